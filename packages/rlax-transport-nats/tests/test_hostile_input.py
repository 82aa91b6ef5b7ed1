"""Hostile bytes in the store, written with a lab credential that may write anything.

Per-role permissions keep non-trainers from writing at all (test_hostile_clients.py);
these tests give the attacker every right, as a token shared by a trusted lab does, and
check what the streams and the readers still refuse: a version overwritten in place,
junk manifests at huge versions, impossible chunk sizes and shapes, unsigned versions in
a signing run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import nats.js.errors
import numpy as np
import pytest

from rlax_core.errors import ForgedVersionError, ManifestError
from rlax_core.kit.transport import SigningSettings, prepare_version
from rlax_core.transport.signing import generate_signing_key
from rlax_transport_nats import NatsParameterStore, NatsServerProcess, NatsTransport
from rlax_transport_nats.param_streams import ParamStreams
from rlax_transport_nats.testing import client_config, delete_namespace

pytestmark = pytest.mark.network


@pytest.fixture
def store(nats_server: NatsServerProcess) -> Iterator[NatsParameterStore]:
    config = client_config(nats_server.url, chunk_mb=1)
    opened = NatsParameterStore.open(config)
    yield opened
    opened.close()
    delete_namespace(config)


def _params(value: float) -> dict[str, np.ndarray]:
    return {"w": np.full(1000, value, np.float32)}


def _raw_publish(store: NatsParameterStore, subject: str, body: bytes) -> None:
    connection = store.connection
    connection.call(connection.js.publish(subject, body), timeout=10)


def _manifest(version: int, **changes: object) -> bytes:
    """A stored manifest for ``version`` with the given fields changed."""
    policy = json.loads(prepare_version(version, _params(9.0)).info.to_bytes())
    body = {"policy": policy, "chunk_bytes": 1 << 20, "upload": "00ff"}
    for key, value in changes.items():
        if key in body:
            body[key] = value
        else:
            policy["tensors"][0][key] = value
    return json.dumps(body).encode()


def test_a_version_cannot_be_overwritten_in_place(store: NatsParameterStore) -> None:
    store.publish(1, _params(1.0))
    streams = ParamStreams(store.connection, store._config)
    _, _, upload = store.manifest_of(1)
    for subject in (streams.manifest_subject(1), streams.chunk_subject(1, upload, 0, 0)):
        with pytest.raises(nats.js.errors.APIError, match="maximum messages per subject"):
            _raw_publish(store, subject, _manifest(1))
    np.testing.assert_array_equal(store.fetch(1).arrays["w"], _params(1.0)["w"])


def test_junk_at_a_huge_version_neither_crashes_readers_nor_blocks_the_trainer(
    store: NatsParameterStore,
) -> None:
    store.publish(1, _params(1.0))
    streams = ParamStreams(store.connection, store._config)
    for version, junk in ((2**53 - 1, b"{not json"), (10**15, b'{"policy": []}')):
        _raw_publish(store, streams.manifest_subject(version), junk)
    assert store.latest().version == 1
    assert store.fetch().version.version == 1
    assert store.wait_for_newer(1, timeout=0.5) is None  # junk does not wake a waiter
    store.publish(2, _params(2.0))  # the trainer goes on and purges the junk
    assert store.latest().version == 2
    assert store.versions()[-1] == 2


@pytest.mark.parametrize(
    ("what", "changes"),
    [
        ("chunk_bytes 0", {"chunk_bytes": 0}),
        ("chunk_bytes 1", {"chunk_bytes": 1}),
        ("a shape of 2^45", {"shape": [2**45], "nbytes": 2**47}),
        ("bytes unlike the shape", {"nbytes": 7}),
        ("an upload that is no token", {"upload": "a.>"}),
    ],
)
def test_impossible_manifests_are_refused_before_any_allocation(
    what: str, changes: dict, store: NatsParameterStore
) -> None:
    store.publish(1, _params(1.0))
    streams = ParamStreams(store.connection, store._config)
    _raw_publish(store, streams.manifest_subject(2), _manifest(2, **changes))
    with pytest.raises(ManifestError):
        store.fetch(2)
    assert store.latest().version == 1, what


def test_a_manifest_on_another_versions_subject_is_refused(store: NatsParameterStore) -> None:
    store.publish(1, _params(1.0))
    streams = ParamStreams(store.connection, store._config)
    _raw_publish(store, streams.manifest_subject(5), _manifest(3))
    with pytest.raises(ManifestError, match="own version's subject"):
        store.fetch(5)
    assert store.latest().version == 1


def test_every_stream_has_limits(store: NatsParameterStore) -> None:
    store.publish(1, _params(1.0))
    connection = store.connection
    namespace = store._config.namespace

    async def streams() -> list:
        return await connection.js.streams_info()

    mine = [s for s in connection.call(streams(), timeout=10) if f"_{namespace}_" in s.config.name]
    assert mine
    for stream in mine:
        assert stream.config.max_bytes > 0, stream.config.name
        assert stream.config.max_msg_size and stream.config.max_msg_size > 0


def test_a_forged_version_is_refused_in_a_signing_run(
    nats_server: NatsServerProcess, tmp_path: Path
) -> None:
    private, public = generate_signing_key()
    (tmp_path / "key.pem").write_bytes(private)
    (tmp_path / "key.pub").write_bytes(public)
    reader_signing = SigningSettings(public_key_file=tmp_path / "key.pub")
    trainer_config = client_config(
        nats_server.url,
        signing=SigningSettings(
            public_key_file=tmp_path / "key.pub", private_key_file=tmp_path / "key.pem"
        ),
    )
    worker_config = trainer_config.model_copy(update={"signing": reader_signing})
    forger_config = trainer_config.model_copy(update={"signing": None})  # no key: unsigned
    trainer, worker = NatsTransport(trainer_config), NatsTransport(worker_config)
    forger = NatsParameterStore.open(forger_config)
    try:
        trainer.parameter_store().publish(1, _params(1.0))
        reader = worker.parameter_store()
        assert reader.latest().version == 1
        forger.publish(2, _params(-1.0))
        time.sleep(0.2)
        assert reader.latest().version == 1  # the unsigned version is skipped
        with pytest.raises(ForgedVersionError):
            reader.fetch(2)
        trainer.parameter_store().publish(3, _params(3.0))
        fetched = reader.fetch()
        assert fetched.version.version == 3
        np.testing.assert_array_equal(fetched.arrays["w"], _params(3.0)["w"])
    finally:
        forger.close()
        trainer.close()
        worker.close()
        delete_namespace(trainer_config)
