"""A gke run's transport is closed by default: per-run credentials, a Secret per role,
each mounted by its role's pods only, and a NetworkPolicy that admits only the run's pods.

Every rendered object is validated against the Kubernetes schemas, as in
test_gke_manifests.py.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from rlax_core.cli.main import main
from rlax_core.config.loading import validate_run_config
from rlax_core.errors import ConfigError
from rlax_core.kit.launcher import generate_run_credentials
from rlax_core.plugins import Registry
from rlax_launchers.gke.manifests import render_manifests
from rlax_launchers.run_credentials import (
    PLACEHOLDER,
    folder_files,
    read_credential_files,
    run_credentials_folder,
)

IMAGE = "us-docker.pkg.dev/rl-project/rlax/rlax:0.1.0"
GRPC = {"type": "grpc", "address": "10.0.0.1:50051"}
MOUNT = "/etc/rlax/credentials"
STAGE = {"placement": "stage", "workers": 2}
Validate = Callable[[list[dict[str, Any]]], None]


def launcher(**fields: Any) -> dict[str, Any]:
    return {
        "type": "gke",
        "image": IMAGE,
        "namespace": "rl",
        "trainer": {"accelerator_type": "v5p-8"},
        "workers": {"accelerator_type": "v5p-8"},
        **fields,
    }


def of_kind(items: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in items if m["kind"] == kind]


def pods(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each role's pod spec: trainer, worker, verifier, server."""
    (jobset,) = of_kind(items, "JobSet")
    found = {
        r["name"]: r["template"]["spec"]["template"]["spec"]
        for r in jobset["spec"]["replicatedJobs"]
    }
    for workload in of_kind(items, "Deployment") + of_kind(items, "StatefulSet"):
        role = workload["metadata"]["labels"]["app.kubernetes.io/component"]
        found["server" if role == "transport" else role] = workload["spec"]["template"]["spec"]
    return found


def secret_data(secret: dict[str, Any]) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def test_a_dry_run_renders_a_secret_per_role_with_placeholders_and_mounts_each_in_its_role(
    write_run_config: Callable[..., Path],
    registry: Registry,
    validate_manifests: Validate,
    capsys: pytest.CaptureFixture,
    tmp_path: Path,
) -> None:
    path = write_run_config(launcher(), verifier=STAGE)
    run_dir = tmp_path / "launcher-files"
    assert main(["launch", str(path), "--dry-run", "--run-dir", str(run_dir)]) == 0
    captured = capsys.readouterr()
    items = list(yaml.safe_load_all(captured.out))
    validate_manifests(items)
    assert "hold placeholders here; --apply fills them from" in captured.err
    assert not run_dir.exists()  # a dry run generates nothing
    secrets = {s["metadata"]["name"]: s for s in of_kind(items, "Secret")}
    assert sorted(secrets) == [
        "demo-server-credentials", "demo-trainer-credentials",
        "demo-verifier-credentials", "demo-worker-credentials",
    ]  # fmt: skip
    for secret in secrets.values():
        assert secret["type"] == "Opaque"
        assert set(secret_data(secret).values()) == {PLACEHOLDER}
        assert "rlax launch CONFIG --apply" in secret["metadata"]["annotations"]["rlax/credentials"]
    assert sorted(secret_data(secrets["demo-trainer-credentials"])) == sorted(
        folder_files("trainer")
    )
    assert "signing-key.pem" not in secret_data(secrets["demo-worker-credentials"])
    assert sorted(secret_data(secrets["demo-server-credentials"])) == [
        "ca.pem",
        "client-key.pem",
        "client.pem",
        "credentials.trainer",
        "credentials.verifier",
        "credentials.worker",
        "server-key.pem",
        "server.pem",
        "signing.pub",
    ]  # fmt: skip (its client certificate: a NATS server makes the streams under mTLS)

    # Each role's pods mount their own Secret, read-only, at the same path; no other's.
    for role, pod in pods(items).items():
        (volume,) = [v for v in pod["volumes"] if v["name"] == "transport-credentials"]
        assert volume["secret"]["secretName"] == f"demo-{role}-credentials"
        assert volume["secret"]["defaultMode"] == 0o400
        assert [i["path"] for i in volume["secret"]["items"]] == folder_files(role)
        for container in pod["containers"]:
            assert {
                "name": "transport-credentials", "mountPath": MOUNT, "readOnly": True
            } in container["volumeMounts"]  # fmt: skip
    server_items = pods(items)["server"]["volumes"][-1]["secret"]["items"]
    assert {"key": "credentials.worker", "path": "credentials/worker"} in server_items


