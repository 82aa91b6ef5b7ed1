"""NATS credentials, TLS, and clear errors within bounded time, against real servers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import nkeys
import numpy as np
import pytest

from rlax_core.errors import TransportAuthError, TransportUnreachableError
from rlax_core.testing.tls import make_test_certificates
from rlax_transport_nats import NatsParameterStore, NatsServerProcess
from rlax_transport_nats.server import NatsAuth, free_port
from rlax_transport_nats.testing import client_config

pytestmark = pytest.mark.network


@pytest.fixture
def token_server(tmp_path: Path) -> Iterator[NatsServerProcess]:
    server = NatsServerProcess(store_dir=tmp_path / "js", auth=NatsAuth(token="s3cret"))
    server.start()
    yield server
    server.stop()


def _params() -> dict[str, np.ndarray]:
    return {"w": np.arange(1000, dtype=np.float32)}


def test_a_client_without_credentials_is_refused(token_server: NatsServerProcess) -> None:
    start = time.monotonic()
    with pytest.raises(TransportAuthError, match=token_server.url):
        NatsParameterStore.open(client_config(token_server.url))
    assert time.monotonic() - start < 10


def test_a_wrong_token_is_refused_and_the_right_one_works(
    token_server: NatsServerProcess,
) -> None:
    with pytest.raises(TransportAuthError, match="token"):
        NatsParameterStore.open(client_config(token_server.url, token="wrong"))
    config = client_config(token_server.url, token="s3cret")
    with NatsParameterStore.open(config) as store:
        store.publish(1, _params())
        assert store.versions() == [1]


def test_user_and_password(tmp_path: Path) -> None:
    auth = NatsAuth(user="trainer", password="pw")
    with NatsServerProcess(store_dir=tmp_path / "js", auth=auth) as server:
        with pytest.raises(TransportAuthError):
            NatsParameterStore.open(client_config(server.url, user="trainer", password="nope"))
        config = client_config(server.url, user="trainer", password="pw")
        with NatsParameterStore.open(config) as store:
            store.publish(1, _params())
            np.testing.assert_array_equal(store.fetch(1).arrays["w"], _params()["w"])


def test_nkeys(tmp_path: Path) -> None:
    user = nkeys.from_seed(_new_user_seed())
    seed_file = tmp_path / "user.nk"
    seed_file.write_bytes(user.seed)
    auth = NatsAuth(nkey=user.public_key.decode())
    with NatsServerProcess(store_dir=tmp_path / "js", auth=auth) as server:
        with pytest.raises(TransportAuthError):
            NatsParameterStore.open(client_config(server.url))
        with NatsParameterStore.open(client_config(server.url, nkey_seed_file=seed_file)) as store:
            store.publish(1, _params())
            assert store.latest().version == 1


def test_tls_with_a_throwaway_ca(tmp_path: Path) -> None:
    certs = make_test_certificates(tmp_path / "certs")
    server = NatsServerProcess(
        store_dir=tmp_path / "js",
        auth=NatsAuth(token="t"),
        tls_cert_file=certs.server_cert_file,
        tls_key_file=certs.server_key_file,
    )
    with server:
        assert server.url.startswith("tls://")
        with pytest.raises(TransportAuthError):  # trusts another CA: refused
            NatsParameterStore.open(
                client_config(server.url, token="t", tls_ca_file=certs.other_ca_file)
            )
        config = client_config(server.url, token="t", tls_ca_file=certs.ca_file)
        with NatsParameterStore.open(config) as store:
            store.publish(1, _params())
            np.testing.assert_array_equal(store.fetch(1).arrays["w"], _params()["w"])


def test_an_unreachable_server_fails_fast_and_names_the_address() -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(TransportUnreachableError, match=url) as info:
        NatsParameterStore.open(client_config(url, connect_timeout_s=1.0))
    assert time.monotonic() - start < 8
    assert "rlax serve param-server" in str(info.value)


def test_a_server_that_dies_mid_transfer_is_an_error_within_the_budget(
    tmp_path: Path,
) -> None:
    server = NatsServerProcess(store_dir=tmp_path / "js")
    server.start()
    try:
        config = client_config(server.url, reconnect_timeout_s=2.0, chunk_mb=1)
        store = NatsParameterStore.open(config)
        store.publish(1, {"w": np.ones(32 << 20, np.uint8)})
        server.kill()
        start = time.monotonic()
        with pytest.raises(TransportUnreachableError, match=server.url.split("//")[1]):
            store.fetch(1)
        assert time.monotonic() - start < 15
        store.close()
    finally:
        server.stop()


def _new_user_seed() -> bytes:
    """A fresh user nkey seed (SU...), made with the nkeys package's own encoder."""
    import os

    from nkeys import PREFIX_BYTE_USER, encode_seed  # type: ignore[attr-defined]

    return encode_seed(os.urandom(32), PREFIX_BYTE_USER)
