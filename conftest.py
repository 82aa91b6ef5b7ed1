"""Session-wide test setup (runs before any test module imports JAX).

* JAX on the CPU exposes one device unless told otherwise; sharding tests need eight.
* XLA's CPU compiler takes seconds per program: a persistent compilation cache under
  .cache/ lets repeated shapes (within a run and across local runs) skip it.
* The suite runs in two pytest-xdist processes (``./scripts/test``: ``-n 2 --dist
  loadgroup``). Most tests keep one core busy, so two of them share two cores well.
  Two groups of test files run each in one test process, one test after another (see
  ``GROUPS``): the files with multi-process tests, which already fill the machine, and
  the files that start code sandboxes, whose host checks look for any sandbox's
  processes left on the machine and whose session sandbox uses a fixed block of uids.
"""

import functools
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", str(Path(__file__).resolve().parent / ".cache" / "jax-compile")
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")


ROOT = Path(__file__).resolve().parent
# A test file's group, from what its source says (the controller process, which
# schedules, collects nothing): several processes (the marker ``distributed``), or a
# code sandbox (the verifier package, the markers ``docker`` and ``sandbox``).
GROUPS = (
    ("processes", lambda path, text: "mark.distributed" in text),
    ("sandbox", lambda path, text: path.startswith("packages/rlax-verifiers/")
     or "mark.docker" in text or "mark.sandbox" in text),
)  # fmt: skip


@functools.cache
def group_of(path: str) -> str | None:
    """The group of the test file at ``path`` (relative to the root), or None."""
    text = (ROOT / path).read_text() if (ROOT / path).is_file() else ""
    return next((name for name, belongs in GROUPS if belongs(path, text)), None)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``: each group's tests go to one test process, one after
    another; every other test is a unit of its own. (xdist's own loadgroup reads
    ``xdist_group`` marks through node ids that pytest 9.2 no longer lets it change.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid.split("::", 1)[0]) or nodeid

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The multi-process group goes first: it is the longest unit of work, and xdist
    hands units out in collection order, so started last it would run on alone at the
    end."""
    items.sort(key=lambda item: not item.get_closest_marker("distributed"))  # stable
