"""The gke launcher's --apply, --status and --stop through the real ``kubernetes`` client.

The client talks HTTP to a small local server that speaks enough of the Kubernetes API
(rlax_launchers.testing.kube_api), reached through a kubeconfig file, as on a laptop.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlax_core.cli.main import main
from rlax_core.config import load_run_config
from rlax_core.plugins import Registry
from rlax_launchers.gke.manifests import render_manifests
from rlax_launchers.run_credentials import read_credential_files
from rlax_launchers.testing.kube_api import JOBSET_ACTIONS, FakeKubernetesApi, jobset_crd

pytestmark = pytest.mark.network

NS = "/api/v1/namespaces/default"
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io"
PATHS = {
    "PriorityClass": "/apis/scheduling.k8s.io/v1/priorityclasses",
    "ServiceAccount": f"{NS}/serviceaccounts",
    "Secret": f"{NS}/secrets",
    "ConfigMap": f"{NS}/configmaps",
    "Service": f"{NS}/services",
    "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies",
    "StatefulSet": "/apis/apps/v1/namespaces/default/statefulsets",
    "JobSet": "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets",
    "Deployment": "/apis/apps/v1/namespaces/default/deployments",
    "ScaledObject": "/apis/keda.sh/v1alpha1/namespaces/default/scaledobjects",
}
AUTOSCALED = {"verifiers": {"autoscale": {"enabled": True}}}


@pytest.fixture
def api() -> Iterator[FakeKubernetesApi]:
    """The cluster, with a JobSet that knows the run's failure-policy actions."""
    with FakeKubernetesApi() as server:
        server.install_crd(jobset_crd(JOBSET_ACTIONS))
        server.requests.clear()
        yield server


@pytest.fixture
def config_path(
    api: FakeKubernetesApi,
    write_run_config: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    return write_run_config(
        {
            "type": "gke",
            "image": "us-docker.pkg.dev/rl-project/rlax/rlax:0.1.0",
            "trainer": {"accelerator_type": "v5p-16"},
            "workers": {"accelerator_type": "v5p-8"},
            "kubeconfig": str(kubeconfig),
        }
    )


@pytest.fixture
def staged_config_path(config_path: Path) -> Path:
    """The same run, judged by verifiers that KEDA scales."""
    settings = yaml.safe_load(config_path.read_text())
    settings["verifier"]["placement"] = "stage"
    settings["launcher"].update(AUTOSCALED)
    config_path.write_text(yaml.safe_dump(settings, sort_keys=False))
    return config_path


def rendered(config_path: Path, registry: Registry) -> list[dict[str, Any]]:
    """The manifests, with the credentials --apply generated under runs/demo."""
    run_config = load_run_config(config_path, registry)
    credentials = read_credential_files(config_path.parent / "runs/demo/launch/credentials")
    return render_manifests(run_config.launcher, run_config, credentials).items


def test_apply_creates_every_object_in_order(
    api: FakeKubernetesApi, config_path: Path, registry: Registry
) -> None:
    assert main(["launch", str(config_path), "--apply", "--skip-checks"]) == 0
    manifests = rendered(config_path, registry)
    # First the JobSet CRD is read (does the controller know the run's actions?).
    assert [(r.method, r.path) for r in api.requests] == [("GET", CRD)] + [
        ("POST", PATHS[m["kind"]]) for m in manifests
    ]
    assert [r.body for r in api.requests[1:]] == manifests


def test_applying_again_replaces_each_object_at_its_current_version(
    api: FakeKubernetesApi, config_path: Path, registry: Registry
) -> None:
    assert main(["launch", str(config_path), "--apply", "--skip-checks"]) == 0
    versions = {p: o["metadata"]["resourceVersion"] for p, o in api.objects.items()}
    api.requests.clear()
    assert main(["launch", str(config_path), "--apply", "--skip-checks"]) == 0
    manifests = rendered(config_path, registry)
    expected = [("GET", CRD)]
    for m in manifests:
        path = f"{PATHS[m['kind']]}/{m['metadata']['name']}"
        expected += [("POST", PATHS[m["kind"]]), ("GET", path), ("PUT", path)]
    assert [(r.method, r.path) for r in api.requests] == expected
    puts = [r for r in api.requests if r.method == "PUT"]
    for put in puts:
        assert put.body["metadata"]["resourceVersion"] == versions[put.path]
    (service_put,) = [p for p in puts if p.path.startswith(PATHS["Service"])]
    assert service_put.body["spec"]["clusterIP"] == "10.96.0.42"  # kept, as the API requires


def test_status_lists_the_run_pods(
    api: FakeKubernetesApi, config_path: Path, capsys: pytest.CaptureFixture
) -> None:
    def pod(name: str, component: str, phase: str, restarts: int, run: str = "demo") -> None:
        labels = {"app.kubernetes.io/instance": run, "app.kubernetes.io/component": component}
        api.put_object(
            f"{NS}/pods/{name}",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "labels": labels},
                "status": {
                    "phase": phase,
                    "containerStatuses": [
                        {
                            "name": component,
                            "image": "rlax",
                            "imageID": "",
                            "ready": phase == "Running",
                            "restartCount": restarts,
                        }
                    ],
                },
            },
        )

    pod("demo-trainer-0-0-abcde", "trainer", "Running", 0)
    pod("demo-worker-1-0-fghij", "worker", "Pending", 2)
    pod("demo-transport-0", "transport", "Running", 1)
    pod("other-worker-0-0-xyz", "worker", "Running", 0, run="other")
    assert main(["launch", str(config_path), "--status"]) == 0
    rows = sorted(line.split()[:4] for line in capsys.readouterr().out.splitlines()[1:])
    assert rows == [
        ["trainer", "demo-trainer-0-0-abcde", "running", "0"],
        ["transport", "demo-transport-0", "running", "1"],
        ["worker", "demo-worker-1-0-fghij", "starting", "2"],
    ]
    (listing,) = [r for r in api.requests if r.method == "GET"]
    assert listing.query["labelSelector"] == "app.kubernetes.io/instance=demo"


