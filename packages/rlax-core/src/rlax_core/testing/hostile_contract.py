"""The hostile-client suite: what a networked transport must withstand from its own clients.

The parameter server and the queues decide the weights every worker samples with and the
rollouts the trainer learns from, so a transport exposed on a shared cluster is attacked
by whoever holds (or takes over) a worker's credential, and by whoever merely reaches its
port. Each test here is one attack with the outcome it must get, followed by a check that
good clients are still served. A transport runs it against its real server, with the
run's credentials (one per role) and signing keys, by subclassing
:class:`HostileClientContract` and providing the ``hostile_harness`` fixture::

    class TestMyTransportUnderAttack(HostileClientContract):
        @pytest.fixture
        def hostile_harness(self, tmp_path):
            with MyHostileHarness(tmp_path) as harness:
                yield harness

The harness gives clients per role (and a stranger with no credential), and carries out
the attacks only the transport's own wire can express (overwriting a stored version,
deleting the store, ending another client's lease, flooding connections, filling quotas,
restarting the server); each hook raises an :class:`~rlax_core.errors.RlaxError` when the
server refuses it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from rlax_core.contracts.transport import Transport
from rlax_core.errors import ForgedVersionError, LeaseExpiredError, RlaxError
from rlax_core.tensors import SIGNED_CHECKSUM_ALGORITHM
from rlax_core.transport.credentials import Role
from rlax_core.transport.publishing import prepare_version
from rlax_core.types.lease import Lease

# Seconds a good client may take to be served while (or after) an attack runs.
SERVED_S = 10.0
PROMPTS, TO_VERIFY, ROLLOUTS = "prompts", "to_verify", "rollouts"


class HostileHarness(ABC):
    """A running server of one run, its clients by role, and its wire's raw attacks.

    Attributes:
        max_lease_s: the longest lease the server grants (a longer ask is refused or
            capped to it).
    """

    max_lease_s: float = 3600.0

    @abstractmethod
    def transport(self, role: Role | None, *, signing_key: bool = True) -> Transport:
        """A new client with ``role``'s credential and the run's public signing key (None:
        a stranger with no credential). ``signing_key``: the trainer's client holds the
        private key; False gives a client with the trainer's credential that cannot sign
        (a stolen credential, without the key)."""

    @abstractmethod
    def overwrite_version(self, role: Role, version: int) -> None:
        """Writes other content over the stored ``version`` with ``role``'s credential,
        through the wire directly (not through ``publish``, which refuses old numbers).

        Raises:
            RlaxError: the server refused it.
        """

    @abstractmethod
    def delete_store(self, role: Role) -> None:
        """Tries to delete or reset the stored versions with ``role``'s credential (a
        stream's deletion, a namespace's eviction: whatever the wire offers).

        Raises:
            RlaxError: the server refused it.
        """

    @abstractmethod
    def send_manifest(self, role: Role, manifest: bytes) -> None:
        """Publishes ``manifest`` (raw JSON, possibly hostile) as a version's manifest
        with ``role``'s credential, bypassing the client's own checks.

        Raises:
            RlaxError: the server refused it.
        """

    @abstractmethod
    def end_lease_of_another(self, role: Role, lease: Lease) -> None:
        """With ``role``'s own connection, tries to end (ack, terminate, nack) a lease
        another client holds, using what the wire exposes of it (its queue and item,
        guessed or observed tokens, ack subjects).

        Raises:
            RlaxError: the server refused it.
        """

    @abstractmethod
    def flood(self, count: int) -> contextlib.AbstractContextManager[Any]:
        """Opens ``count`` connections or calls that hold the server's resources (idle
        connections, blocking waits, unauthenticated where the wire lets them), for the
        duration of the returned context."""

    @abstractmethod
    def fill(self, role: Role) -> None:
        """Puts items and bytes with ``role``'s credential until a quota stops it.

        Raises:
            RlaxError: the quota that stopped it (the test fails if none does).
        """

    @abstractmethod
    def restart(self) -> None:
        """Restarts the server, keeping what it stores."""


def _params(value: float) -> dict[str, np.ndarray]:
    return {"embed": np.full((16, 8), value, np.float32), "norm": np.full((8,), value, np.float32)}


def _hostile_manifests() -> dict[str, bytes]:
    """Manifests no policy version can have, each as a hostile client would send it."""
    good = prepare_version(1_000, _params(1.0)).info
    data = good.model_dump(mode="json")

    def variant(**changes: Any) -> bytes:
        return json.dumps({**data, **changes}).encode()

    first = data["tensors"][0]
    return {
        "not JSON": b"{version: 1000, tensors: [",
        "a version of 2^62": variant(version=2**62),
        "bytes that do not match the shape": variant(tensors=[{**first, "nbytes": 7}]),
        "a shape of 2^45 elements": variant(tensors=[{**first, "shape": [2**45], "nbytes": 2**47}]),
        "an unknown dtype": variant(tensors=[{**first, "dtype": "object"}]),
        "no tensors": variant(tensors=[]),
    }


def _eventually(check: Callable[[], bool], what: str, timeout: float = SERVED_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(0.05)


class HostileClientContract:
    """Each attack of the transport issue, with the outcome it must get."""

    @pytest.fixture
    def hostile_harness(self) -> HostileHarness:
        raise NotImplementedError("override the hostile_harness fixture")

    @pytest.fixture
    def clients(self, hostile_harness: HostileHarness) -> Iterator[dict[str, Transport]]:
        made = {role: hostile_harness.transport(role) for role in ("trainer", "worker", "verifier")}
        yield made
        for transport in made.values():
            transport.close()

    # -- helpers --

    def _publish(self, clients: dict[str, Transport], version: int) -> None:
        clients["trainer"].parameter_store().publish(version, _params(float(version)))

    def _assert_served(self, clients: dict[str, Transport], version: int) -> None:
        """The trainer publishes ``version``; a worker reads it, verified; queues work."""
        self._publish(clients, version)
        store = clients["worker"].parameter_store()

        def newest() -> int | None:
            info = store.latest()
            return None if info is None else info.version

        _eventually(lambda: newest() == version, f"a worker reads version {version}")
        fetched = store.fetch(version)
        assert fetched.version.checksum_algorithm == SIGNED_CHECKSUM_ALGORITHM
        np.testing.assert_array_equal(fetched.arrays["norm"], _params(float(version))["norm"])
        item = f"prompt-{version}-{time.monotonic_ns()}"
        assert clients["trainer"].queue(PROMPTS).put(item, b"p")
        lease = _get_item(clients["worker"].queue(PROMPTS), item)
        clients["worker"].queue(PROMPTS).ack(lease)

    # -- who may do what --

    def test_a_stranger_is_refused_everywhere(
        self, hostile_harness: HostileHarness, clients: dict[str, Transport]
    ) -> None:
        self._publish(clients, 1)
        stranger = hostile_harness.transport(None)
        try:
            attempts: dict[str, Callable[[], object]] = {
                "publish": lambda: stranger.parameter_store().publish(2, _params(2.0)),
                "latest": lambda: stranger.parameter_store().latest(),
                "put": lambda: stranger.queue(PROMPTS).put("x", b"x"),
                "get": lambda: stranger.queue(PROMPTS).get(5.0, 0),
            }
            for attempt in attempts.values():
                with pytest.raises(RlaxError):
                    attempt()
        finally:
            stranger.close()
        self._assert_served(clients, 2)

    @pytest.mark.parametrize("role", ["worker", "verifier"])
    def test_only_the_trainer_publishes_weights(
        self, role: Role, clients: dict[str, Transport]
    ) -> None:
        self._publish(clients, 1)
        with pytest.raises(RlaxError):
            clients[role].parameter_store().publish(2, _params(-1.0))
        assert clients["trainer"].parameter_store().latest().version == 1
        self._assert_served(clients, 2)

    def test_roles_reach_only_their_own_queues(self, clients: dict[str, Transport]) -> None:
        """Workers lease prompts and put rollouts (or work to verify); verifiers lease
        work to verify and put rollouts; only the trainer puts prompts and takes rollouts."""
        denied = [
            ("worker", PROMPTS, "put"),
            ("worker", ROLLOUTS, "get"),
            ("verifier", PROMPTS, "put"),
            ("verifier", PROMPTS, "get"),
            ("verifier", ROLLOUTS, "get"),
        ]
        for role, queue, action in denied:
            client = clients[role].queue(queue)
            with pytest.raises(RlaxError):
                _queue_action(client, action, f"{role}-x")
        allowed = [("worker", TO_VERIFY), ("worker", ROLLOUTS), ("verifier", ROLLOUTS)]
        for role, queue in allowed:
            assert clients[role].queue(queue).put(f"{role}-ok-{queue}", b"ok")
        lease = _get_item(clients["trainer"].queue(ROLLOUTS), "worker-ok-rollouts")
        clients["trainer"].queue(ROLLOUTS).ack(lease)

    # -- the store's integrity --

    @pytest.mark.parametrize("role", ["trainer", "worker"])
    def test_a_stored_version_cannot_be_overwritten(
        self, role: Role, hostile_harness: HostileHarness, clients: dict[str, Transport]
    ) -> None:
        self._publish(clients, 1)
        with pytest.raises(RlaxError):
            hostile_harness.overwrite_version(role, 1)
        fetched = clients["worker"].parameter_store().fetch(1)
        np.testing.assert_array_equal(fetched.arrays["embed"], _params(1.0)["embed"])
        self._assert_served(clients, 2)

    @pytest.mark.parametrize("role", ["worker", "verifier"])
    def test_only_the_trainer_manages_the_store(
        self, role: Role, hostile_harness: HostileHarness, clients: dict[str, Transport]
    ) -> None:
        self._publish(clients, 1)
        with pytest.raises(RlaxError):
            hostile_harness.delete_store(role)
        assert clients["worker"].parameter_store().latest().version == 1
        self._assert_served(clients, 2)

    def test_readers_refuse_a_version_the_run_did_not_sign(
        self, hostile_harness: HostileHarness, clients: dict[str, Transport]
    ) -> None:
        """A stolen trainer credential without the signing key: what it writes is never
        sampled with; the reader reports it, and goes on once the trainer publishes."""
        self._publish(clients, 1)
        reader = clients["worker"].parameter_store()
        assert reader.latest().version == 1
        thief = hostile_harness.transport("trainer", signing_key=False)
        try:
            with contextlib.suppress(RlaxError):  # the server may refuse it outright
                thief.parameter_store().publish(2, _params(-1.0))
        finally:
            thief.close()
        try:
            info = reader.latest()
        except ForgedVersionError:
            info = None  # reported: the reader keeps the weights it has
        assert info is None or info.version == 1, "a version the run did not sign was read"
        with pytest.raises(RlaxError):  # refused by the server, or forged: never its bytes
            reader.fetch(2)
        self._assert_served(clients, 3)

    def test_hostile_manifests_are_refused_and_the_trainer_goes_on(
        self, hostile_harness: HostileHarness, clients: dict[str, Transport]
    ) -> None:
        self._publish(clients, 1)
        reader = clients["worker"].parameter_store()
        for what, manifest in _hostile_manifests().items():
            for role in ("worker", "trainer"):
                try:
                    hostile_harness.send_manifest(role, manifest)  # type: ignore[arg-type]
                except RlaxError:
                    continue  # refused by the server: the best outcome
                try:  # accepted as bytes: readers must refuse it with a message
                    info = reader.latest()
                except RlaxError:
                    continue
                except Exception as exc:
                    pytest.fail(f"{what} from a {role}: latest() raised {exc!r}")
                assert info is not None and info.version == 1, f"{what} from a {role} read"
        self._assert_served(clients, 2)

    # -- leases --

    def test_another_clients_lease_cannot_be_ended(
        self, hostile_harness: HostileHarness, clients: dict[str, Transport]
    ) -> None:
        assert clients["trainer"].queue(PROMPTS).put("leased", b"p")
        holder = hostile_harness.transport("worker")
        try:
            lease = _get_item(holder.queue(PROMPTS), "leased")
            guessed = [dataclasses.replace(lease, token=token) for token in _guesses(lease.token)]
            for forged in guessed:
                with contextlib.suppress(LeaseExpiredError, RlaxError, ValueError):
                    clients["worker"].queue(PROMPTS).ack(forged)
            with contextlib.suppress(RlaxError):
                hostile_harness.end_lease_of_another("worker", lease)
            assert clients["trainer"].queue(PROMPTS).stats().leased >= 1, "the lease was ended"
            holder.queue(PROMPTS).ack(lease)  # still the holder's to end
        finally:
            holder.close()

    @pytest.mark.parametrize("lease_s", [math.nan, math.inf, -1.0, 0.0, 1e12])
    def test_leases_are_finite_and_bounded(
        self, lease_s: float, hostile_harness: HostileHarness, clients: dict[str, Transport]
    ) -> None:
        queue = clients["worker"].queue(PROMPTS)
        assert clients["trainer"].queue(PROMPTS).put(f"lease-{lease_s}", b"p")
        try:
            lease = queue.get(lease_s, 2.0)
        except (RlaxError, ValueError):
            lease = None  # refused with a message: fine
        if lease is not None:
            assert math.isfinite(lease.expires_at), "an unbounded lease was granted"
            assert lease.expires_at <= time.time() + hostile_harness.max_lease_s + 5
            queue.nack(lease)
        queue.ack(_get_item(queue, f"lease-{lease_s}"))  # served again, with a sane lease
        assert clients["trainer"].queue(PROMPTS).put("short", b"p")  # expiry still works
        short = _get_item(queue, "short", lease_s=0.5)
        again = _get_item(queue, "short", lease_s=5.0)
        assert again.delivery == short.delivery + 1
        queue.ack(again)

    # -- resources --

    def test_a_flood_of_connections_does_not_starve_good_clients(
        self, hostile_harness: HostileHarness, clients: dict[str, Transport]
    ) -> None:
        with hostile_harness.flood(200):
            self._assert_served(clients, 1)
        self._assert_served(clients, 2)

    def test_quotas_stop_a_client_that_fills_the_server(
        self, hostile_harness: HostileHarness, clients: dict[str, Transport]
    ) -> None:
        with pytest.raises(RlaxError):
            hostile_harness.fill("worker")
        self._assert_served(clients, 1)

    def test_a_restart_after_hostile_input_leaves_the_store_usable(
        self, hostile_harness: HostileHarness
    ) -> None:
        trainer = hostile_harness.transport("trainer")
        trainer.parameter_store().publish(1, _params(1.0))
        for manifest in _hostile_manifests().values():
            with contextlib.suppress(RlaxError):
                hostile_harness.send_manifest("trainer", manifest)
        trainer.close()
        hostile_harness.restart()
        clients = {role: hostile_harness.transport(role) for role in ("trainer", "worker")}
        try:
            self._assert_served(clients, 2)
        finally:
            for transport in clients.values():
                transport.close()


def _queue_action(queue: Any, action: str, item_id: str) -> object:
    """``put`` an item, or ``get`` one without waiting."""
    return queue.put(item_id, b"x") if action == "put" else queue.get(5.0, 0)


def _get_item(queue: Any, item_id: str, *, lease_s: float = 30.0) -> Lease:
    """Leases from ``queue`` until ``item_id`` comes (nacking others)."""
    deadline = time.monotonic() + SERVED_S
    while time.monotonic() < deadline:
        lease = queue.get(lease_s, 1.0)
        if lease is None:
            continue
        if lease.item_id == item_id:
            return lease
        queue.nack(lease)
    pytest.fail(f"{item_id} never came from {queue.name}")


def _guesses(token: str) -> list[str]:
    """Tokens a client could guess from one it saw: neighbours of any number in it."""
    guesses = {token + "x", token[:-1] or "x", "0", "1"}
    head, sep, tail = token.rpartition(":")
    if sep and tail.isdigit():
        guesses |= {f"{head}:{int(tail) + d}" for d in (-1, 1, 2)}
    return sorted(guesses - {token})
