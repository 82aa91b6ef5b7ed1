"""The sandbox a code judge or a code tool runs in: the run's, else the local one."""

from __future__ import annotations

from rlax_core.contracts import SandboxBackend
from rlax_core.plugins import BuildContext


def configured_sandbox(context: BuildContext) -> SandboxBackend:
    """``verifier.sandbox`` (or ``context.sandbox``), the local sandbox if none is set."""
    verifier = getattr(context.run_config, "verifier", None)
    if context.sandbox is None and getattr(verifier, "sandbox", None) is None:
        local = context.registry.get("sandbox", "local")
        return local.factory(local.config_cls(), context)
    return context.build_sandbox()