def test_stop_deletes_what_the_launch_created_but_the_shared_priority_classes(
    api: FakeKubernetesApi, config_path: Path
) -> None:
    assert main(["launch", str(config_path), "--apply", "--skip-checks"]) == 0
    api.requests.clear()
    assert main(["launch", str(config_path), "--stop"]) == 0
    deleted = [r.path for r in api.requests if r.method == "DELETE"]
    assert deleted[0] == f"{PATHS['JobSet']}/demo"  # first: its pods get SIGTERM, then the rest
    assert sorted(api.objects) == [
        CRD,
        f"{PATHS['PriorityClass']}/rlax-trainer",
        f"{PATHS['PriorityClass']}/rlax-worker",
    ]
    jobset_delete = api.requests[0]
    assert jobset_delete.query["propagationPolicy"] == "Background"


def test_a_refusing_cluster_is_a_clear_error(
    api: FakeKubernetesApi, config_path: Path, capsys: pytest.CaptureFixture
) -> None:
    api.refuse = 403
    assert main(["launch", str(config_path), "--apply", "--skip-checks"]) == 1
    err = capsys.readouterr().err
    assert "create PriorityClass rlax-trainer at http://127.0.0.1:" in err
    assert "failed: 403" in err and "check its RBAC role" in err
    assert "Traceback" not in err


