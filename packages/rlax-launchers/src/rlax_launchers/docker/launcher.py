"""The ``docker`` launcher: a run as supervised containers on this machine's Docker engine.

``rlax launch CONFIG`` with ``launcher: {type: docker}`` starts the transport server,
the trainer, the workers and the verifiers as containers of the RLAX image (see
:mod:`rlax_launchers.docker.plan` for what each one gets), through docker-py, and
supervises them exactly as the ``local`` launcher supervises processes: the same
:class:`~rlax_launchers.local.supervisor.Supervisor` restarts a container that died,
with back-off, and the trainer resumes from its checkpoint. ``rlax status RUN_DIR``
lists each container; ``rlax preempt RUN_DIR w1`` stops one as a scheduler would. When
the run ends or the launch is stopped, every container it made, and its network, is
removed; nothing else is touched (containers are found by the run directory's label).
``--dry-run`` prints the same containers as ``docker run`` commands.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rlax_core.config.run_config import RunConfigBase
from rlax_core.contracts import RenderedArtifact
from rlax_core.errors import ConfigError
from rlax_core.kit.launcher import SERVER
from rlax_core.plugins.registry import BuildContext, Registry
from rlax_launchers.docker.config import DockerLauncherConfig
from rlax_launchers.docker.container import SupervisedContainer
from rlax_launchers.docker.plan import (
    LABEL_RUN_DIR,
    ContainerSpec,
    DockerPlan,
    docker_plan,
    host_paths,
)
from rlax_launchers.local.launcher import LocalLauncher
from rlax_launchers.local.supervised import SupervisedProcess
from rlax_launchers.run_credentials import run_credentials_folder

_ENGINE_TIMEOUT_S = 600
_BUILD_HINT = (
    "build it from a checkout with `python -m rlax_launchers.docker.image` (offline, no "
    "registry), or `docker build --build-arg JAX_EXTRA= -t rlax:cpu .` where base images "
    "can be pulled; or set launcher.image"
)


class DockerLauncher(LocalLauncher):
    """Starts and supervises a run's containers on the local Docker engine.

    Args:
        config: the launcher section of the run config.
        registry: the installed plugins.
        config_path: the run config file (its folder is where relative paths start).
    """

    config: DockerLauncherConfig

    def __init__(
        self, config: DockerLauncherConfig, registry: Registry, config_path: Path | None
    ) -> None:
        super().__init__(config, registry, config_path)
        self._plan: DockerPlan | None = None
        self._client: Any = None

    def plan(self, run_config: RunConfigBase, run_dir: Path) -> DockerPlan:
        """What the launch makes (see :mod:`rlax_launchers.docker.plan`)."""
        config_dir = self.config_path.parent if self.config_path else Path.cwd()
        return docker_plan(self.config, run_config, run_dir.resolve(), config_dir)

    def render(self, run_config: RunConfigBase, run_dir: Path) -> list[RenderedArtifact]:
        """The containers' run config, then the commands that make the run by hand."""
        plan = self.plan(run_config, run_dir)
        artifacts = [RenderedArtifact(kind="script", name=str(plan.config_file),
                                      content=plan.config_yaml)]  # fmt: skip
        if plan.credentials is not None and not (plan.credentials / SERVER).exists():
            server = plan.containers[0].container
            artifacts.append(_command("credentials", ["rlax", "credentials",
                                      str(plan.credentials), "--server-host", server]))  # fmt: skip
        if plan.own_network:
            artifacts.append(_command("network", ["docker", "network", "create", *_labels(plan),
                                                  plan.network]))  # fmt: skip
        for spec in plan.containers:
            artifacts.append(
                RenderedArtifact(kind="command", name=spec.name, content=plan.docker_run(spec))
            )
        return artifacts

    def processes(self, run_config: RunConfigBase, run_dir: Path) -> list[SupervisedProcess]:
        """The run's containers, in the order they start (not yet created)."""
        plan = self._plan or self.plan(run_config, run_dir)
        return [self._container(plan, spec, run_dir) for spec in plan.containers]

    def _container(
        self, plan: DockerPlan, spec: ContainerSpec, run_dir: Path
    ) -> SupervisedContainer:
        return SupervisedContainer(
            spec.name, spec.role, spec.command, run_dir, client=self._client,
            container_name=spec.container, options=plan.create_options(spec),
        )  # fmt: skip

    def _prepare(self, run_config: RunConfigBase, run_dir: Path) -> list[SupervisedProcess]:
        """Checks the engine, the image and the mounts; writes the containers' config and
        credentials; makes the network.

        Raises:
            ConfigError: no engine answers, the image is missing, or a path to mount is.
        """
        self._client = _engine()
        plan = self._plan = self.plan(run_config, run_dir)
        _check_image(self._client, plan.image)
        made = [run_dir, Path(plan.environment.get("JAX_COMPILATION_CACHE_DIR", run_dir))]
        missing = [
            path
            for path in host_paths(plan)
            if not Path(path).exists() and not any(Path(path).is_relative_to(f) for f in made)
        ]
        if missing:
            raise ConfigError(
                f"the containers would mount {', '.join(missing)}, which "
                f"{'does' if len(missing) == 1 else 'do'} not exist here: fix the run "
                "config's paths or launcher.volumes"
            )
        for folder in made:
            folder.mkdir(parents=True, exist_ok=True)  # what the run writes
        if plan.credentials is not None:
            folder = run_credentials_folder(self.config.credentials, run_dir,
                                            [plan.containers[0].container])  # fmt: skip
            print(f"the run's transport credentials: {folder}", file=sys.stderr)
        for path, content in plan.secrets.items():
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            path.write_bytes(content)
            path.chmod(0o600)
        plan.config_file.parent.mkdir(parents=True, exist_ok=True)
        plan.config_file.write_text(plan.config_yaml)
        if plan.own_network:
            _remove_networks(self._client, plan.network)  # one a dead launcher left
            self._client.networks.create(plan.network, driver="bridge", labels=plan.labels)
        processes = self.processes(run_config, run_dir)
        # Side by side: with the vfs storage driver each one copies the whole image.
        print(f"creating {len(processes)} containers of {plan.image}", file=sys.stderr, flush=True)
        try:
            _each(processes, lambda container: container.create(plan.environment))
        except BaseException:
            self._release(processes)
            raise
        return processes

    def _environment(self, run_dir: Path) -> dict[str, str]:
        """The containers' environment: the plan's, never this process's."""
        assert self._plan is not None
        return dict(self._plan.environment)

    def _release(self, processes: list[SupervisedProcess]) -> None:
        """Removes every container of the launch, then its network."""
        try:
            _each(processes, lambda container: container.remove())
        except Exception as exc:  # the run is over: say what is left, and how to remove it
            names = " ".join(
                p.container_name for p in processes if isinstance(p, SupervisedContainer)
            )
            print(f"warning: removing the run's containers failed ({exc}); remove what is "
                  f"left with `docker rm -f {names}`", file=sys.stderr)  # fmt: skip
        if self._plan is not None and self._plan.own_network:
            _remove_networks(self._client, self._plan.network)

    def stop(self, run_dir: Path) -> None:
        """Stops the run (through its launcher, if alive), then removes what is left of it:
        the containers and the network labelled with its run directory."""
        with contextlib.suppress(ConfigError):  # no process table: nothing was started
            super().stop(run_dir)
        client = _engine()
        label = f"{LABEL_RUN_DIR}={run_dir.resolve()}"
        for container in client.containers.list(all=True, filters={"label": label}):
            container.remove(force=True)
        for network in client.networks.list(filters={"label": label}):
            with contextlib.suppress(Exception):
                network.remove()


