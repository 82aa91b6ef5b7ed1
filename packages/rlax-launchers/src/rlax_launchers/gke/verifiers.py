"""The verifiers of a GKE run: a Deployment of CPU pods, and optionally a KEDA ScaledObject.

With ``verifier.placement: stage`` the inference workers put each sampled group on the
``to_verify`` queue and go back to sampling; verifier processes judge the groups on CPU
(no accelerator, no model) and put them on the rollout queue. A verifier keeps nothing
of its own (a group it holds is leased, and comes back to the queue when the lease
ends), so the verifiers are a Deployment, scaled apart from the TPU workers:

* on CPU nodes: no ``google.com/tpu`` request and no toleration of the ``google.com/tpu``
  taint that GKE puts on TPU nodes, so a verifier never takes a TPU host;
  ``machine_type`` and ``node_selector`` pick the CPU node pool;
* each names itself by its pod: the downward API puts the pod's name in ``POD_NAME``,
  which ``--verifier-id $(POD_NAME)`` reads, so replicas never share a name;
* same image, ConfigMap (and credentials), run directory and transport client settings
  as the workers, and their PriorityClass (never preempting anything).

``verifiers.autoscale.enabled`` adds a ``keda.sh/v1alpha1`` ScaledObject whose
``nats-jetstream`` trigger reads the backlog of the queue's consumer (groups waiting plus
groups leased) from nats-server's HTTP monitoring endpoint, which the transport server
then serves on ``monitoring_port``; KEDA keeps about ``lag_threshold`` groups per pod.
The RLAX gRPC server has no endpoint that any KEDA scaler reads a queue from, so
autoscaling a gRPC run is refused.
"""

from __future__ import annotations

from typing import Any

from rlax_core.config.run_config import RunConfigBase
from rlax_core.errors import ConfigError
from rlax_launchers.gke.config import GkeLauncherConfig
from rlax_launchers.gke.pods import CONFIG_PATH, RunObjects, container, pod_spec
from rlax_launchers.gke.transport import transport_service_name
from rlax_launchers.role_commands import verifier_command, verifier_count

KEDA_API_VERSION = "keda.sh/v1alpha1"
# rlax_core.rl.roles.queues.TO_VERIFY (a launcher may not import the RL loop).
TO_VERIFY_QUEUE = "to_verify"
# How rlax_transport_nats.queue names a queue's stream and the durable consumer all its
# clients share (a launcher imports no transport plugin; a test checks they agree).
NATS_QUEUE_CONSUMER = "workers"
# rlax serve configures no NATS accounts, so every stream is in the global account.
NATS_GLOBAL_ACCOUNT = "$G"


def nats_queue_stream(namespace: str, queue: str) -> str:
    """The JetStream stream of an RLAX queue of a NATS transport namespace."""
    return f"RLAX_{namespace}_Q_{queue}"


def verifier_deployment_name(prefix: str) -> str:
    """The Deployment (and ScaledObject) of the run's verifiers."""
    return f"{prefix}-verifier"


def verifier_monitoring_port(config: GkeLauncherConfig, run_config: RunConfigBase) -> int | None:
    """The NATS monitoring port the transport server serves for KEDA, or None when off.

    Raises:
        ConfigError: autoscaling is asked for, but the run judges inline or its transport
            is not NATS.
    """
    autoscale = config.verifiers.autoscale
    if not autoscale.enabled:
        return None
    if not _staged(run_config):
        raise ConfigError(
            "launcher.verifiers.autoscale is enabled, but verifier.placement is inline "
            "(workers judge their own completions, nothing waits to be verified): set "
            "verifier.placement: stage, or autoscale.enabled: false"
        )
    kind = getattr(run_config.transport, "type", None)
    if kind != "nats":
        raise ConfigError(
            f"launcher.verifiers.autoscale needs KEDA to read the to-verify queue's backlog, "
            f"and KEDA has no scaler for the {kind} transport's queues (its nats-jetstream "
            "scaler reads NATS JetStream only): use transport.type: nats, or set "
            "autoscale.enabled: false and a fixed verifiers.replicas"
        )
    return autoscale.monitoring_port


