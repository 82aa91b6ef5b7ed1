"""The transport server on the cluster, and the Service its clients reach it by.

NATS runs as a one-replica StatefulSet whose JetStream store lives on its own volume
claim; the gRPC parameter server as a one-replica Deployment (``Recreate``: never two
servers on one state volume) with a PersistentVolumeClaim for its retained versions.
Either way a restarted server finds its versions and queues again, and clients find it
at ``NAME-transport:PORT``. Both run ``rlax serve param-server`` from the RLAX image,
with the server's folder of the run's credentials mounted (TLS with its certificate for
the Service's names, every role's credential); a run without them (``credentials.
insecure``) gets ``--insecure``.

A ClusterIP Service is reachable from every pod of the cluster, so a NetworkPolicy
(``network_policy``) admits to the server's ports only the run's own pods (by the
``app.kubernetes.io/instance`` label of the run), and to the NATS monitoring port, when
KEDA reads it, only pods of KEDA's namespace.
"""

from __future__ import annotations

from typing import Any

from rlax_launchers.gke.config import GkeLauncherConfig
from rlax_launchers.gke.pods import CONFIG_PATH, RunObjects, container, pod_spec
from rlax_launchers.role_commands import transport_server_command
from rlax_launchers.transport_placement import TransportPlacement

STATE_DIR = "/var/lib/rlax/transport"


def transport_service_name(prefix: str) -> str:
    """The Service (and DNS name) of the run's transport server."""
    return f"{prefix}-transport"


def transport_server_hosts(config: GkeLauncherConfig, prefix: str) -> list[str]:
    """The names the transport server's certificate holds: its Service's DNS names."""
    name = transport_service_name(prefix)
    return [f"{name}.{config.namespace}.svc", f"{name}.{config.namespace}.svc.cluster.local", name]


def transport_objects(
    config: GkeLauncherConfig,
    objects: RunObjects,
    placement: TransportPlacement,
    *,
    monitoring_port: int | None = None,
) -> list[dict[str, Any]]:
    """The Service, its NetworkPolicy and the server workload (plus its volume claim for
    gRPC).

    Args:
        config: the launcher section.
        objects: the run's names and labels.
        placement: the transport server's ports and settings.
        monitoring_port: also serve (and expose) nats-server's HTTP monitoring on this
            port, where KEDA reads the verifiers' backlog (NATS only; None: off).
    """
    name = transport_service_name(objects.prefix)
    labels = objects.labels("transport")
    set_args = placement.server_set_args(STATE_DIR)
    ports = list(placement.ports)
    if monitoring_port is not None:
        set_args += ["--set", f"server.monitoring_port={monitoring_port}"]
        ports.append(("monitoring", monitoring_port))
    server = container(
        config,
        name="transport",
        command=transport_server_command(
            CONFIG_PATH, set_args, insecure=config.credentials.insecure
        ),
        ports=[{"name": name, "containerPort": port} for name, port in ports],
        resources={
            "requests": {"cpu": config.transport.cpu, "memory": f"{config.transport.memory_gib}Gi"},
            "limits": {"memory": f"{config.transport.memory_gib}Gi"},
        },
        extra_mounts=[{"name": "state", "mountPath": STATE_DIR}],
        objects=objects,
    )
    server["readinessProbe"] = {"tcpSocket": {"port": placement.port}, "periodSeconds": 5}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": config.namespace, "labels": labels},
        "spec": {
            "selector": labels,
            "ports": [{"name": name, "port": port, "targetPort": port} for name, port in ports],
        },
    }
    policies = []
    if config.network_policy:
        policies.append(
            _network_policy(config, objects, placement.ports, monitoring_port=monitoring_port)
        )
    volume_claim_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": f"{config.transport.storage_gib}Gi"}},
    }
    if config.transport.storage_class:
        volume_claim_spec["storageClassName"] = config.transport.storage_class
    if placement.type == "nats":
        pod = pod_spec(
            config,
            objects,
            containers=[server],
            priority_class=config.trainer_priority.name,
            restart_policy="Always",
            node_selector=config.transport.node_selector or None,
            credentials="server",
        )
        workload = {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": config.namespace, "labels": labels},
            "spec": {
                "serviceName": name,
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "persistentVolumeClaimRetentionPolicy": {
                    "whenDeleted": "Delete",
                    "whenScaled": "Retain",
                },
                "template": {"metadata": {"labels": labels}, "spec": pod},
                "volumeClaimTemplates": [
                    {"metadata": {"name": "state"}, "spec": volume_claim_spec}
                ],
            },
        }
        return [service, *policies, workload]
    claim_name = f"{name}-state"
    pod = pod_spec(
        config,
        objects,
        containers=[server],
        priority_class=config.trainer_priority.name,
        restart_policy="Always",
        node_selector=config.transport.node_selector or None,
        extra_volumes=[{"name": "state", "persistentVolumeClaim": {"claimName": claim_name}}],
        credentials="server",
    )
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim_name, "namespace": config.namespace, "labels": labels},
        "spec": volume_claim_spec,
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": config.namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
    return [service, *policies, claim, deployment]


def _network_policy(
    config: GkeLauncherConfig,
    objects: RunObjects,
    ports: list[tuple[str, int]],
    *,
    monitoring_port: int | None,
) -> dict[str, Any]:
    """Ingress to the server pod: its ports from the run's pods, monitoring from KEDA's
    namespace; nothing else (a policy that selects a pod refuses what no rule admits)."""
    run_pods = {"app.kubernetes.io/instance": objects.prefix}
    ingress: list[dict[str, Any]] = [
        {
            "from": [{"podSelector": {"matchLabels": run_pods}}],
            "ports": [{"protocol": "TCP", "port": port} for _, port in ports],
        }
    ]
    if monitoring_port is not None:
        keda = config.verifiers.autoscale.keda_namespace
        ingress.append(
            {
                "from": [
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": keda}}}
                ],
                "ports": [{"protocol": "TCP", "port": monitoring_port}],
            }
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": transport_service_name(objects.prefix),
            "namespace": config.namespace,
            "labels": objects.labels("transport"),
        },
        "spec": {
            "podSelector": {"matchLabels": objects.labels("transport")},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }
