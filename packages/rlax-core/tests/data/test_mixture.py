"""The prompt mixture: weighted, seeded, reshuffled per epoch, and resumable exactly."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from rlax_core.config.sections import DataSection
from rlax_core.data import PromptDataset, PromptExample, PromptMixture
from rlax_core.errors import ConfigError


def _dataset(name: str, size: int) -> PromptDataset:
    return PromptDataset(
        name,
        [
            PromptExample(f"{name}/{i}", f"prompt {i}", {"kind": "math", "answer": str(i)})
            for i in range(size)
        ],
    )


def _mixture(seed: int = 1234, shuffle: bool = True) -> PromptMixture:
    datasets = [_dataset("a", 7), _dataset("b", 11), _dataset("c", 5)]
    return PromptMixture(datasets, [1.0, 2.0, 5.0], seed=seed, shuffle=shuffle)


def _ids(mixture: PromptMixture, count: int) -> list[str]:
    return [mixture.next().example_id for _ in range(count)]


def test_draws_follow_the_weights() -> None:
    draws = 8000
    counts = Counter(i.split("/")[0] for i in _ids(_mixture(), draws))
    # Exact for seed 1234: the stream is a pure function of the seed.
    assert counts == {"a": 1033, "b": 2018, "c": 4949}
    for name, share in (("a", 1 / 8), ("b", 2 / 8), ("c", 5 / 8)):
        sigma = math.sqrt(draws * share * (1 - share))
        assert abs(counts[name] - draws * share) < 4 * sigma, (name, counts)


def test_the_stream_is_a_function_of_the_seed() -> None:
    first = _ids(_mixture(seed=7), 300)
    assert _ids(_mixture(seed=7), 300) == first
    assert _ids(_mixture(seed=8), 300) != first


def test_each_epoch_is_a_fresh_permutation() -> None:
    mixture = PromptMixture([_dataset("a", 10)], [1.0], seed=0)
    epochs = [_ids(mixture, 10) for _ in range(3)]
    everything = sorted(f"a/{i}" for i in range(10))
    assert all(sorted(epoch) == everything for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) == 3
    assert epochs[0] != everything  # shuffled, not file order


def test_every_dataset_is_exhausted_before_it_repeats() -> None:
    mixture = _mixture()
    taken: dict[str, list[str]] = {"a": [], "b": [], "c": []}
    for example_id in _ids(mixture, 200):
        taken[example_id.split("/")[0]].append(example_id)
    for name, size in (("a", 7), ("b", 11), ("c", 5)):
        ids = taken[name]
        for start in range(0, len(ids) - size + 1, size):
            assert len(set(ids[start : start + size])) == size, (name, start)


def test_shuffle_false_keeps_file_order() -> None:
    mixture = PromptMixture([_dataset("a", 4)], [1.0], seed=3, shuffle=False)
    assert _ids(mixture, 10) == [f"a/{i % 4}" for i in range(10)]
    mixed = _mixture(shuffle=False)
    taken = [i for i in _ids(mixed, 100) if i.startswith("b/")]
    assert taken == [f"b/{i % 11}" for i in range(len(taken))]


@pytest.mark.parametrize(("first", "then"), [(100, 50), (1000, 100), (0, 20)])
def test_restore_continues_exactly(first: int, then: int) -> None:
    original = _mixture()
    _ids(original, first)
    saved = json.loads(json.dumps(original.state()))  # what a checkpoint stores
    expected = _ids(original, then)
    resumed = _mixture()
    resumed.restore(saved)
    assert resumed.draws == first
    assert _ids(resumed, then) == expected
    assert resumed.state() == original.state()


def test_the_cursor_is_a_few_counters() -> None:
    mixture = _mixture()
    _ids(mixture, 5000)
    state = mixture.state()
    assert state["draws"] == 5000 and sum(state["consumed"]) == 5000
    assert len(json.dumps(state)) < 300


@pytest.mark.parametrize("weight", [0.0, -1.0, math.inf, math.nan])
def test_weights_must_be_positive_and_finite(weight: float) -> None:
    with pytest.raises(ValueError, match="weights must be positive"):
        PromptMixture([_dataset("a", 3), _dataset("b", 3)], [1.0, weight], seed=0)


def test_bad_construction_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one dataset"):
        PromptMixture([], [], seed=0)
    with pytest.raises(ValueError, match="1 weights given for 2 datasets"):
        PromptMixture([_dataset("a", 3), _dataset("b", 3)], [1.0], seed=0)
    with pytest.raises(ValueError, match="seed must be"):
        PromptMixture([_dataset("a", 3)], [1.0], seed=-1)
    with pytest.raises(ValueError, match="has no examples"):
        PromptDataset("empty", [])


def test_restore_refuses_another_run_or_a_damaged_cursor() -> None:
    mixture = _mixture()
    _ids(mixture, 10)
    state = mixture.state()
    with pytest.raises(ConfigError, match=r"run\.seed 1234, but this run has 99"):
        _mixture(seed=99).restore(state)
    with pytest.raises(ConfigError, match=r"data\.shuffle True, but this run has False"):
        _mixture(shuffle=False).restore(state)
    other = PromptMixture([_dataset("a", 7)], [1.0], seed=1234)
    with pytest.raises(ConfigError, match="training datasets"):
        other.restore(state)
    with pytest.raises(ConfigError, match="damaged"):
        _mixture().restore({**state, "draws": 11})
    with pytest.raises(ConfigError, match="not a version-1"):
        _mixture().restore({"draws": 10})


def test_from_section_loads_files_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    for name, size in (("easy", 3), ("hard", 4)):
        rows = [{"q": f"{name} {i}", "a": i} for i in range(size)]
        (tmp_path / "data" / f"{name}.jsonl").write_text(
            "".join(json.dumps(row) + "\n" for row in rows)
        )
    section = DataSection.model_validate(
        {
            "train": [
                {"path": "data/easy.jsonl", "prompt_template": "{q}", "answer_field": "a"},
                {
                    "path": "data/hard.jsonl",
                    "prompt_template": "{q}",
                    "answer_field": "a",
                    "weight": 3,
                },
            ],
            "shuffle": False,
        }
    )
    mixture = PromptMixture.from_section(section, tmp_path, seed=5)
    assert [d.name for d in mixture.datasets] == ["easy", "hard"]
    assert mixture.weights == (1.0, 3.0)
    drawn = [mixture.next() for _ in range(40)]
    hard = [e for e in drawn if e.example_id.startswith("hard/")]
    assert [e.prompt for e in hard[:4]] == [f"hard {i}" for i in range(4)]
    assert hard[0].problem == {"kind": "math", "answer": "0"}
