"""Periodic evaluation: sample held-out prompts, judge them, report pass@k."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlax_core.config.sections import EvalSection, RolloutSection
from rlax_core.contracts.verifier import Judge
from rlax_core.errors import ConfigError
from rlax_core.generate import Sampler, SamplingParams
from rlax_core.generate.paged import Engine
from rlax_core.judging import judge_isolated
from rlax_core.models.qwen import Qwen
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.rl.algorithms.pass_at_k import pass_at_k_metrics
from rlax_core.rl.roles.streaming_worker import engine_for
from rlax_core.rl.roles.worker import sample_seed
from rlax_core.types.verdict import VerdictStatus

# Completions sampled in one generate call: bounds the evaluation's memory.
ROWS_PER_CALL = 256


class Evaluator:
    """Samples ``samples_per_prompt`` completions of each held-out prompt and judges them.

    The seeds are fixed per (prompt, sample), so evaluations at different steps differ
    only by the weights. Completions come from the engine the workers use
    (``rollout.engine``): the rollout engine with ``kind: paged``, else the static sampler.

    Args:
        model: a model of the policy's structure.
        tokenizer: decodes completions for the judge.
        judge: decides correctness (a completion counts as correct when AC).
        prompts: (example id, prompt token ids, problem) of each held-out prompt.
        config: the run config's ``eval`` section.
        rollout: the run config's ``rollout`` section (the engine, ``max_new_tokens``).
        stop_token_ids / seed: as for rollouts.

    Raises:
        ConfigError: a held-out prompt longer than ``rollout.engine.max_prompt_tokens``
            (with ``kind: paged``).
    """

    def __init__(
        self,
        model: Qwen,
        *,
        tokenizer: Tokenizer,
        judge: Judge,
        prompts: Sequence[tuple[str, list[int], dict[str, Any]]],
        config: EvalSection,
        rollout: RolloutSection,
        stop_token_ids: tuple[int, ...],
        seed: int,
    ) -> None:
        pad = tokenizer.pad_token_id or 0
        paged = rollout.engine.kind == "paged"
        self._sampler: Sampler | Engine = (
            engine_for(model, rollout, pad_token_id=pad)
            if paged
            else Sampler(model, pad_token_id=pad)
        )
        self._tokenizer = tokenizer
        self._judge = judge
        self._prompts = list(prompts)[: config.max_prompts]
        longest = rollout.engine.max_prompt_tokens
        too_long = [e for e, tokens, _ in self._prompts if paged and len(tokens) > longest]
        if too_long:
            raise ConfigError(
                f"{len(too_long)} held-out prompts (the first: {too_long[0]!r}) are longer "
                f"than rollout.engine.max_prompt_tokens ({longest}): raise it"
            )
        self._config = config
        self._seed = seed
        self._params = SamplingParams(
            max_new_tokens=rollout.max_new_tokens,
            temperature=config.temperature,
            stop_token_ids=stop_token_ids,
        )

    def run(self, model: Qwen) -> dict[str, float]:
        """pass@k for each configured k, and the mean reward, of ``model``."""
        self._sampler.set_model(model)
        n = self._config.samples_per_prompt
        correct = [0] * len(self._prompts)
        rewards = []
        per_call = max(1, ROWS_PER_CALL // n)  # prompts, each with its n samples
        for start in range(0, len(self._prompts), per_call):
            chunk = self._prompts[start : start + per_call]
            seeds = [sample_seed(self._seed, f"eval/{example_id}", j)
                     for example_id, _, _ in chunk for j in range(n)]  # fmt: skip
            out = self._sampler.generate(
                [list(tokens) for _, tokens, _ in chunk], self._params, seed=seeds,
                samples_per_prompt=n,
            )  # fmt: skip
            texts = [self._tokenizer.decode(t, skip_special_tokens=True) for t in out.tokens]
            problems = [problem for _, _, problem in chunk for _ in range(n)]
            verdicts = judge_isolated(self._judge, problems, texts)
            for row, verdict in enumerate(verdicts):
                correct[start + row // n] += verdict.status == VerdictStatus.AC
                if verdict.reward is not None:
                    rewards.append(verdict.reward)
        metrics = pass_at_k_metrics(correct, n, self._config.ks)
        metrics["eval/reward_mean"] = sum(rewards) / len(rewards) if rewards else float("nan")
        return metrics
