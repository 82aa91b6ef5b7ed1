"""Settings of the ``docker`` launcher (the ``launcher:`` section of a run config)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rlax_launchers.local.config import LocalLauncherConfig
from rlax_launchers.run_credentials import RunCredentialsConfig


class RoleResources(BaseModel):
    """What the containers of one role may use."""

    model_config = ConfigDict(extra="forbid")

    cpus: float | None = Field(
        default=None, gt=0, description="CPUs (docker run --cpus); null: no limit."
    )
    memory: str | None = Field(
        default=None,
        description="Memory limit (docker run --memory), e.g. '8g' or '512m'; null: no limit. "
        "A container over it is killed by the kernel and restarted by the launcher.",
    )

    @field_validator("memory")
    @classmethod
    def _docker_size(cls, value: str | None) -> str | None:
        if value is None:
            return None
        number = value[:-1] if value[-1:].lower() in "bkmg" else value
        if not number.isdigit():
            raise ValueError(
                f"{value!r} is not a memory size: give a whole number with an optional unit "
                "b, k, m or g, e.g. '8g'"
            )
        return value


class DockerLauncherConfig(LocalLauncherConfig):
    """Runs the transport server, the trainer, the workers and the verifiers as containers
    of the RLAX image on this machine's Docker engine, supervised as the ``local``
    launcher supervises processes."""

    image: str = Field(
        default="rlax:cpu",
        description="The RLAX image every container runs. Build it from a checkout with "
        "`python -m rlax_launchers.docker.image` (offline), or `docker build --build-arg "
        "JAX_EXTRA= -t rlax:cpu .` where base images can be pulled.",
    )
    network: str | None = Field(
        default=None,
        description="null: a bridge network of the run's own (rlax-NAME), created and removed "
        "with it, where the clients reach the transport server by its container name and "
        "no port is opened on the host; 'host': the host's network (the transport "
        "address of the run config, on 127.0.0.1); any other name: that existing network.",
    )
    resources: dict[str, RoleResources] = Field(
        default_factory=dict,
        description="Limits per role (transport, trainer, worker, verifier), e.g. "
        "{worker: {cpus: 2, memory: 8g}}.",
    )
    volumes: list[str] = Field(
        default_factory=list,
        description="More bind mounts, as docker run -v takes them: 'HOST:CONTAINER[:ro]'. "
        "The run directory, the compilation cache and every local file the run config "
        "reads (model, tokenizer, datasets) are mounted at their own paths already.",
    )
    user: str | None = Field(
        default=None,
        description="UID:GID the containers run as; null: yours, so the run directory's "
        "files stay yours.",
    )
    credentials: RunCredentialsConfig = Field(
        default_factory=RunCredentialsConfig,
        description="The run's transport credentials: generated into RUN_DIR/launch/"
        "credentials unless a folder is given; each container mounts its role's folder.",
    )

    @field_validator("resources")
    @classmethod
    def _known_roles(cls, value: dict[str, RoleResources]) -> dict[str, RoleResources]:
        unknown = sorted(set(value) - {"transport", "trainer", "worker", "verifier"})
        if unknown:
            raise ValueError(
                f"no role {', '.join(unknown)}: resources are given per role, one of "
                "transport, trainer, worker, verifier"
            )
        return value

    @field_validator("volumes")
    @classmethod
    def _bind_mounts(cls, value: list[str]) -> list[str]:
        for volume in value:
            parts = volume.split(":")
            if (
                len(parts) not in (2, 3)
                or not all(p.startswith("/") for p in parts[:2])
                or (len(parts) == 3 and parts[2] not in ("ro", "rw"))
            ):
                raise ValueError(
                    f"{volume!r} is not a bind mount: give 'HOST:CONTAINER' or "
                    "'HOST:CONTAINER:ro', both absolute paths"
                )
        return value
