"""The in-process transport against the shared contract suites, plus its own promises."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_core.plugins import BuildContext, load_registry
from rlax_core.testing import (
    ParameterStoreContract,
    ParameterStoreHarness,
    QueueContract,
    QueueHarness,
)
from rlax_core.transport.inproc import (
    InProcParameterStore,
    InProcQueue,
    InProcTransport,
    InProcTransportConfig,
)


class InProcStoreHarness(ParameterStoreHarness):
    keep_last = 3

    def __init__(self) -> None:
        self.store = InProcParameterStore(keep_last=self.keep_last)

    def open(self) -> InProcParameterStore:
        return self.store.client()

    def corrupt(self, version: int, name: str) -> None:
        self.store.corrupt_for_test(version, name)


class InProcQueueHarness(QueueHarness):
    lease_s = 0.3

    def __init__(self) -> None:
        self.queues: dict[str, InProcQueue] = {}

    def open(self, name: str = "items", *, max_deliveries: int | None = None) -> InProcQueue:
        if name not in self.queues:
            self.queues[name] = InProcQueue(name, max_deliveries=max_deliveries)
        return self.queues[name].client()


class TestInProcStore(ParameterStoreContract):
    @pytest.fixture
    def store_harness(self) -> InProcStoreHarness:
        return InProcStoreHarness()


class TestInProcQueue(QueueContract):
    @pytest.fixture
    def queue_harness(self) -> InProcQueueHarness:
        return InProcQueueHarness()


def test_readers_share_one_read_only_copy() -> None:
    store = InProcParameterStore()
    store.publish(1, {"w": np.arange(8, dtype=np.float32)})
    a, b = store.fetch(1).arrays["w"], store.client().fetch(1).arrays["w"]
    assert np.shares_memory(a, b)
    assert not a.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 1.0


def test_jax_arrays_are_published_by_value() -> None:
    store = InProcParameterStore()
    weights = jnp.arange(6, dtype=jnp.bfloat16).reshape(2, 3)
    info = store.publish(1, {"w": weights})
    assert info.tensor("w").dtype == "bfloat16"
    np.testing.assert_array_equal(store.fetch(1).arrays["w"], np.asarray(weights))


def test_transport_hands_out_one_store_and_one_queue_per_name() -> None:
    transport = InProcTransport(InProcTransportConfig(keep_versions=4))
    assert transport.parameter_store() is transport.parameter_store()
    assert transport.queue("prompts") is transport.queue("prompts")
    assert transport.queue("prompts") is not transport.queue("rollouts")
    transport.close()


def test_transport_is_built_from_its_registered_config() -> None:
    registry = load_registry(load_entry_points=False)
    config = registry.get("transport", "inproc").config_cls(keep_versions=5, max_deliveries=3)
    transport = registry.build("transport", config, BuildContext(registry))
    assert isinstance(transport, InProcTransport)
    store = transport.parameter_store()
    for v in range(7):
        store.publish(v, {"w": np.zeros(1, np.float32)})
    assert store.versions() == [2, 3, 4, 5, 6]
    transport.close()


def test_a_published_jax_array_is_the_version_itself() -> None:
    """No copy of a JAX array's CPU buffer; a donating update cannot change the version."""
    store = InProcParameterStore(keep_last=1)
    weights = jnp.arange(1000, dtype=jnp.float32) + 1
    store.publish(0, {"w": weights})
    fetched = store.fetch(0).arrays["w"]
    assert np.shares_memory(fetched, np.asarray(weights))
    update = jax.jit(lambda w: w * 0, donate_argnums=0)
    jax.block_until_ready(update(weights))  # JAX keeps the viewed buffer: new ones instead
    np.testing.assert_array_equal(store.fetch(0).arrays["w"], np.arange(1000) + 1)
    host = np.ones(10, np.float32)
    store.publish(1, {"w": host})
    host[:] = 5  # a NumPy array the caller may change is copied
    np.testing.assert_array_equal(store.fetch(1).arrays["w"], np.ones(10))
