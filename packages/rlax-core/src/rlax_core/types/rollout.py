"""What inference workers receive (prompt groups) and send back (rollout groups).

A rollout group leaves a worker judged (inline judging) or unjudged, with the problem it
answers, for the verifier stage; a verifier sends it on judged. Either way the trainer
receives it from the rollout queue.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rlax_core.types.record import Record
from rlax_core.types.verdict import Verdict


class PromptGroup(Record):
    """One prompt to be sampled ``samples_per_prompt`` times by one worker."""

    group_id: str = Field(description="Unique id of this group; rollout ids derive from it.")
    prompt_id: str = Field(description="Id of the dataset example.")
    prompt_tokens: tuple[int, ...] = Field(description="Token ids of the formatted prompt.")
    problem: dict[str, Any] = Field(
        default_factory=dict,
        description="What the judge needs (answer, tests), never shown to the model.",
    )
    samples_per_prompt: int = Field(ge=1, description="Completions to sample for this prompt.")
    min_policy_version: int = Field(
        default=0,
        ge=0,
        description="Oldest policy version whose rollouts can still be trained on.",
    )


class Rollout(Record):
    """One completion with everything the trainer needs to learn from it."""

    rollout_id: str = Field(description="Unique id; the trainer trains on it at most once.")
    completion_tokens: tuple[int, ...] = Field(description="Sampled token ids.")
    behaviour_logprobs: tuple[float, ...] = Field(
        description="Per token, log-probability under the distribution it was sampled from."
    )
    policy_logprobs: tuple[float, ...] | None = Field(
        default=None, description="Per token, log-probability under the untruncated policy."
    )
    token_versions: tuple[int, ...] | None = Field(
        default=None,
        description="Per token, the policy version that sampled it, when a weight update "
        "landed mid-completion (rollout.in_flight_updates); None: every token's version is "
        "the group's policy_version.",
    )
    environment_spans: tuple[tuple[int, int], ...] = Field(
        default=(),
        description="[start, end) ranges of completion_tokens that an environment wrote (tool "
        "results, user turns) between the model's turns: never sampled, never trained on; "
        "their log-probabilities are 0. Empty: the model sampled every token.",
    )
    finish_reason: Literal["stop", "length"] = Field(description="Why sampling ended.")
    end_reason: str | None = Field(
        default=None,
        description="Why a multi-turn rollout ended, when not at the model's last turn: the "
        "turn limit, a hung environment step, the token budget.",
    )
    reward: float | None = Field(
        description="Scalar reward from the judge; None when there is no judgement (a sandbox "
        "error, invalid input, or not judged yet): such a sample is never trained on."
    )
    verdict: Verdict | None = Field(default=None, description="The judge's full verdict.")

    @model_validator(mode="after")
    def _lengths_agree(self) -> Rollout:
        n = len(self.completion_tokens)
        if len(self.behaviour_logprobs) != n:
            raise ValueError(
                f"behaviour_logprobs has {len(self.behaviour_logprobs)} entries for {n} tokens"
            )
        if self.token_versions is not None and len(self.token_versions) != n:
            raise ValueError(
                f"token_versions has {len(self.token_versions)} entries for {n} tokens"
            )
        if self.policy_logprobs is not None and len(self.policy_logprobs) != n:
            raise ValueError(
                f"policy_logprobs has {len(self.policy_logprobs)} entries for {n} tokens"
            )
        end = 0
        for start, stop in self.environment_spans:
            if not end <= start < stop <= n:
                raise ValueError(
                    f"environment_spans {self.environment_spans} are not ascending, disjoint "
                    f"and non-empty ranges within the {n} completion tokens"
                )
            end = stop
        return self

    def answer_tokens(self) -> tuple[int, ...]:
        """The model's last turn, after the last environment span (the whole completion
        of a single-turn rollout): what the judge decides on."""
        start = self.environment_spans[-1][1] if self.environment_spans else 0
        return self.completion_tokens[start:]

    def sampled_mask(self) -> list[bool]:
        """Per completion token, whether the model sampled it (False: an environment's)."""
        mask = [True] * len(self.completion_tokens)
        for start, stop in self.environment_spans:
            mask[start:stop] = [False] * (stop - start)
        return mask


class RolloutGroup(Record):
    """All completions of one prompt group, sampled with one policy version."""

    group_id: str = Field(description="The PromptGroup this answers.")
    prompt_id: str = Field(description="Id of the dataset example.")
    prompt_tokens: tuple[int, ...] = Field(description="Token ids of the prompt.")
    policy_version: int = Field(
        ge=0,
        description="The version that sampled its tokens; with in-flight updates, the oldest "
        "one that sampled any (the staleness bound applies to it, so to every token).",
    )
    worker_id: str = Field(description="The inference worker that produced it.")
    rollouts: tuple[Rollout, ...] = Field(min_length=1, description="The completions.")
    generation_s: float = Field(default=0.0, ge=0, description="Time spent sampling.")
    logprob_gap: float | None = Field(
        default=None,
        ge=0,
        description="Largest |sampler − teacher-forced| policy log-probability of the group, "
        "checked by the worker with the same weights (the train/inference gap).",
    )
    problem: dict[str, Any] = Field(
        default_factory=dict,
        description="What the judge needs (answer, tests), carried to the verifier stage.",
    )
    verifier_id: str | None = Field(
        default=None, description="The verifier that judged it (None: judged by the worker)."
    )
