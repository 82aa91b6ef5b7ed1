"""Periodic evaluation: sample held-out prompts, judge them, report pass@k."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlax_core.config.sections import EvalSection
from rlax_core.contracts.verifier import Judge
from rlax_core.generate import Sampler, SamplingParams
from rlax_core.judging import judge_isolated
from rlax_core.models.qwen import Qwen
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.rl.algorithms.pass_at_k import pass_at_k_metrics
from rlax_core.rl.roles.worker import sample_seed
from rlax_core.types.verdict import VerdictStatus

# Completions sampled in one generate call: bounds the evaluation's memory.
ROWS_PER_CALL = 256


class Evaluator:
    """Samples ``samples_per_prompt`` completions of each held-out prompt and judges them.

    The seeds are fixed per (prompt, sample), so evaluations at different steps differ
    only by the weights.

    Args:
        model: a model of the policy's structure.
        tokenizer: decodes completions for the judge.
        judge: decides correctness (a completion counts as correct when AC).
        prompts: (example id, prompt token ids, problem) of each held-out prompt.
        config: the run config's ``eval`` section.
        max_new_tokens / stop_token_ids / seed: as for rollouts.
    """

    def __init__(
        self,
        model: Qwen,
        *,
        tokenizer: Tokenizer,
        judge: Judge,
        prompts: Sequence[tuple[str, list[int], dict[str, Any]]],
        config: EvalSection,
        max_new_tokens: int,
        stop_token_ids: tuple[int, ...],
        seed: int,
    ) -> None:
        self._sampler = Sampler(model, pad_token_id=tokenizer.pad_token_id or 0)
        self._tokenizer = tokenizer
        self._judge = judge
        self._prompts = list(prompts)[: config.max_prompts]
        self._config = config
        self._seed = seed
        self._params = SamplingParams(
            max_new_tokens=max_new_tokens,
            temperature=config.temperature,
            stop_token_ids=stop_token_ids,
        )

    def run(self, model: Qwen) -> dict[str, float]:
        """pass@k for each configured k, and the mean reward, of ``model``."""
        self._sampler.set_model(model)
        n = self._config.samples_per_prompt
        rows = [
            (i, list(tokens), problem, sample_seed(self._seed, f"eval/{example_id}", j))
            for i, (example_id, tokens, problem) in enumerate(self._prompts)
            for j in range(n)
        ]
        correct = [0] * len(self._prompts)
        rewards = []
        for start in range(0, len(rows), ROWS_PER_CALL):
            chunk = rows[start : start + ROWS_PER_CALL]
            out = self._sampler.generate(
                [r[1] for r in chunk], self._params, seed=[r[3] for r in chunk]
            )
            texts = [self._tokenizer.decode(t, skip_special_tokens=True) for t in out.tokens]
            verdicts = judge_isolated(self._judge, [r[2] for r in chunk], texts)
            for (i, *_), verdict in zip(chunk, verdicts, strict=True):
                correct[i] += verdict.status == VerdictStatus.AC
                if verdict.reward is not None:
                    rewards.append(verdict.reward)
        metrics = pass_at_k_metrics(correct, n, self._config.ks)
        metrics["eval/reward_mean"] = sum(rewards) / len(rewards) if rewards else float("nan")
        return metrics
