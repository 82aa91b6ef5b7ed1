"""The fixed sections of a run config (the plugin sections are built from the registry).

Every field says what it counts: ``prompts_per_step`` counts prompts, ``samples_per_prompt``
completions per prompt, ``max_new_tokens`` tokens per completion. There is no bare
``batch_size`` anywhere.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Section(BaseModel):
    """A config section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


class RunSection(Section):
    """Identity and reproducibility of the run."""

    name: str = Field(
        default="rlax-run",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Name of the run; the default run directory is runs/<name>.",
    )
    seed: int = Field(default=0, ge=0, description="Seed of every RNG stream of the run.")
    run_dir: str | None = Field(
        default=None,
        description="Directory for checkpoints, metrics and logs (default: runs/<name>).",
    )


class ModelSection(Section):
    """The policy model: a named size or a local Hugging Face checkpoint directory."""

    preset: str | None = Field(
        default=None,
        description="Named model size, e.g. 'tiny' or 'qwen2_5_0_5b' (random initialisation).",
    )
    path: str | None = Field(
        default=None,
        description="Local directory with config.json, *.safetensors and tokenizer.json.",
    )
    dtype: Literal["float32", "bfloat16"] = Field(default="float32", description="Parameter dtype.")
    activation_dtype: Literal["float32", "bfloat16"] | None = Field(
        default=None,
        description="Dtype of activations and matmuls (default: the parameter dtype); norms, "
        "softmax and logits stay fp32.",
    )
    remat: bool = Field(
        default=False, description="Rematerialise layer activations in the backward pass."
    )
    overrides: dict[str, int | float | bool] = Field(
        default_factory=dict,
        description="Changes to the preset's sizes, e.g. {num_layers: 4, hidden_size: 128}.",
    )
    tokenizer: str | None = Field(
        default=None,
        description="Directory with tokenizer.json (default: model.path). Relative paths are "
        "relative to the run config file.",
    )

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, preset: str | None) -> str | None:
        from rlax_core.models.qwen.config import PRESETS  # imports JAX: only when validating

        if preset is not None and preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        return preset

    @field_validator("overrides")
    @classmethod
    def _known_sizes(cls, overrides: dict) -> dict:
        import dataclasses

        from rlax_core.models.qwen.config import QwenConfig

        known = {f.name for f in dataclasses.fields(QwenConfig)} - {"architecture"}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown model sizes {unknown}; known: {', '.join(sorted(known))}")
        return overrides

    @model_validator(mode="after")
    def _one_source(self) -> ModelSection:
        if self.path is not None and self.preset is not None:
            raise ValueError(
                f"model.preset ({self.preset!r}) and model.path ({self.path!r}) are both set; "
                "give one of them"
            )
        if self.path is None and self.preset is None:
            raise ValueError("give model.preset (a named size) or model.path (a checkpoint)")
        return self


class RolloutSection(Section):
    """How inference workers sample."""

    prompts_per_step: int = Field(
        default=8, ge=1, description="Prompts (groups) in one training step's batch."
    )
    samples_per_prompt: int = Field(
        default=8, ge=1, description="Completions sampled per prompt (the group size)."
    )
    max_new_tokens: int = Field(
        default=256, ge=1, description="Most tokens generated per completion."
    )
    temperature: float = Field(
        default=1.0, ge=0.0, description="Sampling temperature; 0 is greedy."
    )
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="Nucleus sampling mass (1: off).")
    top_k: int = Field(default=0, ge=0, description="Keep the k most likely tokens (0: off).")
    workers: int = Field(default=1, ge=1, description="Inference workers.")
    groups_per_batch: int = Field(
        default=4,
        ge=1,
        description="Prompt groups a worker leases and samples together (its batch holds "
        "groups_per_batch × samples_per_prompt completions).",
    )
    lease_s: float = Field(
        default=600.0,
        gt=0.0,
        description="Seconds a worker owns a leased prompt group before it is handed out again.",
    )


