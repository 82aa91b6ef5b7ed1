"""The transport kit: what a transport plugin builds on, besides the contracts.

- Publishing: :func:`prepare_version` does what every ``publish`` starts with (checks
  the arguments, makes host arrays, hashes them, builds the manifest).
- Fetching: :func:`fetch_destinations` (the arrays a fetch fills, the caller's ``out``
  where given), :func:`verify_received` (every tensor against its manifest checksum,
  hashed as its bytes arrived with :class:`IncomingChecksum`), and the tensor helpers
  of :mod:`rlax_core.tensors`.
- Waiting for versions: :class:`VersionWatch` (the newest version a client heard of,
  what ``wait_for_newer`` waits on).
- Settings: :class:`TransportSettings` and :class:`NetworkTransportSettings`, the fields
  every transport's config shares (retention, delivery rules, namespace, timeouts).
- Security: :mod:`rlax_core.transport.credentials` (a credential per role:
  :func:`read_credential`, :func:`read_server_credentials`, :func:`authenticate`),
  :mod:`rlax_core.transport.signing` (:func:`version_signer`, whose signature
  :func:`prepare_version` adds; readers verify through :class:`LazyTransport`), and
  :mod:`rlax_core.transport.manifests` (:func:`parse_manifest` and
  :func:`check_manifest`: what a store accepts off the wire).
- :class:`LazyTransport`: one connection per process, the store and queues on it; a
  plugin fills in how to connect.
- Serving: :class:`InProcParameterStore` (versions in memory: retention, atomic
  visibility, waiting; :meth:`~InProcParameterStore.adopt` takes arrays a server has
  received) and :class:`LeaseTable` (a queue's leases, redelivery and
  de-duplication, with an optional :class:`QueueJournal` to keep it across restarts),
  with :class:`InProcQueue` clients of a table; :func:`queue_item` checks a ``put``.
- Processes: :func:`reuse_transfer_buffers` (malloc settings for processes that stream
  weights through short-lived buffers), :func:`signal_when_parent_dies`.
"""

from rlax_core.child_processes import signal_when_parent_dies
from rlax_core.tensors import (
    CHECKSUM_ALGORITHM,
    SIGNED_CHECKSUM_ALGORITHM,
    SUPPORTED_DTYPES,
    IncomingChecksum,
    as_host_array,
    byte_view,
    dtype_from_name,
    manifest_checksum,
    tensor_checksum,
    tensor_checksums,
)
from rlax_core.transport.credentials import (
    CREDENTIALS_ENV,
    QUEUE_RIGHTS,
    ROLES,
    Role,
    RoleCredential,
    authenticate,
    read_credential,
    read_server_credentials,
)
from rlax_core.transport.fetching import (
    fetch_destination,
    fetch_destinations,
    verify_received,
    wanted_names,
)
from rlax_core.transport.host_memory import reuse_transfer_buffers
from rlax_core.transport.inproc.parameter_store import InProcParameterStore
from rlax_core.transport.inproc.queue import InProcQueue
from rlax_core.transport.lazy import LazyTransport
from rlax_core.transport.lease_table import LeaseTable, QueueJournal, queue_item
from rlax_core.transport.manifests import (
    MAX_VERSION,
    ManifestLimits,
    check_manifest,
    parse_manifest,
)
from rlax_core.transport.publishing import PreparedVersion, check_version_number, prepare_version
from rlax_core.transport.settings import NetworkTransportSettings, TransportSettings
from rlax_core.transport.signing import (
    SigningSettings,
    VersionSigner,
    VersionVerifier,
    version_signer,
)
from rlax_core.transport.version_watch import VersionWatch

__all__ = [
    "CHECKSUM_ALGORITHM",
    "CREDENTIALS_ENV",
    "MAX_VERSION",
    "QUEUE_RIGHTS",
    "ROLES",
    "SIGNED_CHECKSUM_ALGORITHM",
    "SUPPORTED_DTYPES",
    "InProcParameterStore",
    "InProcQueue",
    "IncomingChecksum",
    "LazyTransport",
    "LeaseTable",
    "ManifestLimits",
    "NetworkTransportSettings",
    "PreparedVersion",
    "QueueJournal",
    "Role",
    "RoleCredential",
    "SigningSettings",
    "TransportSettings",
    "VersionSigner",
    "VersionVerifier",
    "VersionWatch",
    "as_host_array",
    "authenticate",
    "byte_view",
    "check_manifest",
    "check_version_number",
    "dtype_from_name",
    "fetch_destination",
    "fetch_destinations",
    "manifest_checksum",
    "parse_manifest",
    "prepare_version",
    "queue_item",
    "read_credential",
    "read_server_credentials",
    "reuse_transfer_buffers",
    "signal_when_parent_dies",
    "tensor_checksum",
    "tensor_checksums",
    "verify_received",
    "version_signer",
    "wanted_names",
]
