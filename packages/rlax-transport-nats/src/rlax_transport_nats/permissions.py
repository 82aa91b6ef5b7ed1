"""What each role may publish and subscribe to on nats-server, per namespace.

``rlax serve`` writes these into the server's config when ``server.credentials_dir``
holds the roles' credentials (:func:`authorization_block`). Subjects of namespace ``ns``
(see :mod:`~rlax_transport_nats.param_streams` and :mod:`~rlax_transport_nats.queue`):

==========  ==========================================================================
trainer     every ``$JS.API`` call (creates, updates, purges and deletes streams and
            consumers), publishes weights, manifests and prompts, consumes rollouts
worker      reads weights (stream info, direct gets), hears new versions, leases
            prompts, puts to ``to_verify`` and ``rollouts``, reads queue figures
verifier    reads weights, hears new versions, leases ``to_verify``, puts ``rollouts``,
            reads queue figures
==========  ==========================================================================

Everything else is denied, in particular to the worker and verifier: any other
``$JS.API`` subject (stream and consumer create, update, delete, purge; message
delete), publishing to weight or manifest subjects, and ``$JS.ACK.>``. A client answers
a delivered item (ack, extend, hand back) only through ``allow_responses``: the server
lets it publish to the reply subject of a message it was delivered, for
``max_lease_s``, and to no other ``$JS.ACK`` subject. Replies come to ``_INBOX.<role>``
(:mod:`~rlax_transport_nats.auth`), the only inboxes a role may subscribe to, so a
worker never receives a verifier's or the trainer's deliveries, and nobody subscribes
to the weight, manifest or queue subjects themselves (whose messages carry the
publisher's reply subject). New versions are announced on a subject only the stream
republishes to, without a reply subject.

The limit of the scheme: the processes of one role share its credential, so a hostile
worker can still subscribe to other workers' inboxes and answer their prompt leases.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from rlax_core.kit.transport import QUEUE_RIGHTS, ROLES, Role, RoleCredential
from rlax_transport_nats.auth import INBOX

CONSUMER = "workers"
"""The durable pull consumer every client of a queue shares."""

QUEUE_ROLES: dict[str, tuple[tuple[Role, ...], tuple[Role, ...]]] = {
    name: (tuple(sorted(put)), tuple(sorted(lease))) for name, (put, lease) in QUEUE_RIGHTS.items()
}
"""Each queue of a run: (the roles that put to it, the roles that lease from it), as core
defines them for every transport."""


def data_stream(namespace: str) -> str:
    """The stream of weight chunks."""
    return f"RLAX_{namespace}_PARAM_DATA"


def manifest_stream(namespace: str) -> str:
    """The stream of version manifests."""
    return f"RLAX_{namespace}_PARAMS"


def queue_stream(namespace: str, name: str) -> str:
    """The work-queue stream of a queue."""
    return f"RLAX_{namespace}_Q_{name}"


def queue_subject(namespace: str, name: str) -> str:
    """The subject a queue's items are put on."""
    return f"rlax.{namespace}.q.{name}"


def announce_subject(namespace: str) -> str:
    """Where the manifest stream republishes each stored manifest (without a reply)."""
    return f"rlax.{namespace}.params.announce.*"


def may_put(role: Role | None, queue: str) -> bool:
    """Whether a client of ``role`` may put to ``queue`` (None: a lab client; a queue not
    of the run: the server decides)."""
    return role is None or queue not in QUEUE_ROLES or role in QUEUE_ROLES[queue][0]


def may_lease(role: Role | None, queue: str) -> bool:
    """Whether a client of ``role`` may lease from ``queue`` (as :func:`may_put`)."""
    return role is None or queue not in QUEUE_ROLES or role in QUEUE_ROLES[queue][1]


def role_permissions(
    role: Role,
    namespace: str,
    *,
    max_lease_s: float,
    queue_roles: Mapping[str, tuple[tuple[Role, ...], tuple[Role, ...]]] = QUEUE_ROLES,
) -> dict:
    """The nats-server ``permissions`` of a role's user (see the module docstring).

    Args:
        role: the role.
        namespace: the run's namespace.
        max_lease_s: how long a client may answer an item delivered to it.
        queue_roles: the queues and who puts to and leases from each.
    """
    ns = namespace
    api = "$JS.API"
    publish: list[str] = []
    if role == "trainer":
        publish += [f"{api}.>", f"rlax.{ns}.>"]
    else:
        for stream in (manifest_stream(ns), data_stream(ns)):
            publish += [f"{api}.STREAM.INFO.{stream}", f"{api}.DIRECT.GET.{stream}.>"]
        for name, (producers, consumers) in queue_roles.items():
            # Every role reads every queue's figures (the controller and the verifiers
            # watch backlogs); only the roles of a queue put to it or lease from it.
            stream = queue_stream(ns, name)
            publish += [
                f"{api}.STREAM.INFO.{stream}",
                f"{api}.STREAM.INFO.{stream}_DEAD",
                f"{api}.CONSUMER.INFO.{stream}.{CONSUMER}",
            ]
            if role in producers:
                publish.append(queue_subject(ns, name))
            if role in consumers:
                publish.append(f"{api}.CONSUMER.MSG.NEXT.{stream}.{CONSUMER}")
    return {
        "publish": {
            "allow": publish,
            # Announcements come from the stream alone; acks only as answers (below).
            "deny": [announce_subject(ns), "$JS.ACK.>"],
        },
        "subscribe": {"allow": [f"{INBOX}.{role}.>", announce_subject(ns)]},
        "allow_responses": {"max": -1, "expires": f"{max(1, round(max_lease_s))}s"},
    }


def authorization_block(
    credentials: Mapping[Role, RoleCredential], namespace: str, *, max_lease_s: float
) -> str:
    """nats-server's ``authorization`` block: a user per role, with its permissions.

    JSON is valid nats-server config syntax, so the block is written as JSON.
    """
    users = [
        {
            "user": role,
            "password": credentials[role].secret,
            "permissions": role_permissions(role, namespace, max_lease_s=max_lease_s),
        }
        for role in ROLES
        if role in credentials
    ]
    return f"authorization {json.dumps({'users': users}, indent=2)}\n"