class StalenessSection(Section):
    """How old a rollout's policy version may be when it is trained on."""

    max_staleness: int = Field(
        default=1,
        ge=0,
        description="k: the trainer at version v trains only on rollouts of versions ≥ v - k "
        "(0: synchronous on-policy).",
    )
    pull_every: int = Field(
        default=1, ge=1, description="Workers pull new weights every this many versions."
    )

    @model_validator(mode="after")
    def _pull_often_enough(self) -> StalenessSection:
        if self.pull_every > self.max_staleness + 1:
            raise ValueError(
                f"pull_every ({self.pull_every}) exceeds max_staleness + 1 "
                f"({self.max_staleness + 1}): workers would hold weights too stale to train "
                "on; lower pull_every or raise max_staleness"
            )
        return self


class AlgorithmSection(Section):
    """The RL objective."""

    advantage: Literal["grpo", "dr_grpo", "rloo", "reinforce"] = Field(
        default="grpo", description="Advantage estimator."
    )
    loss: Literal["ppo_clip", "gspo", "reinforce"] = Field(
        default="ppo_clip", description="Policy loss."
    )
    clip_low: float = Field(
        default=0.2, ge=0.0, description="Lower PPO clip: ratio ≥ 1 - clip_low."
    )
    clip_high: float = Field(
        default=0.28,
        ge=0.0,
        description="Upper PPO clip (DAPO clip-higher): ratio ≤ 1 + clip_high.",
    )
    kl_coef: float = Field(
        default=0.0, ge=0.0, description="Weight of the KL to the reference model."
    )
    entropy_coef: float = Field(default=0.0, ge=0.0, description="Weight of the entropy bonus.")
    importance_ratio_cap: float = Field(
        default=2.0,
        ge=1.0,
        description="Truncation of the behaviour importance ratio for stale rollouts.",
    )
    aggregation: Literal["token", "sequence", "fixed_length"] = Field(
        default="token",
        description="How per-token losses are averaged: over all tokens (DAPO), per sequence "
        "then over sequences (GRPO), or over sequences × max_new_tokens (Dr. GRPO).",
    )
    kl_estimator: Literal["k1", "k3"] = Field(
        default="k3", description="Estimator of the KL to the reference model."
    )
    dynamic_sampling: bool = Field(
        default=False,
        description="Drop prompt groups whose rewards are all equal and sample others "
        "instead (DAPO).",
    )
    overlong_filter: bool = Field(
        default=False,
        description="Leave completions cut off at max_new_tokens out of the loss (DAPO).",
    )


class MeshSection(Section):
    """How the trainer's devices are arranged (see rlax_core.models.sharding)."""

    data: int = Field(default=1, ge=1, description="Devices on the data axis (batch only).")
    fsdp: int = Field(
        default=1, ge=1, description="Devices on the fsdp axis (batch and parameter shards)."
    )
    tensor: int = Field(
        default=1, ge=1, description="Devices on the tensor axis (heads, MLP and vocabulary)."
    )


class TrainerSection(Section):
    """The optimiser and the step budget."""

    total_steps: int = Field(default=100, ge=1, description="Training steps of the run.")
    learning_rate: float = Field(default=1e-5, gt=0.0, description="Peak learning rate.")
    warmup_steps: int = Field(default=0, ge=0, description="Linear warm-up steps.")
    schedule: Literal["constant", "cosine"] = Field(
        default="constant", description="Learning-rate schedule after warm-up."
    )
    weight_decay: float = Field(default=0.0, ge=0.0, description="AdamW weight decay.")
    max_grad_norm: float = Field(default=1.0, gt=0.0, description="Global gradient-norm clip.")
    adam_b1: float = Field(default=0.9, ge=0.0, lt=1.0, description="AdamW β1.")
    adam_b2: float = Field(default=0.999, ge=0.0, lt=1.0, description="AdamW β2.")
    adam_eps: float = Field(default=1e-8, gt=0.0, description="AdamW ε.")
    micro_batch_tokens: int = Field(
        default=16384,
        ge=1,
        description="Tokens (sequences × padded length) per micro-batch; gradients of the "
        "micro-batches of a step are accumulated.",
    )
    minibatches_per_step: int = Field(
        default=1,
        ge=1,
        description="Optimizer updates per training step, each on a slice of the step's batch "
        "(PPO epochs over mini-batches); the policy version advances once per step.",
    )
    mesh: MeshSection = Field(
        default_factory=lambda: MeshSection(), description="Device mesh of the trainer."
    )

    @model_validator(mode="after")
    def _warmup_fits(self) -> TrainerSection:
        if self.warmup_steps >= self.total_steps:
            raise ValueError(
                f"warmup_steps ({self.warmup_steps}) must be less than total_steps "
                f"({self.total_steps})"
            )
        return self


