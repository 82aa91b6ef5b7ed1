"""A trained policy from where a run leaves one, for evaluating it outside the run.

Three places are understood (each local or in a bucket, see :mod:`rlax_core.storage`):

- a Hugging Face checkpoint folder (``config.json`` and safetensors), such as a finished
  run's ``RUN_DIR/final/``: it carries its own model config;
- an Orbax checkpoint of a run, ``RUN_DIR/checkpoints/N`` (its ``state`` item): only the
  policy's parameters are read (not the optimiser state or the reference policy), into a
  model of the structure the run config describes;
- a run directory, or its ``checkpoints/`` folder: its ``final/`` if the run finished,
  else its newest checkpoint.

Orbax reads local folders and ``gs://`` only: a checkpoint in ``s3://`` is refused with
what to do instead (its ``final/``, or a local copy).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlax_core.errors import ConfigError
from rlax_core.run_dir.layout import FINAL_DIR
from rlax_core.storage import AnyPath, remote_scheme, storage_path

if TYPE_CHECKING:
    from rlax_core.config.run_config import RunConfigBase
    from rlax_core.models.qwen import Qwen, QwenConfig

_HF_CONFIG = "config.json"
_ORBAX_STATE = "state"  # the item of a run's checkpoint step that holds the arrays
_CHECKPOINTS = "checkpoints"


@dataclass(frozen=True)
class TrainedPolicy:
    """Where a policy's weights are, and in which form.

    Attributes:
        path: the Hugging Face folder, or the Orbax checkpoint step folder.
        kind: ``huggingface`` or ``orbax``.
    """

    path: AnyPath
    kind: str

    def describe(self) -> str:
        """``runs/x/final (Hugging Face safetensors)``."""
        form = "Hugging Face safetensors" if self.kind == "huggingface" else "Orbax checkpoint"
        return f"{self.path} ({form})"


def locate_policy(given: str) -> TrainedPolicy:
    """The policy that ``given`` (``--checkpoint``) names; see the module docstring.

    Raises:
        ConfigError: nothing there, or nothing this module can read.
    """
    path = storage_path(given)
    try:
        return _locate(path, given)
    except OSError as exc:  # a bucket that cannot be reached, or a folder not readable
        raise ConfigError(
            f"--checkpoint {given}: cannot be read ({type(exc).__name__}: {exc}); check the "
            "path, and for a bucket the network and the credentials"
        ) from None


def _locate(path: AnyPath, given: str) -> TrainedPolicy:
    if not path.exists():
        raise ConfigError(f"--checkpoint {given}: no such directory")
    if not path.is_dir():
        raise ConfigError(
            f"--checkpoint {given}: a file; give the checkpoint's folder (a Hugging Face "
            "folder such as RUN_DIR/final, or RUN_DIR/checkpoints/N)"
        )
    if (path / _HF_CONFIG).exists():
        return TrainedPolicy(path, "huggingface")
    if (path / _ORBAX_STATE).is_dir():
        return _orbax(path, given)
    if (path / FINAL_DIR / _HF_CONFIG).exists():
        return TrainedPolicy(path / FINAL_DIR, "huggingface")
    steps = _steps(path / _CHECKPOINTS) or _steps(path)
    if steps:
        return _orbax(steps[-1], given)
    raise ConfigError(
        f"--checkpoint {given}: holds no checkpoint; give a Hugging Face folder (config.json "
        "and *.safetensors, e.g. RUN_DIR/final), a run's Orbax checkpoint "
        "(RUN_DIR/checkpoints/N) or a run directory"
    )


def load_policy(policy: TrainedPolicy, config: RunConfigBase, config_dir: Path) -> Qwen:
    """The model of ``policy``, in the dtypes of ``config.model``.

    Args:
        config / config_dir: the run config and its folder: an Orbax checkpoint holds
            arrays only, and the config says the model's structure.

    Raises:
        CheckpointError: a Hugging Face folder that cannot be read.
        ConfigError: an Orbax checkpoint that does not fit the config's model.
    """
    from rlax_core.models import load_pretrained
    from rlax_core.models.params import host_model, param_shapes

    section = config.model
    dtypes = dict(param_dtype=section.dtype, dtype=section.activation_dtype or section.dtype)
    if policy.kind == "huggingface":
        return load_pretrained(policy.path, **dtypes)
    model_config = _model_config(config, config_dir)
    params = _orbax_params(policy.path)
    expected = {name: tuple(spec.shape) for name, spec in param_shapes(model_config).items()}
    found = {name: tuple(array.shape) for name, array in params.items()}
    if found != expected:
        raise ConfigError(
            f"{policy.path}: does not fit the model the config describes "
            f"({_first_difference(found, expected)}); was it written by a run of another "
            "config? Give that run's RUN_DIR/config.yaml"
        )
    return host_model(model_config, params)


def _first_difference(found: dict[str, tuple], expected: dict[str, tuple]) -> str:
    """The first parameter a checkpoint lacks, has in another shape, or has too many."""
    missing = sorted(set(expected) - set(found))
    if missing:
        return f"it has no {missing[0]!r}"
    misshapen = sorted(name for name in expected if expected[name] != found[name])
    if misshapen:
        name = misshapen[0]
        return f"its {name!r} is {list(found[name])}, the config's model's {list(expected[name])}"
    return f"it has {sorted(set(found) - set(expected))[0]!r}, which the model has not"


def _orbax(step: AnyPath, given: str) -> TrainedPolicy:
    if remote_scheme(step) == "s3":
        raise ConfigError(
            f"--checkpoint {given}: an Orbax checkpoint in s3:// cannot be read in place; "
            f"give the run's {FINAL_DIR}/ (Hugging Face safetensors), or copy the step "
            "folder to a local directory and give that"
        )
    return TrainedPolicy(step, "orbax")


def _steps(folder: AnyPath) -> list[AnyPath]:
    """The committed step folders of a checkpoints folder, oldest first."""
    if not folder.is_dir():
        return []
    steps = [p for p in folder.iterdir() if p.name.isdigit() and (p / _ORBAX_STATE).is_dir()]
    return sorted(steps, key=lambda p: int(p.name))


def _model_config(config: RunConfigBase, config_dir: Path) -> QwenConfig:
    """The policy's structure from the run config, without reading any weights."""
    from rlax_core.models import PRESETS, read_config
    from rlax_core.rl.roles.components import resolve

    section = config.model
    dtypes = dict(param_dtype=section.dtype, dtype=section.activation_dtype or section.dtype)
    if section.path is not None:
        return read_config(resolve(section.path, config_dir), **dtypes)
    preset = PRESETS[section.preset]()
    return dataclasses.replace(preset, **section.overrides, **dtypes)


