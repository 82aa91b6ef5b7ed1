"""Config sections of the RL loop's schedule: evaluation, checkpoints, the warm start."""

from __future__ import annotations

from pydantic import Field, model_validator

from rlax_core.config.sections.base import Section


class EvalSection(Section):
    """Periodic evaluation on the held-out prompts (data.eval)."""

    every_steps: int = Field(
        default=10,
        ge=0,
        description="Evaluate every this many RL steps (0: only at the start and the end).",
    )
    samples_per_prompt: int = Field(
        default=8, ge=1, description="Completions sampled per held-out prompt (n of pass@k)."
    )
    ks: list[int] = Field(
        default_factory=lambda: [1, 8], min_length=1, description="The k of each pass@k reported."
    )
    temperature: float = Field(default=1.0, ge=0.0, description="Sampling temperature.")
    max_prompts: int | None = Field(
        default=None, ge=1, description="Evaluate on at most this many held-out prompts."
    )
    without_tools: bool = Field(
        default=False,
        description="Also evaluate with the environment's tools unanswered (the same prompts; "
        "the first turn is judged), as eval_without_tools/*: how much of pass@k the tools "
        "give. Only with a multi-turn environment.",
    )

    @model_validator(mode="after")
    def _k_fits(self) -> EvalSection:
        too_big = [k for k in self.ks if k > self.samples_per_prompt or k < 1]
        if too_big:
            raise ValueError(
                f"ks {too_big} must lie in 1..samples_per_prompt ({self.samples_per_prompt})"
            )
        return self


class CheckpointSection(Section):
    """When the whole RL state is saved (params, optimizer, cursor, RNG, leases)."""

    every_steps: int = Field(default=10, ge=1, description="Save every this many RL steps.")
    keep: int = Field(default=2, ge=1, description="Checkpoints kept (the newest ones).")
    at_start: bool = Field(
        default=False,
        description="Also save before the first RL step. A run with a warm start always "
        "does (the warm start is never redone); otherwise step 0 is the initial policy, "
        "which a resume rebuilds from the config at no cost.",
    )


class WarmStartSection(Section):
    """A short supervised stage before RL: learn the answer format from the training data."""

    steps: int = Field(default=0, ge=0, description="Supervised steps (0: no warm start).")
    learning_rate: float = Field(default=1e-3, gt=0.0, description="Learning rate.")
    examples_per_step: int = Field(default=32, ge=1, description="Examples per step.")
    target_template: str = Field(
        default="{answer}",
        description="The completion taught for an example: a str.format template over its "
        "problem's fields (e.g. '{answer}').",
    )
    turns: list[str] | None = Field(
        default=None,
        min_length=1,
        description="A multi-turn demonstration instead of target_template: the model's turns, "
        "each a str.format template over the problem's fields. The run's environment answers "
        "each turn but the last, as in a rollout; its replies are out of the loss.",
    )