class DatasetConfig(Section):
    """One prompt dataset: a JSONL or Parquet file, how to render its prompts and judge them."""

    path: str = Field(
        min_length=1,
        description="JSONL or Parquet file; a relative path is relative to the run config's "
        "directory.",
    )
    format: Literal["auto", "jsonl", "parquet"] = Field(
        default="auto",
        description="File format; auto: by extension (.jsonl/.ndjson, .parquet/.pq).",
    )
    name: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Name of the dataset, the first part of its example ids "
        "(default: the file name without extension).",
    )
    weight: float = Field(
        default=1.0,
        gt=0.0,
        allow_inf_nan=False,
        description="Relative share of the training mixture's draws (any positive number).",
    )
    prompt_template: str = Field(
        min_length=1,
        description="Python str.format template over the row's fields, e.g. "
        "'Q: {question}\\nA:'; write literal braces as {{ and }}.",
    )
    answer_field: str | None = Field(
        default=None,
        description="Field holding the reference answer; the problem is "
        "{kind: math, answer: <its value as text>}.",
    )
    problem_field: str | None = Field(
        default=None,
        description="Field holding the judge's problem itself: a mapping or a JSON object "
        "string (e.g. a code problem with tests).",
    )
    id_field: str | None = Field(
        default=None,
        description="Field holding each row's unique id (default: the row's index from 0).",
    )
    limit: int | None = Field(
        default=None, ge=1, description="Use only the first this many rows (default: all)."
    )

    @property
    def dataset_name(self) -> str:
        """The name used in example ids: ``name``, or the file name without extension."""
        return self.name if self.name is not None else Path(self.path).stem

    @field_validator("prompt_template")
    @classmethod
    def _template_names_fields(cls, template: str) -> str:
        for field in template_fields(template):
            if not field or field.isdigit():
                raise ValueError(
                    f"uses a positional field {{{field}}}; name a field of the row "
                    "instead, e.g. {question}"
                )
        return template

    @model_validator(mode="after")
    def _one_problem_source(self) -> DatasetConfig:
        if (self.answer_field is None) == (self.problem_field is None):
            given = "both are set" if self.answer_field is not None else "neither is set"
            raise ValueError(
                f"give exactly one of answer_field (a math answer) and problem_field (a whole "
                f"problem) for dataset {self.path!r}; {given}"
            )
        return self


def template_fields(template: str) -> list[str]:
    """The row fields a str.format template reads, in order (``{a.b}`` and ``{a[0]}`` read a).

    Raises:
        ValueError: the template is not a valid format string (e.g. a single brace).
    """
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(
            f"is not a valid str.format template ({exc}); write literal braces as {{{{ and }}}}"
        ) from None
    fields: list[str] = []
    for _, field, spec, _ in parsed:
        if field is None:
            continue
        fields.append(field.split(".", 1)[0].split("[", 1)[0])
        if spec:  # a spec may hold fields of its own: {value:{width}}
            fields.extend(template_fields(spec))
    return fields


class DataSection(Section):
    """The prompts of the run: a weighted mixture of training datasets and a held-out set."""

    train: list[DatasetConfig] = Field(
        min_length=1,
        description="Training datasets; each draw picks one with probability proportional "
        "to its weight.",
    )
    eval: DatasetConfig | None = Field(
        default=None, description="Held-out prompts for periodic evaluation (pass@k)."
    )
    shuffle: bool = Field(
        default=True,
        description="Shuffle each training dataset every epoch (seeded by run.seed); "
        "false keeps file order.",
    )

    @model_validator(mode="after")
    def _names_differ(self) -> DataSection:
        first: dict[str, int] = {}
        for index, dataset in enumerate(self.train):
            name = dataset.dataset_name
            if name in first:
                raise ValueError(
                    f"data.train[{first[name]}] and data.train[{index}] are both named "
                    f"{name!r}, so their example ids would clash; set a different name: on "
                    "one of them"
                )
            first[name] = index
        return self
