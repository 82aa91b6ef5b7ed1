"""Session-wide test setup (runs before any test module imports JAX).

* JAX on the CPU exposes one device unless told otherwise; sharding tests need eight.
* XLA's CPU compiler takes seconds per program: a persistent compilation cache under
  .cache/ lets repeated shapes (within a run and across local runs) skip it.
* The suite runs in two pytest-xdist processes (``./scripts/test``: ``-n 2 --dist
  loadgroup``). Most tests keep one core busy, so two of them share two cores well.
  Tests that start several processes (marker ``distributed``) already fill the machine:
  they form one group, run one at a time in one test process. The verifier package's
  tests, the Docker tests and every other test that starts a code sandbox (marker
  ``sandbox``) form another: their host checks look for any sandbox's processes left
  on the machine, and their session sandbox uses a fixed block of uids.
"""

import os
from pathlib import Path

import pytest

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", str(Path(__file__).resolve().parent / ".cache" / "jax-compile")
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")


VERIFIERS = Path(__file__).resolve().parent / "packages" / "rlax-verifiers"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The xdist groups (see the module's docstring); without xdist they change nothing.

    The multi-process group goes first: it is the longest unit of work, and xdist hands
    units out in collection order, so started last it would run on alone at the end.
    """
    for item in items:
        if item.get_closest_marker("distributed"):
            item.add_marker(pytest.mark.xdist_group("processes"))
        elif (
            item.get_closest_marker("docker")
            or item.get_closest_marker("sandbox")
            or item.path.is_relative_to(VERIFIERS)
        ):
            item.add_marker(pytest.mark.xdist_group("sandbox"))
    items.sort(key=lambda item: not item.get_closest_marker("distributed"))  # stable