def test_an_unreachable_cluster_is_a_clear_error(
    write_run_config: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with socket.socket() as probe:  # a port where nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = FakeKubernetesApi()  # only for its kubeconfig writer
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    server.stop()
    kubeconfig.write_text(kubeconfig.read_text().replace(server.url, f"http://127.0.0.1:{port}"))
    path = write_run_config(
        {
            "type": "gke",
            "image": "rlax:test",
            "trainer": {"accelerator_type": "v5p-8"},
            "workers": {"accelerator_type": "v5p-8"},
            "kubeconfig": str(kubeconfig),
        }
    )
    assert main(["launch", str(path), "--apply", "--skip-checks"]) == 1
    err = capsys.readouterr().err
    assert f"cannot reach the Kubernetes API at http://127.0.0.1:{port}" in err


def test_a_missing_kubeconfig_is_a_config_error(
    write_run_config: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = write_run_config(
        {
            "type": "gke",
            "image": "rlax:test",
            "trainer": {"accelerator_type": "v5p-8"},
            "workers": {"accelerator_type": "v5p-8"},
            "kubeconfig": str(tmp_path / "nowhere"),
        }
    )
    assert main(["launch", str(path), "--status"]) == 2
    assert "cannot use kubeconfig" in capsys.readouterr().err


def test_apply_creates_the_verifier_deployment_and_its_scaled_object(
    api: FakeKubernetesApi, staged_config_path: Path, registry: Registry
) -> None:
    assert main(["launch", str(staged_config_path), "--apply", "--skip-checks"]) == 0
    manifests = rendered(staged_config_path, registry)
    assert [m["kind"] for m in manifests][-2:] == ["Deployment", "ScaledObject"]
    assert [(r.method, r.path) for r in api.requests] == [("GET", CRD)] + [
        ("POST", PATHS[m["kind"]]) for m in manifests
    ]
    assert f"{PATHS['ScaledObject']}/demo-verifier" in api.objects


def test_applying_again_keeps_the_verifier_count_that_keda_set(
    api: FakeKubernetesApi, staged_config_path: Path
) -> None:
    assert main(["launch", str(staged_config_path), "--apply", "--skip-checks"]) == 0
    path = f"{PATHS['Deployment']}/demo-verifier"
    scaled = dict(api.objects[path])
    scaled["spec"] = dict(scaled["spec"], replicas=7)  # as KEDA's HPA would have it
    api.put_object(path, scaled)
    api.requests.clear()
    assert main(["launch", str(staged_config_path), "--apply", "--skip-checks"]) == 0
    (put,) = [r for r in api.requests if r.method == "PUT" and r.path == path]
    assert put.body["spec"]["replicas"] == 7


def test_status_and_stop_cover_the_verifiers(
    api: FakeKubernetesApi, staged_config_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["launch", str(staged_config_path), "--apply", "--skip-checks"]) == 0
    labels = {"app.kubernetes.io/instance": "demo", "app.kubernetes.io/component": "verifier"}
    api.put_object(
        f"{NS}/pods/demo-verifier-5d8f-x2k4l",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "demo-verifier-5d8f-x2k4l", "labels": labels},
            "status": {"phase": "Running"},
        },
    )
    capsys.readouterr()
    assert main(["launch", str(staged_config_path), "--status"]) == 0
    rows = [line.split()[:3] for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == [["verifier", "demo-verifier-5d8f-x2k4l", "running"]]
    api.requests.clear()
    assert main(["launch", str(staged_config_path), "--stop"]) == 0
    deleted = [r.path for r in api.requests if r.method == "DELETE"]
    assert deleted[:3] == [
        f"{PATHS['JobSet']}/demo",
        f"{PATHS['ScaledObject']}/demo-verifier",  # before its target: KEDA lets go first
        f"{PATHS['Deployment']}/demo-verifier",
    ]
    assert not [p for p in api.objects if "verifier" in p and "/pods/" not in p]


def test_a_cluster_without_keda_is_a_clear_error(
    api: FakeKubernetesApi, staged_config_path: Path, capsys: pytest.CaptureFixture
) -> None:
    api.missing_apis.append("/apis/keda.sh/")
    assert main(["launch", str(staged_config_path), "--apply", "--skip-checks"]) == 1
    err = capsys.readouterr().err
    assert "create ScaledObject demo-verifier" in err
    assert "is KEDA installed? (kubectl get crd scaledobjects.keda.sh)" in err
    # --stop still works there: nothing to delete is no error.
    assert main(["launch", str(staged_config_path), "--stop"]) == 0
