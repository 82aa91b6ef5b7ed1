"""Building a run's parts from its config: tokenizer, model, prompts, judge, transport.

Shared by every role (the embedded run, the trainer process, worker and verifier
processes), so each builds exactly the same model structure, prompt encoding and stop
tokens. JAX and the model are imported only where a model or a mesh is built: a
verifier process needs neither.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlax_core.config.run_config import RunConfigBase
from rlax_core.contracts.environment import Environment
from rlax_core.contracts.prompts import PromptExample
from rlax_core.contracts.transport import Transport
from rlax_core.contracts.verifier import Judge
from rlax_core.data import PromptDataset, PromptMixture
from rlax_core.errors import ConfigError, RlaxError
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.plugins.registry import BuildContext, Registry
from rlax_core.storage import AnyPath, storage_path

if TYPE_CHECKING:
    from jax.sharding import Mesh

    from rlax_core.models.qwen import Qwen

Prompt = tuple[str, list[int], dict[str, Any]]  # (example id, token ids, problem)


def resolve(path: str, base_dir: Path) -> AnyPath:
    """A config path: a bucket URL, absolute, or relative to the run config file's directory."""
    return storage_path(path, base_dir)


NO_CHAT_TEMPLATE = (
    "rollout.chat_template is true, but the tokenizer has no chat template (no "
    "chat_template in its tokenizer_config.json): use the model's own tokenizer folder, "
    "or set rollout.chat_template: false"
)


def tokenizer_dir(config: RunConfigBase, base_dir: Path) -> AnyPath:
    """The directory of ``model.tokenizer`` (or the checkpoint's own tokenizer)."""
    source = config.model.tokenizer or config.model.path
    if source is None:
        raise ConfigError(
            "model.tokenizer is not set: a preset model needs a tokenizer directory "
            "(tokenizer.json); set model.tokenizer"
        )
    return resolve(source, base_dir)


def load_tokenizer(config: RunConfigBase, base_dir: Path) -> Tokenizer:
    """The tokenizer of the run (see :func:`tokenizer_dir`)."""
    return Tokenizer.from_dir(tokenizer_dir(config, base_dir))


def stop_token_ids(tokenizer: Tokenizer) -> tuple[int, ...]:
    """Tokens that end a completion: EOS, and Qwen's <|endoftext|> / <|im_end|>."""
    ids = {tokenizer.eos_token_id}
    for token in ("<|endoftext|>", "<|im_end|>"):
        with contextlib.suppress(KeyError):
            ids.add(tokenizer.token_id(token))
    return tuple(sorted(i for i in ids if i is not None))


def mesh_of(config: RunConfigBase) -> Mesh | None:
    """The trainer's mesh from ``trainer.mesh`` (None for a single device).

    A multi-host trainer's mesh must span every device of every process: the processes
    run one program over one global mesh.

    Raises:
        ConfigError: the mesh needs more devices than there are, or does not cover all
            the devices of a multi-host trainer.
    """
    import jax  # (here: a verifier builds its parts without JAX)

    from rlax_core.models.sharding import MeshShape

    section = config.trainer.mesh
    shape = MeshShape(data=section.data, fsdp=section.fsdp, tensor=section.tensor)
    if jax.process_count() > 1 and shape.size != jax.device_count():
        raise ConfigError(
            f"trainer.mesh: data={shape.data} × fsdp={shape.fsdp} × tensor={shape.tensor} = "
            f"{shape.size} devices, but this multi-host trainer has {jax.device_count()} "
            f"({jax.process_count()} processes × {jax.local_device_count()}); set the mesh "
            "axes to multiply to the total"
        )
    if shape.size == 1:
        return None
    try:
        return shape.make()
    except ValueError as exc:
        raise ConfigError(f"trainer.mesh: {exc}") from None


def build_model(config: RunConfigBase, base_dir: Path, *, mesh: Mesh | None = None) -> Qwen:
    """The policy: a checkpoint from ``model.path`` or a preset initialised with the seed."""
    from rlax_core.models import PRESETS, QwenConfig, init_model, load_pretrained

    section = config.model
    dtypes = dict(param_dtype=section.dtype, dtype=section.activation_dtype or section.dtype)
    if section.path is not None:
        return load_pretrained(
            resolve(section.path, base_dir), mesh=mesh, remat=section.remat, **dtypes
        )
    model_config: QwenConfig = PRESETS[section.preset]()
    model_config = dataclasses.replace(
        model_config, **section.overrides, **dtypes, remat=section.remat
    )
    return init_model(model_config, seed=config.run.seed, mesh=mesh)


