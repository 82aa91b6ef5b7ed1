"""The launcher kit: the run directory as launchers read and write it, and child processes.

A launcher that supervises processes records them in the run directory's process table
(``launcher.json``), appends start and exit events, and notes preemptions, so that
``rlax status`` and ``rlax preempt`` find them without importing the launcher. The
formats are core's (:mod:`rlax_core.run_dir`); this module is the part of them a
launcher may use.
"""

from rlax_core.child_processes import signal_when_parent_dies
from rlax_core.contracts.launcher import ProcessRole, ProcessState
from rlax_core.run_dir.metrics import METRICS_FILE, read_metrics
from rlax_core.run_dir.process_table import (
    EVENTS_FILE,
    LOGS_DIR,
    PREEMPTING_DIR,
    TABLE_FILE,
    ProcessEntry,
    ProcessTable,
    append_event,
    mark_preempting,
    pid_alive,
    read_events,
    read_table,
    take_preempting,
    write_table,
)
from rlax_core.run_dir.status import ProcessRow, collect_status

__all__ = [
    "EVENTS_FILE",
    "LOGS_DIR",
    "METRICS_FILE",
    "PREEMPTING_DIR",
    "TABLE_FILE",
    "ProcessEntry",
    "ProcessRole",
    "ProcessRow",
    "ProcessState",
    "ProcessTable",
    "append_event",
    "collect_status",
    "mark_preempting",
    "pid_alive",
    "read_events",
    "read_metrics",
    "read_table",
    "signal_when_parent_dies",
    "take_preempting",
    "write_table",
]
