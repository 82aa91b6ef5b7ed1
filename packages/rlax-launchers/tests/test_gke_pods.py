"""What every pod of a gke run gets from the platform: its ServiceAccount (Workload
Identity to the run's bucket), the grace period GKE honours on its nodes, and CPU and
memory requests that keep TPU pods out of the BestEffort class. Every rendered object is
validated against the Kubernetes 1.35 schemas and the JobSet CRD."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rlax_core.cli.main import main
from rlax_core.errors import ConfigError
from rlax_launchers.gke.manifests import render_manifests
from rlax_launchers.gke.tpu_hosts import TPU_HOSTS

IMAGE = "us-docker.pkg.dev/rl-project/rlax/rlax:0.1.0"
GSA = "rlax-runner@rl-project.iam.gserviceaccount.com"
STAGED = {"placement": "stage", "workers": 2}


def launcher(**fields: Any) -> dict[str, Any]:
    section = {
        "type": "gke",
        "image": IMAGE,
        "trainer": {"accelerator_type": "v5p-16"},
        "workers": {"accelerator_type": "v5p-8"},
    }
    section.update(fields)
    return section


def pods(items: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(role, pod spec) of every pod template: trainer, worker, transport, verifier."""
    for item in items:
        if item["kind"] == "JobSet":
            for job in item["spec"]["replicatedJobs"]:
                yield job["name"], job["template"]["spec"]["template"]["spec"]
        elif item["kind"] in ("Deployment", "StatefulSet"):
            template = item["spec"]["template"]
            yield template["metadata"]["labels"]["app.kubernetes.io/component"], template["spec"]


def qos_class(pod: dict[str, Any]) -> str:
    """The pod's QoS class, as the kubelet computes it (only cpu and memory count)."""
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    any_set, guaranteed = False, True
    for container in containers:
        resources = container.get("resources", {})
        requests = {
            k: v for k, v in resources.get("requests", {}).items() if k in ("cpu", "memory")
        }
        limits = {k: v for k, v in resources.get("limits", {}).items() if k in ("cpu", "memory")}
        any_set = any_set or bool(requests or limits)
        if set(limits) != {"cpu", "memory"} or any(
            requests.get(k, limits[k]) != limits[k] for k in limits
        ):
            guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def render(make_run_config: Callable[..., Any], section: dict[str, Any], **kwargs: Any) -> Any:
    run_config = make_run_config(section, **kwargs)
    return render_manifests(run_config.launcher, run_config).items


def refused(
    write_run_config: Callable[..., Path],
    capsys: pytest.CaptureFixture,
    section: dict[str, Any],
    **kwargs: Any,
) -> str:
    path = write_run_config(section, **kwargs)
    assert main(["launch", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# -- Workload Identity: every pod names its ServiceAccount --


def test_every_pod_names_the_namespace_default_service_account_by_default(
    make_run_config: Callable[..., Any],
    validate_manifests: Callable[[list[dict[str, Any]]], None],
) -> None:
    items = render(make_run_config, launcher(), verifier=STAGED)
    validate_manifests(items)
    roles = {role: pod["serviceAccountName"] for role, pod in pods(items)}
    assert roles == dict.fromkeys(["trainer", "worker", "transport", "verifier"], "default")
    assert "ServiceAccount" not in [m["kind"] for m in items]


def test_the_launcher_renders_the_service_account_with_its_google_service_account(
    make_run_config: Callable[..., Any],
    validate_manifests: Callable[[list[dict[str, Any]]], None],
) -> None:
    section = launcher(
        namespace="rl",
        service_account="rlax-runner",
        create_service_account=True,
        gcp_service_account=GSA,
    )
    items = render(make_run_config, section, verifier=STAGED)
    validate_manifests(items)
    assert [m["kind"] for m in items][:3] == ["PriorityClass", "PriorityClass", "ServiceAccount"]
    account = items[2]
    assert account["metadata"]["name"] == "rlax-runner"
    assert account["metadata"]["namespace"] == "rl"
    assert account["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": GSA}
    # Shared by the namespace's runs, so no run claims it (--stop keeps it).
    assert "app.kubernetes.io/instance" not in account["metadata"]["labels"]
    assert {pod["serviceAccountName"] for _, pod in pods(items)} == {"rlax-runner"}


def test_a_service_account_for_workload_identity_federation_has_no_annotation(
    make_run_config: Callable[..., Any],
) -> None:
    section = launcher(service_account="rlax", create_service_account=True)
    (account,) = [m for m in render(make_run_config, section) if m["kind"] == "ServiceAccount"]
    assert "annotations" not in account["metadata"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"gcp_service_account": GSA}, "gcp_service_account annotates the ServiceAccount the"),
        ({"create_service_account": True}, "create_service_account needs service_account"),
        ({"gcp_service_account": "rlax@example.com"}, "gcp_service_account"),
        ({"service_account": "Bad_Name"}, "service_account"),
    ],
)
def test_service_account_settings_that_cannot_work_are_config_errors(
    write_run_config: Callable[..., Path],
    capsys: pytest.CaptureFixture,
    fields: dict[str, Any],
    message: str,
) -> None:
    assert message in refused(write_run_config, capsys, launcher(**fields))


