"""The benchmark runner behind ``rlax bench SUITE``.

A suite is a module ``benchmarks/<suite>.py`` with a ``run(bench)`` function, imported as
``benchmarks.<suite>`` (the folder is a package; its ``_``-prefixed modules are helpers,
not suites). Every figure it reports stands beside a baseline measured in the same run,
and the report gives their ratio: shared machines are noisy, so only same-run ratios
compare.
"""

from rlax_core.bench.measure import (
    Bench,
    Comparison,
    chosen_counts,
    chosen_parts,
    taking_turns,
)
from rlax_core.bench.runner import find_benchmarks_dir, list_suites, run_suite

__all__ = [
    "Bench",
    "Comparison",
    "chosen_counts",
    "chosen_parts",
    "find_benchmarks_dir",
    "list_suites",
    "run_suite",
    "taking_turns",
]
