"""Talking to the cluster with the ``kubernetes`` client: create-or-replace, list, delete.

The client is imported here only, when a command needs the cluster, so rendering
(``--dry-run``) works without credentials and ``rlax`` starts quickly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import urllib3

from rlax_core.errors import ConfigError, RlaxError

# Custom resources: kind → (group, version, plural, the controller that serves it).
_CUSTOM = {
    "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets", "the JobSet controller"),
    "ScaledObject": ("keda.sh", "v1alpha1", "scaledobjects", "KEDA"),
}


class KubernetesError(RlaxError):
    """The cluster refused a request, or could not be reached.

    Attributes:
        status: the HTTP status of the refusal (None: no answer, or not an HTTP one).
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class _Kind:
    api: str  # the typed API class, or "custom"
    resource: str  # the method suffix, e.g. "config_map"
    namespaced: bool


_KINDS = {
    "ConfigMap": _Kind("CoreV1Api", "config_map", True),
    "Secret": _Kind("CoreV1Api", "secret", True),
    "ServiceAccount": _Kind("CoreV1Api", "service_account", True),
    "Service": _Kind("CoreV1Api", "service", True),
    "PersistentVolumeClaim": _Kind("CoreV1Api", "persistent_volume_claim", True),
    "NetworkPolicy": _Kind("NetworkingV1Api", "network_policy", True),
    "StatefulSet": _Kind("AppsV1Api", "stateful_set", True),
    "Deployment": _Kind("AppsV1Api", "deployment", True),
    "PriorityClass": _Kind("SchedulingV1Api", "priority_class", False),
    "CustomResourceDefinition": _Kind("ApiextensionsV1Api", "custom_resource_definition", False),
    "JobSet": _Kind("custom", "jobset", True),
    "ScaledObject": _Kind("custom", "scaledobject", True),
}


