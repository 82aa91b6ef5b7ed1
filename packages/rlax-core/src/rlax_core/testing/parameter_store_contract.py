"""The contract every ParameterStore implementation must pass.

Use it by subclassing and providing one fixture, ``store_harness``::

    class TestMyStore(ParameterStoreContract):
        @pytest.fixture
        def store_harness(self):
            with MyHarness() as harness:
                yield harness
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from rlax_core.contracts.parameter_store import ParameterStore
from rlax_core.errors import (
    ChecksumMismatchError,
    TransportClosedError,
    VersionConflictError,
    VersionNotFoundError,
)

# Seconds a store may take to notice a publish or a close in another client.
NOTICE_S = 5.0


class ParameterStoreHarness(ABC):
    """What an implementation provides to be tested against the contract.

    Attributes:
        keep_last: the retention every store opened by this harness was created with
            (the suite needs at least 2).
    """

    keep_last: int = 3

    @abstractmethod
    def open(self) -> ParameterStore:
        """A new client of the one store under test (a new connection, where there are any)."""

    @abstractmethod
    def corrupt(self, version: int, name: str) -> None:
        """Damages the stored bytes of one tensor behind the store's back."""


def _params(
    version: int, shapes: dict[str, tuple[int, ...]] | None = None
) -> dict[str, np.ndarray]:
    """Arrays whose every element is ``version``, so a torn read is visible."""
    shapes = shapes or {"embed": (64, 32), "layer.0.w": (32, 32), "norm": (32,)}
    dtypes = [np.float32, ml_dtypes.bfloat16, np.int32]
    return {
        name: np.full(shape, version, dtype=dtypes[i % len(dtypes)])
        for i, (name, shape) in enumerate(shapes.items())
    }


def _assert_uniform(arrays: dict[str, np.ndarray], version: int) -> None:
    for name, array in arrays.items():
        values = np.unique(array.astype(np.float64))
        assert values.tolist() == [float(version)], f"{name} of version {version} holds {values}"


