"""Reusable contract test suites for ParameterStore and Queue implementations.

Every transport, built-in or plugin, proves its guarantees by running the same suites
against itself; each needs one fixture (``store_harness`` / ``queue_harness``). Requires
pytest (``pip install rlax-core[testing]``).
"""

from rlax_core.testing.parameter_store_contract import (
    ParameterStoreContract,
    ParameterStoreHarness,
)
from rlax_core.testing.queue_contract import QueueContract, QueueHarness

__all__ = ["ParameterStoreContract", "ParameterStoreHarness", "QueueContract", "QueueHarness"]
