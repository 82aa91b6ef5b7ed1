"""The transport's security parts in core: credentials per role, signed versions,
manifests checked off the wire, and the server exposure ``rlax serve`` refuses."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlax_core.cli.serve_cmd import check_exposure
from rlax_core.contracts.transport import ServerSecurity
from rlax_core.errors import (
    ConfigError,
    ForgedVersionError,
    LeaseExpiredError,
    ManifestError,
    TransportAuthError,
)
from rlax_core.tensors import manifest_checksum, tensor_checksum
from rlax_core.transport.credentials import (
    CREDENTIALS_ENV,
    FOLDERS,
    ROLES,
    authenticate,
    folder_files,
    generate_run_credentials,
    parse_credential,
    read_credential,
    read_server_credentials,
)
from rlax_core.transport.inproc.parameter_store import InProcParameterStore
from rlax_core.transport.lease_table import LeaseTable
from rlax_core.transport.manifests import MAX_VERSION, ManifestLimits, parse_manifest
from rlax_core.transport.publishing import prepare_version
from rlax_core.transport.signing import (
    SigningSettings,
    VersionSigner,
    VersionVerifier,
    generate_signing_key,
    verifying,
    version_signer,
)
from rlax_core.types.policy import PolicyVersion

PARAMS = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(4, np.float32)}


@pytest.fixture(scope="module")
def run_credentials(tmp_path_factory: pytest.TempPathFactory):
    return generate_run_credentials(tmp_path_factory.mktemp("creds"), ["rlax-transport"])


def _keys(tmp_path: Path) -> SigningSettings:
    private, public = generate_signing_key()
    (tmp_path / "key.pem").write_bytes(private)
    (tmp_path / "key.pub").write_bytes(public)
    return SigningSettings(
        public_key_file=tmp_path / "key.pub", private_key_file=tmp_path / "key.pem"
    )


# -- credentials --


def test_each_role_gets_its_own_folder_and_only_the_trainer_can_sign(run_credentials) -> None:
    server = read_server_credentials(run_credentials.server / "credentials")
    assert sorted(server) == sorted(ROLES)
    for role, folder in run_credentials.roles.items():
        credential = read_credential(folder / "credential")
        assert credential.role == role and authenticate(credential.line(), server, "t") == role
        assert stat.S_IMODE((folder / "credential").stat().st_mode) == 0o600
        assert stat.S_IMODE((folder / "client-key.pem").stat().st_mode) == 0o600
        assert (folder / "signing-key.pem").exists() == (role == "trainer")
        assert (folder / "ca.pem").read_bytes() == (run_credentials.server / "ca.pem").read_bytes()
    secrets = {read_credential(f / "credential").secret for f in run_credentials.roles.values()}
    assert len(secrets) == len(ROLES)  # no two roles share a secret
    with pytest.raises(ConfigError, match="holds credentials already"):
        generate_run_credentials(run_credentials.folder, ["x"])


def test_each_folder_holds_exactly_the_files_its_layout_names(run_credentials) -> None:
    """What launchers mount (folder_files) is what generate_run_credentials writes."""
    folders = {**run_credentials.roles, "server": run_credentials.server}
    assert sorted(folders) == sorted(FOLDERS)
    for name, folder in folders.items():
        written = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        assert written == sorted(folder_files(name)), name


def test_a_wrong_guessed_or_missing_credential_is_refused(run_credentials) -> None:
    server = read_server_credentials(run_credentials.server / "credentials")
    worker = read_credential(run_credentials.roles["worker"] / "credential")
    for presented in (None, "", "trainer:" + worker.secret, worker.line() + "x", "admin:x" * 4):
        with pytest.raises(TransportAuthError):
            authenticate(presented, server, "publish")


def test_credentials_come_from_a_file_or_the_environment_and_bad_ones_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CREDENTIALS_ENV, raising=False)
    assert read_credential(None) is None
    monkeypatch.setenv(CREDENTIALS_ENV, "worker:" + "s" * 20)
    assert read_credential(None).role == "worker"
    with pytest.raises(ConfigError, match="cannot be read"):
        read_credential(tmp_path / "missing")
    with pytest.raises(ConfigError, match="unknown role 'admin'"):
        parse_credential("admin:" + "s" * 20, "f")
    with pytest.raises(ConfigError, match="at least 16"):
        parse_credential("worker:short", "f")
    with pytest.raises(ConfigError, match="ROLE:SECRET"):
        parse_credential("no-colon", "f")
    assert "s" * 20 not in repr(parse_credential("worker:" + "s" * 20, "f"))


# -- signed versions --


def test_a_signed_version_verifies_and_every_change_to_it_is_refused(tmp_path: Path) -> None:
    settings = _keys(tmp_path)
    info = prepare_version(3, PARAMS, {"step": 3}, signer=version_signer(settings)).info
    assert info.checksum_algorithm == "blake3" and info.signature
    verifier = VersionVerifier.from_file(settings.public_key_file)
    assert verifier.verify(info) is info
    tensors = list(info.tensors)
    forged_bytes = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    tensors[0] = tensors[0].model_copy(update={"checksum": tensor_checksum(forged_bytes, "blake3")})
    entries = [(t.name, t.dtype, t.shape, t.checksum) for t in tensors]
    recomputed = info.model_copy(
        update={"tensors": tuple(tensors), "checksum": manifest_checksum(entries, "blake3")}
    )
    changes = {
        "new bytes, checksums recomputed": recomputed,
        "another version number": info.model_copy(update={"version": 4}),
        "other metadata": info.model_copy(update={"metadata": {"step": 4}}),
        "no signature": info.model_copy(update={"signature": None}),
        "a garbled signature": info.model_copy(update={"signature": "not base64!"}),
    }
    for what, changed in changes.items():
        verifier = VersionVerifier.from_file(settings.public_key_file)
        with pytest.raises(ForgedVersionError, match=r"version \d"):
            verifier.verify(changed)
        assert verifier.newest is None, what
    (tmp_path / "other").mkdir()
    other = _keys(tmp_path / "other")
    by_another_key = prepare_version(3, PARAMS, signer=version_signer(other)).info
    with pytest.raises(ForgedVersionError, match="does not carry the run's signature"):
        VersionVerifier.from_file(settings.public_key_file).verify(by_another_key)


def test_unkeyed_checksums_are_not_accepted_as_signed(tmp_path: Path) -> None:
    settings = _keys(tmp_path)
    plain = prepare_version(1, PARAMS).info
    assert plain.checksum_algorithm == "xxh3-128"
    with pytest.raises(ValueError, match="blake3"):
        VersionSigner.from_file(settings.private_key_file).sign(plain)
    with pytest.raises(ForgedVersionError, match="not signed"):
        VersionVerifier.from_file(settings.public_key_file).verify(plain)


def test_a_replayed_older_version_is_refused(tmp_path: Path) -> None:
    settings = _keys(tmp_path)
    signer = version_signer(settings)
    verifier = VersionVerifier.from_file(settings.public_key_file)
    old, new = (prepare_version(v, PARAMS, signer=signer).info for v in (1, 2))
    verifier.verify(new)
    assert verifier.verify(new) is new  # the same version again is fine
    with pytest.raises(ForgedVersionError, match="replays an older signed version"):
        verifier.verify(old)
    again = prepare_version(2, PARAMS, signer=signer).info  # same number, other content
    with pytest.raises(ForgedVersionError, match="replays"):
        verifier.verify(again)


def test_readers_of_a_signing_run_get_only_signed_versions(tmp_path: Path) -> None:
    settings = _keys(tmp_path)
    trainer = InProcParameterStore(signer=version_signer(settings))
    reader = verifying(trainer.client(), settings)
    trainer.publish(1, PARAMS)
    fetched = reader.fetch()
    assert reader.latest().version == 1 and fetched.version.signature
    np.testing.assert_array_equal(fetched.arrays["w"], PARAMS["w"])
    forger = InProcParameterStore(_shared=trainer._shared)  # a writer without the key
    forger.publish(2, {k: v + 1 for k, v in PARAMS.items()})
    with pytest.raises(ForgedVersionError):
        reader.latest()
    with pytest.raises(ForgedVersionError):
        reader.fetch()
    with pytest.raises(ForgedVersionError):  # waits hand out verified versions only
        reader.wait_for_newer(1, 0)
    unsigned = verifying(InProcParameterStore(), None)
    assert isinstance(unsigned, InProcParameterStore)  # a run that does not sign: as it is


def test_a_process_without_the_private_key_cannot_publish(tmp_path: Path) -> None:
    settings = _keys(tmp_path)
    worker = SigningSettings(public_key_file=settings.public_key_file)
    store = InProcParameterStore(signer=version_signer(worker))
    with pytest.raises(ConfigError, match="only the trainer publishes"):
        store.publish(1, PARAMS)
    with pytest.raises(ConfigError, match="cannot be read"):
        VersionVerifier.from_file(tmp_path / "none.pub")
    (tmp_path / "junk.pub").write_text("junk")
    with pytest.raises(ConfigError, match="not a PEM key"):
        VersionVerifier.from_file(tmp_path / "junk.pub")


# -- manifests off the wire --


def _manifest(**changes) -> str:
    info = prepare_version(1, PARAMS).info
    data = json.loads(info.model_dump_json())
    data.update(changes)
    return json.dumps(data)


def test_good_manifests_parse() -> None:
    assert parse_manifest(_manifest(), "t").version == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"version": MAX_VERSION + 1}, "version numbers stop at"),
        ({"version": 2**62}, "version numbers stop at"),
        ({"tensors": []}, "has no tensors"),
        ({"checksum": "0" * 32}, "checksum does not match"),
        ({"checksum_algorithm": "md5"}, "unknown checksum algorithm"),
    ],
)
def test_hostile_manifests_are_refused_with_a_message(change: dict, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        parse_manifest(_manifest(**change), "t")


def test_tensors_that_cannot_be_are_refused() -> None:
    info = prepare_version(1, PARAMS).info

    def with_tensor(**changes) -> str:
        tensor = info.tensors[0].model_copy(update=changes)
        return PolicyVersion.model_validate(
            {**info.model_dump(), "tensors": (tensor, *info.tensors[1:])}
        ).model_dump_json()

    cases = {
        "is 48 bytes, but it claims 47": with_tensor(nbytes=47),
        "dtype 'object'": with_tensor(dtype="object"),
        "negative dimension": with_tensor(shape=(-1, 4)),
        "more than 1e-06 GB": with_tensor(shape=(2**45,), nbytes=2**47),
    }
    for message, data in cases.items():
        with pytest.raises(ManifestError, match=message.replace("(", r"\(")):
            parse_manifest(data, "t", ManifestLimits(max_tensor_gb=1e-6))
    twice = PolicyVersion.model_validate(
        {**info.model_dump(), "tensors": (info.tensors[0], info.tensors[0])}
    )
    with pytest.raises(ManifestError, match="unique"):
        parse_manifest(twice.model_dump_json(), "t")
    for junk in (b"{not json", b"[]", b'{"version": "x"}', b"\xff" * 10):
        with pytest.raises(ManifestError, match="malformed"):
            parse_manifest(junk, "t")
    with pytest.raises(ManifestError, match="more than"):
        parse_manifest(b" " * 2_000_001, "t", ManifestLimits(max_manifest_mb=2))


# -- rlax serve's exposure check --


@pytest.mark.parametrize(
    ("host", "authenticated", "encrypted", "refused"),
    [
        ("127.0.0.1", False, False, False),
        ("localhost", False, False, False),
        ("::1", False, False, False),
        ("0.0.0.0", False, False, True),
        ("0.0.0.0", True, False, True),
        ("10.1.2.3", False, True, True),
        ("rlax-transport", True, True, False),
        ("0.0.0.0", True, True, False),
    ],
)
def test_serve_refuses_an_open_non_loopback_server(
    host: str, authenticated: bool, encrypted: bool, refused: bool, capsys
) -> None:
    security = ServerSecurity(host, authenticated, encrypted)
    if refused:
        with pytest.raises(ConfigError, match="--insecure"):
            check_exposure(security, insecure=False)
        check_exposure(security, insecure=True)
        assert "warning: serving on" in capsys.readouterr().err
    else:
        check_exposure(security, insecure=False)


def test_rlax_credentials_writes_the_folders_and_prints_the_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from rlax_core.cli.main import main

    folder = tmp_path / "creds"
    assert main(["credentials", str(folder), "--server-host", "rlax-transport"]) == 0
    settings = yaml.safe_load(capsys.readouterr().out)["transport"]
    mounted = {role: tmp_path / role for role in (*ROLES, "server")}
    for role, target in mounted.items():  # each folder, where its role mounts it
        shutil.copytree(folder / role, target)
    assert read_credential(mounted["worker"] / Path(settings["credentials_file"]).name)
    assert (mounted["trainer"] / Path(settings["signing"]["private_key_file"]).name).exists()
    assert not (mounted["worker"] / Path(settings["signing"]["private_key_file"]).name).exists()
    server_dir = mounted["server"] / Path(settings["server"]["credentials_dir"]).name
    assert sorted(read_server_credentials(server_dir)) == sorted(ROLES)
    assert main(["credentials", str(folder), "--server-host", "x"]) == 2
    assert "holds credentials already" in capsys.readouterr().err


# -- leases --


@pytest.mark.parametrize("lease_s", [math.nan, math.inf, -1.0, 0.0, 1e12, "5"])
def test_a_lease_is_finite_positive_and_bounded(lease_s: object) -> None:
    table = LeaseTable("prompts", max_lease_s=60.0)
    table.put("a", b"x")
    with pytest.raises(ValueError, match=r"lease_s must be a number of seconds in \(0, 60\]"):
        table.get(lease_s, 0, lambda: None)  # type: ignore[arg-type]
    lease = table.get(30.0, 0, lambda: None)
    with pytest.raises(ValueError, match="lease_s must be"):
        table.extend(lease, lease_s)  # type: ignore[arg-type]
    table.ack(lease)


def test_lease_tokens_cannot_be_guessed_from_another() -> None:
    table = LeaseTable("prompts")
    for item in "abc":
        table.put(item, b"x")
    leases = [table.get(30.0, 0, lambda: None) for _ in range(3)]
    tokens = [lease.token for lease in leases]
    assert len({t.split(".")[1] for t in tokens}) == 3 and all(len(t) > 20 for t in tokens)
    for lease, other in zip(leases, leases[1:] + leases[:1], strict=True):
        with pytest.raises(LeaseExpiredError):  # another lease's token does not end this one
            table.ack(dataclasses.replace(lease, token=other.token))
    for lease in leases:
        table.ack(lease)