def test_the_run_config_turns_on_tls_per_role_credentials_and_signing(
    make_run_config: Callable[..., Any], registry: Registry
) -> None:
    for transport, address in [
        (None, ("servers", ["tls://demo-transport:4222"])),
        (GRPC, ("address", "demo-transport:50051")),
    ]:
        run_config = make_run_config(launcher(), transport=transport)
        items = render_manifests(run_config.launcher, run_config).items
        (config_map,) = of_kind(items, "ConfigMap")
        settings = yaml.safe_load(config_map["data"]["run.yaml"])
        section = settings["transport"]
        assert section[address[0]] == address[1]
        assert section["credentials_file"] == f"{MOUNT}/credential"
        assert section["tls_ca_file"] == f"{MOUNT}/ca.pem"
        assert (section["tls_cert_file"], section["tls_key_file"]) == (
            f"{MOUNT}/client.pem", f"{MOUNT}/client-key.pem",
        )  # fmt: skip
        assert section["signing"] == {
            "public_key_file": f"{MOUNT}/signing.pub",
            "private_key_file": f"{MOUNT}/signing-key.pem",
        }
        server = section["server"]
        assert (server["tls_cert_file"], server["tls_key_file"]) == (
            f"{MOUNT}/server.pem", f"{MOUNT}/server-key.pem",
        )  # fmt: skip
        assert server["credentials_dir"] == f"{MOUNT}/credentials"
        assert server["verify_clients"] is True
        # A valid run config for the installed transport, and the same for every role.
        validate_run_config(settings, registry)
        (server_pod,) = [p for r, p in pods(items).items() if r == "server"]
        assert "--insecure" not in server_pod["containers"][0]["command"]


def test_apply_generates_the_credentials_once_for_the_service_names_and_fills_the_secrets(
    make_run_config: Callable[..., Any], tmp_path: Path
) -> None:
    from rlax_launchers.gke.launcher import GkeLauncher
    from rlax_launchers.gke.transport import transport_server_hosts

    run_config = make_run_config(launcher())
    hosts = transport_server_hosts(run_config.launcher, "demo")
    assert hosts == [
        "demo-transport.rl.svc",
        "demo-transport.rl.svc.cluster.local",
        "demo-transport",
    ]
    folder = run_credentials_folder(run_config.launcher.credentials, tmp_path, hosts)
    assert folder == tmp_path / "launch" / "credentials"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for private in ["ca-key.pem", "server/server-key.pem", "trainer/credential"]:
        assert stat.S_IMODE((folder / private).stat().st_mode) == 0o600
    certificate = x509.load_pem_x509_certificate((folder / "server/server.pem").read_bytes())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    # the Service's names, and loopback for the server's own connections
    assert sorted(names.value.get_values_for_type(x509.DNSName)) == sorted([*hosts, "localhost"])
    # A second --apply reuses them: new ones would lock out the running pods.
    before = (folder / "worker/credential").read_bytes()
    assert run_credentials_folder(run_config.launcher.credentials, tmp_path, hosts) == folder
    assert (folder / "worker/credential").read_bytes() == before

    credentials = GkeLauncher(run_config.launcher, run_config)._credentials(run_config, tmp_path)
    assert credentials is not None and not credentials.placeholder
    items = render_manifests(run_config.launcher, run_config, credentials).items
    secrets = {s["metadata"]["name"]: secret_data(s) for s in of_kind(items, "Secret")}
    assert secrets["demo-worker-credentials"]["credential"] == before
    assert secrets["demo-server-credentials"]["credentials.worker"] == before
    assert all("annotations" not in s["metadata"] for s in of_kind(items, "Secret"))


def test_credentials_from_a_folder_of_rlax_credentials(
    make_run_config: Callable[..., Any], tmp_path: Path
) -> None:
    from rlax_launchers.gke.launcher import GkeLauncher

    made = generate_run_credentials(tmp_path / "mine", ["demo-transport"])
    run_config = make_run_config(launcher(credentials={"folder": str(made.folder)}))
    credentials = GkeLauncher(run_config.launcher, run_config)._credentials(
        run_config, tmp_path / "run"
    )
    assert credentials is not None
    assert (
        credentials.folders["trainer"]["signing-key.pem"]
        == (made.roles["trainer"] / "signing-key.pem").read_bytes()
    )
    assert not (tmp_path / "run").exists()  # nothing generated

    os.remove(made.server / "credentials" / "verifier")
    with pytest.raises(ConfigError, match=r"lacks server/credentials/verifier"):
        read_credential_files(made.folder)
    run_config = make_run_config(launcher(credentials={"folder": str(tmp_path / "none")}))
    with pytest.raises(ConfigError, match="is not a folder; make one with `rlax credentials"):
        GkeLauncher(run_config.launcher, run_config)._credentials(run_config, tmp_path)