def _each(processes: list[SupervisedProcess], act: Callable[[SupervisedContainer], None]) -> None:
    """``act`` on every container at once; the first error is raised once all are done."""
    containers = [p for p in processes if isinstance(p, SupervisedContainer)]
    if containers:
        with ThreadPoolExecutor(len(containers)) as pool:
            for future in [pool.submit(act, c) for c in containers]:
                future.result()


def _command(name: str, argv: list[str]) -> RenderedArtifact:
    return RenderedArtifact(kind="command", name=name, content=shlex.join(argv))


def _labels(plan: DockerPlan) -> list[str]:
    return [flag for key, value in plan.labels.items() for flag in ("--label", f"{key}={value}")]


def _engine() -> Any:
    """A docker-py client of the engine that answers (``DOCKER_HOST`` or the socket).

    Raises:
        ConfigError: none answers.
    """
    import docker
    import docker.errors

    try:
        # Creating or removing a container copies or deletes the whole image with the vfs
        # storage driver: minutes, past docker-py's default of 60 s.
        client = docker.from_env(timeout=_ENGINE_TIMEOUT_S)
        client.ping()
    except docker.errors.DockerException as exc:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise ConfigError(
            f"launcher: {{type: docker}} needs a Docker engine, and none answers at {where} "
            f"({exc}): start it (e.g. `sudo systemctl start docker`), or set DOCKER_HOST"
        ) from None
    return client


def _check_image(client: Any, image: str) -> None:
    import docker.errors

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise ConfigError(f"launcher.image {image!r} is not on this Docker engine: "
                          f"{_BUILD_HINT}") from None  # fmt: skip


def _remove_networks(client: Any, name: str) -> None:
    import docker.errors

    for network in client.networks.list(names=[name]):
        with contextlib.suppress(docker.errors.APIError):
            network.remove()


def make_docker_launcher(config: DockerLauncherConfig, context: BuildContext) -> DockerLauncher:
    """Builds the launcher for the run config file in ``context.config_path``."""
    return DockerLauncher(config, context.registry, context.config_path)
