"""A worker that follows a signing run's store never loads a version the run did not sign."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from rlax_core.rl.roles.policy_follower import PolicyFollower
from rlax_core.transport.inproc.parameter_store import InProcParameterStore
from rlax_core.transport.signing import (
    SigningSettings,
    generate_signing_key,
    verifying,
    version_signer,
)


def _params(value: float) -> dict[str, np.ndarray]:
    return {"w": np.full((4, 4), value, np.float32)}


def test_a_forged_version_is_reported_and_never_loaded(tmp_path: Path) -> None:
    private, public = generate_signing_key()
    (tmp_path / "key.pem").write_bytes(private)
    (tmp_path / "key.pub").write_bytes(public)
    settings = SigningSettings(
        public_key_file=tmp_path / "key.pub", private_key_file=tmp_path / "key.pem"
    )
    trainer = InProcParameterStore(keep_last=4, signer=version_signer(settings))
    forger = trainer.client()
    forger._signer = None  # a writer with the trainer's access but not its key
    loaded: list[tuple[int, float]] = []
    follower = PolicyFollower(
        verifying(trainer.client(), settings),
        pull_every=1,
        load=lambda arrays, version: loaded.append((version, float(arrays["w"][0, 0]))),
    )
    trainer.publish(1, _params(1.0))
    assert follower.ensure(1)
    forger.publish(2, _params(-1.0))
    assert not follower.due(1)  # the forged newest is not a reason to pull
    assert follower.ensure(1) and follower.version == 1  # samples on with what it holds
    assert follower.forged_versions == 2  # each look at the store reported it
    threading.Timer(0.3, lambda: trainer.publish(3, _params(3.0))).start()
    stop = threading.Event()
    assert follower.ensure(2, stop)  # waits out the forgery for the next signed version
    assert loaded == [(1, 1.0), (3, 3.0)]
    assert follower.forged_versions >= 2
