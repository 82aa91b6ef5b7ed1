"""The launcher kit: the run directory as launchers read and write it, child processes,
and the storage layer that reaches a run directory in a bucket.

A launcher that supervises processes records them in the run directory's process table
(``launcher.json``), appends start and exit events, and notes preemptions, so that
``rlax status`` and ``rlax preempt`` find them without importing the launcher. The
formats are core's (:mod:`rlax_core.run_dir`); this module is the part of them a
launcher may use. A run directory may be ``gs://…`` or ``s3://…``: :func:`storage_path`
and :func:`filesystem` reach it as the run itself does (:mod:`rlax_core.storage`).
"""

from rlax_core.child_processes import signal_when_parent_dies
from rlax_core.contracts.launcher import ProcessRole, ProcessState
from rlax_core.run_dir.layout import resolved_config
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
from rlax_core.storage import filesystem, is_remote, remote_scheme, storage_path
from rlax_core.transport.credentials import (
    CA_FILE,
    CLIENT_CERT_FILE,
    CLIENT_KEY_FILE,
    CREDENTIAL_FILE,
    FOLDERS,
    IDENTITY_FILES,
    MOUNT_DIR,
    ROLES,
    SERVER,
    SERVER_CERT_FILE,
    SERVER_CREDENTIALS_DIR,
    SERVER_KEY_FILE,
    SIGNING_PRIVATE_FILE,
    SIGNING_PUBLIC_FILE,
    RunCredentials,
    folder_files,
    generate_run_credentials,
    transport_settings,
)

__all__ = [
    "CA_FILE",
    "CLIENT_CERT_FILE",
    "CLIENT_KEY_FILE",
    "CREDENTIAL_FILE",
    "EVENTS_FILE",
    "FOLDERS",
    "IDENTITY_FILES",
    "LOGS_DIR",
    "METRICS_FILE",
    "MOUNT_DIR",
    "PREEMPTING_DIR",
    "ROLES",
    "SERVER",
    "SERVER_CERT_FILE",
    "SERVER_CREDENTIALS_DIR",
    "SERVER_KEY_FILE",
    "SIGNING_PRIVATE_FILE",
    "SIGNING_PUBLIC_FILE",
    "TABLE_FILE",
    "ProcessEntry",
    "ProcessRole",
    "ProcessRow",
    "ProcessState",
    "ProcessTable",
    "RunCredentials",
    "append_event",
    "collect_status",
    "filesystem",
    "folder_files",
    "generate_run_credentials",
    "is_remote",
    "mark_preempting",
    "pid_alive",
    "read_events",
    "read_metrics",
    "read_table",
    "remote_scheme",
    "resolved_config",
    "signal_when_parent_dies",
    "storage_path",
    "take_preempting",
    "transport_settings",
    "write_table",
]