def test_a_multi_host_trainer_needs_a_gs_run_directory(
    write_run_config: Callable[..., Path],
    make_run_config: Callable[..., Any],
    capsys: pytest.CaptureFixture,
) -> None:
    err = refused(write_run_config, capsys, launcher(), run_dir="s3://bucket/runs/demo")
    assert "run.run_dir is 's3://bucket/runs/demo', but a trainer of 2 hosts checkpoints" in err
    err = refused(write_run_config, capsys, launcher(run_dir="s3://bucket/runs/demo"), run_dir=None)
    assert "launcher.run_dir is 's3://bucket/runs/demo'" in err
    single_host = launcher(trainer={"accelerator_type": "v5p-8"})
    assert render(make_run_config, single_host, run_dir="s3://bucket/runs/demo")


# -- Grace periods: what GKE honours on Spot nodes --


def test_spot_pods_get_the_grace_gke_gives_and_the_trainer_keeps_its_own(
    make_run_config: Callable[..., Any],
    validate_manifests: Callable[[list[dict[str, Any]]], None],
) -> None:
    section = launcher(verifiers={"spot": True})
    items = render(make_run_config, section, verifier=STAGED)
    validate_manifests(items)
    grace = {role: pod["terminationGracePeriodSeconds"] for role, pod in pods(items)}
    assert grace == {"trainer": 300, "worker": 15, "transport": 300, "verifier": 15}


def test_pods_on_on_demand_nodes_keep_the_long_grace(make_run_config: Callable[..., Any]) -> None:
    section = launcher(workers={"accelerator_type": "v5p-8", "spot": False})
    items = render(make_run_config, section, verifier=STAGED)
    assert {pod["terminationGracePeriodSeconds"] for _, pod in pods(items)} == {300}


def test_spot_node_pools_with_the_longer_grace_of_gke_1_35(
    make_run_config: Callable[..., Any],
) -> None:
    section = launcher(spot_node_grace_s=120)
    grace = {
        role: pod["terminationGracePeriodSeconds"]
        for role, pod in pods(render(make_run_config, section))
    }
    assert grace["worker"] == 120
    section = launcher(spot_node_grace_s=120, spot_termination_grace_period_s=90)
    grace = {
        role: pod["terminationGracePeriodSeconds"]
        for role, pod in pods(render(make_run_config, section))
    }
    assert (grace["worker"], grace["trainer"]) == (90, 300)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"spot_termination_grace_period_s": 300},
            "spot_termination_grace_period_s is 300, but GKE gives the pods of a reclaimed "
            "Spot node 15 s (spot_node_grace_s)",
        ),
        (
            {"spot_node_grace_s": 120, "spot_termination_grace_period_s": 121},
            "set it to at most 120",
        ),
        ({"spot_node_grace_s": 300}, "spot_node_grace_s"),
    ],
)
def test_a_spot_grace_gke_does_not_give_is_a_config_error(
    write_run_config: Callable[..., Path],
    capsys: pytest.CaptureFixture,
    fields: dict[str, Any],
    message: str,
) -> None:
    assert message in refused(write_run_config, capsys, launcher(**fields))


