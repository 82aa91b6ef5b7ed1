"""What a cloud run's resources are called and where its processes share files."""

from __future__ import annotations

import re

from rlax_core.config.run_config import RunConfigBase
from rlax_core.errors import ConfigError

# Kubernetes object names and label values, TPU node names and GCE labels all accept
# this; 40 characters leave room for suffixes such as "-worker-12-3" within 63.
_RESOURCE_NAME = re.compile(r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")


def resource_prefix(run_config: RunConfigBase, override: str | None) -> str:
    """The prefix of every resource name: ``override``, else ``run.name`` in lowercase.

    Raises:
        ConfigError: the name is not a valid resource name.
    """
    name = override if override is not None else run_config.run.name.lower().replace("_", "-")
    name = name.replace(".", "-")
    if not _RESOURCE_NAME.match(name):
        source = "launcher.name" if override is not None else f"run.name ({run_config.run.name!r})"
        raise ConfigError(
            f"{source} gives resource name {name!r}, but cloud resource names need 1-40 "
            "lowercase letters, digits and '-', starting with a letter and not ending with "
            "'-'; set launcher.name, e.g. 'my-run'"
        )
    return name


def shared_run_dir(
    run_config: RunConfigBase, configured: str | None, *, launcher: str, trainer_hosts: int = 1
) -> str:
    """The run directory that every process of a cloud run reads and writes.

    ``configured`` (the launcher's ``run_dir``) wins over ``run.run_dir``.

    Raises:
        ConfigError: there is none, it is a local path, which hosts cannot share, or a
            trainer of several hosts (``trainer_hosts``) would checkpoint to anything but
            ``gs://`` (Orbax writes elsewhere through one local folder, so the trainer
            would refuse it in its pods, after the slice was found).
    """
    run_dir = configured or run_config.run.run_dir
    if run_dir is None:
        raise ConfigError(
            f"a {launcher} run needs a run directory all its hosts share: set launcher.run_dir "
            "(or run.run_dir) to e.g. gs://BUCKET/runs/NAME"
        )
    if "://" not in run_dir:
        raise ConfigError(
            f"run directory {run_dir!r} is a local path, which the hosts of a {launcher} run "
            "do not share: use e.g. gs://BUCKET/runs/NAME"
        )
    if trainer_hosts > 1 and not run_dir.startswith("gs://"):
        field = "launcher.run_dir" if configured else "run.run_dir"
        raise ConfigError(
            f"{field} is {run_dir!r}, but a trainer of {trainer_hosts} hosts checkpoints only "
            "to gs:// (each host writes its shards there; elsewhere Orbax writes through one "
            "local folder): use e.g. gs://BUCKET/runs/NAME"
        )
    return run_dir
