"""The Python packages a run's hosts install: the RLAX plugins the run config uses, and JAX."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

from rlax_core.config.run_config import RunConfigBase
from rlax_core.plugins.registry import Registry


@dataclass(frozen=True)
class RunPackage:
    """One RLAX distribution a run needs.

    Attributes:
        name: the distribution, e.g. ``rlax-transport-nats``.
        version: the version installed here (the one that rendered and validated the
            config).
        extra: the extra the hosts install it with (the transport server's), or None.
    """

    name: str
    version: str
    extra: str | None = None

    @property
    def requirement(self) -> str:
        """``name[extra]==version``, as pip reads it."""
        extra = f"[{self.extra}]" if self.extra else ""
        return f"{self.name}{extra}=={self.version}"


def run_packages(
    run_config: RunConfigBase, registry: Registry, *, server_extra: str | None
) -> list[RunPackage]:
    """The RLAX distributions the run uses: rlax-core, then each plugin's package.

    Args:
        run_config: the validated run config.
        registry: the installed plugins (which package registered each ``type``).
        server_extra: the extra the transport's package needs on the server host.
    """
    used: list[tuple[str, str]] = [("transport", run_config.transport.type)]
    verifier = run_config.verifier
    if verifier is not None:
        used.append(("judge", verifier.judge.type))
        if verifier.sandbox is not None:
            used.append(("sandbox", verifier.sandbox.type))
    from rlax_core import __version__

    packages = {"rlax-core": RunPackage("rlax-core", __version__)}
    for kind, name in used:
        registration = registry.get(kind, name)
        if registration.package in packages:
            continue
        extra = server_extra if kind == "transport" else None
        packages[registration.package] = RunPackage(
            registration.package, registration.version, extra
        )
    return list(packages.values())


def jax_requirement(jax_extra: str) -> str:
    """``jax[jax_extra]`` pinned to the JAX installed here, e.g. ``jax[tpu]==0.7.2``."""
    return f"jax[{jax_extra}]=={importlib.metadata.version('jax')}"
