"""Signed policy versions: the trainer signs each manifest, readers verify before use.

Transport credentials keep strangers out, but a checksum only proves that bytes were not
damaged: anyone who can write to the store can write a version with matching checksums.
So the trainer holds an Ed25519 key (the run's alone) and signs every version's
manifest: the version number, every tensor's name, dtype, shape, size and digest, the
metadata and the publish time. A signed version's tensor digests are BLAKE3
(:data:`~rlax_core.tensors.SIGNED_CHECKSUM_ALGORITHM`), which no one can match with other
bytes; XXH3 could be. Readers hold the public key and, through
:class:`VerifyingParameterStore`, check the signature before they read a byte, check each
tensor against its signed digest as it arrives, and refuse a version older than the
newest signed one they accepted (a replay), each as :class:`ForgedVersionError`.

The keys are PEM files (PKCS#8 private, SubjectPublicKeyInfo public), as
``rlax credentials`` writes them; a transport's ``signing`` settings name them.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field

from rlax_core.contracts.parameter_store import FetchedParameters, ParameterStore
from rlax_core.errors import ConfigError, ForgedVersionError
from rlax_core.tensors import SIGNED_CHECKSUM_ALGORITHM
from rlax_core.types.policy import PolicyVersion


class SigningSettings(BaseModel):
    """Where a process finds the run's weight-signing keys."""

    model_config = ConfigDict(extra="forbid")

    public_key_file: Path = Field(
        description="The run's public key (PEM): every reader verifies versions with it."
    )
    private_key_file: Path | None = Field(
        default=None,
        description="The run's private key (PEM), which signs each version: needed by the "
        "trainer only, and mounted in the trainer's processes only.",
    )


