"""What a docker launch creates: the containers' run config, their network and each
container's command, mounts, limits and labels.

Every container runs the RLAX image with the role command the other launchers use
(:mod:`rlax_launchers.role_commands`) and sees the host's files at their own paths: the
run directory (read-write), every local file the run config reads (model, tokenizer,
datasets; read-only), the compilation cache and the user's ``volumes``. The run config
they read is ``RUN_DIR/launch/run.yaml``: the user's, with its paths made absolute, the
``launcher`` section dropped, and the transport pointed at the server's container and,
unless the run opts out, at the role's credentials, mounted read-only at
:data:`~rlax_core.kit.launcher.MOUNT_DIR` (each role its own folder). The plan is pure:
:meth:`DockerPlan.docker_run` prints it as ``docker run`` commands (``--dry-run``), and
the launcher creates the same containers through docker-py.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlax_core.config.launch_checks import config_paths
from rlax_core.config.run_config import RunConfigBase
from rlax_core.kit.launcher import MOUNT_DIR, ProcessRole, is_remote, resolved_config
from rlax_launchers.cluster_config import cluster_run_config, run_config_yaml
from rlax_launchers.docker.config import DockerLauncherConfig
from rlax_launchers.local.launcher import (
    STATE_FIELDS,
    TRANSPORT_STATE_DIR,
    compilation_cache_env,
)
from rlax_launchers.role_commands import (
    trainer_command,
    transport_server_command,
    verifier_command,
    verifier_count,
    worker_command,
)
from rlax_launchers.run_credentials import GENERATED_SUBDIR
from rlax_launchers.run_identity import resource_prefix
from rlax_launchers.transport_placement import transport_placement

CONFIG_FILE = "launch/run.yaml"
SECRETS_DIR = "launch/secrets"
LABEL_RUN_DIR = "rlax.run-dir"
LABEL_PROCESS = "rlax.process"


@dataclass(frozen=True)
class BindMount:
    """A host path seen inside a container."""

    source: str
    target: str
    read_only: bool

    def flag(self) -> str:
        """``docker run --mount``'s value."""
        readonly = ",readonly" if self.read_only else ""
        return f"type=bind,source={self.source},target={self.target}{readonly}"


@dataclass(frozen=True)
class ContainerSpec:
    """One process of the run as a container."""

    name: str  # the process's name in the run: transport, trainer, w0, v0
    role: ProcessRole
    container: str  # the container's name on the engine
    command: list[str]
    mounts: tuple[BindMount, ...]
    cpus: float | None = None
    memory: str | None = None


@dataclass
class DockerPlan:
    """Everything a docker launch makes, before it makes it.

    Attributes:
        image: the image every container runs.
        network: ``host`` or the network's name.
        own_network: the launch creates ``network`` and removes it at the end.
        config_file: the containers' run config (in the run directory).
        config_yaml: its text.
        secrets: files a run without per-run credentials ships (path → bytes).
        credentials: the folder of the run's credentials (None: the run opted out).
        environment: every container's environment.
        user: ``UID:GID`` the containers run as.
        labels: on every container (and the network): which run they belong to.
        containers: the transport server first, then trainer, workers, verifiers.
    """

    image: str
    network: str
    own_network: bool
    config_file: Path
    config_yaml: str
    secrets: dict[Path, bytes]
    credentials: Path | None
    environment: dict[str, str]
    user: str
    labels: dict[str, str]
    containers: list[ContainerSpec] = field(default_factory=list)

    def container_labels(self, spec: ContainerSpec) -> dict[str, str]:
        """The run's labels, and which process of it ``spec`` is."""
        return {**self.labels, LABEL_PROCESS: spec.name, "rlax.role": spec.role}

    def create_options(self, spec: ContainerSpec) -> dict[str, Any]:
        """``client.containers.create``'s arguments for ``spec`` but command, name, env."""
        from docker.types import Mount

        options: dict[str, Any] = {
            "image": self.image,
            "user": self.user,
            "labels": self.container_labels(spec),
            "mounts": [
                Mount(m.target, m.source, type="bind", read_only=m.read_only) for m in spec.mounts
            ],
        }
        if self.network == "host":
            options["network_mode"] = "host"
        else:
            options["network"] = self.network
            options["hostname"] = spec.container
        if spec.cpus is not None:
            options["nano_cpus"] = round(spec.cpus * 1e9)
        if spec.memory is not None:
            options["mem_limit"] = spec.memory
        return options

    def docker_run(self, spec: ContainerSpec) -> str:
        """The equivalent ``docker run`` command line."""
        argv = ["docker", "run", "--detach", "--init", "--name", spec.container,
                "--user", self.user, "--network", self.network]  # fmt: skip
        if self.network != "host":
            argv += ["--hostname", spec.container]
        for key, value in self.container_labels(spec).items():
            argv += ["--label", f"{key}={value}"]
        for mount in spec.mounts:
            argv += ["--mount", mount.flag()]
        for key, value in self.environment.items():
            argv += ["--env", f"{key}={value}"]
        if spec.cpus is not None:
            argv += ["--cpus", f"{spec.cpus:g}"]
        if spec.memory is not None:
            argv += ["--memory", spec.memory]
        return shlex.join([*argv, self.image, *spec.command])


