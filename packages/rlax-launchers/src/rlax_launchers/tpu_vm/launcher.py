"""The ``tpu-vm`` launcher: creates, inspects and deletes a run's Cloud TPU VM slices (and
its verifier machines)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from rlax_core.config.run_config import RunConfigBase
from rlax_core.contracts import Launcher, ProcessStatus, RenderedArtifact
from rlax_core.errors import RlaxError
from rlax_core.plugins.registry import BuildContext, Registry
from rlax_launchers.run_credentials import (
    GENERATED_SUBDIR,
    CredentialFiles,
    read_credential_files,
    run_credentials_folder,
)
from rlax_launchers.run_identity import resource_prefix, shared_run_dir
from rlax_launchers.tpu_vm.commands import (
    SliceNode,
    delete_command,
    graceful_stop_command,
    list_nodes_command,
    list_queued_resources_command,
)
from rlax_launchers.tpu_vm.config import TpuVmLauncherConfig
from rlax_launchers.tpu_vm.gcloud import GcloudError, is_not_found, run_gcloud
from rlax_launchers.tpu_vm.instances import (
    INSTANCE_STATES,
    VerifierInstance,
    create_instance_command,
    delete_instance_command,
    list_instances_command,
    staged,
    verifier_instances,
)
from rlax_launchers.tpu_vm.plan import (
    LAUNCH_SUBDIR,
    build_plan,
    shipped_packages,
    slice_nodes,
    transport_server_name,
)
from rlax_launchers.tpu_vm.wheels import WHEELS_SUBDIR, Wheel, build_and_upload_wheels

# TPU node states (Cloud TPU API) and queued-resource states → ProcessStatus.state.
_NODE_STATES = {
    "CREATING": "starting",
    "STARTING": "starting",
    "RESTARTING": "restarting",
    "REPAIRING": "restarting",
    "READY": "running",
    "STOPPING": "stopped",
    "STOPPED": "stopped",
    "DELETING": "stopped",
    "PREEMPTED": "failed",
    "TERMINATED": "failed",
}
_QUEUED_STATES = {
    "ACCEPTED": "starting",
    "WAITING_FOR_RESOURCES": "starting",
    "PROVISIONING": "starting",
    "CREATING": "starting",
    "ACTIVE": "running",
    # A preempted Spot queued resource is suspended, and stays so: it is never resumed,
    # only deleted and created again, as a failed one is.
    "SUSPENDING": "failed",
    "SUSPENDED": "failed",
    "DELETING": "stopped",
    "FAILED": "failed",
}


class TpuVmLauncher(Launcher):
    """Places a run on TPU VM slices with ``gcloud`` (see :mod:`rlax_launchers.tpu_vm.plan`).

    Args:
        config: the launcher section of the run config.
        registry: the installed plugins (to pin the packages the hosts install).
        run_config: the run config, which names the slices for :meth:`status` and
            :meth:`stop` (``render`` and ``launch`` are given it anyway).
    """

    creates_cloud_resources = True

    def __init__(
        self,
        config: TpuVmLauncherConfig,
        registry: Registry,
        run_config: RunConfigBase | None = None,
    ) -> None:
        self.config = config
        self.registry = registry
        self.run_config = run_config
        self._wheels: list[Wheel] | None = None

    def render(self, run_config: RunConfigBase, run_dir: Path) -> list[RenderedArtifact]:
        """The start-up scripts and the ``gcloud`` commands that create the slices.

        Nothing is built: the scripts name the RLAX wheels unbuilt, with placeholder
        hashes (see :mod:`rlax_launchers.tpu_vm.wheels`); ``--apply`` builds them. Nothing
        secret is generated or read either: the scripts write placeholders where the
        run's credentials go (see :mod:`rlax_launchers.run_credentials`).
        """
        if not self.config.credentials.insecure:
            source = self.config.credentials.folder or f"{run_dir / GENERATED_SUBDIR}"
            print(
                "the start-up scripts write placeholders for the run's transport credentials "
                f"here; --apply writes them from {source}",
                file=sys.stderr,
            )
        return build_plan(self.config, run_config, run_dir, self.registry).artifacts()

    def launch(self, run_config: RunConfigBase, run_dir: Path) -> None:
        """Builds and uploads the RLAX wheels, writes the start-up scripts under
        ``run_dir/launch`` and creates the slices.

        Idempotent, so it also repairs a run: a slice that exists is left alone, one that
        was preempted (or whose queued resource failed, or was suspended: a preempted
        Spot queued resource) is deleted and created again, a missing one is created. The
        verifier machines follow, the same way. The wheels are built once per launcher
        (``--watch`` calls this every round) into ``run_dir/launch/wheels`` and uploaded
        to ``RUN_DIR/wheels/`` (none with ``launcher.pip_packages``).

        Raises:
            ConfigError: the run cannot be placed, or its run directory is not ``gs://``.
            RlaxError: the wheels could not be built or uploaded.
            GcloudError: ``gcloud`` is missing, or a command failed (the slices before it
                exist: ``--stop`` deletes them).
        """
        if self._wheels is None and not self.config.pip_packages:
            shared_dir = shared_run_dir(run_config, self.config.run_dir, launcher="tpu-vm")
            self._wheels = build_and_upload_wheels(
                shipped_packages(self.config, run_config, self.registry),
                shared_dir,
                run_dir / LAUNCH_SUBDIR / WHEELS_SUBDIR,
            )
        plan = build_plan(
            self.config,
            run_config,
            run_dir,
            self.registry,
            self._wheels,
            self._credentials(run_config, run_dir),
        )
        for path, text in plan.scripts.items():
            # The scripts hold the run's credentials: this user's alone.
            path.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(path.parent, 0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
        states = self._slice_states(plan.prefix, plan.slices)
        created = 0
        for node, command in zip(plan.slices, plan.slice_commands, strict=True):
            state = states[node.node]
            if state not in (None, "failed"):
                print(f"{node.node} exists ({state}); left as it is", file=sys.stderr)
                continue
            if state == "failed":
                print(
                    f"{node.node} was preempted, suspended or failed; recreating it",
                    file=sys.stderr,
                )
                _run(delete_command(node, self.config))
            _run(command)
            created += 1
        print(
            f"created {created} of the {len(plan.slices)} slices of run {plan.prefix}; each "
            "host starts its roles when it boots (logs: /var/log/rlax-*.log on the hosts)",
            file=sys.stderr,
        )
        if staged(run_config):
            self._apply_verifiers(plan.prefix, plan.verifiers)

    def _credentials(self, run_config: RunConfigBase, run_dir: Path) -> CredentialFiles | None:
        """The run's credentials for the scripts: read from ``credentials.folder``, or
        generated under ``run_dir`` on the first ``--apply`` and reused after (None: the
        run has none)."""
        section = self.config.credentials
        if section.insecure:
            return None
        name = transport_server_name(resource_prefix(run_config, self.config.name))
        folder = run_credentials_folder(section, run_dir, [name])
        print(f"the run's transport credentials: {folder}", file=sys.stderr)
        return read_credential_files(folder)

    def _apply_verifiers(self, prefix: str, planned: list[VerifierInstance]) -> None:
        """Verifier machines as the config has them: the missing (or preempted) ones are
        created, and machines beyond ``verifiers.count`` deleted, so a changed count
        scales the verifiers on the next ``--apply``."""
        existing = self._verifier_machines(prefix)
        created = 0
        for instance in planned:
            found = existing.pop(instance.name, None)
            state = INSTANCE_STATES.get(found["status"], "starting") if found else None
            if state not in (None, "failed"):
                print(f"{instance.name} exists ({state}); left as it is", file=sys.stderr)
                continue
            if state == "failed":
                print(f"{instance.name} was preempted or stopped; recreating it", file=sys.stderr)
                _run(delete_instance_command(instance.name, found["zone"], self.config))
            _run(create_instance_command(instance, self.config, prefix))
            created += 1
        for name, extra in existing.items():
            print(f"{name} is beyond verifiers.count; deleting it", file=sys.stderr)
            _run(delete_instance_command(name, extra["zone"], self.config))
        print(
            f"created {created} of the {len(planned)} verifier machines of run {prefix}",
            file=sys.stderr,
        )

    def _verifier_machines(self, prefix: str) -> dict[str, dict[str, str]]:
        """The run's verifier machines that exist: name → their status and zone."""
        listing = run_gcloud(list_instances_command(self.config, prefix), capture_stdout=True)
        return {
            entry.get("name", ""): {
                "status": entry.get("status", ""),
                "zone": entry.get("zone", self.config.zone).rsplit("/", 1)[-1],
            }
            for entry in _json_list(listing)
        }

    def status(self, run_dir: Path) -> list[ProcessStatus]:
        """One entry per slice (its TPU VM's state, or its queued resource's while queued),
        then one per verifier machine, planned or left over."""
        run_config = self._config_for_status()
        prefix, trainer, workers = slice_nodes(self.config, run_config, run_dir)
        states = self._slice_states(prefix, [trainer, *workers])
        statuses = [
            ProcessStatus(role=node.role, name=node.node, state=states[node.node] or "stopped")
            for node in [trainer, *workers]
        ]
        if staged(run_config):
            existing = self._verifier_machines(prefix)
            scripts = run_dir / LAUNCH_SUBDIR
            instances = verifier_instances(self.config, run_config, prefix, scripts)
            planned = [v.name for v in instances]
            for name in [*planned, *(n for n in existing if n not in planned)]:
                found = existing.get(name)
                state = INSTANCE_STATES.get(found["status"], "starting") if found else "stopped"
                statuses.append(ProcessStatus(role="verifier", name=name, state=state))
        return statuses

    def _slice_states(self, prefix: str, slices: list[SliceNode]) -> dict[str, str | None]:
        """Node name → its state (as :class:`ProcessStatus` has them), None when absent."""
        listing = run_gcloud(list_nodes_command(self.config, prefix), capture_stdout=True)
        nodes = {e.get("name", "").rsplit("/", 1)[-1]: e for e in _json_list(listing)}
        queued: dict[str, Any] = {}
        if self.config.queued_resources:
            listing = run_gcloud(list_queued_resources_command(self.config), capture_stdout=True)
            queued = {e.get("name", "").rsplit("/", 1)[-1]: e for e in _json_list(listing)}
        states: dict[str, str | None] = {}
        for node in slices:
            state: str | None = None
            if node.node in nodes:
                state = _NODE_STATES.get(nodes[node.node].get("state", ""), "starting")
            if node.queued_resource in queued:
                raw = queued[node.queued_resource].get("state", {})
                raw = raw.get("state", "") if isinstance(raw, dict) else raw
                queued_state = _QUEUED_STATES.get(raw, "starting")
                # A suspended or failed queued resource fails its slice whatever its node
                # (if still listed) says; otherwise the node, once there, says more.
                if state is None or queued_state == "failed":
                    state = queued_state
            states[node.node] = state
        return states

    def stop(self, run_dir: Path) -> None:
        """Stops the trainer gracefully (it checkpoints), then deletes every slice and
        verifier machine: the worker slices, the verifiers, the trainer slice last.

        Slices already gone are skipped; a trainer that cannot be reached (preempted,
        never created) is deleted all the same. Verifier machines are found by their
        labels, so those of an older, larger ``verifiers.count`` go too.
        """
        run_config = self._config_for_status()
        prefix, trainer, workers = slice_nodes(self.config, run_config, run_dir)
        try:
            print(f"stopping the trainer of {prefix} (it writes a checkpoint)", file=sys.stderr)
            run_gcloud(graceful_stop_command(trainer, self.config))
        except GcloudError as exc:
            print(f"warning: {exc}; deleting the slices anyway", file=sys.stderr)
        for node in workers:
            self._delete(delete_command(node, self.config), node.node)
        if staged(run_config):
            for name, found in self._verifier_machines(prefix).items():
                self._delete(delete_instance_command(name, found["zone"], self.config), name)
        self._delete(delete_command(trainer, self.config), trainer.node)

    def _delete(self, command: list[str], name: str) -> None:
        try:
            _run(command)
        except GcloudError as exc:
            if not is_not_found(exc):
                raise
            print(f"{name} is already gone", file=sys.stderr)

    def _config_for_status(self) -> Any:
        if self.run_config is None:
            raise RlaxError(
                "the tpu-vm launcher was built without a run config, so it cannot name the "
                "run's slices: build it with BuildContext(run_config=...)"
            )
        return self.run_config


def _run(command: list[str]) -> None:
    print(f"running: {shlex.join(command)}", file=sys.stderr, flush=True)
    run_gcloud(command)


def _json_list(text: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(text or "[]")
    except json.JSONDecodeError as exc:
        raise GcloudError(
            f"gcloud printed something that is not JSON ({exc}): {text[:200]!r}"
        ) from None
    if not isinstance(data, list):
        raise GcloudError(f"gcloud printed JSON that is not a list: {text[:200]!r}")
    return data


def make_tpu_vm_launcher(config: TpuVmLauncherConfig, context: BuildContext) -> TpuVmLauncher:
    """Builds the launcher for the run in ``context.run_config``."""
    return TpuVmLauncher(config, context.registry, context.run_config)
