"""A version's manifest as the manifest stream stores it, and how readers check it.

The message is JSON: ``{"policy": <PolicyVersion>, "chunk_bytes": N, "upload": "<hex>"}``.
Whoever could write to the stream could write anything there, so a reader trusts
nothing in it before :func:`decode_manifest` has checked it, and allocates nothing
before: the policy goes through core's :func:`~rlax_core.kit.transport.parse_manifest`
(dtypes, byte counts against shapes, sizes, the version bound, the checksum), the
version must be the one its subject names, ``chunk_bytes`` must be a chunk size a store
uses (so a fetch sends a bounded number of requests; 0 would divide by zero), and the
upload token must be one subject token of hex digits. Where the run signs its weights,
:class:`ManifestReader` also checks the signature before anything is fetched, so a
forged version costs a reader no allocation.

Every failure is a :class:`~rlax_core.errors.ManifestError` or
:class:`~rlax_core.errors.ForgedVersionError`, never a ``JSONDecodeError``,
``ZeroDivisionError`` or ``MemoryError``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from rlax_core.errors import ManifestError
from rlax_core.kit.transport import (
    ManifestLimits,
    SigningSettings,
    VersionVerifier,
    parse_manifest,
)
from rlax_core.types.policy import PolicyVersion

MIN_CHUNK_BYTES = 64 << 10
"""The smallest chunk a store writes (nats-server's max_payload is never below it)."""
MAX_CHUNK_BYTES = 64 << 20
"""The largest: nats-server's max_payload cannot exceed it."""
_UPLOAD = re.compile(r"^[0-9a-f]{1,64}$")


@dataclass(frozen=True)
class StoredManifest:
    """A checked manifest: the version, its chunk size and its upload's subject token."""

    info: PolicyVersion
    chunk_bytes: int
    upload: str

    def encode(self) -> bytes:
        """The message body the manifest stream stores."""
        return json.dumps(
            {
                "policy": json.loads(self.info.to_bytes()),
                "chunk_bytes": self.chunk_bytes,
                "upload": self.upload,
            }
        ).encode()


def decode_manifest(
    data: bytes, version: int | None, source: str, limits: ManifestLimits | None = None
) -> StoredManifest:
    """Checks a stored manifest (see the module docstring).

    Args:
        data: the message body.
        version: the version its subject names (None: not known, e.g. an announcement).
        source: where it came from, for messages.
        limits: the bounds of :func:`parse_manifest`.

    Raises:
        ManifestError: the first check that fails.
    """
    limits = limits or ManifestLimits()
    where = f"the manifest of version {version} from {source}" if version is not None else (
        f"a manifest from {source}"
    )  # fmt: skip
    if len(data) > limits.max_manifest_mb * 1e6:
        raise ManifestError(f"{where} is {len(data)} bytes, past max_manifest_mb; refused")
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        raise ManifestError(f"{where} is not JSON; refused") from None
    if not isinstance(body, dict) or not isinstance(body.get("policy"), dict):
        raise ManifestError(f"{where} is not a manifest (no policy object); refused")
    info = parse_manifest(json.dumps(body["policy"]), source, limits)
    if version is not None and info.version != version:
        raise ManifestError(
            f"{where} describes version {info.version}: a manifest is only valid on its "
            "own version's subject; refused"
        )
    chunk_bytes = body.get("chunk_bytes")
    if (
        not isinstance(chunk_bytes, int)
        or isinstance(chunk_bytes, bool)
        or not MIN_CHUNK_BYTES <= chunk_bytes <= MAX_CHUNK_BYTES
    ):
        raise ManifestError(
            f"{where}: chunk_bytes {chunk_bytes!r} is not a chunk size in "
            f"[{MIN_CHUNK_BYTES}, {MAX_CHUNK_BYTES}]; refused"
        )
    upload = body.get("upload")
    if not isinstance(upload, str) or not _UPLOAD.match(upload):
        raise ManifestError(f"{where}: upload {upload!r} is not a hex token; refused")
    return StoredManifest(info, chunk_bytes, upload)


class ManifestReader:
    """Decodes manifests, and where the run signs its weights, checks their signature.

    Args:
        signing: the run's signing settings (None: versions are checksummed only).
        source: where manifests come from, for messages.

    Raises:
        ConfigError: the public key cannot be read.
    """

    def __init__(self, signing: SigningSettings | None, source: str) -> None:
        self._source = source
        self._verifier = (
            None if signing is None else VersionVerifier.from_file(signing.public_key_file)
        )

    def read(self, data: bytes, version: int | None) -> StoredManifest:
        """A checked (and where the run signs, signature-checked) manifest.

        Raises:
            ManifestError: see :func:`decode_manifest`.
            ForgedVersionError: the run signs its weights and this version's signature is
                missing or wrong.
        """
        stored = decode_manifest(data, version, self._source)
        if self._verifier is not None:
            # Replays are the reader's wrapper's business (VerifyingParameterStore).
            self._verifier.check_signature(stored.info)
        return stored
