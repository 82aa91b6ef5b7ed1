"""The gke launcher's verifiers: a Deployment on CPU nodes, and KEDA's ScaledObject.

Every rendered object is validated as in test_gke_manifests.py; the ScaledObject against
KEDA's CRD where shared/schemas has it, else against KEDA's documented spec (see
conftest.py). That its trigger names the queue KEDA must read is checked against a real
nats-server's monitoring endpoint.
"""

from __future__ import annotations

import copy
import json
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlax_core.cli.main import main
from rlax_core.config.loading import validate_run_config
from rlax_core.errors import ConfigError
from rlax_core.plugins import Registry
from rlax_core.rl.roles.queues import TO_VERIFY
from rlax_launchers.gke.manifests import render_manifests

STAGE = {"placement": "stage", "workers": 3, "groups_per_batch": 2}
Validate = Callable[[list[dict[str, Any]]], None]


def launcher(**verifiers: Any) -> dict[str, Any]:
    return {
        "type": "gke",
        "image": "us-docker.pkg.dev/rl-project/rlax/rlax:0.1.0",
        "namespace": "rl",
        "trainer": {"accelerator_type": "v5p-8"},
        "workers": {"accelerator_type": "v5p-8"},
        "verifiers": verifiers,
    }


def rendered(make_run_config: Callable[..., Any], section: dict[str, Any], **kw: Any) -> list:
    run_config = make_run_config(section, **kw)
    return render_manifests(run_config.launcher, run_config).items