def _orbax_params(step: AnyPath) -> dict:
    """name → host array of the policy's parameters in a checkpoint step (only those)."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    state = step / _ORBAX_STATE
    if remote_scheme(state) is None:
        state = Path(state).absolute()  # Orbax finds no metadata under a relative path
    checkpointer = ocp.PyTreeCheckpointer()
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])

    def abstract(metadata: Any) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(metadata.shape, metadata.dtype, sharding=device)

    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)  # Orbax warns of the step-level metadata it does not need
    try:
        tree = checkpointer.metadata(state).item_metadata
        target = {"params": jax.tree.map(abstract, tree["params"])}
        restored = checkpointer.restore(
            state,
            args=ocp.args.PyTreeRestore(
                item=target,
                restore_args=ocp.checkpoint_utils.construct_restore_args(target),
                partial_restore=True,
            ),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"{step}: not a readable checkpoint of a run ({type(exc).__name__}: {exc})"
        ) from None
    finally:
        absl.setLevel(level)
    leaves, _ = jax.tree_util.tree_flatten_with_path(restored["params"])
    params = {}
    for path, array in leaves:
        keys = [str(getattr(k, "key", getattr(k, "idx", k))) for k in path]
        if keys and keys[-1] == "value":  # an NNX variable's value, saved as a dict entry
            keys = keys[:-1]
        params[".".join(keys)] = np.asarray(array)
    return params