# -- Resources: TPU pods request CPU and memory --


def test_tpu_pods_request_cpu_and_memory_and_are_not_best_effort(
    make_run_config: Callable[..., Any],
    validate_manifests: Callable[[list[dict[str, Any]]], None],
) -> None:
    items = render(make_run_config, launcher())
    validate_manifests(items)
    host = TPU_HOSTS["v5p"]
    assert (host.machine_type, host.vcpus, host.memory_gib) == ("ct5p-hightpu-4t", 208, 448)
    for role, pod in pods(items):
        if role not in ("trainer", "worker"):
            continue
        (container,) = pod["containers"]
        assert container["resources"]["requests"] == {
            "cpu": "156", "memory": "336Gi", "google.com/tpu": "4",
        }  # fmt: skip
        assert qos_class(pod) == "Burstable", role
        # Well inside what GKE lets pods of the node allocate.
        assert host.allocatable_cpu() > 156 and host.allocatable_memory_gib() > 336


def test_gke_node_allocatable_follows_its_reservation_rules() -> None:
    host = TPU_HOSTS["v5p"]
    # 208 vCPUs: 0.06 + 0.01 + 2 * 0.005 + 204 * 0.0025 reserved.
    assert host.allocatable_cpu() == pytest.approx(208 - 0.59)
    # 448 GiB: 1 + 0.8 + 0.8 + 6.72 + 320 * 0.02 reserved, and 100 MiB for eviction.
    assert host.allocatable_memory_gib() == pytest.approx(448 - 15.72 - 100 / 1024)


def test_requests_and_a_memory_limit_can_be_set(
    make_run_config: Callable[..., Any],
    validate_manifests: Callable[[list[dict[str, Any]]], None],
) -> None:
    section = launcher(
        trainer={"accelerator_type": "v5p-16", "cpu": "200", "memory_gib": 400},
        workers={"accelerator_type": "v5p-8", "cpu": "1500m", "memory_gib": 64,
                 "memory_limit_gib": 128},
    )  # fmt: skip
    items = render(make_run_config, section)
    validate_manifests(items)
    resources = {role: pod["containers"][0]["resources"] for role, pod in pods(items)}
    assert resources["trainer"]["requests"] == {
        "cpu": "200", "memory": "400Gi", "google.com/tpu": "4",
    }  # fmt: skip
    assert resources["worker"] == {
        "requests": {"cpu": "1500m", "memory": "64Gi", "google.com/tpu": "4"},
        "limits": {"google.com/tpu": "4", "memory": "128Gi"},
    }


@pytest.mark.parametrize(
    ("trainer", "message"),
    [
        ({"memory_gib": 440}, "launcher.trainer.memory_gib is 440, but a v5p host "
         "(ct5p-hightpu-4t) has 448 GiB, about 432 GiB of it allocatable to pods"),
        ({"cpu": "208"}, "launcher.trainer.cpu asks for 208 cores, but a v5p host "
         "(ct5p-hightpu-4t) has 208 vCPUs, about 207.4 of them allocatable"),
        ({"cpu": "lots"}, "cpu"),
        ({"memory_gib": 64, "memory_limit_gib": 32}, "memory_limit_gib (32) is below memory_gib"),
    ],
)  # fmt: skip
def test_requests_a_tpu_host_cannot_give_are_config_errors(
    write_run_config: Callable[..., Path],
    make_run_config: Callable[..., Any],
    capsys: pytest.CaptureFixture,
    trainer: dict[str, Any],
    message: str,
) -> None:
    section = launcher(trainer={"accelerator_type": "v5p-16", **trainer})
    assert message in refused(write_run_config, capsys, section)
    if "host" in message:
        with pytest.raises(ConfigError):
            render(make_run_config, section)
