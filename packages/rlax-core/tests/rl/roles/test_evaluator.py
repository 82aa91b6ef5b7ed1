"""Evaluation samples through the workers' engine: the rollout engine gives what the
static sampler gives, and a held-out prompt too long for it fails before anything runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from rlax_core.config.sections import EngineSection, EvalSection, RolloutSection
from rlax_core.contracts import Environment, EnvStep, Episode, Message
from rlax_core.contracts.verifier import Judge
from rlax_core.errors import ConfigError
from rlax_core.models import QwenConfig, init_model
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.rl.roles.evaluator import Evaluator
from rlax_core.types.verdict import Verdict, VerdictStatus

TOKENIZER = Path(__file__).resolve().parents[5] / "examples" / "quickstart" / "tokenizer"


class _Recorder(Judge):
    """Accepts completions that hold the problem's letter; remembers what it saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def judge(
        self, problems: Sequence[Mapping[str, Any]], completions: Sequence[str]
    ) -> list[Verdict]:
        self.seen += [(p["id"], c) for p, c in zip(problems, completions, strict=True)]
        return [
            Verdict(status=VerdictStatus.AC if p["letter"] in c else VerdictStatus.WA,
                    reward=float(p["letter"] in c))
            for p, c in zip(problems, completions, strict=True)
        ]  # fmt: skip


def _evaluate(kind: str, prompts, **engine) -> tuple[dict[str, float], list[tuple[str, str]]]:
    tokenizer = Tokenizer.from_dir(TOKENIZER)
    model = init_model(QwenConfig.tiny(vocab_size=tokenizer.vocab_size))
    judge = _Recorder()
    rollout = RolloutSection(
        max_new_tokens=10, engine=EngineSection(kind=kind, slots=3, block_size=4, **engine)
    )
    evaluator = Evaluator(model, tokenizer=tokenizer, judge=judge, prompts=prompts,
                          config=EvalSection(samples_per_prompt=3, ks=[1, 3]), rollout=rollout,
                          stop_token_ids=(), seed=5)  # fmt: skip
    return evaluator.run(model), judge.seen


PROMPTS = [
    (f"e{i}", list(range(4, 9 + i)), {"id": f"e{i}", "letter": letter})
    for i, letter in enumerate("aeiou")
]


def test_the_rollout_engine_evaluates_as_the_static_sampler_does() -> None:
    """Same weights, prompts and seeds: the same completions judged, in the same order,
    so the same pass@k."""
    static, static_seen = _evaluate("static", PROMPTS)
    paged, paged_seen = _evaluate("paged", PROMPTS, max_prompt_tokens=16)
    assert len(paged_seen) == len(PROMPTS) * 3
    assert paged_seen == static_seen
    assert paged == static
    assert set(paged) >= {"eval/pass@1", "eval/pass@3", "eval/reward_mean"}


def test_a_held_out_prompt_too_long_for_the_engine_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"e4.*rollout\.engine\.max_prompt_tokens \(8\)"):
        _evaluate("paged", PROMPTS, max_prompt_tokens=8)


class _TwoTurns(Environment):
    """Asks the model to try again once; then the judge decides on its second turn."""

    def __init__(self) -> None:
        self.turns: list[str] = []

    def start(self, problem):
        environment = self

        class _Episode(Episode):
            def __init__(self) -> None:
                self.count = 0

            def step(self, turn: str) -> EnvStep:
                environment.turns.append(turn)
                self.count += 1
                if self.count == 2:
                    return EnvStep(done=True)
                return EnvStep(messages=(Message(role="user", content="Again."),))

        return _Episode()


def test_a_multi_turn_environment_evaluates_episodes() -> None:
    """With a multi-turn environment, each held-out sample is an episode: two model turns
    here, the judge deciding on the last one only."""
    tokenizer = Tokenizer.from_dir(TOKENIZER)
    model = init_model(QwenConfig.tiny(vocab_size=tokenizer.vocab_size))
    judge, environment = _Recorder(), _TwoTurns()
    rollout = RolloutSection(
        max_new_tokens=120, turns={"turn_tokens": 6},
        engine=EngineSection(kind="paged", slots=3, block_size=4),
    )  # fmt: skip
    evaluator = Evaluator(model, tokenizer=tokenizer, judge=judge, prompts=PROMPTS,
                          config=EvalSection(samples_per_prompt=3, ks=[1, 3]), rollout=rollout,
                          stop_token_ids=(), seed=5, environment=environment)  # fmt: skip
    evaluated = []
    metrics = evaluator.run(model, on_prompt=evaluated.append)
    assert metrics["eval/turns_mean"] == 2.0
    assert len(environment.turns) == 2 * 3 * len(PROMPTS)
    assert len(judge.seen) == 3 * len(PROMPTS)
    assert all(text in environment.turns for _, text in judge.seen)  # each is a model turn
    # What `rlax eval --out` writes: each prompt's episodes whole, the judged turn last.
    assert [e.example_id for e in evaluated] == [example_id for example_id, _, _ in PROMPTS]
    for prompt in evaluated:
        judged = [text for example_id, text in judge.seen if example_id == prompt.example_id]
        assert len(prompt.completions) == len(prompt.verdicts) == len(judged) == 3
        for episode, turn in zip(prompt.completions, judged, strict=True):
            assert turn.strip() in episode and len(episode) > len(turn)
    assert 0.0 <= metrics["eval/pass@1"] <= 1.0
    with pytest.raises(ConfigError, match="needs the rollout engine"):
        Evaluator(model, tokenizer=tokenizer, judge=judge, prompts=PROMPTS,
                  config=EvalSection(), rollout=RolloutSection(max_new_tokens=10),
                  stop_token_ids=(), seed=5, environment=environment)  # fmt: skip