class ParameterStoreContract:
    """Tests of the :class:`ParameterStore` guarantees; see the class docstring there."""

    @pytest.fixture
    def store_harness(self) -> ParameterStoreHarness:
        raise NotImplementedError("override the store_harness fixture")

    @pytest.fixture
    def store(self, store_harness: ParameterStoreHarness) -> Any:
        store = store_harness.open()
        yield store
        store.close()

    def test_empty_store_has_no_latest(self, store: ParameterStore) -> None:
        assert store.latest() is None
        assert store.versions() == []
        with pytest.raises(VersionNotFoundError):
            store.fetch()

    def test_publish_then_fetch_round_trips_every_dtype(self, store: ParameterStore) -> None:
        rng = np.random.default_rng(0)
        params = {
            "f32": rng.standard_normal((7, 5)).astype(np.float32),
            "bf16": rng.standard_normal((3, 4, 5)).astype(ml_dtypes.bfloat16),
            "f16": rng.standard_normal(9).astype(np.float16),
            "i32": rng.integers(-100, 100, (4, 4)).astype(np.int32),
            "i64": rng.integers(-(2**40), 2**40, 3).astype(np.int64),
            "u8": rng.integers(0, 255, 17).astype(np.uint8),
            "bool": rng.integers(0, 2, 6).astype(bool),
            "scalar": np.float32(3.5),
            "empty": np.zeros((0, 4), np.float32),
        }
        info = store.publish(1, params, {"step": 1, "note": "first"})
        assert info.version == 1
        assert info.metadata == {"step": 1, "note": "first"}
        assert info.expected_checksum() == info.checksum
        fetched = store.fetch(1)
        assert fetched.version.checksum == info.checksum
        assert set(fetched.arrays) == set(params)
        for name, array in params.items():
            got = fetched.arrays[name]
            assert got.dtype == np.asarray(array).dtype, name
            assert got.shape == np.asarray(array).shape, name
            np.testing.assert_array_equal(got, array, err_msg=name)

    def test_latest_and_fetch_default_to_the_newest(self, store: ParameterStore) -> None:
        store.publish(3, _params(3))
        store.publish(7, _params(7))
        latest = store.latest()
        assert latest is not None and latest.version == 7
        fetched = store.fetch()
        assert fetched.version.version == 7
        _assert_uniform(fetched.arrays, 7)

    def test_fetch_a_subset_for_a_shard(self, store: ParameterStore) -> None:
        store.publish(1, _params(1))
        fetched = store.fetch(1, names=["norm", "embed"])
        assert set(fetched.arrays) == {"norm", "embed"}
        assert set(fetched.version.names) == {"embed", "layer.0.w", "norm"}
        _assert_uniform(fetched.arrays, 1)

    def test_fetch_of_an_unknown_name_is_an_error(self, store: ParameterStore) -> None:
        store.publish(1, _params(1))
        with pytest.raises(KeyError, match="nope"):
            store.fetch(1, names=["embed", "nope"])

    def test_fetch_into_destination_buffers(self, store: ParameterStore) -> None:
        params = _params(4)
        store.publish(4, params)
        out = {"embed": np.zeros_like(params["embed"])}
        fetched = store.fetch(4, out=out)
        assert fetched.arrays["embed"] is out["embed"]
        _assert_uniform(fetched.arrays, 4)

    def test_fetch_into_a_mismatched_buffer_is_an_error(self, store: ParameterStore) -> None:
        store.publish(1, _params(1))
        with pytest.raises(ValueError, match="embed"):
            store.fetch(1, out={"embed": np.zeros((2, 2), np.float32)})

    def test_versions_never_go_back(self, store: ParameterStore) -> None:
        store.publish(5, _params(5))
        for stale in (5, 4):
            with pytest.raises(VersionConflictError):
                store.publish(stale, _params(stale))
        assert store.versions() == [5]

    def test_a_failed_publish_leaves_no_trace(self, store: ParameterStore) -> None:
        store.publish(1, _params(1))
        bad = {**_params(2), "broken": object()}
        with pytest.raises(TypeError, match="broken"):
            store.publish(2, bad)
        with pytest.raises(ValueError, match="empty"):
            store.publish(2, {})
        assert store.versions() == [1]
        assert store.latest().version == 1
        store.publish(2, _params(2))  # the number was not burnt by the failures
        assert store.versions() == [1, 2]

    def test_retention_keeps_the_last_n(
        self, store_harness: ParameterStoreHarness, store: ParameterStore
    ) -> None:
        n = store_harness.keep_last
        assert n >= 2, "the contract suite needs keep_last >= 2"
        for v in range(1, n + 3):
            store.publish(v, _params(v))
        assert store.versions() == list(range(3, n + 3))
        with pytest.raises(VersionNotFoundError):
            store.fetch(1)
        _assert_uniform(store.fetch(3).arrays, 3)

    def test_wait_returns_at_once_when_newer_exists(self, store: ParameterStore) -> None:
        store.publish(2, _params(2))
        start = time.monotonic()
        assert store.wait_for_newer(None, timeout=NOTICE_S).version == 2
        assert store.wait_for_newer(1, timeout=NOTICE_S).version == 2
        assert time.monotonic() - start < NOTICE_S

    def test_wait_times_out_with_none(self, store: ParameterStore) -> None:
        store.publish(2, _params(2))
        start = time.monotonic()
        assert store.wait_for_newer(2, timeout=0.3) is None
        assert 0.25 <= time.monotonic() - start < NOTICE_S

    def test_wait_wakes_on_a_publish_from_another_client(
        self, store_harness: ParameterStoreHarness, store: ParameterStore
    ) -> None:
        store.publish(1, _params(1))
        woke: list[Any] = []
        waiter = threading.Thread(
            target=lambda: woke.append(store.wait_for_newer(1, timeout=NOTICE_S * 2))
        )
        waiter.start()
        time.sleep(0.2)
        publisher = store_harness.open()
        try:
            publisher.publish(2, _params(2))
        finally:
            publisher.close()
        waiter.join(NOTICE_S * 3)
        assert not waiter.is_alive()
        assert woke and woke[0] is not None and woke[0].version == 2

    def test_concurrent_readers_never_see_a_partial_version(
        self, store_harness: ParameterStoreHarness, store: ParameterStore
    ) -> None:
        shapes = {"embed": (256, 256), "layer.0.w": (128, 512), "norm": (4096,)}
        store.publish(1, _params(1, shapes))
        done = threading.Event()
        errors: list[BaseException] = []
        reads = [0]

        def read() -> None:
            reader = store_harness.open()
            try:
                while not done.is_set():
                    try:
                        fetched = reader.fetch()
                    except VersionNotFoundError:
                        continue  # evicted between resolving "latest" and reading it
                    _assert_uniform(fetched.arrays, fetched.version.version)
                    reads[0] += 1
            except BaseException as exc:
                errors.append(exc)
            finally:
                reader.close()

        readers = [threading.Thread(target=read) for _ in range(4)]
        for r in readers:
            r.start()
        for v in range(2, 26):
            store.publish(v, _params(v, shapes))
        time.sleep(0.2)
        done.set()
        for r in readers:
            r.join(60)
        assert not errors, errors[0]
        assert reads[0] > 0
        assert store.latest().version == 25

    def test_tampered_bytes_are_refused(
        self, store_harness: ParameterStoreHarness, store: ParameterStore
    ) -> None:
        store.publish(1, _params(1))
        store_harness.corrupt(1, "layer.0.w")
        with pytest.raises(ChecksumMismatchError, match=r"layer\.0\.w"):
            store.fetch(1)
        with pytest.raises(ChecksumMismatchError):
            store.fetch(1, names=["layer.0.w"])
        # Intact tensors of the same version remain readable.
        _assert_uniform(store.fetch(1, names=["embed", "norm"]).arrays, 1)

    def test_checksums_depend_on_content_only(self, store: ParameterStore) -> None:
        a = store.publish(1, {"w": np.arange(10, dtype=np.float32)})
        b = store.publish(2, {"w": np.arange(10, dtype=np.float32)})
        c = store.publish(3, {"w": np.arange(1, 11, dtype=np.float32)})
        assert a.tensor("w").checksum == b.tensor("w").checksum != c.tensor("w").checksum
        assert a.checksum == b.checksum != c.checksum

    def test_publish_owns_its_bytes(self, store: ParameterStore) -> None:
        array = np.ones(16, np.float32)
        store.publish(1, {"w": array})
        array[:] = 7.0  # the caller reuses its buffer
        _assert_uniform(store.fetch(1).arrays, 1)

    def test_large_parameter_set_round_trips(self, store: ParameterStore) -> None:
        rng = np.random.default_rng(1)
        params = {
            "embed": rng.standard_normal((16384, 4096), dtype=np.float32),  # 256 MiB
            "head": rng.standard_normal((4096, 2048), dtype=np.float32).astype(ml_dtypes.bfloat16),
        }
        info = store.publish(1, params)
        assert info.nbytes >= 256 << 20
        fetched = store.fetch(1)
        for name, array in params.items():
            assert np.array_equal(fetched.arrays[name], array), name
        del fetched

    def test_a_closed_store_refuses_every_call(self, store_harness: ParameterStoreHarness) -> None:
        store = store_harness.open()
        store.publish(1, _params(1))
        store.close()
        store.close()  # idempotent
        for call in (
            store.latest,
            store.versions,
            lambda: store.fetch(1),
            lambda: store.publish(2, _params(2)),
            lambda: store.wait_for_newer(1, timeout=0.1),
        ):
            with pytest.raises(TransportClosedError):
                call()

    def test_close_wakes_a_blocked_waiter(self, store_harness: ParameterStoreHarness) -> None:
        store = store_harness.open()
        store.publish(1, _params(1))
        outcome: list[BaseException | object] = []

        def wait() -> None:
            try:
                outcome.append(store.wait_for_newer(1, timeout=60))
            except BaseException as exc:
                outcome.append(exc)

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.2)
        start = time.monotonic()
        store.close()
        waiter.join(NOTICE_S * 2)
        assert not waiter.is_alive(), "wait_for_newer kept blocking after close()"
        assert time.monotonic() - start < NOTICE_S
        assert isinstance(outcome[0], TransportClosedError)
