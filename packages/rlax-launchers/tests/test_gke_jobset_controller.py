"""--apply refuses a cluster whose JobSet cannot run the run's JobSet, before creating
anything: the installed CRD is read through the real ``kubernetes`` client from a local
server that speaks enough of the Kubernetes API (rlax_launchers.testing.kube_api)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rlax_core.cli.main import main
from rlax_launchers.gke.jobset import MIN_JOBSET_VERSION
from rlax_launchers.testing.kube_api import (
    JOBSET_ACTIONS,
    JOBSET_ACTIONS_BEFORE_V0_12,
    FakeKubernetesApi,
    jobset_crd,
)

pytestmark = pytest.mark.network

CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io"
CONTROLLER = "/apis/apps/v1/namespaces/jobset-system/deployments/jobset-controller-manager"
INSTALL = (
    "kubectl apply --server-side -f https://github.com/kubernetes-sigs/jobset/releases/"
    "download/v0.12.0/manifests.yaml"
)


@pytest.fixture
def api() -> Iterator[FakeKubernetesApi]:
    with FakeKubernetesApi() as server:
        yield server


@pytest.fixture
def config_path(
    api: FakeKubernetesApi, write_run_config: Callable[..., Path], tmp_path: Path
) -> Path:
    return write_run_config(
        {
            "type": "gke",
            "image": "us-docker.pkg.dev/rl-project/rlax/rlax:0.1.0",
            "trainer": {"accelerator_type": "v5p-16"},
            "workers": {"accelerator_type": "v5p-8"},
            "kubeconfig": str(api.write_kubeconfig(tmp_path / "kubeconfig")),
        }
    )


def launch(config_path: Path) -> int:
    return main(["launch", str(config_path), "--apply", "--skip-checks"])


def created(api: FakeKubernetesApi) -> list[str]:
    return [r.path for r in api.requests if r.method in ("POST", "PUT", "DELETE")]


def controller(image: str) -> dict[str, Any]:
    """The controller Deployment of JobSet's release manifests, cut down."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "jobset-controller-manager", "namespace": "jobset-system"},
        "spec": {"template": {"spec": {"containers": [{"name": "manager", "image": image}]}}},
    }


def test_the_minimum_version_is_the_release_that_shipped_the_actions() -> None:
    assert MIN_JOBSET_VERSION == "v0.12.0"  # kubernetes-sigs/jobset PR #1177, CHANGELOG-0.12


def test_an_old_jobset_is_refused_before_anything_is_created(
    api: FakeKubernetesApi, config_path: Path, capsys: pytest.CaptureFixture
) -> None:
    api.install_crd(jobset_crd(JOBSET_ACTIONS_BEFORE_V0_12))
    api.put_object(CONTROLLER, controller("registry.k8s.io/jobset/jobset:v0.11.1"))
    api.requests.clear()
    assert launch(config_path) == 1
    err = capsys.readouterr().err
    assert "the JobSet installed at http://127.0.0.1:" in err and "(v0.11.1)" in err
    assert "failure-policy actions RestartJobAndIgnoreMaxRestarts, RestartJob" in err
    assert "nothing was created. Upgrade JobSet to v0.12.0 or later: " + INSTALL in err
    assert "Traceback" not in err
    assert created(api) == []
    assert [r.path for r in api.requests] == [CRD, CONTROLLER]


def test_the_version_label_of_the_crd_names_the_installed_release(
    api: FakeKubernetesApi, config_path: Path, capsys: pytest.CaptureFixture
) -> None:
    labels = {"app.kubernetes.io/version": "v0.10.1"}
    api.install_crd(jobset_crd(JOBSET_ACTIONS_BEFORE_V0_12, labels=labels))
    assert launch(config_path) == 1
    assert "(v0.10.1) does not know" in capsys.readouterr().err


def test_an_unreadable_version_is_said_to_be_unknown(
    api: FakeKubernetesApi, config_path: Path, capsys: pytest.CaptureFixture
) -> None:
    api.install_crd(jobset_crd(JOBSET_ACTIONS_BEFORE_V0_12))
    api.forbidden_apis.append("/apis/apps/v1/namespaces/jobset-system/")
    assert launch(config_path) == 1
    err = capsys.readouterr().err
    assert "(version unknown) does not know" in err and created(api) == []


def test_a_current_jobset_crd_lets_the_run_be_created(
    api: FakeKubernetesApi,
    config_path: Path,
    jobset_crd_manifest: dict[str, Any],
    capsys: pytest.CaptureFixture,
) -> None:
    """The real CRD (shared/schemas, JobSet after v0.12.0) passes the check."""
    api.install_crd(jobset_crd_manifest)
    assert launch(config_path) == 0
    assert capsys.readouterr().err.count(" created\n") == len(created(api))
    assert any(path.endswith("/jobsets") for path in created(api))


def test_the_real_crd_without_the_new_actions_is_refused(
    api: FakeKubernetesApi, config_path: Path, jobset_crd_manifest: dict[str, Any]
) -> None:
    """The same CRD with the action enum JobSet v0.11 had: refused, nothing created."""
    old = copy.deepcopy(jobset_crd_manifest)
    (served,) = [v for v in old["spec"]["versions"] if v["name"] == "v1alpha2"]
    spec = served["schema"]["openAPIV3Schema"]["properties"]["spec"]
    action = spec["properties"]["failurePolicy"]["properties"]["rules"]["items"]
    action["properties"]["action"]["enum"] = list(JOBSET_ACTIONS_BEFORE_V0_12)
    api.install_crd(old)
    assert launch(config_path) == 1
    assert created(api) == []


def test_a_cluster_without_jobset_is_refused(
    api: FakeKubernetesApi, config_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert launch(config_path) == 1
    err = capsys.readouterr().err
    assert "JobSet is not installed at http://127.0.0.1:" in err
    assert "no CustomResourceDefinition jobsets.jobset.x-k8s.io" in err
    assert "Install JobSet v0.12.0 or later: " + INSTALL in err
    assert created(api) == [] and "Traceback" not in err


def test_a_jobset_that_does_not_serve_v1alpha2_is_refused(
    api: FakeKubernetesApi, config_path: Path, capsys: pytest.CaptureFixture
) -> None:
    api.install_crd(jobset_crd(JOBSET_ACTIONS, version="v1alpha1"))
    assert launch(config_path) == 1
    assert "does not serve jobset.x-k8s.io/v1alpha2" in capsys.readouterr().err
    assert created(api) == []


def test_a_user_who_may_not_read_crds_is_warned_and_the_run_goes_on(
    api: FakeKubernetesApi, config_path: Path, capsys: pytest.CaptureFixture
) -> None:
    api.forbidden_apis.append("/apis/apiextensions.k8s.io/")
    assert launch(config_path) == 0
    err = capsys.readouterr().err
    assert "warning: may not read CustomResourceDefinition jobsets.jobset.x-k8s.io" in err
    assert "needs JobSet v0.12.0 or later" in err
    assert any(path.endswith("/jobsets") for path in created(api))
