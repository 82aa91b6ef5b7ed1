"""The exceptions RLAX raises on purpose.

Every error a user can cause (a bad config, an unreachable server, a corrupted weight
chunk) is an :class:`RlaxError` whose message names what is wrong and what to do. The
CLI prints such an error in one message, without a traceback, and exits with
:attr:`RlaxError.exit_code`. Anything else that escapes is a bug in RLAX.
"""

from __future__ import annotations


class RlaxError(Exception):
    """Base of all deliberate RLAX errors.

    Attributes:
        exit_code: the process exit status the CLI uses for this error.
    """

    exit_code = 1


class ConfigError(RlaxError):
    """A run config (or a CLI argument) is invalid; nothing was started."""

    exit_code = 2


class PluginError(RlaxError):
    """A plugin failed to load, or two plugins claim the same name."""

    exit_code = 2


class TransportError(RlaxError):
    """A parameter store or queue operation failed."""


class TransportClosedError(TransportError):
    """The store or queue was closed, or its connection is gone for good."""


class TransportUnreachableError(TransportError):
    """The transport's server could not be reached within the configured time.

    Raised when the first connection fails, and when a connection lost mid-call (the
    server died or restarted) is not restored in time. The message names the address.
    """


class TransportAuthError(TransportError):
    """The transport's server refused this client's credentials (or it sent none).

    Nothing was changed on the server. The message names the address and the setting
    to check (token, user/password, nkey seed, TLS certificates).
    """


class ChecksumMismatchError(TransportError):
    """Bytes read back do not match the checksum recorded when they were written.

    The data is never used: the reader must fetch again (or another version).
    """


class ManifestError(TransportError):
    """A version's manifest is malformed or claims what no policy version can be (an
    unknown dtype, byte counts that do not match the shapes, sizes past the limits).

    Raised by a server before it commits anything, and by a client before it reads a
    byte; the version is never used.
    """


class ForgedVersionError(TransportError):
    """A version is not signed by the run's key, or replays an older signed one.

    A worker reports it and keeps the weights it has; it never samples with the version.
    """


class VersionNotFoundError(TransportError):
    """The requested policy version was never published or has been evicted."""


class VersionConflictError(TransportError):
    """A publish used a version number that is not newer than the latest one."""


class LeaseExpiredError(TransportError):
    """An ack or extend came after the lease ran out; the item was handed back."""