def test_secrets_that_exist_are_mounted_and_none_is_rendered(
    make_run_config: Callable[..., Any], validate_manifests: Validate
) -> None:
    names = {"trainer": "t-creds", "worker": "w-creds", "verifier": "v-creds", "server": "s-creds"}
    run_config = make_run_config(launcher(credentials={"secrets": names}), verifier=STAGE)
    items = render_manifests(run_config.launcher, run_config).items
    validate_manifests(items)
    assert of_kind(items, "Secret") == []
    for role, pod in pods(items).items():
        (volume,) = [v for v in pod["volumes"] if v["name"] == "transport-credentials"]
        assert volume["secret"]["secretName"] == names[role]


def test_the_transport_section_s_own_credentials_are_refused_unless_insecure(
    make_run_config: Callable[..., Any], validate_manifests: Validate
) -> None:
    run_config = make_run_config(launcher(), transport={**GRPC, "token": "s3cret-token-123"})
    with pytest.raises(ConfigError) as caught:
        render_manifests(run_config.launcher, run_config)
    assert "transport.token is set, but the launcher gives the run credentials" in str(caught.value)
    assert "launcher.credentials.insecure: true" in str(caught.value)

    run_config = make_run_config(launcher(credentials={"insecure": True}))
    items = render_manifests(run_config.launcher, run_config).items
    validate_manifests(items)
    assert of_kind(items, "Secret") == []
    server = pods(items)["server"]
    assert server["containers"][0]["command"][-1] == "--insecure"
    assert "nats://0.0.0.0:4222" in json.dumps(server["containers"][0]["command"])
    assert all(
        v["name"] != "transport-credentials" for p in pods(items).values() for v in p["volumes"]
    )


SECRETS = {"trainer": "a", "worker": "b", "verifier": "c", "server": "d"}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"insecure": True, "folder": "creds"}, "drop one of them"),
        ({"secrets": SECRETS, "folder": "creds"}, "drop folder"),
    ],
)
def test_one_source_of_credentials(
    write_run_config: Callable[..., Path],
    capsys: pytest.CaptureFixture,
    settings: dict[str, Any],
    message: str,
) -> None:
    path = write_run_config(launcher(credentials=settings))
    assert main(["launch", str(path), "--dry-run"]) == 2
    assert message in capsys.readouterr().err


def test_the_network_policy_admits_only_the_run_s_pods_to_the_transport(
    make_run_config: Callable[..., Any], validate_manifests: Validate
) -> None:
    run_config = make_run_config(launcher(), transport=GRPC)
    items = render_manifests(run_config.launcher, run_config).items
    validate_manifests(items)
    (policy,) = of_kind(items, "NetworkPolicy")
    (service,) = of_kind(items, "Service")
    assert policy["metadata"]["name"] == "demo-transport"
    assert policy["spec"]["podSelector"]["matchLabels"] == service["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [
        {
            "from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/instance": "demo"}}}],
            "ports": [{"protocol": "TCP", "port": 50051}, {"protocol": "TCP", "port": 50052}],
        }
    ]
    # Every pod of the run carries the label the policy admits.
    for pod_labels in _pod_labels(items):
        assert pod_labels["app.kubernetes.io/instance"] == "demo"

    run_config = make_run_config(launcher(network_policy=False))
    assert of_kind(render_manifests(run_config.launcher, run_config).items, "NetworkPolicy") == []


def test_keda_alone_reaches_the_monitoring_port(
    make_run_config: Callable[..., Any], validate_manifests: Validate
) -> None:
    autoscale = {"enabled": True, "keda_namespace": "keda-system"}
    run_config = make_run_config(launcher(verifiers={"autoscale": autoscale}), verifier=STAGE)
    items = render_manifests(run_config.launcher, run_config).items
    validate_manifests(items)
    (policy,) = of_kind(items, "NetworkPolicy")
    clients, keda = policy["spec"]["ingress"]
    assert clients["ports"] == [{"protocol": "TCP", "port": 4222}]
    assert keda == {
        "from": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda-system"}}}
        ],
        "ports": [{"protocol": "TCP", "port": 8222}],
    }


def _pod_labels(items: list[dict[str, Any]]) -> list[dict[str, str]]:
    labels = []
    for item in items:
        if item["kind"] == "JobSet":
            for job in item["spec"]["replicatedJobs"]:
                labels.append(job["template"]["spec"]["template"]["metadata"]["labels"])
        elif item["kind"] in ("Deployment", "StatefulSet"):
            labels.append(item["spec"]["template"]["metadata"]["labels"])
    return labels
