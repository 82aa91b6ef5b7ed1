"""Run configs for the launcher tests, validated against the installed plugins, and the
schemas that rendered Kubernetes objects are validated against.

Core objects are checked with kubernetes-validate (Kubernetes 1.35, strict: an unknown
field is an error, where the API server would drop it silently); custom resources
against their CRD's openAPIV3Schema, made strict the same way, from ``shared/schemas``
beside the checkout: the JobSet's (skipped where it is absent) and KEDA's ScaledObject's
(where it is absent, against :data:`SCALED_OBJECT_SPEC`, the part of the ScaledObject
that KEDA's reference documents, written out here; it is no copy of KEDA's CRD).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from rlax_core.config import load_run_config
from rlax_core.plugins import Registry, load_registry
from rlax_launchers.testing.fake_gcloud import install_fake_gcloud
from rlax_launchers.tpu_slice import TpuSliceConfig

NATS = {"type": "nats", "servers": ["nats://10.0.0.1:4222"]}
KUBERNETES_VERSION = "1.35.0"
JOBSET_CRD = "jobset.x-k8s.io_jobsets.yaml"
SCALED_OBJECT_CRD = "keda.sh_scaledobjects.yaml"
_INT = {"type": "integer", "format": "int32"}
_STR = {"type": "string"}
# keda.sh/v1alpha1 ScaledObject, as KEDA's reference documents it
# (keda.sh/docs/2.x/reference/scaledobject-spec): every documented field of ``spec`` with
# its type, the required ones required, nothing else allowed.
SCALED_OBJECT_SPEC: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "apiVersion": _STR, "kind": _STR, "name": _STR,
                        "envSourceContainerName": _STR,
                    },
                },
                "pollingInterval": _INT, "cooldownPeriod": _INT, "initialCooldownPeriod": _INT,
                "idleReplicaCount": _INT, "minReplicaCount": _INT, "maxReplicaCount": _INT,
                "fallback": {
                    "type": "object",
                    "required": ["failureThreshold", "replicas"],
                    "properties": {"failureThreshold": _INT, "replicas": _INT, "behavior": _STR},
                },
                "advanced": {"type": "object"},
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["type", "metadata"],
                        "properties": {
                            "type": _STR, "name": _STR, "metricType": _STR,
                            "useCachedMetrics": {"type": "boolean"},
                            "metadata": {"type": "object", "additionalProperties": _STR},
                            "authenticationRef": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {"name": _STR, "kind": _STR},
                            },
                        },
                    },
                },
            },
        },
    },
}  # fmt: skip


@pytest.fixture(scope="session")
def registry() -> Registry:
    """Everything installed (the launchers, transports and verifiers)."""
    return load_registry()


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in its own folder: a launch without --run-dir writes runs/NAME
    (an --apply's generated credentials) there, never in the checkout, where the next
    test would find and reuse them."""
    monkeypatch.chdir(tmp_path)


def trainer_mesh(launcher: dict[str, Any]) -> dict[str, int]:
    """A trainer mesh over the launcher's trainer slice (all its chips on fsdp), as a cloud
    launch requires; the local launcher's run gets the default."""
    trainer = launcher.get("trainer")
    if not trainer:
        return {}
    try:
        shape = TpuSliceConfig(
            accelerator_type=trainer["accelerator_type"], topology=trainer.get("topology")
        ).shape()
    except ValueError:
        return {}  # a slice the test means to be refused
    return {"fsdp": shape.chips}


@pytest.fixture
def write_run_config(tmp_path: Path) -> Callable[..., Path]:
    """Writes a run config file: a small run with the given launcher section."""

    def write(
        launcher: dict[str, Any] | None,
        *,
        transport: dict[str, Any] | None = None,
        workers: int = 2,
        run_dir: str | None = "gs://bucket/runs/demo",
        name: str = "demo",
        verifier: dict[str, Any] | None = None,
    ) -> Path:
        data: dict[str, Any] = {
            "run": {"name": name, "run_dir": run_dir},
            "model": {"path": "gs://bucket/models/Qwen2.5-0.5B-Instruct"},
            "data": {
                "train": [
                    {
                        "path": "gs://bucket/data/train.jsonl",
                        "prompt_template": "{question}",
                        "answer_field": "answer",
                    }
                ]
            },
            "rollout": {"workers": workers, "max_new_tokens": 16},
            "transport": transport or NATS,
            "verifier": {"judge": {"type": "math"}, **(verifier or {})},
        }
        if launcher is not None:
            data["launcher"] = launcher
            data["trainer"] = {"mesh": trainer_mesh(launcher)}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


@pytest.fixture
def make_run_config(
    write_run_config: Callable[..., Path], registry: Registry
) -> Callable[..., Any]:
    """A validated run config (see ``write_run_config`` for the arguments)."""

    def make(launcher: dict[str, Any] | None, **kwargs: Any) -> Any:
        return load_run_config(write_run_config(launcher, **kwargs), registry)

    return make


