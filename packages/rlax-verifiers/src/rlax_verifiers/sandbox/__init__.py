"""Sandbox backends: local (namespaces, uids, rlimits), Docker, and the Lambda client.

Every backend runs programs through :mod:`rlax_verifiers.sandbox.isolate`, the part
that lives inside the isolation boundary; the backends differ in where that boundary is.
"""

from rlax_core.errors import RlaxError


class SandboxUnavailableError(RlaxError):
    """A sandbox backend cannot start here (missing tool, engine or privilege)."""
