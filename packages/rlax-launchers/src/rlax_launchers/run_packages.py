"""The Python packages a run's hosts install: the RLAX plugins the run config uses."""

from __future__ import annotations

import importlib.metadata

from rlax_core.config.run_config import RunConfigBase
from rlax_core.plugins.registry import Registry


def run_requirements(
    run_config: RunConfigBase, registry: Registry, *, server_extra: str | None, jax_extra: str
) -> list[str]:
    """pip requirements for the run: rlax-core, each plugin package it uses, and JAX.

    Every RLAX package is pinned to the version installed here (the one that rendered and
    validated the config); ``jax[jax_extra]`` is pinned to the installed JAX.

    Args:
        run_config: the validated run config.
        registry: the installed plugins (which package registered each ``type``).
        server_extra: the extra the transport's package needs on the server host.
        jax_extra: JAX's extra for the accelerator, e.g. ``tpu``.
    """
    used: list[tuple[str, str]] = [("transport", run_config.transport.type)]
    verifier = run_config.verifier
    if verifier is not None:
        used.append(("judge", verifier.judge.type))
        if verifier.sandbox is not None:
            used.append(("sandbox", verifier.sandbox.type))
    from rlax_core import __version__

    requirements = {"rlax-core": f"rlax-core=={__version__}"}
    for kind, name in used:
        registration = registry.get(kind, name)
        if registration.package in requirements:
            continue
        extra = f"[{server_extra}]" if kind == "transport" and server_extra else ""
        requirements[registration.package] = (
            f"{registration.package}{extra}=={registration.version}"
        )
    jax_version = importlib.metadata.version("jax")
    return [*requirements.values(), f"jax[{jax_extra}]=={jax_version}"]