@pytest.fixture
def gcloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Puts the fake gcloud first on PATH, answering from ``tmp_path/answers``; returns its
    argv log."""
    bin_dir = tmp_path / "bin"
    install_fake_gcloud(bin_dir)
    log = tmp_path / "gcloud.log"
    answers = tmp_path / "answers"
    answers.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GCLOUD_LOG", str(log))
    monkeypatch.setenv("FAKE_GCLOUD_DIR", str(answers))
    return log


@pytest.fixture
def stub_wheels(monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
    """Makes the tpu-vm launcher's ``--apply`` ship stand-in wheels instead of building
    and uploading real ones (test_tpu_vm_wheels.py builds them); returns the wheels of
    each call."""
    from rlax_launchers.tpu_vm import launcher as tpu_vm_launcher
    from rlax_launchers.tpu_vm.wheels import Wheel, unbuilt_wheels

    calls: list[list[Any]] = []

    def ship(packages: list[Any], shared_run_dir: str, build_dir: Path) -> list[Wheel]:
        calls.append(
            [
                Wheel(w.package, w.file_name, "0" * 64, w.url.replace("UNBUILT", "0" * 16))
                for w in unbuilt_wheels(packages, shared_run_dir)
            ]
        )
        return calls[-1]

    monkeypatch.setattr(tpu_vm_launcher, "build_and_upload_wheels", ship)
    return calls


def _find_shared_schema(name: str) -> Path | None:
    """shared/schemas beside the repository (or beside a folder above a worktree)."""
    repo = Path(__file__).resolve().parents[3]
    for folder in [repo, *repo.parents]:
        candidate = folder / "shared" / "schemas" / name
        if candidate.is_file():
            return candidate
    return None


def _strict(schema: Any) -> Any:
    """The schema with unknown properties refused wherever it lists the known ones."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


def _crd_validator(path: Path, version: str) -> jsonschema.Validator:
    crd = yaml.safe_load(path.read_text())
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return jsonschema.Draft7Validator(_strict(served["schema"]["openAPIV3Schema"]))


@pytest.fixture(scope="session")
def jobset_crd_manifest() -> dict[str, Any]:
    """The JobSet CustomResourceDefinition from shared/schemas, as a cluster serves it."""
    path = _find_shared_schema(JOBSET_CRD)
    if path is None:
        pytest.skip(f"{JOBSET_CRD} is not in shared/schemas beside this checkout")
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="session")
def jobset_validator() -> jsonschema.Validator:
    """The JobSet CRD's schema (``jobset.x-k8s.io/v1alpha2``), strict."""
    path = _find_shared_schema(JOBSET_CRD)
    if path is None:
        pytest.skip(
            f"{JOBSET_CRD} is not in shared/schemas beside this checkout, so the JobSet cannot "
            "be validated against its CRD here"
        )
    return _crd_validator(path, "v1alpha2")


@pytest.fixture(scope="session")
def scaled_object_validator() -> jsonschema.Validator:
    """KEDA's ScaledObject CRD's schema (``keda.sh/v1alpha1``), strict; where the CRD is
    not in shared/schemas, the documented spec (:data:`SCALED_OBJECT_SPEC`)."""
    path = _find_shared_schema(SCALED_OBJECT_CRD)
    if path is None:
        return jsonschema.Draft7Validator(_strict(SCALED_OBJECT_SPEC))
    return _crd_validator(path, "v1alpha1")


def _assert_valid(validator: jsonschema.Validator, manifest: dict[str, Any]) -> None:
    errors = sorted(validator.iter_errors(manifest), key=str)
    assert errors == [], "\n".join(
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:10]
    )


@pytest.fixture
def validate_manifests(request: pytest.FixtureRequest) -> Callable[[list[dict[str, Any]]], None]:
    """Validates rendered objects; a JobSet's Job templates once more as batch/v1 Jobs.

    Raises (in the returned callable): AssertionError for a custom resource its CRD
    refuses, ``kubernetes_validate.ValidationError`` for any other object.
    """

    def validate(manifests: list[dict[str, Any]]) -> None:
        for manifest in manifests:
            if manifest["kind"] == "ScaledObject":
                _assert_valid(request.getfixturevalue("scaled_object_validator"), manifest)
            elif manifest["kind"] == "JobSet":
                _assert_valid(request.getfixturevalue("jobset_validator"), manifest)
                for replicated in manifest["spec"]["replicatedJobs"]:
                    template = replicated["template"]
                    name = f"{manifest['metadata']['name']}-{replicated['name']}-0"
                    job = {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "metadata": {"name": name} | template["metadata"],
                        "spec": template["spec"],
                    }
                    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
            else:
                kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)

    return validate