def verifier_objects(
    config: GkeLauncherConfig, objects: RunObjects, run_config: RunConfigBase, *, run_dir: str
) -> list[dict[str, Any]]:
    """The verifier Deployment and, when autoscaled, its ScaledObject ([] without verifiers).

    Raises:
        ConfigError: verifiers are asked for, but the run judges inline; or autoscaling
            is asked for where it cannot work (see :func:`verifier_monitoring_port`).
    """
    section = config.verifiers
    monitoring_port = verifier_monitoring_port(config, run_config)
    replicas = verifier_count(run_config, section.replicas)
    if monitoring_port is None and replicas == 0:
        return []
    name = verifier_deployment_name(objects.prefix)
    labels = objects.labels("verifier")
    memory_limit = section.memory_limit_gib or section.memory_gib
    resources: dict[str, Any] = {
        "requests": {"cpu": section.cpu, "memory": f"{section.memory_gib}Gi"},
        "limits": {"memory": f"{memory_limit}Gi"},
    }
    if section.cpu_limit is not None:
        resources["limits"]["cpu"] = section.cpu_limit
    verifier = container(
        config,
        name="verifier",
        command=verifier_command(CONFIG_PATH, run_dir, "$(POD_NAME)"),
        env=[{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        resources=resources,
        objects=objects,
    )
    spec: dict[str, Any] = {
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": pod_spec(
                config,
                objects,
                containers=[verifier],
                priority_class=config.worker_priority.name,
                restart_policy="Always",
                node_selector=_node_selector(config) or None,
                tolerations=_tolerations(config) or None,
                spot=config.verifiers.spot,
                credentials="verifier",
            ),
        },
    }
    if monitoring_port is None:
        spec = {"replicas": replicas, **spec}
    # Autoscaled, the count is KEDA's (through its HPA): the manifest leaves replicas out,
    # and a re-apply keeps the Deployment's current count (gke.apply).
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": config.namespace, "labels": labels},
        "spec": spec,
    }
    if monitoring_port is None:
        return [deployment]
    return [deployment, _scaled_object(config, objects, run_config, name, monitoring_port)]


def _scaled_object(
    config: GkeLauncherConfig,
    objects: RunObjects,
    run_config: RunConfigBase,
    deployment: str,
    monitoring_port: int,
) -> dict[str, Any]:
    autoscale = config.verifiers.autoscale
    namespace = getattr(run_config.transport, "namespace", "rlax")
    groups_per_batch = run_config.verifier.groups_per_batch if run_config.verifier else 4
    lag_threshold = autoscale.lag_threshold or 2 * groups_per_batch
    # KEDA's operator runs in a namespace of its own: the fully qualified Service name.
    service = f"{transport_service_name(objects.prefix)}.{config.namespace}.svc.cluster.local"
    return {
        "apiVersion": KEDA_API_VERSION,
        "kind": "ScaledObject",
        "metadata": {
            "name": deployment,
            "namespace": config.namespace,
            "labels": objects.labels("verifier"),
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment},
            "minReplicaCount": autoscale.min_replicas,
            "maxReplicaCount": autoscale.max_replicas,
            "pollingInterval": autoscale.polling_interval_s,
            "cooldownPeriod": autoscale.cooldown_period_s,
            "triggers": [
                {
                    "type": "nats-jetstream",
                    # Trigger metadata values are strings, numbers too (KEDA parses them).
                    "metadata": {
                        "natsServerMonitoringEndpoint": f"{service}:{monitoring_port}",
                        "account": NATS_GLOBAL_ACCOUNT,
                        "stream": nats_queue_stream(namespace, TO_VERIFY_QUEUE),
                        "consumer": NATS_QUEUE_CONSUMER,
                        "lagThreshold": str(lag_threshold),
                    },
                }
            ],
        },
    }


def _node_selector(config: GkeLauncherConfig) -> dict[str, str]:
    section = config.verifiers
    selector = {}
    if section.machine_type is not None:
        selector["node.kubernetes.io/instance-type"] = section.machine_type
    selector.update(section.node_selector)
    if section.spot:
        selector["cloud.google.com/gke-spot"] = "true"
    return selector


def _tolerations(config: GkeLauncherConfig) -> list[dict[str, Any]]:
    section = config.verifiers
    tolerations = [t.model_dump(exclude_none=True) for t in section.tolerations]
    if section.spot:
        tolerations.append(
            {
                "key": "cloud.google.com/gke-spot",
                "operator": "Equal",
                "value": "true",
                "effect": "NoSchedule",
            }
        )
    return tolerations


def _staged(run_config: RunConfigBase) -> bool:
    return run_config.verifier is not None and run_config.verifier.placement == "stage"
