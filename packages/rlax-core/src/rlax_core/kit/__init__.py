"""The kit: what a plugin may import from rlax-core, and nothing else.

A plugin (a transport, a verifier, a launcher; ours or a third party's) depends on
core's contracts and on this declared kit only, so core may reorganise everything else
without breaking a plugin. :data:`PUBLIC_MODULES` lists the modules a plugin's code may
import (each with its submodules); ``tests/test_dependency_direction.py`` fails when a
plugin in this workspace imports any other part of core.

- :mod:`rlax_core.contracts`: the interfaces a plugin implements (``ParameterStore``,
  ``Queue``, ``Transport``, ``TransportServer``, ``Judge``, ``SandboxBackend``,
  ``Launcher``).
- :mod:`rlax_core.types`: the records that cross them (policy versions, leases,
  rollouts, verdicts).
- :mod:`rlax_core.errors`: the errors a plugin raises, each with a message that says
  what to fix.
- :mod:`rlax_core.hookspecs` and :mod:`rlax_core.plugins`: ``hookimpl``, ``Register``,
  ``BuildContext`` and ``Registry``, to register factories and build what a factory
  needs from the run config.
- :mod:`rlax_core.config`: the run config (:class:`~rlax_core.config.RunConfigBase`,
  what ``context.run_config`` is, and its sections): what a launcher places and
  renders.
- :mod:`rlax_core.testing`: the contract suites a plugin runs against itself.
- :mod:`rlax_core.kit.transport`: building blocks of a transport: preparing a version
  to publish, checksums, the lazy-connection transport base, the in-memory store and
  lease table a server can serve.
- :mod:`rlax_core.kit.environment`: the base of environments that are OpenAI-client
  programs, and chat messages as the chat template reads them.
- :mod:`rlax_core.kit.launcher`: the run directory as launchers read and write it (the
  process table, events, status rows, metrics) and child processes that die with
  their parent, and the storage layer that reaches a run directory in a bucket.

- :mod:`rlax_core.kit.images`: container images built with no registry, from Debian
  packages, under a tag that names their inputs (the sandbox image, the RLAX image).

``rlax_core.__version__`` may be read too.
"""

PUBLIC_MODULES = (
    "rlax_core.contracts",
    "rlax_core.types",
    "rlax_core.errors",
    "rlax_core.hookspecs",
    "rlax_core.plugins",
    "rlax_core.config",
    "rlax_core.testing",
    "rlax_core.kit",
)
"""The modules (and their submodules) a plugin may import from rlax-core."""