def check_vocabulary(vocab_size: int, tokenizer: Tokenizer) -> None:
    """Refuses a tokenizer with ids past the model's embedding table (they would embed as
    NaN, silently).

    Raises:
        ConfigError: the tokenizer has more ids than the model has embeddings.
    """
    if tokenizer.vocab_size > vocab_size:
        raise ConfigError(
            f"the tokenizer has {tokenizer.vocab_size} token ids but the model embeds "
            f"{vocab_size}: set model.overrides.vocab_size to at least "
            f"{tokenizer.vocab_size}, or use the model's own tokenizer"
        )


def prompt_encoder(
    tokenizer: Tokenizer, chat_template: bool, tools: Sequence[dict] = ()
) -> Callable[[PromptExample], list[int]]:
    """A prompt → token ids, through the chat template when the config asks for it
    (listing ``tools``, the environment's, in OpenAI's function format); a prompt given
    as messages always goes through it."""
    if not chat_template and tools:
        raise ConfigError(
            "the environment offers tools, which the model is shown through the chat "
            "template: set rollout.chat_template: true"
        )
    if chat_template and not tokenizer.chat_template:
        raise ConfigError(NO_CHAT_TEMPLATE)

    def encode(example: PromptExample) -> list[int]:
        if example.messages:
            try:
                return tokenizer.apply_chat_template(example.messages, tools=tools)
            except ValueError as exc:
                raise ConfigError(f"prompt {example.example_id}: {exc}") from None
        if chat_template:
            return tokenizer.apply_chat_template(
                [{"role": "user", "content": example.prompt}], tools=tools
            )
        return tokenizer.encode(example.prompt)

    return encode


def train_prompts(
    config: RunConfigBase,
    base_dir: Path,
    tokenizer: Tokenizer,
    *,
    seed: int | None = None,
    tools: Sequence[dict] = (),
) -> tuple[PromptMixture, Callable[[], Prompt]]:
    """The training mixture and a function drawing its next encoded prompt (with the
    environment's ``tools`` listed)."""
    if config.data is None:
        raise ConfigError("the run config has no data section: RL needs training prompts")
    mixture = PromptMixture.from_section(
        config.data, base_dir, seed=config.run.seed if seed is None else seed
    )
    encode = prompt_encoder(tokenizer, config.rollout.chat_template, tools)

    def next_prompt() -> Prompt:
        example = mixture.next()
        return example.example_id, encode(example), example.problem

    return mixture, next_prompt


def eval_prompts(
    config: RunConfigBase, base_dir: Path, tokenizer: Tokenizer, *, tools: Sequence[dict] = ()
) -> list[Prompt]:
    """The held-out prompts (``data.eval``), encoded (with ``tools`` listed); empty when
    none are configured."""
    if config.data is None or config.data.eval is None:
        return []
    dataset = PromptDataset.load(config.data.eval, base_dir)
    encode = prompt_encoder(tokenizer, config.rollout.chat_template, tools)
    return [
        (ex.example_id, encode(ex), ex.problem) for ex in (dataset[i] for i in range(len(dataset)))
    ]


def build_judge(registry: Registry, config: RunConfigBase, run_dir: Path) -> Judge:
    """The judge of ``verifier.judge`` (with its sandbox, for judges that run code)."""
    if config.verifier is None:
        raise ConfigError("the run config has no verifier section: RL needs a judge for rewards")
    context = BuildContext(registry, run_config=config, run_dir=run_dir)
    return registry.build("judge", config.verifier.judge, context)


def build_environment(registry: Registry, config: RunConfigBase, run_dir: Path) -> Environment:
    """The environment of ``environment`` (single-turn by default)."""
    context = BuildContext(registry, run_config=config, run_dir=run_dir)
    return registry.build("environment", config.environment, context)


def require_networked_transport(role: str, config: RunConfigBase) -> None:
    """Refuses a process of ``role`` on the in-process transport (it cannot reach the run).

    Raises:
        RlaxError: ``transport.type`` is inproc.
    """
    if config.transport.type == "inproc":  # type: ignore[attr-defined]
        raise RlaxError(
            f"a {role} process needs a networked transport (transport.type nats or grpc); "
            "with inproc, run everything in one process: rlax train CONFIG"
        )


def judged_by_stage(config: RunConfigBase) -> bool:
    """Whether verifiers judge (``verifier.placement: stage``) rather than the workers."""
    return config.verifier is not None and config.verifier.placement == "stage"


def build_transport(registry: Registry, config: RunConfigBase, run_dir: Path) -> Transport:
    """The transport of ``transport`` (in-process by default)."""
    return registry.build(
        "transport", config.transport, BuildContext(registry, run_config=config, run_dir=run_dir)
    )
