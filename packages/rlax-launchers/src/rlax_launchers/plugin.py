"""The rlax-launchers plugin module, loaded through its ``rlax`` entry point.

Registers the launchers: ``local`` (the run as supervised processes on this machine),
``docker`` (the same, each process a container of the RLAX image), ``tpu-vm`` (Cloud
TPU VM slices created with ``gcloud``) and ``gke`` (a JobSet and its companions on a GKE
cluster).
"""

from __future__ import annotations

from rlax_core.hookspecs import Register, hookimpl
from rlax_launchers.docker.config import DockerLauncherConfig
from rlax_launchers.docker.launcher import make_docker_launcher
from rlax_launchers.gke.config import GkeLauncherConfig
from rlax_launchers.gke.launcher import make_gke_launcher
from rlax_launchers.local.config import LocalLauncherConfig
from rlax_launchers.local.launcher import make_local_launcher
from rlax_launchers.tpu_vm.config import TpuVmLauncherConfig
from rlax_launchers.tpu_vm.launcher import make_tpu_vm_launcher


@hookimpl
def register_launchers(register: Register) -> None:
    """Registers the ``local``, ``docker``, ``tpu-vm`` and ``gke`` launchers."""
    register("local", make_local_launcher, LocalLauncherConfig)
    register("docker", make_docker_launcher, DockerLauncherConfig)
    register("tpu-vm", make_tpu_vm_launcher, TpuVmLauncherConfig)
    register("gke", make_gke_launcher, GkeLauncherConfig)
