"""Lease tokens a client cannot guess, bound to the lease and to the role that holds it.

The queue (rlax-core's lease table) names each delivery with a token; the server hands
the client that token sealed with an HMAC-SHA256 under a key of its own, drawn at start
(``secrets.token_bytes``), over the namespace, the queue, the item and the holder: its
role and its client's id (a random id each channel sends, ``rlax-holder``). An ack,
nack or extend presents the sealed token: one that was guessed, altered, moved to
another item or queue, or presented by another client (even one of the same role that
saw it) does not open, and the call is refused as for an ended lease. The queue then
compares the inner token too, so a token opens only the very delivery it was issued
for. A restarted server draws a new
key, as its queues hand out new tokens: leases never outlive the server that granted
them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

_MAC_BYTES = 18  # 144 bits: a guess succeeds with probability 2^-144


class LeaseSeal:
    """Seals and opens lease tokens with this server's key."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def seal(self, namespace: str, queue: str, item_id: str, holder: str, token: str) -> str:
        """The token handed to the client for ``token`` (the queue's own)."""
        return f"{token}~{self._mac(namespace, queue, item_id, holder, token)}"

    def open(
        self, namespace: str, queue: str, item_id: str, holder: str, sealed: str
    ) -> str | None:
        """The queue's token inside ``sealed``, or None if it was not issued for this
        lease and this holder."""
        token, sep, mac = sealed.rpartition("~")
        if not sep:
            return None
        expected = self._mac(namespace, queue, item_id, holder, token)
        return token if hmac.compare_digest(mac.encode(), expected.encode()) else None

    def _mac(self, namespace: str, queue: str, item_id: str, holder: str, token: str) -> str:
        message = "\0".join((namespace, queue, item_id, holder, token)).encode()
        digest = hmac.new(self._key, message, hashlib.sha256).digest()[:_MAC_BYTES]
        return base64.urlsafe_b64encode(digest).decode()
