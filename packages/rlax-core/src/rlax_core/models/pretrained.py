"""Hugging Face checkpoint directories: ``load_pretrained`` and ``save_pretrained``.

A directory holds ``config.json`` and either ``model.safetensors`` or shards listed in
``model.safetensors.index.json``. Loading places each tensor slice straight from the
mapped file onto its device shard (no second full host copy) and releases the file pages
as it goes; anything wrong is a :class:`CheckpointError` naming the file and the problem,
raised before a model is returned. Saving writes every file atomically and
deterministically, so save → load → save gives identical bytes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from rlax_core.models.params import build_model, flat_params, param_shapes
from rlax_core.models.qwen import Qwen, QwenConfig
from rlax_core.models.safetensors_file import CheckpointError, SafetensorsReader, write_safetensors
from rlax_core.storage import AnyPath, staged_folder, storage_path

CONFIG = "config.json"
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"


def load_pretrained(
    path: str | AnyPath,
    *,
    mesh: Mesh | None = None,
    param_dtype: str | None = None,
    dtype: str | None = None,
    remat: bool = False,
) -> Qwen:
    """Loads a Qwen2/Qwen3 checkpoint directory.

    Args:
        path: directory with ``config.json`` and safetensors weights, local or in a
            bucket (each tensor is then read with its own ranged request).
        mesh: where to place parameters (see :mod:`rlax_core.models.sharding`); one
            device if None.
        param_dtype: "float32" or "bfloat16"; default: the checkpoint's dtype.
        dtype: activation dtype; default: ``param_dtype``.
        remat: rematerialise layer activations in the backward pass.

    Returns:
        The model; call it on int32 token ids (batch, length) for logits.

    Raises:
        CheckpointError: missing or unreadable files, unknown architecture, missing or
            unexpected tensors, wrong shapes, truncated safetensors.
    """
    path = storage_path(path) if isinstance(path, str) else path
    config = read_config(path, param_dtype=param_dtype, dtype=dtype, remat=remat)
    with _open_weights(path) as tensors:
        _check_weights(path, config, tensors)

        def make(
            name: str, spec: jax.ShapeDtypeStruct, sharding: jax.sharding.Sharding
        ) -> jax.Array:
            reader = tensors[name]
            source = reader.array(name)
            # Each device copies only its own slice, converted to the parameter dtype.
            array = jax.make_array_from_callback(
                spec.shape, sharding, lambda index: np.array(source[index], dtype=spec.dtype)
            )
            reader.release(name)
            return array

        return build_model(config, make, mesh)


def inspect_pretrained(path: str | AnyPath) -> QwenConfig:
    """Checks a checkpoint directory without reading its tensors: ``config.json``, the
    safetensors headers, and that every tensor the config implies is there in its shape.

    Raises:
        CheckpointError: as :func:`load_pretrained` would, before loading anything.
    """
    path = storage_path(path) if isinstance(path, str) else path
    config = read_config(path)
    with _open_weights(path) as tensors:
        _check_weights(path, config, tensors)
    return config


def _check_weights(
    path: AnyPath, config: QwenConfig, tensors: dict[str, SafetensorsReader]
) -> None:
    """Missing, unexpected or misshapen tensors, against what ``config`` implies."""
    expected = param_shapes(config)
    available = set(tensors)
    missing = sorted(set(expected) - available)
    if missing:
        raise CheckpointError(
            f"{path}: missing tensor(s) {missing[:5]}{' ...' if len(missing) > 5 else ''} "
            f"for a {config.architecture} model with {config.num_layers} layers "
            f"({len(missing)} missing); config.json and the weights do not match"
        )
    # A tied model's checkpoint may still carry the (identical) LM head.
    ignorable = {"lm_head.weight"} if config.tie_embeddings else set()
    unexpected = sorted(available - set(expected) - ignorable)
    if unexpected:
        raise CheckpointError(
            f"{path}: unexpected tensor(s) {unexpected[:5]} that a {config.architecture} "
            f"model with {config.num_layers} layers does not have; config.json and the "
            "weights do not match"
        )
    for name, spec in expected.items():
        entry = tensors[name].entries[name]
        if entry.shape != tuple(spec.shape):
            raise CheckpointError(
                f"{tensors[name].path}: tensor {name!r} has shape {list(entry.shape)}, "
                f"but config.json implies {list(spec.shape)}"
            )


def read_config(path: Path, **overrides: Any) -> QwenConfig:
    """Reads ``config.json`` of a checkpoint directory into a :class:`QwenConfig`."""
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a checkpoint directory (no such directory)")
    config_path = path / CONFIG
    try:
        hf = json.loads(config_path.read_text())
    except FileNotFoundError:
        raise CheckpointError(
            f"{config_path}: missing; a checkpoint needs its config.json"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{config_path}: unreadable: {exc}") from None
    checkpoint_dtype = hf.get("torch_dtype") or hf.get("dtype") or "float32"
    param_dtype = overrides.pop("param_dtype", None) or (
        checkpoint_dtype if checkpoint_dtype in ("float32", "bfloat16") else "float32"
    )
    dtype = overrides.pop("dtype", None) or param_dtype
    try:
        return QwenConfig.from_hf(hf, param_dtype=param_dtype, dtype=dtype, **overrides)
    except KeyError as exc:
        raise CheckpointError(f"{config_path}: missing key {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{config_path}: {exc}") from None


@contextmanager
def _open_weights(path: Path) -> Iterator[dict[str, SafetensorsReader]]:
    """name → the open reader holding it, for single or sharded checkpoints."""
    with ExitStack() as stack:
        index_path = path / INDEX
        if index_path.exists():
            try:
                weight_map = json.loads(index_path.read_text())["weight_map"]
            except (OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
                raise CheckpointError(f"{index_path}: unreadable index: {exc}") from None
            readers = {}
            for file in sorted(set(weight_map.values())):
                if not (path / file).exists():
                    raise CheckpointError(f"{index_path}: lists {file}, which does not exist")
                readers[file] = stack.enter_context(SafetensorsReader(path / file))
            tensors = {}
            for name, file in weight_map.items():
                if name not in readers[file].entries:
                    raise CheckpointError(
                        f"{path / file}: has no tensor {name!r}, which {INDEX} maps to it"
                    )
                tensors[name] = readers[file]
            yield tensors
        elif (path / SINGLE).exists():
            reader = stack.enter_context(SafetensorsReader(path / SINGLE))
            yield dict.fromkeys(reader.entries, reader)
        else:
            raise CheckpointError(
                f"{path}: no {SINGLE} and no {INDEX}; not a safetensors checkpoint"
            )


def save_pretrained(
    model: Qwen, path: str | AnyPath, *, max_shard_bytes: int | None = None
) -> None:
    """Writes ``config.json`` and safetensors weights that ``transformers`` loads.

    Args:
        model: the model (parameters may be sharded; each tensor is gathered when written).
        path: the directory (created if needed), local or in a bucket (written locally,
            then uploaded); stale weight files of an earlier save with other sharding
            are removed.
        max_shard_bytes: split the weights into shards of at most this size (plus one
            tensor), with a ``model.safetensors.index.json``.
    """
    target = storage_path(path) if isinstance(path, str) else path
    with staged_folder(target) as path:
        params = flat_params(model)
        shards: list[list[str]] = [[]]
        size = 0
        for name, array in params.items():
            if max_shard_bytes and shards[-1] and size + array.nbytes > max_shard_bytes:
                shards.append([])
                size = 0
            shards[-1].append(name)
            size += array.nbytes
        if len(shards) == 1:
            files = {SINGLE: shards[0]}
        else:
            files = {
                f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors": s
                for i, s in enumerate(shards)
            }
        for file, names in files.items():
            write_safetensors(
                path / file,
                [(n, params[n].shape, params[n].dtype, _gather(params[n])) for n in names],
                metadata={"format": "pt"},
            )
        if len(files) > 1:
            index = {
                "metadata": {"total_size": sum(int(a.nbytes) for a in params.values())},
                "weight_map": {n: f for f, names in files.items() for n in names},
            }
            _write_json(path / INDEX, index)
        else:
            (path / INDEX).unlink(missing_ok=True)
        for stale in path.glob("model*.safetensors"):
            if stale.name not in files:
                stale.unlink()
        _write_json(path / CONFIG, model.config.to_hf())


def _gather(array: jax.Array):
    return lambda: np.asarray(jax.device_get(array))


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
