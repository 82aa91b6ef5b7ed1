"""The gke launcher's manifests, every object validated against the real schemas.

Core objects are checked with kubernetes-validate (Kubernetes 1.35, strict: an unknown
field is an error, where the API server would drop it silently); the JobSet against its
CRD's openAPIV3Schema (made strict the same way), and its Job templates once more as
batch/v1 Jobs (the ``validate_manifests`` fixture of conftest.py).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from rlax_core.cli.main import main
from rlax_core.config.loading import validate_run_config
from rlax_core.errors import ConfigError
from rlax_core.plugins import Registry
from rlax_launchers.gke.manifests import render_manifests

IMAGE = "us-docker.pkg.dev/rl-project/rlax/rlax:0.1.0"
GRPC = {"type": "grpc", "address": "10.0.0.1:50051"}


def launcher(**fields: Any) -> dict[str, Any]:
    section = {
        "type": "gke",
        "image": IMAGE,
        "trainer": {"accelerator_type": "v5p-16"},
        "workers": {"accelerator_type": "v5p-8"},
    }
    section.update(fields)
    return section


def by_kind(items: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    kinds: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        kinds.setdefault(item["kind"], []).append(item)
    return kinds


def test_nats_run_with_spot_workers_and_kueue(
    make_run_config: Callable[..., Any],
    registry: Registry,
    validate_manifests: Callable[[list[dict[str, Any]]], None],
) -> None:
    run_config = make_run_config(launcher(kueue_queue="tpu-queue", namespace="rl"))
    items = render_manifests(run_config.launcher, run_config).items
    validate_manifests(items)
    assert [m["kind"] for m in items] == [
        "PriorityClass", "PriorityClass", "Secret", "Secret", "Secret", "Secret", "ConfigMap",
        "Service", "NetworkPolicy", "StatefulSet", "JobSet",
    ]  # fmt: skip
    kinds = by_kind(items)
    trainer_class, worker_class = kinds["PriorityClass"]
    assert (trainer_class["metadata"]["name"], trainer_class["value"]) == ("rlax-trainer", 1000)
    assert (worker_class["metadata"]["name"], worker_class["value"]) == ("rlax-worker", 100)
    assert worker_class["preemptionPolicy"] == "Never"

    (jobset,) = kinds["JobSet"]
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "tpu-queue"
    trainer, worker = jobset["spec"]["replicatedJobs"]
    assert (trainer["name"], trainer["replicas"], worker["name"], worker["replicas"]) == (
        "trainer", 1, "worker", 2,
    )  # fmt: skip
    trainer_job, worker_job = trainer["template"]["spec"], worker["template"]["spec"]
    assert (trainer_job["parallelism"], trainer_job["completionMode"]) == (2, "Indexed")
    trainer_pod = trainer_job["template"]["spec"]
    assert trainer_pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
        "cloud.google.com/gke-tpu-topology": "2x2x2",
    }
    (trainer_container,) = trainer_pod["containers"]
    assert trainer_container["resources"] == {  # three quarters of a ct5p-hightpu-4t host
        "requests": {"cpu": "156", "memory": "336Gi", "google.com/tpu": "4"},
        "limits": {"google.com/tpu": "4"},
    }
    assert trainer_container["command"] == [
        "rlax", "train", "/etc/rlax/run/run.yaml", "--run-dir", "gs://bucket/runs/demo",
        "--role", "trainer", "--coordinator", "demo-trainer-0-0.demo:8476",
        "--num-processes", "2", "--process-id", "$(JOB_COMPLETION_INDEX)",
    ]  # fmt: skip
    assert trainer_pod["priorityClassName"] == "rlax-trainer"
    worker_pod = worker_job["template"]["spec"]
    assert worker_pod["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    assert worker_pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x2x1"
    assert worker_pod["priorityClassName"] == "rlax-worker"
    assert worker_pod["containers"][0]["command"] == [
        "rlax", "train", "/etc/rlax/run/run.yaml", "--run-dir", "gs://bucket/runs/demo",
        "--role", "worker", "--worker-id", "$(JOB_INDEX)-$(JOB_COMPLETION_INDEX)",
    ]  # fmt: skip
    # The preemption story: workers restart alone, a reclaimed node is no failure, the
    # trainer restarts (from its checkpoint) a bounded number of times, bad configs fail.
    policy = jobset["spec"]["failurePolicy"]
    assert [(r["action"], r.get("targetReplicatedJobs")) for r in policy["rules"]] == [
        ("FailJobSet", None),
        ("RestartJobAndIgnoreMaxRestarts", ["worker"]),
        ("RestartJob", ["trainer"]),
    ]
    assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]} in worker_job[
        "podFailurePolicy"
    ]["rules"]
    assert all(
        r["action"] != "Ignore" for r in trainer_job["podFailurePolicy"]["rules"]
    )  # one trainer pod lost restarts all of them
    assert jobset["spec"]["successPolicy"] == {
        "operator": "All",
        "targetReplicatedJobs": ["trainer"],
    }

    (statefulset,) = kinds["StatefulSet"]
    (server,) = statefulset["spec"]["template"]["spec"]["containers"]
    assert server["command"] == [
        "rlax", "serve", "param-server", "--config", "/etc/rlax/run/run.yaml",
        "--set", 'servers=["tls://0.0.0.0:4222"]',
        "--set", 'server.store_dir="/var/lib/rlax/transport"',
    ]  # fmt: skip
    assert kinds["Service"][0]["spec"]["ports"][0]["port"] == 4222
    assert all(m["metadata"].get("namespace") in ("rl", None) for m in items)


def test_the_config_map_holds_a_valid_run_config_that_points_at_the_service(
    make_run_config: Callable[..., Any], registry: Registry
) -> None:
    run_config = make_run_config(launcher())
    items = render_manifests(run_config.launcher, run_config).items
    (config_map,) = by_kind(items)["ConfigMap"]
    settings = yaml.safe_load(config_map["data"]["run.yaml"])
    config = validate_run_config(settings, registry)
    assert config.transport.servers == ["tls://demo-transport:4222"]
    assert config.launcher is None and config.run.run_dir == "gs://bucket/runs/demo"


def test_own_grpc_credentials_travel_in_a_secret_and_are_merged_by_an_init_container(
    make_run_config: Callable[..., Any],
    registry: Registry,
    validate_manifests: Callable[[list[dict[str, Any]]], None],
    tmp_path: Path,
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    transport = {**GRPC, "token": "s3cret-token", "tls_ca_file": str(ca)}
    run_config = make_run_config(launcher(credentials={"insecure": True}), transport=transport)
    items = render_manifests(run_config.launcher, run_config).items
    validate_manifests(items)
    kinds = by_kind(items)
    assert [m["kind"] for m in items][2:] == [
        "Secret", "ConfigMap", "Service", "NetworkPolicy", "PersistentVolumeClaim",
        "Deployment", "JobSet",
    ]  # fmt: skip
    (secret,) = kinds["Secret"]
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert yaml.safe_load(data["credentials.yaml"]) == {"token": "s3cret-token"}
    assert data["transport.tls_ca_file"] == ca.read_bytes()
    run_yaml = kinds["ConfigMap"][0]["data"]["run.yaml"]
    assert "s3cret-token" not in run_yaml
    settings = yaml.safe_load(run_yaml)
    assert settings["transport"]["address"] == "demo-transport:50051"
    assert settings["transport"]["tls_ca_file"] == "/etc/rlax/secrets/transport.tls_ca_file"
    (deployment,) = kinds["Deployment"]
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    server_pod = deployment["spec"]["template"]["spec"]
    assert server_pod["containers"][0]["command"][-7:] == [
        "--set", 'address="0.0.0.0:50051"', "--set", "server.bulk_port=50052",
        "--set", 'server.state_dir="/var/lib/rlax/transport"', "--insecure",
    ]  # fmt: skip
    # The bulk fetch port is pinned beside the gRPC one and let through by the Service.
    assert [c["containerPort"] for c in server_pod["containers"][0]["ports"]] == [50051, 50052]
    (service,) = [s for s in kinds["Service"] if s["metadata"]["name"] == "demo-transport"]
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [
        ("grpc", 50051), ("bulk", 50052),
    ]  # fmt: skip
    for pod in [server_pod] + [
        r["template"]["spec"]["template"]["spec"]
        for r in kinds["JobSet"][0]["spec"]["replicatedJobs"]
    ]:
        (init,) = pod["initContainers"]
        assert init["command"][:3] == ["python", "-m", "rlax_launchers.gke.config_merge"]
        assert {v["name"] for v in pod["volumes"]} >= {"base-config", "run-config", "credentials"}


def test_multi_host_worker_slices_and_no_priority_classes(
    make_run_config: Callable[..., Any],
    registry: Registry,
    validate_manifests: Callable[[list[dict[str, Any]]], None],
) -> None:
    section = launcher(
        workers={"accelerator_type": "v5p-16", "spot": False},
        trainer={"accelerator_type": "v5p-8"},
        create_priority_classes=False,
        service_account="rlax-runner",
    )
    run_config = make_run_config(section, workers=4)
    items = render_manifests(run_config.launcher, run_config).items
    validate_manifests(items)
    assert "PriorityClass" not in by_kind(items)
    trainer, worker = by_kind(items)["JobSet"][0]["spec"]["replicatedJobs"]
    assert (
        "--coordinator"
        not in trainer["template"]["spec"]["template"]["spec"]["containers"][0]["command"]
    )
    assert (worker["replicas"], worker["template"]["spec"]["parallelism"]) == (2, 2)
    assert worker["template"]["metadata"]["annotations"] == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
    }
    pod = worker["template"]["spec"]["template"]["spec"]
    assert "cloud.google.com/gke-spot" not in pod["nodeSelector"]
    assert pod["serviceAccountName"] == "rlax-runner"


def test_a_broken_manifest_is_caught_by_the_validation(
    make_run_config: Callable[..., Any],
    validate_manifests: Callable[[list[dict[str, Any]]], None],
) -> None:
    """The validation has teeth: a misspelt field fails it."""
    run_config = make_run_config(launcher())
    items = render_manifests(run_config.launcher, run_config).items
    jobset = copy.deepcopy(items[-1])
    jobset["spec"]["failurePolicy"]["maxRestart"] = 3
    with pytest.raises(AssertionError, match="maxRestart"):
        validate_manifests([jobset])
    statefulset = copy.deepcopy(by_kind(items)["StatefulSet"][0])
    statefulset["spec"]["template"]["spec"]["containers"][0]["comand"] = ["rlax"]
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_manifests([statefulset])


def test_dry_run_prints_the_manifests_as_multi_document_yaml(
    write_run_config: Callable[..., Path], registry: Registry, capsys: pytest.CaptureFixture
) -> None:
    path = write_run_config(launcher())
    assert main(["launch", str(path), "--dry-run"]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    from rlax_core.config import load_run_config

    run_config = load_run_config(path, registry)
    assert documents == render_manifests(run_config.launcher, run_config).items


@pytest.mark.parametrize(
    ("section", "kwargs", "message"),
    [
        (launcher(image=None), {}, "launcher.image is required: the pods run the RLAX image"),
        (launcher(), {"transport": {"type": "inproc"}}, "a gke run has separate processes"),
        (launcher(), {"run_dir": "runs/demo"}, "is a local path, which the hosts of a gke run"),
        (launcher(workers={"accelerator_type": "v5p-16"}), {"workers": 3}, "a multiple of 2"),
    ],
)
def test_configs_that_cannot_run_on_gke_exit_2_with_the_reason(
    write_run_config: Callable[..., Path],
    capsys: pytest.CaptureFixture,
    section: dict[str, Any],
    kwargs: dict[str, Any],
    message: str,
) -> None:
    path = write_run_config(section, **kwargs)
    assert main(["launch", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_cloud_launch_refuses_what_would_not_train_there(
    write_run_config: Callable[..., Path], capsys: pytest.CaptureFixture
) -> None:
    """Every problem at once, each naming its field, before anything is rendered."""
    path = write_run_config(launcher())
    config = yaml.safe_load(path.read_text())
    config["model"] = {"preset": "qwen2_5_7b"}  # random weights, no tokenizer
    config["data"]["train"][0]["path"] = "data/train.jsonl"  # only on this machine
    path.write_text(yaml.safe_dump(config))
    assert main(["launch", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "would not train on gke as it stands (3 problems); nothing was created" in err
    assert "data.train[0].path: 'data/train.jsonl' is a path on this machine" in err
    assert "model.preset: 'qwen2_5_7b' starts the policy from random weights" in err
    assert "model.tokenizer: not set" in err and "Traceback" not in err
    config["model"] = {"preset": "tiny", "random_init": True, "tokenizer": "/opt/tokenizer"}
    config["data"]["train"][0]["path"] = "gs://my-bucket/data/train.jsonl"
    path.write_text(yaml.safe_dump(config))
    assert main(["launch", str(path), "--dry-run"]) == 0  # a dry run shows placeholders
    capsys.readouterr()
    assert main(["launch", str(path), "--apply", "--skip-checks"]) == 2  # creating refuses them
    err = capsys.readouterr().err
    placeholder = "data.train[0].path: 'gs://my-bucket/data/train.jsonl' still holds the example's"
    assert placeholder in err


def test_config_errors_are_config_errors(make_run_config: Callable[..., Any]) -> None:
    run_config = make_run_config(launcher(name="Bad_Name"))
    with pytest.raises(ConfigError) as caught:
        render_manifests(run_config.launcher, run_config)
    assert "launcher.name gives resource name 'Bad_Name'" in str(caught.value)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("example", ["gke-v5p.yaml", "tpu-vm-v5p.yaml"])
def test_the_cloud_examples_render(example: str, capsys: pytest.CaptureFixture) -> None:
    path = Path(__file__).resolve().parents[3] / "examples" / example
    assert main(["launch", str(path), "--dry-run", "--run-dir", "runs/example"]) == 0
    out = capsys.readouterr().out
    if example.startswith("gke"):
        assert "kind: JobSet" in out and "name: qwen-math-gke-verifier" in out
        assert "kind: ServiceAccount" in out and "serviceAccountName: rlax" in out
    else:
        assert "gcloud compute tpus" in out and "gcloud compute instances create" in out
