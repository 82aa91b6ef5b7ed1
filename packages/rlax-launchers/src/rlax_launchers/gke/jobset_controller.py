"""Whether the cluster's JobSet controller knows the failure-policy actions a run uses.

The run's JobSet restarts a failed worker Job alone (``RestartJobAndIgnoreMaxRestarts``)
and a failed trainer Job from its checkpoint (``RestartJob``). Those actions came with
JobSet v0.12.0 (:data:`~rlax_launchers.gke.jobset.MIN_JOBSET_VERSION`,
kubernetes-sigs/jobset PR #1177). On an older JobSet the API server refuses the JobSet
(its CRD's schema lists no such action) after the ConfigMap, the transport server and
the rest were created, leaving half a run behind. So ``--apply`` reads the installed
CustomResourceDefinition ``jobsets.jobset.x-k8s.io`` first and refuses, before it
creates anything, when JobSet is missing, does not serve ``v1alpha2``, or its schema's
failure-policy ``action`` enum lacks an action the run uses.

The CRD carries no release number (kustomize's manifests label it with none), so the
installed version is read where it can be: the CRD's ``app.kubernetes.io/version``
label, else the image tag of the controller Deployment of the release manifests
(``jobset-system/jobset-controller-manager``); a user who may not read either just sees
"unknown". A user who may not read CRDs at all (403) gets a warning, not a refusal: the
check is a convenience, and the API server still has the last word.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from rlax_launchers.gke.apply import Cluster, KubernetesError
from rlax_launchers.gke.jobset import JOBSET_API_VERSION, MIN_JOBSET_VERSION

JOBSET_CRD = "jobsets.jobset.x-k8s.io"
# Where the release manifests install the controller.
CONTROLLER = ("jobset-system", "jobset-controller-manager")
INSTALL = (
    "kubectl apply --server-side -f https://github.com/kubernetes-sigs/jobset/releases/"
    f"download/{MIN_JOBSET_VERSION}/manifests.yaml"
)


def failure_policy_actions(jobset: dict[str, Any]) -> list[str]:
    """The failure-policy actions a JobSet manifest uses, in rule order, each once."""
    rules = jobset.get("spec", {}).get("failurePolicy", {}).get("rules", [])
    return list(dict.fromkeys(rule["action"] for rule in rules))


def check_jobset_controller(cluster: Cluster, actions: Iterable[str]) -> None:
    """Refuses a cluster whose JobSet cannot run a JobSet using ``actions``.

    Raises:
        KubernetesError: JobSet is not installed, does not serve ``v1alpha2``, or its CRD
            lacks one of ``actions``; the message names the installed version and the
            command that upgrades it.
    """
    needed = list(actions)
    try:
        crd = cluster.read("CustomResourceDefinition", JOBSET_CRD)
    except KubernetesError as exc:
        if exc.status != 403:
            raise
        print(
            f"warning: may not read CustomResourceDefinition {JOBSET_CRD} at {cluster.host} "
            f"(403), so the JobSet controller's version is not checked; this run needs JobSet "
            f"{MIN_JOBSET_VERSION} or later (failure-policy actions {', '.join(needed)})",
            file=sys.stderr,
        )
        return
    if crd is None:
        raise KubernetesError(
            f"JobSet is not installed at {cluster.host} (no CustomResourceDefinition "
            f"{JOBSET_CRD}); nothing was created. Install JobSet {MIN_JOBSET_VERSION} or "
            f"later: {INSTALL}"
        )
    version = JOBSET_API_VERSION.split("/")[1]
    schema = _served_schema(crd, version)
    if schema is None:
        raise KubernetesError(
            f"the JobSet installed at {cluster.host} ({installed_version(cluster, crd)}) does "
            f"not serve {JOBSET_API_VERSION}; nothing was created. Upgrade JobSet to "
            f"{MIN_JOBSET_VERSION} or later: {INSTALL}"
        )
    known = _action_enum(schema)
    missing = [action for action in needed if action not in known]
    if missing:
        raise KubernetesError(
            f"the JobSet installed at {cluster.host} ({installed_version(cluster, crd)}) does "
            f"not know the failure-policy action{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)} that this run uses to restart a failed worker or trainer "
            f"alone (they came with JobSet {MIN_JOBSET_VERSION}; it knows "
            f"{', '.join(known) or 'none'}); nothing was created. Upgrade JobSet to "
            f"{MIN_JOBSET_VERSION} or later: {INSTALL}"
        )


def installed_version(cluster: Cluster, crd: dict[str, Any]) -> str:
    """The installed JobSet release as far as it can be read, e.g. ``v0.11.1``."""
    labels = crd.get("metadata", {}).get("labels") or {}
    if labels.get("app.kubernetes.io/version"):
        return str(labels["app.kubernetes.io/version"])
    try:
        deployment = cluster.read("Deployment", CONTROLLER[1], CONTROLLER[0])
    except KubernetesError:
        deployment = None
    containers = (
        (deployment or {}).get("spec", {}).get("template", {}).get("spec", {}).get("containers")
    )
    for container in containers or []:
        image = str(container.get("image", ""))
        if "jobset" in image and ":" in image.rsplit("/", 1)[-1]:
            return image.rsplit(":", 1)[1]
    return "version unknown"


def _served_schema(crd: dict[str, Any], version: str) -> dict[str, Any] | None:
    for entry in crd.get("spec", {}).get("versions") or []:
        if entry.get("name") == version and entry.get("served", True):
            return entry.get("schema", {}).get("openAPIV3Schema") or {}
    return None


def _action_enum(schema: dict[str, Any]) -> list[str]:
    """The failure-policy rule ``action`` enum of a JobSet schema (empty: none found)."""
    node: Any = schema
    for key in ("spec", "failurePolicy", "rules"):
        node = (node.get("properties") or {}).get(key) or {}
    action = ((node.get("items") or {}).get("properties") or {}).get("action") or {}
    return [str(value) for value in action.get("enum") or []]
