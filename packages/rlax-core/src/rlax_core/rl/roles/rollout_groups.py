"""What an inference worker does with finished completions: check, judge, pack, send."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from rlax_core.contracts.queue import Queue
from rlax_core.contracts.verifier import Judge
from rlax_core.errors import LeaseExpiredError
from rlax_core.generate import Sampler
from rlax_core.judging import judge_isolated
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.types.lease import Lease
from rlax_core.types.rollout import PromptGroup, Rollout, RolloutGroup
from rlax_core.types.verdict import Verdict


def logprob_gaps(
    sampler: Sampler,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    policy_logprobs: Sequence[Sequence[float]],
    temperature: float,
    sampled: Sequence[Sequence[bool]] | None = None,
) -> list[float | None]:
    """Per completion, the worst |sampled − teacher-forced| policy log-probability, the
    teacher-forced ones scored by ``sampler`` with the weights that sampled them;
    ``sampled``: per token, whether the model sampled it (an environment's tokens have
    no sampler log-probability to check)."""
    if not prompts:
        return []
    scored = sampler.score([list(p) for p in prompts], [list(c) for c in completions],
                           temperature)  # fmt: skip
    masks = sampled or [[True] * len(c) for c in completions]
    return [
        max((abs(a - b) for a, b, m in zip(s, p, mask, strict=True) if m), default=None)
        for s, p, mask in zip(scored, policy_logprobs, masks, strict=True)
    ]


def judge_completions(
    judge: Judge | None,
    tokenizer: Tokenizer,
    problems: Sequence[dict],
    completions: Sequence[Sequence[int]],
) -> list[Verdict | None]:
    """The judge's verdicts on the decoded completions; all None without a judge (the
    verifier stage judges)."""
    if judge is None:
        return [None] * len(completions)
    texts = [tokenizer.decode(list(t), skip_special_tokens=True) for t in completions]
    return list(judge_isolated(judge, list(problems), texts))


def pack_group(
    group: PromptGroup,
    *,
    worker_id: str,
    version: int,
    tokens: Sequence[Sequence[int]],
    behaviour_logprobs: Sequence[Sequence[float]],
    policy_logprobs: Sequence[Sequence[float]],
    finish_reasons: Sequence[str],
    verdicts: Sequence[Verdict | None],
    gaps: Sequence[float | None],
    generation_s: float,
    token_versions: Sequence[Sequence[int]] | None = None,
    sampled: Sequence[Sequence[bool]] | None = None,
    end_reasons: Sequence[str | None] | None = None,
) -> RolloutGroup:
    """One group's completions (in sample order) as the rollout group sent on.

    Args:
        version: the version that sampled every token, or with ``token_versions`` (per
            completion, each token's version) the oldest of them.
        sampled: per completion and token, whether the model sampled it (multi-turn:
            False on an environment's tokens).
        end_reasons: per completion, why a multi-turn rollout ended early.
    """
    mixed = token_versions is not None and any(len(set(v)) > 1 for v in token_versions)
    rollouts = tuple(
        Rollout(
            rollout_id=f"{group.group_id}/{j}",
            completion_tokens=tuple(tokens[j]),
            behaviour_logprobs=tuple(behaviour_logprobs[j]),
            policy_logprobs=tuple(policy_logprobs[j]),
            token_versions=tuple(token_versions[j]) if mixed and token_versions else None,
            environment_spans=spans(sampled[j]) if sampled else (),
            finish_reason=finish_reasons[j],
            end_reason=end_reasons[j] if end_reasons else None,
            reward=None if verdicts[j] is None else verdicts[j].reward,
            verdict=verdicts[j],
        )
        for j in range(group.samples_per_prompt)
    )
    checked = [g for g in gaps if g is not None]
    return RolloutGroup(
        group_id=group.group_id,
        prompt_id=group.prompt_id,
        prompt_tokens=group.prompt_tokens,
        policy_version=version,
        worker_id=worker_id,
        rollouts=rollouts,
        generation_s=generation_s,
        logprob_gap=max(checked) if checked else None,
        problem=group.problem,
    )


def spans(sampled: Sequence[bool]) -> tuple[tuple[int, int], ...]:
    """The [start, end) ranges where ``sampled`` is False (an environment's tokens)."""
    ranges, start = [], None
    for i, mine in enumerate([*sampled, True]):
        if not mine and start is None:
            start = i
        elif mine and start is not None:
            ranges.append((start, i))
            start = None
    return tuple(ranges)


def deliver(outbox: Queue, prompts: Queue, result: RolloutGroup, lease: Lease) -> None:
    """Sends a rollout group on, then acks its prompt group's lease."""
    outbox.put(result.group_id, result.to_bytes())
    # An expired lease went to another worker meanwhile; its copy is dropped by id.
    with contextlib.suppress(LeaseExpiredError):
        prompts.ack(lease)