def docker_plan(
    config: DockerLauncherConfig,
    run_config: RunConfigBase,
    run_dir: Path,
    config_dir: Path,
) -> DockerPlan:
    """The plan of a docker launch of ``run_config`` in ``run_dir`` (an absolute path).

    Raises:
        ConfigError: the transport has no server (inproc), or the transport section names
            credentials of its own while the launcher gives the run's.
    """
    secure = not config.credentials.insecure
    placement = transport_placement(run_config, "docker", tls=secure)
    prefix = f"rlax-{resource_prefix(run_config, None)}-{_short_hash(str(run_dir))}"
    server = f"{prefix}-transport"
    host_network = config.network == "host"
    network = config.network or prefix
    cluster = cluster_run_config(
        run_config,
        run_dir=str(run_dir),
        placement=placement,
        transport_host="127.0.0.1" if host_network else server,
        secrets_dir=str(run_dir / SECRETS_DIR),
        split_inline_credentials=False,
        secure=secure,
    )
    # The paths the processes read, absolute: the containers see them at the same place.
    resolved = resolved_config(run_config, config_dir, run_dir)
    cluster.settings["model"] = resolved["model"]
    cluster.settings["data"] = resolved["data"]
    state_dir, state_mounts = _state_folder(cluster.settings["transport"], run_dir)
    environment = {"PYTHONUNBUFFERED": "1", "HOME": "/tmp",
                   **compilation_cache_env(config, run_dir), **config.env}  # fmt: skip
    credentials = None
    if secure:
        folder = config.credentials.folder
        credentials = Path(folder).expanduser().resolve() if folder else run_dir / GENERATED_SUBDIR
    shared = _shared_mounts(config, run_config, config_dir, run_dir, environment)
    config_file = str(run_dir / CONFIG_FILE)  # as the role commands name it
    plan = DockerPlan(
        image=config.image,
        network=network,
        own_network=config.network is None,
        config_file=run_dir / CONFIG_FILE,
        config_yaml=run_config_yaml(cluster.settings),
        secrets={run_dir / SECRETS_DIR / k: v for k, v in cluster.credential_files.items()},
        credentials=credentials,
        environment=environment,
        user=config.user or f"{os.getuid()}:{os.getgid()}",
        labels={"rlax.run": run_config.run.name, LABEL_RUN_DIR: str(run_dir)},
    )

    def add(name: str, role: ProcessRole, command: list[str], *extra: BindMount) -> None:
        folder = "server" if role == "transport" else role
        own = (BindMount(str(credentials / folder), MOUNT_DIR, True),) if credentials else ()
        limits = config.resources.get(role)
        plan.containers.append(
            ContainerSpec(
                name, role, f"{prefix}-{name}", command, (*shared, *extra, *own),
                cpus=limits.cpus if limits else None, memory=limits.memory if limits else None,
            )
        )  # fmt: skip

    interface = "127.0.0.1" if host_network else "0.0.0.0"
    serve = transport_server_command(
        config_file, placement.server_set_args(state_dir, interface), insecure=not secure,
        run_dir=str(run_dir),
    )  # fmt: skip
    add("transport", "transport", serve, *state_mounts)
    trainer = trainer_command(
        config_file, str(run_dir), num_processes=1, coordinator="", process_id="0"
    )
    add("trainer", "trainer", [*trainer, "--no-progress"])
    for i in range(config.workers or run_config.rollout.workers):
        add(f"w{i}", "worker", worker_command(config_file, str(run_dir), f"w{i}"))
    for i in range(verifier_count(run_config, config.verifiers)):
        add(f"v{i}", "verifier", verifier_command(config_file, str(run_dir), f"v{i}"))
    return plan


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def _state_folder(transport: dict[str, Any], run_dir: Path) -> tuple[str, list[BindMount]]:
    """Where the transport server keeps its state: the config's folder (mounted), else
    ``RUN_DIR/transport``, so a restarted server still holds the versions and the queues."""
    server = transport.get("server")
    for name in STATE_FIELDS:
        folder = server.get(name) if isinstance(server, dict) else None
        if folder:
            return folder, [BindMount(folder, folder, read_only=False)]
    return str(run_dir / TRANSPORT_STATE_DIR), []


def _shared_mounts(
    config: DockerLauncherConfig,
    run_config: RunConfigBase,
    config_dir: Path,
    run_dir: Path,
    environment: dict[str, str],
) -> tuple[BindMount, ...]:
    """The mounts of every container: the run directory, what the run reads, the
    compilation cache, the user's volumes."""
    mounts = [BindMount(str(run_dir), str(run_dir), read_only=False)]

    def outside_run_dir(path: str) -> bool:
        return not Path(path).is_relative_to(run_dir)

    for _, value in config_paths(run_config):
        if not is_remote(value):
            path = os.path.abspath(config_dir / value)
            if outside_run_dir(path):
                mounts.append(BindMount(path, path, read_only=True))
    cache = environment.get("JAX_COMPILATION_CACHE_DIR")
    if cache and outside_run_dir(cache):
        mounts.append(BindMount(cache, cache, read_only=False))
    for volume in config.volumes:
        source, target, *mode = volume.split(":")
        mounts.append(BindMount(source, target, read_only=mode == ["ro"]))
    unique = {mount.target: mount for mount in mounts}  # a later one wins, as in docker
    return tuple(unique.values())


def host_paths(plan: DockerPlan) -> list[str]:
    """Every host path some container mounts (each once)."""
    return sorted({m.source for spec in plan.containers for m in spec.mounts})