def one(items: list[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    (found,) = [
        m
        for m in items
        if m["kind"] == kind and m["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    return found


def test_a_staged_run_gets_a_verifier_deployment_on_cpu_nodes(
    make_run_config: Callable[..., Any], validate_manifests: Validate
) -> None:
    section = launcher(
        replicas=5,
        machine_type="n2-standard-16",
        node_selector={"cloud.google.com/gke-nodepool": "cpu-pool"},
        cpu="6",
        cpu_limit="8",
        memory_gib=12,
        memory_limit_gib=16,
        tolerations=[{"key": "dedicated", "value": "verifiers", "effect": "NoSchedule"}],
    )
    items = rendered(make_run_config, section, verifier=STAGE)
    validate_manifests(items)
    assert [m["kind"] for m in items][-2:] == ["JobSet", "Deployment"]
    deployment = one(items, "Deployment", "verifier")
    assert deployment["metadata"] == {
        "name": "demo-verifier",
        "namespace": "rl",
        "labels": deployment["spec"]["selector"]["matchLabels"],
    }
    assert deployment["spec"]["replicas"] == 5
    pod = deployment["spec"]["template"]["spec"]
    # A CPU node pool: no TPU request, no toleration of the TPU nodes' taint.
    assert "google.com/tpu" not in json.dumps(pod)
    assert pod["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "n2-standard-16",
        "cloud.google.com/gke-nodepool": "cpu-pool",
    }
    assert pod["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "verifiers", "effect": "NoSchedule"}
    ]
    assert (pod["priorityClassName"], pod["restartPolicy"]) == ("rlax-worker", "Always")
    (verifier,) = pod["containers"]
    assert verifier["command"] == [
        "rlax", "train", "/etc/rlax/run/run.yaml", "--run-dir", "gs://bucket/runs/demo",
        "--role", "verifier", "--verifier-id", "$(POD_NAME)",
    ]  # fmt: skip
    assert verifier["env"] == [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    ]
    assert verifier["resources"] == {
        "requests": {"cpu": "6", "memory": "12Gi"},
        "limits": {"memory": "16Gi", "cpu": "8"},
    }
    # The workers' image and run config; the verifiers' own credentials, at the same path.
    jobset = one(items, "JobSet", "jobset")
    worker_pod = jobset["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]
    assert verifier["image"] == worker_pod["containers"][0]["image"]
    assert verifier["volumeMounts"] == worker_pod["containers"][0]["volumeMounts"]
    assert [v["name"] for v in pod["volumes"]] == [v["name"] for v in worker_pod["volumes"]]
    assert [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v] == [
        "demo-verifier-credentials"
    ]


def test_verifiers_share_the_workers_transport_credentials_and_may_run_on_spot(
    make_run_config: Callable[..., Any], validate_manifests: Validate
) -> None:
    transport = {"type": "grpc", "address": "10.0.0.1:50051", "token": "s3cret"}
    section = {**launcher(spot=True), "credentials": {"insecure": True}}
    items = rendered(make_run_config, section, verifier=STAGE, transport=transport)
    validate_manifests(items)
    deployment = one(items, "Deployment", "verifier")
    assert deployment["spec"]["replicas"] == 3  # verifier.workers
    pod = deployment["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][:3] == ["python", "-m", "rlax_launchers.gke.config_merge"]
    assert {v["name"] for v in pod["volumes"]} == {"base-config", "run-config", "credentials"}
    assert pod["nodeSelector"] == {"cloud.google.com/gke-spot": "true"}
    assert pod["tolerations"][0]["key"] == "cloud.google.com/gke-spot"
    assert "ScaledObject" not in {m["kind"] for m in items}


def test_no_verifiers_when_the_run_judges_inline_or_asks_for_none(
    make_run_config: Callable[..., Any],
) -> None:
    inline = rendered(make_run_config, launcher())
    assert [m["kind"] for m in inline][-1] == "JobSet"
    assert all(m["metadata"]["name"] != "demo-verifier" for m in inline)
    none = rendered(make_run_config, launcher(replicas=0), verifier=STAGE)
    assert [m["kind"] for m in none][-1] == "JobSet"


def test_autoscaling_renders_a_scaled_object_on_the_to_verify_backlog(
    make_run_config: Callable[..., Any], validate_manifests: Validate, registry: Registry
) -> None:
    section = launcher(autoscale={"enabled": True, "min_replicas": 0, "max_replicas": 12})
    nats = {"type": "nats", "servers": ["nats://10.0.0.1:4222"], "namespace": "math-run"}
    items = rendered(make_run_config, section, verifier=STAGE, transport=nats)
    validate_manifests(items)
    assert [m["kind"] for m in items][-3:] == ["JobSet", "Deployment", "ScaledObject"]
    deployment = one(items, "Deployment", "verifier")
    assert "replicas" not in deployment["spec"]  # KEDA's HPA owns the count
    scaled = one(items, "ScaledObject", "verifier")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "demo-verifier"},
        "minReplicaCount": 0,
        "maxReplicaCount": 12,
        "pollingInterval": 15,
        "cooldownPeriod": 300,
        "triggers": [
            {
                "type": "nats-jetstream",
                "metadata": {
                    "natsServerMonitoringEndpoint": "demo-transport.rl.svc.cluster.local:8222",
                    "account": "$G",
                    "stream": "RLAX_math-run_Q_to_verify",
                    "consumer": "workers",
                    "lagThreshold": "4",  # twice verifier.groups_per_batch
                },
            }
        ],
    }
    # The transport server serves its monitoring endpoint, and its Service exposes it.
    server = one(items, "StatefulSet", "transport")["spec"]["template"]["spec"]["containers"][0]
    assert server["command"][-2:] == ["--set", "server.monitoring_port=8222"]
    assert {"name": "monitoring", "containerPort": 8222} in server["ports"]
    service = one(items, "Service", "transport")
    assert ("monitoring", 8222) in [(p["name"], p["port"]) for p in service["spec"]["ports"]]
    # The server reads that --set: the ConfigMap's run config plus it is a valid config.
    settings = yaml.safe_load(one(items, "ConfigMap", "config")["data"]["run.yaml"])
    settings["transport"]["server"]["monitoring_port"] = 8222
    assert validate_run_config(settings, registry).transport.server.monitoring_port == 8222


def test_without_autoscaling_the_transport_serves_no_monitoring(
    make_run_config: Callable[..., Any],
) -> None:
    items = rendered(make_run_config, launcher(), verifier=STAGE)
    server = one(items, "StatefulSet", "transport")["spec"]["template"]["spec"]["containers"][0]
    assert "server.monitoring_port=8222" not in server["command"]
    assert [p["name"] for p in server["ports"]] == ["nats"]


@pytest.mark.network
def test_the_trigger_names_the_stream_and_consumer_that_nats_reports_the_backlog_of(
    make_run_config: Callable[..., Any], tmp_path: Path
) -> None:
    """KEDA's query, with the trigger's account, stream and consumer, on a real nats-server
    that an RLAX client put groups on the run's to-verify queue of."""
    from rlax_transport_nats import NatsServerProcess
    from rlax_transport_nats.queue import NatsQueue
    from rlax_transport_nats.server import free_port
    from rlax_transport_nats.testing import client_config

    section = launcher(autoscale={"enabled": True, "lag_threshold": 6})
    nats = {"type": "nats", "servers": ["nats://10.0.0.1:4222"], "namespace": "ns-1"}
    items = rendered(make_run_config, section, verifier=STAGE, transport=nats)
    trigger = one(items, "ScaledObject", "verifier")["spec"]["triggers"][0]["metadata"]
    assert trigger["lagThreshold"] == "6"
    port = free_port()
    with NatsServerProcess(store_dir=tmp_path / "js", monitoring_port=port) as server:
        queue = NatsQueue.open(client_config(server.url, namespace="ns-1"), TO_VERIFY)
        try:
            for group in ("g1", "g2"):
                queue.put(group, b"group")
            account = urllib.parse.quote(trigger["account"])
            url = f"http://127.0.0.1:{port}/jsz?acc={account}&consumers=true&config=true"
            with urllib.request.urlopen(url, timeout=10) as answer:
                report = json.load(answer)
        finally:
            queue.close()
    (details,) = [a for a in report["account_details"] if a["name"] == trigger["account"]]
    (stream,) = [s for s in details["stream_detail"] if s["name"] == trigger["stream"]]
    (consumer,) = [c for c in stream["consumer_detail"] if c["name"] == trigger["consumer"]]
    assert consumer["num_pending"] + consumer["num_ack_pending"] == 2


def test_a_broken_scaled_object_is_caught_by_the_validation(
    make_run_config: Callable[..., Any], validate_manifests: Validate
) -> None:
    """The KEDA schema has teeth: a misspelt field or a missing trigger type fails it."""
    items = rendered(make_run_config, launcher(autoscale={"enabled": True}), verifier=STAGE)
    scaled = one(items, "ScaledObject", "verifier")
    misspelt = copy.deepcopy(scaled)
    misspelt["spec"]["minReplicas"] = misspelt["spec"].pop("minReplicaCount")
    with pytest.raises(AssertionError, match="minReplicas"):
        validate_manifests([misspelt])
    untyped = copy.deepcopy(scaled)
    del untyped["spec"]["triggers"][0]["type"]
    with pytest.raises(AssertionError, match="'type' is a required property"):
        validate_manifests([untyped])


@pytest.mark.parametrize(
    ("section", "kwargs", "message"),
    [
        (
            launcher(autoscale={"enabled": True}),
            {"verifier": STAGE, "transport": {"type": "grpc", "address": "10.0.0.1:50051"}},
            "KEDA has no scaler for the grpc transport's queues",
        ),
        (
            launcher(autoscale={"enabled": True}),
            {},
            "launcher.verifiers.autoscale is enabled, but verifier.placement is inline",
        ),
        (launcher(replicas=2), {}, "asked for 2 verifier processes, but verifier.placement"),
    ],
)
def test_verifiers_the_run_cannot_use_are_config_errors(
    make_run_config: Callable[..., Any],
    section: dict[str, Any],
    kwargs: dict[str, Any],
    message: str,
) -> None:
    run_config = make_run_config(section, **kwargs)
    with pytest.raises(ConfigError) as caught:
        render_manifests(run_config.launcher, run_config)
    assert message in str(caught.value)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("verifiers", "message"),
    [
        ({"replicas": 2, "autoscale": {"enabled": True}}, "drop replicas and set autoscale"),
        ({"autoscale": {"min_replicas": 9, "max_replicas": 4}}, "min_replicas (9) is above"),
        ({"memory_gib": 8, "memory_limit_gib": 4}, "memory_limit_gib (4) is below"),
        ({"tolerations": [{"operator": "Exists", "value": "x"}]}, "operator Exists matches any"),
    ],
)
def test_inconsistent_verifier_settings_exit_2_with_the_reason(
    write_run_config: Callable[..., Path],
    capsys: pytest.CaptureFixture,
    verifiers: dict[str, Any],
    message: str,
) -> None:
    path = write_run_config(launcher(**verifiers), verifier=STAGE)
    assert main(["launch", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and "launcher.verifiers" in err and "Traceback" not in err
