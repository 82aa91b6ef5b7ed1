"""The fixed sections of a run config (the plugin sections are built from the registry).

Every field says what it counts: ``prompts_per_step`` counts prompts, ``samples_per_prompt``
completions per prompt, ``max_new_tokens`` tokens per completion. There is no bare
``batch_size`` anywhere.
"""

from __future__ import annotations

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
    chat_template: bool = Field(
        default=False,
        description="Wrap each prompt in the tokenizer's chat template as a user message.",
    )
    logprob_check_groups: int = Field(
        default=1,
        ge=0,
        description="Prompt groups of each batch a worker re-scores by teacher forcing with "
        "the same weights, to measure its sampler's log-probability gap (logprob_gap/max). "
        "It costs a forward pass over those groups' sequences (0: no check).",
    )
    lease_s: float = Field(
        default=600.0,
        gt=0.0,
        description="Seconds a lease lasts: a worker's on a prompt group (renewed once its "
        "weights are ready), and the trainer's on the rollouts it holds until a checkpoint "
        "covers them (renewed while it runs). A killed process's items come back this late.",
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