class Cluster:
    """One Kubernetes API endpoint, from a kubeconfig or the in-cluster service account.

    Args:
        kubeconfig: the kubeconfig file (None: ``$KUBECONFIG`` or ``~/.kube/config``,
            else the in-cluster configuration).
        context: the kubeconfig context (None: the current one).

    Raises:
        ConfigError: no usable configuration was found.
    """

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        import kubernetes

        self._k8s = kubernetes
        configuration = kubernetes.client.Configuration()
        try:
            kubernetes.config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
        except (kubernetes.config.ConfigException, OSError) as exc:
            if kubeconfig is not None or context is not None:
                raise ConfigError(
                    f"cannot use kubeconfig {kubeconfig or '(default)'}: {exc}"
                ) from None
            try:
                kubernetes.config.load_incluster_config(client_configuration=configuration)
            except kubernetes.config.ConfigException:
                raise ConfigError(
                    f"no Kubernetes credentials: {exc}; run `gcloud container clusters "
                    "get-credentials CLUSTER` or set launcher.kubeconfig"
                ) from None
        # One retry: an unreachable API server should be reported in seconds, not minutes.
        configuration.retries = 1
        self.api_client = kubernetes.client.ApiClient(configuration)
        self.host = self.api_client.configuration.host

    def apply(self, manifest: dict[str, Any]) -> str:
        """Creates the object, or replaces it if it exists; returns ``created``/``replaced``."""
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        namespace = manifest["metadata"].get("namespace")
        try:
            self._call(kind, "create", namespace, body=manifest)
            return "created"
        except self._k8s.client.ApiException as exc:
            if exc.status != 409:
                raise self._error(exc, f"create {kind} {name}", kind) from None
        try:
            current = self._call(kind, "read", namespace, name=name)
            body = dict(manifest, metadata=dict(manifest["metadata"]))
            body["metadata"]["resourceVersion"] = _field(current, "metadata", "resource_version")
            if kind == "Service":
                # The cluster IP is assigned once and cannot change.
                body["spec"] = dict(
                    manifest["spec"], clusterIP=_field(current, "spec", "cluster_ip")
                )
            replicas = _field(current, "spec", "replicas") if kind == "Deployment" else None
            if replicas is not None and "replicas" not in manifest["spec"]:
                # An autoscaler owns the count; a replace must not reset it to one.
                body["spec"] = dict(manifest["spec"], replicas=replicas)
            self._call(kind, "replace", namespace, name=name, body=body)
            return "replaced"
        except self._k8s.client.ApiException as exc:
            if kind == "JobSet" and exc.status == 422:
                raise KubernetesError(
                    f"JobSet {name} exists and its spec cannot change in place: stop the run "
                    "(`rlax launch CONFIG --stop`) and launch it again"
                ) from None
            raise self._error(exc, f"replace {kind} {name}", kind) from None

    def read(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object as the API server serves it (its JSON), or None if it is not there."""
        try:
            response = self._call(kind, "read", namespace, name=name, _preload_content=False)
        except self._k8s.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise self._error(exc, f"read {kind} {name}", kind) from None
        try:
            return json.loads(response.data)
        except ValueError:
            raise KubernetesError(
                f"read {kind} {name} at {self.host}: the answer is not JSON"
            ) from None

    def delete(self, kind: str, name: str, namespace: str | None) -> bool:
        """Deletes the object and what it owns; returns False if it was not there."""
        try:
            self._call(kind, "delete", namespace, name=name, propagation_policy="Background")
            return True
        except self._k8s.client.ApiException as exc:
            if exc.status == 404:
                return False
            raise self._error(exc, f"delete {kind} {name}", kind) from None

    def pods(self, namespace: str, selector: str) -> list[Any]:
        """The pods matching a label selector."""
        api = self._k8s.client.CoreV1Api(self.api_client)
        try:
            return list(api.list_namespaced_pod(namespace, label_selector=selector).items)
        except self._k8s.client.ApiException as exc:
            raise self._error(exc, f"list pods ({selector})") from None

    def _call(self, kind: str, verb: str, namespace: str | None, **kwargs: Any) -> Any:
        spec = _KINDS.get(kind)
        if spec is None:
            raise KubernetesError(f"the gke launcher does not apply objects of kind {kind}")
        try:
            if spec.api == "custom":
                return self._call_custom(kind, verb, namespace, **kwargs)
            api = getattr(self._k8s.client, spec.api)(self.api_client)
            scope = "namespaced_" if spec.namespaced else ""
            args = [kwargs.pop("name")] if "name" in kwargs else []
            if spec.namespaced:
                args.append(namespace)
            if "body" in kwargs:
                args.append(kwargs.pop("body"))
            return getattr(api, f"{verb}_{scope}{spec.resource}")(*args, **kwargs)
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # refused, TLS, time-outs
            raise KubernetesError(
                f"cannot reach the Kubernetes API at {self.host}: {type(exc).__name__}: {exc}"
            ) from None

    def _call_custom(self, kind: str, verb: str, namespace: str | None, **kwargs: Any) -> Any:
        api = self._k8s.client.CustomObjectsApi(self.api_client)
        group, version, plural, _ = _CUSTOM[kind]
        if verb == "create":
            return api.create_namespaced_custom_object(
                group, version, namespace, plural, kwargs["body"]
            )
        if verb == "read":
            return api.get_namespaced_custom_object(
                group, version, namespace, plural, kwargs["name"]
            )
        if verb == "replace":
            return api.replace_namespaced_custom_object(
                group, version, namespace, plural, kwargs["name"], kwargs["body"]
            )
        return api.delete_namespaced_custom_object(
            group, version, namespace, plural, kwargs["name"], propagation_policy="Background"
        )

    def _error(self, exc: Any, what: str, kind: str | None = None) -> KubernetesError:
        group, _, plural, controller = _CUSTOM.get(kind or "", _CUSTOM["JobSet"])
        hint = {
            401: "the credentials were refused; refresh them with "
            "`gcloud container clusters get-credentials`",
            403: "the account may not do this; check its RBAC role in the namespace",
            404: f"the API is missing; is {controller} installed? "
            f"(kubectl get crd {plural}.{group})",
        }.get(exc.status, "")
        return KubernetesError(
            f"{what} at {self.host} failed: {exc.status} {exc.reason}"
            + (f" ({hint})" if hint else ""),
            status=exc.status,
        )


def _field(obj: Any, section: str, name: str) -> Any:
    """A field of a typed model or of a custom object's dict."""
    if isinstance(obj, dict):
        camel = "".join(p if i == 0 else p.capitalize() for i, p in enumerate(name.split("_")))
        camel = camel.replace("Ip", "IP")
        return obj.get(section, {}).get(camel)
    return getattr(getattr(obj, section), name)
