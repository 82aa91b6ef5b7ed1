"""Records cross processes as explicit JSON and validate what they receive."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rlax_core.types import (
    ExecutionResult,
    PromptGroup,
    Rollout,
    RolloutGroup,
    TestOutcome,
    Verdict,
    VerdictStatus,
)


def _rollout(**overrides: object) -> Rollout:
    fields = {
        "rollout_id": "g1/0",
        "completion_tokens": (5, 6, 7),
        "behaviour_logprobs": (-0.5, -1.25, -0.0625),
        "finish_reason": "stop",
        "reward": 1.0,
        "verdict": Verdict(
            status=VerdictStatus.AC,
            reward=1.0,
            tests=(TestOutcome(verdict=VerdictStatus.AC, time_s=0.01, memory_mb=9.5),),
        ),
    }
    return Rollout(**{**fields, **overrides})


def test_rollout_group_round_trips_through_bytes() -> None:
    group = RolloutGroup(
        group_id="g1",
        prompt_id="p1",
        prompt_tokens=(1, 2),
        policy_version=4,
        worker_id="worker-0",
        rollouts=(_rollout(), _rollout(rollout_id="g1/1", reward=0.0)),
    )
    data = group.to_bytes()
    assert data.startswith(b"{")  # JSON, not a pickle
    assert RolloutGroup.from_bytes(data) == group
    assert RolloutGroup.from_bytes(memoryview(data)) == group


def test_float32_logprobs_survive_json_exactly() -> None:
    import numpy as np

    values = tuple(
        float(x) for x in np.random.default_rng(0).standard_normal(50).astype(np.float32)
    )
    rollout = _rollout(completion_tokens=tuple(range(50)), behaviour_logprobs=values)
    again = Rollout.from_bytes(rollout.to_bytes())
    assert np.array_equal(np.float32(again.behaviour_logprobs), np.float32(values))


def test_logprobs_must_match_the_tokens() -> None:
    with pytest.raises(ValidationError, match="behaviour_logprobs has 2 entries for 3 tokens"):
        _rollout(behaviour_logprobs=(-1.0, -2.0))
    with pytest.raises(ValidationError, match="policy_logprobs"):
        _rollout(policy_logprobs=(-1.0,))
    with pytest.raises(ValidationError, match="token_versions has 1 entries for 3 tokens"):
        _rollout(token_versions=(4,))


def test_records_refuse_unknown_fields_and_are_frozen() -> None:
    with pytest.raises(ValidationError, match="extra"):
        PromptGroup.model_validate(
            {
                "group_id": "g",
                "prompt_id": "p",
                "prompt_tokens": [1],
                "samples_per_prompt": 2,
                "x": 1,
            }
        )
    group = PromptGroup(group_id="g", prompt_id="p", prompt_tokens=(1,), samples_per_prompt=2)
    with pytest.raises(ValidationError, match="frozen"):
        group.samples_per_prompt = 3  # type: ignore[misc]


def test_garbage_bytes_are_a_validation_error() -> None:
    with pytest.raises(ValidationError):
        ExecutionResult.from_bytes(b"\x80\x04\x95 not json")
