"""Config sections of training: the RL objective, the optimiser and the trainer's mesh."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlax_core.config.sections.base import Section
from rlax_core.rl.algorithms.advantages import ADVANTAGES

# The estimators' names, as registered (a run config names one; the schema lists them).
AdvantageName = Literal[tuple(ADVANTAGES)]  # type: ignore[valid-type]


class AlgorithmSection(Section):
    """The RL objective."""

    advantage: AdvantageName = Field(default="grpo", description="Advantage estimator.")
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
    logits_chunk_tokens: int = Field(
        default=512,
        ge=1,
        description="The LM head's memory bound in training, in positions' worth of logits: "
        "a micro-batch's logits are computed a slice of the vocabulary at a time, about "
        "vocab × this / positions entries each (recomputed in the backward pass), so they "
        "never exist whole (at a 152K vocabulary, 512 positions' worth is 311 MB in fp32).",
    )
    share_prompts: bool = Field(
        default=True,
        description="Train each rollout group as one row that holds its prompt once, "
        "followed by every sample's completion (same loss and gradient), when that costs "
        "fewer FLOPs than a row per sample: short completions of long prompts.",
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