def generate_signing_key() -> tuple[bytes, bytes]:
    """A new Ed25519 key pair as PEM: (private, public)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public


def signed_bytes(info: PolicyVersion) -> bytes:
    """What a signature covers: every field of the manifest but the signature, as
    canonical JSON (sorted keys, no spaces), so any reader recomputes the same bytes."""
    fields = info.model_dump(mode="json", exclude={"signature"})
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


class VersionSigner:
    """Signs manifests with the run's private key (the trainer's), read on first use."""

    def __init__(self, key: Ed25519PrivateKey | None = None, key_file: Path | None = None) -> None:
        self._key = key
        self._key_file = key_file
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: Path) -> VersionSigner:
        """Reads a PEM Ed25519 private key now.

        Raises:
            ConfigError: the file is missing, unreadable or not such a key.
        """
        return cls(_private_key(path))

    def sign(self, info: PolicyVersion) -> PolicyVersion:
        """``info`` with its signature.

        Raises:
            ConfigError: this process has no private key (only the trainer's has).
            ValueError: its tensors are not hashed with the signed algorithm.
        """
        if info.checksum_algorithm != SIGNED_CHECKSUM_ALGORITHM:
            raise ValueError(
                f"a signed version hashes its tensors with {SIGNED_CHECKSUM_ALGORITHM}, "
                f"not {info.checksum_algorithm}"
            )
        with self._lock:
            if self._key is None:
                if self._key_file is None:
                    raise ConfigError(
                        "this run signs its weights, but this process has no "
                        "signing.private_key_file: only the trainer publishes"
                    )
                self._key = _private_key(self._key_file)
        signature = self._key.sign(signed_bytes(info))
        return info.model_copy(update={"signature": base64.b64encode(signature).decode()})


def version_signer(settings: SigningSettings | None) -> VersionSigner | None:
    """The signer a store publishes with: None when the run does not sign; else one
    that reads ``private_key_file`` when it first signs (a reader never needs it)."""
    if settings is None:
        return None
    return VersionSigner(key_file=settings.private_key_file)


def verifying(store: ParameterStore, settings: SigningSettings | None) -> ParameterStore:
    """``store`` as its readers should see it: verified against the run's public key
    when the run signs its weights, else as it is.

    Raises:
        ConfigError: the public key cannot be read.
    """
    if settings is None:
        return store
    return VerifyingParameterStore(store, VersionVerifier.from_file(settings.public_key_file))


def _private_key(path: Path) -> Ed25519PrivateKey:
    key = _load(path, "private", serialization.load_pem_private_key, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"signing.private_key_file {path}: not an Ed25519 private key")
    return key


class VersionVerifier:
    """Checks manifests against the run's public key, and refuses replays.

    Thread-safe: one verifier serves a process's readers.
    """

    def __init__(self, key: Ed25519PublicKey) -> None:
        self._key = key
        self._lock = threading.Lock()
        self._newest: PolicyVersion | None = None

    @classmethod
    def from_file(cls, path: Path) -> VersionVerifier:
        """Reads a PEM Ed25519 public key.

        Raises:
            ConfigError: the file is missing, unreadable or not such a key.
        """
        key = _load(path, "public", serialization.load_pem_public_key)
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigError(f"signing.public_key_file {path}: not an Ed25519 public key")
        return cls(key)

    @property
    def newest(self) -> int | None:
        """The newest version this verifier accepted."""
        return None if self._newest is None else self._newest.version

    def check_signature(self, info: PolicyVersion) -> PolicyVersion:
        """Returns ``info`` if the run's key signed it (whatever the versions seen).

        Raises:
            ForgedVersionError: unsigned, signed by another key or over other content,
                or hashed with a forgeable algorithm.
        """
        where = f"version {info.version}"
        if info.signature is None:
            raise ForgedVersionError(f"{where} is not signed, and this run's readers verify")
        if info.checksum_algorithm != SIGNED_CHECKSUM_ALGORITHM:
            raise ForgedVersionError(
                f"{where} is hashed with {info.checksum_algorithm}, which can be forged; "
                f"signed versions use {SIGNED_CHECKSUM_ALGORITHM}"
            )
        if info.expected_checksum() != info.checksum:
            raise ForgedVersionError(f"{where}: its manifest checksum does not match its tensors")
        try:
            self._key.verify(base64.b64decode(info.signature, validate=True), signed_bytes(info))
        except (InvalidSignature, ValueError):
            raise ForgedVersionError(
                f"{where} does not carry the run's signature: someone other than the trainer "
                "wrote it, or changed it; it is not used"
            ) from None
        return info

    def verify(self, info: PolicyVersion) -> PolicyVersion:
        """Returns ``info`` if the run's key signed it and it is not a replay.

        A version older than the newest accepted one is a replay; the newest one again is
        fine only as the very manifest accepted before.

        Raises:
            ForgedVersionError: as :meth:`check_signature`, or replayed.
        """
        self.check_signature(info)
        where = f"version {info.version}"
        with self._lock:
            newest = self._newest
            if newest is not None and (
                info.version < newest.version
                or (info.version == newest.version and info.signature != newest.signature)
            ):
                raise ForgedVersionError(
                    f"{where} replays an older signed version (the newest accepted is "
                    f"{newest.version}); it is not used"
                )
            self._newest = info
        return info


class VerifyingParameterStore(ParameterStore):
    """A reader's view of a store whose versions must carry the run's signature.

    Every manifest :meth:`latest`, :meth:`wait_for_newer` and :meth:`fetch` return is
    verified first (:class:`VersionVerifier`); a fetch checks its tensors against the
    signed digests (the store verifies them as they arrive) and that the manifest it
    fetched by is the signed one. Publishing goes to the inner store unchanged (it signs,
    if it has the key).
    """

    def __init__(self, inner: ParameterStore, verifier: VersionVerifier) -> None:
        self.inner = inner
        self.verifier = verifier

    def publish(
        self, version: int, params: Mapping[str, Any], metadata: Mapping[str, Any] | None = None
    ) -> PolicyVersion:
        return self.inner.publish(version, params, metadata)

    def latest(self) -> PolicyVersion | None:
        info = self.inner.latest()
        return None if info is None else self.verifier.verify(info)

    def versions(self) -> list[int]:
        return self.inner.versions()

    def fetch(
        self,
        version: int | None = None,
        names: Iterable[str] | None = None,
        out: Mapping[str, np.ndarray] | None = None,
    ) -> FetchedParameters:
        fetched = self.inner.fetch(version, names, out)
        self.verifier.verify(fetched.version)
        return fetched

    def wait_for_newer(self, than: int | None, timeout: float | None) -> PolicyVersion | None:
        info = self.inner.wait_for_newer(than, timeout)
        return None if info is None else self.verifier.verify(info)

    def close(self) -> None:
        self.inner.close()


def _load(path: Path, kind: str, loader: Any, **kwargs: Any) -> Any:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"signing.{kind}_key_file {path}: cannot be read ({exc.strerror}); "
            "`rlax credentials DIR` writes the run's keys"
        ) from None
    try:
        return loader(data, **kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"signing.{kind}_key_file {path}: not a PEM key ({exc})") from None
