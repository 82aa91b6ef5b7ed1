"""Reusable contract test suites for ParameterStore, Queue and networked transports.

Every transport, built-in or plugin, proves its guarantees by running the same suites
against itself; each needs one fixture (``store_harness`` / ``queue_harness`` /
``restart_harness``; a networked transport also ``hostile_harness``, for the attacks of
:class:`HostileClientContract`). Requires pytest (``pip install rlax-core[testing]``).
"""

from rlax_core.testing.hostile_contract import HostileClientContract, HostileHarness
from rlax_core.testing.parameter_store_contract import (
    ParameterStoreContract,
    ParameterStoreHarness,
)
from rlax_core.testing.queue_contract import QueueContract, QueueHarness
from rlax_core.testing.restart_contract import RestartContract, RestartHarness

__all__ = [
    "HostileClientContract",
    "HostileHarness",
    "ParameterStoreContract",
    "ParameterStoreHarness",
    "QueueContract",
    "QueueHarness",
    "RestartContract",
    "RestartHarness",
]
