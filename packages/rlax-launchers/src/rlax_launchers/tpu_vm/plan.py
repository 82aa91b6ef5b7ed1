"""The ``tpu-vm`` launcher's plan: the slices of a run, their scripts and commands.

Layout: one trainer slice (``NAME-trainer``), whose hosts form one ``jax.distributed``
trainer and whose host 0 also runs the transport server; ``rollout.workers / hosts``
worker slices (``NAME-worker-I``), one inference worker per host, as Spot VMs unless
told otherwise. Queued resources are named after their node with a ``-qr`` suffix. A run
that judges in a stage also gets its verifier machines (CPU instances, see
:mod:`rlax_launchers.tpu_vm.instances`), created after the slices.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from rlax_core.config.run_config import RunConfigBase
from rlax_core.contracts import RenderedArtifact
from rlax_core.errors import ConfigError
from rlax_core.plugins.registry import Registry
from rlax_launchers.cluster_config import cluster_run_config
from rlax_launchers.role_commands import (
    trainer_command,
    transport_server_command,
    verifier_command,
    worker_command,
)
from rlax_launchers.run_credentials import CredentialFiles, placeholder_files
from rlax_launchers.run_identity import resource_prefix, shared_run_dir
from rlax_launchers.run_packages import RunPackage, jax_requirement, run_packages
from rlax_launchers.tpu_slice import TpuSliceShape, check_trainer_mesh
from rlax_launchers.tpu_vm.commands import SliceNode, create_command
from rlax_launchers.tpu_vm.config import TpuVmLauncherConfig
from rlax_launchers.tpu_vm.instances import (
    VerifierInstance,
    create_instance_command,
    verifier_instances,
)
from rlax_launchers.tpu_vm.startup import (
    CONFIG_PATH,
    SECRETS_DIR,
    TRANSPORT_HOST_PLACEHOLDER,
    TRANSPORT_STATE_DIR,
    Unit,
    startup_script,
    trainer_host_facts,
    transport_lookup_command,
    verifier_host_facts,
    worker_host_facts,
)
from rlax_launchers.tpu_vm.wheels import Wheel, unbuilt_wheels
from rlax_launchers.transport_placement import transport_placement

LAUNCH_SUBDIR = "launch"


@dataclass(frozen=True)
class TpuVmPlan:
    """Everything ``launch`` creates, in order.

    Attributes:
        prefix: the resource-name prefix.
        trainer: the trainer slice.
        workers: the worker slices.
        verifiers: the verifier machines.
        scripts: script file → text.
        slice_commands: the slices' create commands, trainer first.
        verifier_commands: the verifier machines' create commands.
    """

    prefix: str
    trainer: SliceNode
    workers: list[SliceNode]
    verifiers: list[VerifierInstance]
    scripts: dict[Path, str]
    slice_commands: list[list[str]]
    verifier_commands: list[list[str]]

    @property
    def slices(self) -> list[SliceNode]:
        """The trainer slice, then the worker slices."""
        return [self.trainer, *self.workers]

    @property
    def commands(self) -> list[list[str]]:
        """Every create command: the slices, then the verifier machines."""
        return [*self.slice_commands, *self.verifier_commands]

    def artifacts(self) -> list[RenderedArtifact]:
        """The scripts, then the commands, as ``rlax launch --dry-run`` prints them."""
        import shlex

        rendered = [
            RenderedArtifact(kind="script", name=str(path), content=text)
            for path, text in self.scripts.items()
        ]
        rendered += [
            RenderedArtifact(kind="command", name=" ".join(c[:5]), content=shlex.join(c))
            for c in self.commands
        ]
        return rendered


def slice_nodes(
    config: TpuVmLauncherConfig, run_config: RunConfigBase, run_dir: Path
) -> tuple[str, SliceNode, list[SliceNode]]:
    """The run's prefix, trainer slice and worker slices (no files, no commands).

    Raises:
        ConfigError: the name is unusable, or the workers do not fill whole slices.
    """
    prefix = resource_prefix(run_config, config.name)
    scripts = run_dir / LAUNCH_SUBDIR
    trainer_shape = config.trainer.shape()
    worker_shape = config.workers.shape()
    workers = run_config.rollout.workers
    if workers % worker_shape.hosts:
        raise ConfigError(
            f"rollout.workers is {workers}, but each worker slice ({worker_shape.accelerator_type})"
            f" has {worker_shape.hosts} hosts, one worker each: make rollout.workers a multiple "
            f"of {worker_shape.hosts}, or use a smaller worker slice"
        )

    def node(role: str, index: int | None, shape: TpuSliceShape, spot: bool) -> SliceNode:
        name = f"{prefix}-{role}" if index is None else f"{prefix}-{role}-{index}"
        return SliceNode(
            role=role,  # type: ignore[arg-type]
            index=index,
            node=name,
            queued_resource=f"{name}-qr" if config.queued_resources else None,
            shape=shape,
            spot=spot,
            script=scripts / f"{role}-startup.sh",
        )

    trainer = node("trainer", None, trainer_shape, False)
    worker_slices = [
        node("worker", i, worker_shape, config.workers.spot)
        for i in range(workers // worker_shape.hosts)
    ]
    return prefix, trainer, worker_slices


def build_plan(
    config: TpuVmLauncherConfig,
    run_config: RunConfigBase,
    run_dir: Path,
    registry: Registry,
    wheels: list[Wheel] | None = None,
    credentials: CredentialFiles | None = None,
) -> TpuVmPlan:
    """The slices, their start-up scripts and the commands that create them.

    Args:
        config: the launcher section.
        run_config: the run config.
        run_dir: the local folder of the launcher's files (the scripts go to ``launch/``).
        registry: the installed plugins.
        wheels: the RLAX wheels the hosts install (:func:`shipped_packages`, built and
            uploaded); None names them unbuilt, as ``--dry-run`` shows them. Unused when
            ``launcher.pip_packages`` is set.
        credentials: the run's transport credentials the scripts write, each slice its
            role's folder (None: placeholders, as ``--dry-run`` shows them; unused when
            ``launcher.credentials.insecure``).

    Raises:
        ConfigError: the run cannot be placed (see :func:`slice_nodes`,
            :func:`~rlax_launchers.transport_placement.transport_placement`,
            :func:`~rlax_launchers.run_identity.shared_run_dir`), or it asks for
            verifiers but judges inline.
    """
    prefix, trainer, workers = slice_nodes(config, run_config, run_dir)
    check_trainer_mesh(run_config, config.trainer.shape())
    verifiers = verifier_instances(config, run_config, prefix, run_dir / LAUNCH_SUBDIR)
    secure = not config.credentials.insecure
    placement = transport_placement(run_config, "tpu-vm", tls=secure)
    shared_dir = shared_run_dir(run_config, config.run_dir, launcher="tpu-vm")
    # With TLS, clients reach the server by the name its certificate holds.
    name = transport_server_name(prefix) if secure else None
    cluster_config = cluster_run_config(
        run_config,
        run_dir=shared_dir,
        placement=placement,
        transport_host=name or TRANSPORT_HOST_PLACEHOLDER,
        secrets_dir=SECRETS_DIR,
        split_inline_credentials=False,
        secure=secure,
    )
    files = (credentials or placeholder_files()) if secure else None
    if config.pip_packages:
        wheels, requirements = [], list(config.pip_packages)
        verifier_requirements = requirements
    else:
        if wheels is None:
            wheels = unbuilt_wheels(shipped_packages(config, run_config, registry), shared_dir)
        requirements = [jax_requirement("tpu")]
        # Judging needs no accelerator: JAX for CPU, not libtpu.
        verifier_requirements = [jax_requirement("cpu")]
    lookup = transport_lookup_command(
        trainer_node=trainer.node, project=config.project, zone=config.zone
    )
    common = {
        "cluster_config": cluster_config,
        "wheels": wheels,
        "apt_packages": config.apt_packages,
        "python_version": config.python_version,
        "stop_timeout_s": config.stop_timeout_s,
        "transport_name": name,
    }
    server = transport_server_command(
        CONFIG_PATH,
        placement.server_set_args(TRANSPORT_STATE_DIR),
        insecure=config.credentials.insecure,
    )
    trainer_units = [
        Unit("rlax-transport", f"RLAX {placement.type} transport server", server, "always", True),
        Unit(
            "rlax-trainer",
            f"RLAX trainer of run {prefix}",
            trainer_command(
                CONFIG_PATH,
                shared_dir,
                num_processes=trainer.shape.hosts,
                coordinator=f"${{COORDINATOR_IP}}:{config.coordinator_port}",
                process_id="${PROCESS_ID}",
            ),
            "on-failure",
        ),
    ]
    worker_unit = Unit(
        "rlax-worker",
        f"RLAX inference worker of run {prefix}",
        worker_command(CONFIG_PATH, shared_dir, "${WORKER_ID}"),
        "on-failure",
    )
    scripts = {
        trainer.script: startup_script(
            title=f"RLAX run {prefix}: trainer slice {trainer.node} "
            f"({_hosts(trainer.shape.hosts)})",
            host_facts=trainer_host_facts(),
            units=trainer_units,
            requirements=requirements,
            # Host 0 runs the server beside a trainer: both folders, at one path.
            role_credentials=files.merged("trainer", "server") if files else None,
            **common,
        ),
    }
    if workers:
        scripts[workers[0].script] = startup_script(
            title=f"RLAX run {prefix}: worker slices {prefix}-worker-* "
            f"({_hosts(workers[0].shape.hosts)} each)",
            host_facts=worker_host_facts(),
            units=[worker_unit],
            requirements=requirements,
            transport_lookup=lookup,
            role_credentials=files.folders["worker"] if files else None,
            **common,
        )
    if verifiers:
        scripts[verifiers[0].script] = startup_script(
            title=f"RLAX run {prefix}: verifier machines {prefix}-verifier-* "
            f"({config.verifiers.machine_type}, one verifier each)",
            host_facts=verifier_host_facts(),
            units=[
                Unit(
                    "rlax-verifier",
                    f"RLAX verifier of run {prefix}",
                    verifier_command(CONFIG_PATH, shared_dir, "${VERIFIER_ID}"),
                    "on-failure",
                )
            ],
            requirements=verifier_requirements,
            transport_lookup=lookup,
            role_credentials=files.folders["verifier"] if files else None,
            **{**common, "wheels": [_without_extra(w) for w in wheels]},
        )
    return TpuVmPlan(
        prefix,
        trainer,
        workers,
        verifiers,
        scripts,
        [create_command(s, config, prefix) for s in [trainer, *workers]],
        [create_instance_command(v, config, prefix) for v in verifiers],
    )


def transport_server_name(prefix: str) -> str:
    """The name clients reach the transport server by (its certificate's; each host maps
    it to the trainer slice's host 0 in /etc/hosts)."""
    return f"{prefix}-transport"


def shipped_packages(
    config: TpuVmLauncherConfig, run_config: RunConfigBase, registry: Registry
) -> list[RunPackage]:
    """The RLAX distributions every host installs as wheels (the transport's with its
    server extra: host 0 of the trainer slice runs the server, and all hosts share one
    set of wheels).

    Raises:
        ConfigError: the transport cannot serve a tpu-vm run.
    """
    placement = transport_placement(run_config, "tpu-vm")
    return run_packages(run_config, registry, server_extra=placement.server_extra)


def _without_extra(wheel: Wheel) -> Wheel:
    """The wheel installed plain: a verifier runs no transport server."""
    return replace(wheel, package=replace(wheel.package, extra=None))


def _hosts(count: int) -> str:
    return f"{count} host" if count == 1 else f"{count} hosts"
