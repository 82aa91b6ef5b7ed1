"""The training prompt stream: a seeded, weighted mixture of datasets with a resumable cursor.

Every random choice is a pure function of the seed and a counter, so the whole cursor is
a handful of integers: draw ``d`` picks its dataset from the block of uniform numbers
seeded by ``(seed, CHOICE, d // BLOCK)``, and the ``j``-th example taken from dataset
``i`` is position ``j mod len`` of the permutation seeded by ``(seed, ORDER, i, j // len)``
(one fresh permutation per epoch). Restoring the counters restores the stream exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlax_core.config.sections import DataSection
from rlax_core.data.dataset import PromptDataset, PromptExample
from rlax_core.errors import ConfigError

_CHOICE_STREAM = 0  # separates the dataset-choice stream from the per-epoch orders
_ORDER_STREAM = 1
_BLOCK = 1024  # draws whose dataset choices come from one generator
_STATE_VERSION = 1


class PromptMixture:
    """A deterministic, resumable stream over weighted datasets.

    Each draw picks a dataset with probability proportional to its weight (seeded), then
    that dataset's next example in a per-epoch permutation (seeded by the seed, the
    dataset's index and the epoch); ``shuffle=False`` keeps file order. A dataset that runs
    out starts its next epoch; the stream never ends.
    """

    def __init__(
        self,
        datasets: Sequence[PromptDataset],
        weights: Sequence[float],
        *,
        seed: int,
        shuffle: bool = True,
    ) -> None:
        """Builds the stream at its start.

        Raises:
            ValueError: no datasets, an empty dataset, a weight count that differs from
                the dataset count, a weight that is not a positive finite number, or a
                negative seed.
        """
        if not datasets:
            raise ValueError("a prompt mixture needs at least one dataset")
        if len(weights) != len(datasets):
            raise ValueError(f"{len(weights)} weights given for {len(datasets)} datasets")
        for dataset, weight in zip(datasets, weights, strict=True):
            if not (math.isfinite(weight) and weight > 0):
                raise ValueError(
                    f"dataset {dataset.name!r} has weight {weight}; weights must be positive "
                    "finite numbers (leave a dataset out rather than give it weight 0)"
                )
            if len(dataset) == 0:
                raise ValueError(f"dataset {dataset.name!r} is empty")
        if seed < 0:
            raise ValueError(f"seed must be ≥ 0, got {seed}")
        self.datasets = tuple(datasets)
        self.weights = tuple(float(w) for w in weights)
        self.seed = seed
        self.shuffle = shuffle
        cumulative = np.cumsum(np.asarray(self.weights) / sum(self.weights))
        cumulative[-1] = 1.0  # rounding must never leave a uniform draw past the last bin
        self._cumulative = cumulative
        self._draws = 0
        self._consumed = [0] * len(self.datasets)
        self._choice_cache: tuple[int, np.ndarray] | None = None
        self._order_cache: dict[int, tuple[int, np.ndarray]] = {}

    @classmethod
    def from_section(cls, section: DataSection, base_dir: Path, *, seed: int) -> PromptMixture:
        """Loads the training datasets of a run config's ``data`` section.

        Args:
            section: the ``data`` section (its ``eval`` set is not part of the mixture).
            base_dir: the directory relative dataset paths are relative to.
            seed: the run's seed.

        Raises:
            ConfigError: a dataset cannot be loaded (see :meth:`PromptDataset.load`).
        """
        datasets = [PromptDataset.load(config, base_dir) for config in section.train]
        weights = [config.weight for config in section.train]
        return cls(datasets, weights, seed=seed, shuffle=section.shuffle)

    @property
    def draws(self) -> int:
        """Examples drawn so far."""
        return self._draws

    def next(self) -> PromptExample:
        """The next example of the stream."""
        index = self._dataset_of(self._draws)
        dataset = self.datasets[index]
        epoch, position = divmod(self._consumed[index], len(dataset))
        example = dataset[self._row_of(index, epoch, position)]
        self._consumed[index] += 1
        self._draws += 1
        return example

    def state(self) -> dict[str, Any]:
        """The cursor, as a small JSON-serialisable dict (counters only)."""
        return {
            "version": _STATE_VERSION,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "datasets": [{"name": d.name, "size": len(d)} for d in self.datasets],
            "draws": self._draws,
            "consumed": list(self._consumed),
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Moves the cursor to where :meth:`state` was taken; ``next`` then continues exactly.

        The datasets, seed and shuffle setting must be those of the run the state came
        from; weights may differ (draws after the restore then follow the new weights).

        Raises:
            ConfigError: the state is malformed, or was taken over other datasets, another
                seed or another shuffle setting.
        """
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ConfigError(
                f"the data cursor in the checkpoint is not a version-{_STATE_VERSION} "
                f"prompt-mixture state: {state!r:.200}"
            )
        mine = self.state()
        for key, what in (("datasets", "training datasets"), ("seed", "run.seed")):
            if state.get(key) != mine[key]:
                raise ConfigError(
                    f"the checkpoint's data cursor was taken with {what} {state.get(key)!r}, "
                    f"but this run has {mine[key]!r}; resume with the config the run started "
                    "with"
                )
        if state.get("shuffle") != self.shuffle:
            raise ConfigError(
                f"the checkpoint's data cursor was taken with data.shuffle "
                f"{state.get('shuffle')!r}, but this run has {self.shuffle!r}; resume with "
                "the config the run started with"
            )
        draws, consumed = state.get("draws"), state.get("consumed")
        if (
            not isinstance(draws, int)
            or not isinstance(consumed, list)
            or len(consumed) != len(self.datasets)
            or not all(isinstance(c, int) and c >= 0 for c in consumed)
            or sum(consumed) != draws
        ):
            raise ConfigError(
                f"the checkpoint's data cursor is inconsistent (draws {draws!r}, per dataset "
                f"{consumed!r}); the checkpoint is damaged"
            )
        self._draws = draws
        self._consumed = list(consumed)

    def _dataset_of(self, draw: int) -> int:
        """Which dataset draw number ``draw`` takes from."""
        if len(self.datasets) == 1:
            return 0
        block, offset = divmod(draw, _BLOCK)
        if self._choice_cache is None or self._choice_cache[0] != block:
            rng = np.random.default_rng([self.seed, _CHOICE_STREAM, block])
            # Inverse-CDF sampling: bin i holds a [cumulative[i-1], cumulative[i]) share.
            choices = np.searchsorted(self._cumulative, rng.random(_BLOCK), side="right")
            self._choice_cache = (block, choices)
        return int(self._choice_cache[1][offset])

    def _row_of(self, index: int, epoch: int, position: int) -> int:
        """The row of dataset ``index`` at ``position`` in its order for ``epoch``."""
        if not self.shuffle:
            return position
        cached = self._order_cache.get(index)
        if cached is None or cached[0] != epoch:
            rng = np.random.default_rng([self.seed, _ORDER_STREAM, index, epoch])
            cached = (epoch, rng.permutation(len(self.datasets[index])))
            self._order_cache[index] = cached
        return int(cached[1][position])
