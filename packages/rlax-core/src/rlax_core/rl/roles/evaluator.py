"""Periodic evaluation: sample held-out prompts, judge them, report pass@k."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlax_core.config.sections import EvalSection, RolloutSection
from rlax_core.contracts.environment import Environment
from rlax_core.contracts.verifier import Judge
from rlax_core.errors import ConfigError
from rlax_core.generate import Sampler, SamplingParams
from rlax_core.generate.paged import Engine, Request
from rlax_core.judging import judge_isolated
from rlax_core.models.qwen import Qwen
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.rl.algorithms.pass_at_k import pass_at_k_metrics
from rlax_core.rl.roles.episodes import Episodes, environment_verdict, model_turns
from rlax_core.rl.roles.streaming_worker import engine_for
from rlax_core.rl.roles.worker import sample_seed
from rlax_core.types.verdict import Verdict, VerdictStatus

# Completions sampled in one generate call: bounds the evaluation's memory.
ROWS_PER_CALL = 256


@dataclass(frozen=True)
class EvaluatedPrompt:
    """One held-out prompt with its samples as they were judged (``rlax eval --out``).

    Attributes:
        example_id / prompt_tokens / problem: the prompt, as given to the evaluator.
        completions: each sample's text (with a multi-turn environment: the whole
            episode after the prompt, the environment's turns included).
        verdicts: the judge's verdict on each sample (or the environment's).
    """

    example_id: str
    prompt_tokens: list[int]
    problem: dict[str, Any]
    completions: list[str]
    verdicts: list[Verdict]


class Evaluator:
    """Samples ``samples_per_prompt`` completions of each held-out prompt and judges them.

    The seeds are fixed per (prompt, sample), so evaluations at different steps differ
    only by the weights. Completions come from the engine the workers use
    (``rollout.engine``): the rollout engine with ``kind: paged``, else the static sampler.
    With a multi-turn ``environment`` each sample is an episode, as in training: the
    judge decides on its last turn unless the environment rewarded it (correct: a
    reward above 0), and one whose environment failed counts as not correct.

    Args:
        model: a model of the policy's structure.
        tokenizer: decodes completions for the judge.
        judge: decides correctness (a completion counts as correct when AC).
        prompts: (example id, prompt token ids, problem) of each held-out prompt.
        config: the run config's ``eval`` section.
        rollout: the run config's ``rollout`` section (the engine, ``max_new_tokens``).
        stop_token_ids / seed: as for rollouts.
        environment: what answers the model's turns (None or single-turn: nothing).

    Raises:
        ConfigError: a held-out prompt longer than ``rollout.engine.max_prompt_tokens``
            (with ``kind: paged``); a multi-turn environment without the rollout engine.
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
        environment: Environment | None = None,
    ) -> None:
        pad = tokenizer.pad_token_id or 0
        paged = rollout.engine.kind == "paged"
        self._sampler: Sampler | Engine = (
            engine_for(model, rollout, pad_token_id=pad)
            if paged
            else Sampler(model, pad_token_id=pad)
        )
        self._episodes = None
        if environment is not None and environment.multi_turn:
            if not isinstance(self._sampler, Engine):
                raise ConfigError("a multi-turn environment needs the rollout engine: set "
                                  "rollout.engine.kind: paged")  # fmt: skip
            self._episodes = Episodes(self._sampler, environment, tokenizer, rollout.turns)
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

    @property
    def num_prompts(self) -> int:
        """How many held-out prompts an evaluation samples (``eval.max_prompts`` at most)."""
        return len(self._prompts)

    def run(
        self, model: Qwen, on_prompt: Callable[[EvaluatedPrompt], None] | None = None
    ) -> dict[str, float]:
        """pass@k for each configured k, and the mean reward, of ``model`` (and, with a
        multi-turn environment, the mean number of model turns).

        Args:
            on_prompt: called with each prompt's samples and verdicts, in prompt order.
        """
        self._sampler.set_model(model)
        self._turns = 0
        n = self._config.samples_per_prompt
        correct = [0] * len(self._prompts)
        rewards = []
        per_call = max(1, ROWS_PER_CALL // n)  # prompts, each with its n samples
        for start in range(0, len(self._prompts), per_call):
            chunk = self._prompts[start : start + per_call]
            seeds = [sample_seed(self._seed, f"eval/{example_id}", j)
                     for example_id, _, _ in chunk for j in range(n)]  # fmt: skip
            problems = [problem for _, _, problem in chunk for _ in range(n)]
            if self._episodes is None:
                out = self._sampler.generate(
                    [list(tokens) for _, tokens, _ in chunk], self._params, seed=seeds,
                    samples_per_prompt=n,
                )  # fmt: skip
                texts = [self._tokenizer.decode(t, skip_special_tokens=True) for t in out.tokens]
                verdicts = judge_isolated(self._judge, problems, texts)
            else:
                verdicts, texts = self._episode_verdicts(chunk, seeds, problems)
            for row, verdict in enumerate(verdicts):
                correct[start + row // n] += verdict.status == VerdictStatus.AC
                if verdict.reward is not None:
                    rewards.append(verdict.reward)
            for i, (example_id, tokens, problem) in enumerate(chunk if on_prompt else ()):
                rows = slice(i * n, (i + 1) * n)
                on_prompt(
                    EvaluatedPrompt(example_id, list(tokens), problem, texts[rows], verdicts[rows])
                )
        metrics = pass_at_k_metrics(correct, n, self._config.ks)
        if self._episodes is not None:
            metrics["eval/turns_mean"] = self._turns / max(1, len(self._prompts) * n)
        metrics["eval/reward_mean"] = sum(rewards) / len(rewards) if rewards else float("nan")
        return metrics

    def _episode_verdicts(
        self, chunk, seeds: list[int], problems: list
    ) -> tuple[list[Verdict], list[str]]:
        """The verdicts and texts of the chunk's samples run as episodes (prompt-major)."""
        assert self._episodes is not None
        n = self._config.samples_per_prompt
        requests = [
            (Request(i, tuple(tokens), tuple(seeds[i * n : (i + 1) * n]),
                     self._params.max_new_tokens, frozenset(self._params.stop_token_ids)), problem)
            for i, (_, tokens, problem) in enumerate(chunk)
        ]  # fmt: skip
        done = self._episodes.run(requests, self._params)
        samples = [pair for i in range(len(chunk)) for pair in done[i]]
        self._turns += sum(model_turns(s) for s, _ in samples)
        decided = [e.failed or e.reward is not None for _, e in samples]
        texts = [self._tokenizer.decode(s.last_turn, skip_special_tokens=True)
                 for (s, _), done_ in zip(samples, decided, strict=True) if not done_]  # fmt: skip
        judged = iter(judge_isolated(
            self._judge, [p for p, d in zip(problems, decided, strict=True) if not d], texts
        ))  # fmt: skip
        verdicts = [environment_verdict(e) if d else next(judged)
                    for (_, e), d in zip(samples, decided, strict=True)]  # fmt: skip
        episodes = [self._tokenizer.decode(s.tokens, skip_special_tokens=True) for s, _ in samples]
        return verdicts, episodes
