"""Who may call what on the gRPC parameter server: a credential per role, checked per call.

Every call carries ``authorization: Bearer <credential>``. With ``server.credentials_dir``
the credential is a role's ``ROLE:SECRET`` line (see
:mod:`rlax_core.transport.credentials`) and the role decides what the call may do:

========  ===================================  =================================
role      parameter server                     queues
========  ===================================  =================================
trainer   everything (only it publishes, and   everything, and only it makes a
          so evicts old versions)              new namespace
worker    read versions (manifests, fetches,   lease ``prompts``; put to
          watches)                             ``to_verify`` and ``rollouts``
verifier  read versions                        lease ``to_verify``; put to
                                               ``rollouts``
========  ===================================  =================================

"Lease" is get, ack, nack and extend; every role may open the run's three queues and
read their stats. Queues other than the run's three are the trainer's alone. The shared ``token``
(no ``credentials_dir``, or beside it) is the trusted lab mode: whoever holds it may do
everything, as may every client of a server with neither (loopback or ``--insecure``).

The method is checked by an interceptor before the request is even read (a refused
publish costs no upload); the queue a call names is checked by the service, which asks
:meth:`Gatekeeper.caller` again (a constant-time comparison, cheaper than passing state
between the two).
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from rlax_core.errors import TransportAuthError
from rlax_core.kit.transport import QUEUE_RIGHTS, ROLES, authenticate, read_server_credentials
from rlax_transport_grpc.config import GrpcTransportConfig

TRUSTED = "trusted"
"""The caller of a server without roles (the shared token, or no credentials at all)."""

RUN_QUEUES = frozenset(QUEUE_RIGHTS)
HOLDER_KEY = "rlax-holder"
"""Metadata naming the client (a random id per channel) that lease tokens are bound to."""
READS = frozenset(
    {"Ping", "GetManifest", "ListVersions", "Fetch", "WatchVersions", "OpenBulkFetch"}
)
TAKES = frozenset({"Get", "Ack", "Nack", "Extend"})
LOOKS = frozenset({"OpenQueue", "Stats"})
_QUEUE_METHODS = TAKES | LOOKS | {"Put"}
# The queues each role but the trainer (which may do anything) may lease from ("take")
# and put to, as core defines them for every transport.
_TAKE: dict[str, frozenset[str]] = {
    role: frozenset(q for q, (_, lease) in QUEUE_RIGHTS.items() if role in lease)
    for role in ("worker", "verifier")
}
_PUT: dict[str, frozenset[str]] = {
    role: frozenset(q for q, (put, _) in QUEUE_RIGHTS.items() if role in put)
    for role in ("worker", "verifier")
}


class RoleDeniedError(TransportAuthError):
    """The caller's credential is good, but its role may not do this (PERMISSION_DENIED)."""


@dataclass(frozen=True)
class Caller:
    """Who made a call.

    Attributes:
        role: ``trainer``, ``worker``, ``verifier``, or :data:`TRUSTED`.
    """

    role: str

    @property
    def manages(self) -> bool:
        """Publishes, evicts, makes namespaces: the trainer's (or a trusted caller's)."""
        return self.role in ("trainer", TRUSTED)

    def check_method(self, method: str) -> None:
        """Raises RoleDeniedError unless the role may call ``method`` at all."""
        if self.manages or method in READS or method in _QUEUE_METHODS:
            return
        raise RoleDeniedError(f"the {self.role} role may not call {method}; only the trainer may")

    def check_queue(self, method: str, queue: str) -> None:
        """Raises RoleDeniedError unless the role may call ``method`` on ``queue``."""
        if self.manages:
            return
        takes, puts = _TAKE.get(self.role, frozenset()), _PUT.get(self.role, frozenset())
        allowed = takes if method in TAKES else puts if method == "Put" else RUN_QUEUES
        if queue not in allowed:
            verb = {"Put": "put to"}.get(method, "lease from" if method in TAKES else "open")
            raise RoleDeniedError(
                f"the {self.role} role may not {verb} queue {queue!r} (it may "
                f"lease from {sorted(takes)} and put to {sorted(puts)})"
            )


class Gatekeeper:
    """Turns a call's metadata into its :class:`Caller`, and counts refusals.

    Args:
        config: the server's settings (``token``, ``server.credentials_dir``).

    Raises:
        ConfigError: the credentials folder is missing or malformed.
    """

    def __init__(self, config: GrpcTransportConfig) -> None:
        folder = config.server.credentials_dir
        self._roles = read_server_credentials(folder) if folder is not None else {}
        self._token = config.token.encode() if config.token else None
        self.authenticates = bool(self._roles) or self._token is not None
        self._lock = threading.Lock()
        self.refused = 0  # calls refused for their credential or their role

    def caller(self, metadata: Mapping[str, str]) -> Caller:
        """The caller presenting ``metadata``'s ``authorization``.

        Raises:
            TransportAuthError: no credential, or one the server does not accept.
        """
        if not self.authenticates:
            return Caller(TRUSTED)
        given = metadata.get("authorization", "")
        presented = given[len("Bearer ") :] if given.startswith("Bearer ") else ""
        return self.holder_of(presented)

    def holder_of(self, presented: str) -> Caller:
        """The caller a presented credential line proves (the bulk port's check too).

        Raises:
            TransportAuthError: see :meth:`caller`.
        """
        if not self.authenticates:
            return Caller(TRUSTED)
        if self._token is not None and hmac.compare_digest(presented.encode(), self._token):
            return Caller(TRUSTED)
        if self._roles and presented.partition(":")[0] in ROLES:
            try:
                return Caller(authenticate(presented, self._roles, "the gRPC parameter server"))
            except TransportAuthError:
                self.count_refusal()
                raise
        self.count_refusal()
        raise TransportAuthError(
            f"{'wrong' if presented else 'missing'} credential: present a role's ROLE:SECRET "
            "(credentials_file) or the shared token"
        )

    def count_refusal(self) -> None:
        """Counts one refused call (for ``Ping``'s counters)."""
        with self._lock:
            self.refused += 1


class AccessInterceptor(grpc.ServerInterceptor):
    """Refuses a call whose credential is not accepted, or whose role may not call its
    method, before its request is read."""

    def __init__(self, gatekeeper: Gatekeeper) -> None:
        self._gatekeeper = gatekeeper

    def intercept_service(self, continuation: Callable, details: Any) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        method = details.method.rsplit("/", 1)[-1]
        try:
            caller = self._gatekeeper.caller(dict(details.invocation_metadata or ()))
            caller.check_method(method)
        except RoleDeniedError as exc:
            self._gatekeeper.count_refusal()
            return _refusal(handler, grpc.StatusCode.PERMISSION_DENIED, str(exc))
        except TransportAuthError as exc:
            return _refusal(handler, grpc.StatusCode.UNAUTHENTICATED, str(exc))
        return handler


def _refusal(handler: Any, code: grpc.StatusCode, message: str) -> Any:
    def deny(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(code, message)

    kind = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    # The request is never deserialised: a refused call costs no parsing.
    return kind(deny, lambda raw: b"", handler.response_serializer)
