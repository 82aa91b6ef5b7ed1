"""The start-up scripts of the TPU VM slices.

Every host of a slice runs its slice's script at boot (the ``startup-script`` metadata
key), so one script serves all hosts (``--worker=all`` by construction), and a host that
reboots after maintenance comes back into the run by itself. The script:

1. asks the metadata server which host it is (``agent-worker-number``, the
   ``jax.distributed`` process id) and where host 0 is (``worker-network-endpoints``:
   the coordinator, and on the trainer slice the transport server);
2. installs the packages (uv makes a Python 3.11+ virtual environment);
3. writes the run config (and any credential files, mode 600);
4. writes systemd units for its roles and starts them: on the trainer slice, the
   transport server on host 0 and a trainer process on every host; on a worker slice,
   one worker per host; on a verifier machine (a CPU instance, one host), one verifier.
   systemd restarts a role that fails; ``systemctl stop`` sends SIGTERM, so a trainer
   writes its checkpoint before teardown.
"""

from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass

from rlax_launchers.cluster_config import ClusterRunConfig

CONFIG_PATH = "/etc/rlax/run.yaml"
SECRETS_DIR = "/etc/rlax/secrets"
HOST_ENV = "/etc/rlax/host.env"
VENV = "/opt/rlax/venv"
TRANSPORT_STATE_DIR = "/var/lib/rlax/transport"
TRANSPORT_HOST_PLACEHOLDER = "__RLAX_TRANSPORT_HOST__"
WORKER_SLICE_METADATA_KEY = "rlax-worker-slice"
VERIFIER_ID_METADATA_KEY = "rlax-verifier-id"


@dataclass(frozen=True)
class Unit:
    """One role as a systemd service.

    Attributes:
        name: the unit's name without ``.service``, e.g. ``rlax-trainer``.
        description: what it runs.
        command: the role's argv (``${VAR}`` words are filled from the host env file).
        restart: systemd ``Restart=`` policy.
        only_on_host_0: start it on the slice's first host only.
    """

    name: str
    description: str
    command: list[str]
    restart: str
    only_on_host_0: bool = False


def startup_script(
    *,
    title: str,
    host_facts: str,
    cluster_config: ClusterRunConfig,
    pip_packages: list[str],
    apt_packages: list[str],
    python_version: str,
    units: list[Unit],
    stop_timeout_s: int,
) -> str:
    """The whole script of one slice.

    Args:
        title: first comment line, e.g. ``RLAX run demo: trainer slice demo-trainer``.
        host_facts: shell lines that set ``PROCESS_ID``, ``TRANSPORT_HOST`` and whatever
            else the units' ``${VAR}`` words use (see :func:`trainer_host_facts`).
        cluster_config: the run config the processes read.
        pip_packages: requirements installed into the virtual environment.
        apt_packages: Debian packages installed first.
        python_version: Python of the virtual environment.
        units: the slice's roles.
        stop_timeout_s: seconds a role has after SIGTERM.
    """
    variables = sorted({v for unit in units for v in _variables(unit.command)} | {"PROCESS_ID"})
    apt = " ".join(shlex.quote(p) for p in ["python3-pip", *apt_packages])
    pip = " ".join(shlex.quote(p) for p in pip_packages)
    lines = [
        "#!/bin/bash",
        f"# {title}",
        "# Every host of the slice runs this at boot; see rlax_launchers/tpu_vm/startup.py.",
        "set -euo pipefail",
        "",
        "metadata() {",
        "  curl -sSf --retry 20 --retry-connrefused -H 'Metadata-Flavor: Google' \\",
        '    "http://metadata.google.internal/computeMetadata/v1/instance/attributes/$1"',
        "}",
        host_facts.rstrip(),
        "",
        "# Packages.",
        "export DEBIAN_FRONTEND=noninteractive",
        # Waits for the dpkg lock that unattended-upgrades holds after boot (apt >= 1.9.11).
        "APT='apt-get -o DPkg::Lock::Timeout=900'",
        f"$APT update -qq && $APT install -y -qq --no-install-recommends {apt}",
        "python3 -m pip install --quiet --upgrade uv",
        f"[ -x {VENV}/bin/python ] || python3 -m uv venv --python {python_version} {VENV}",
        f"python3 -m uv pip install --quiet --python {VENV}/bin/python {pip}",
        "",
        "# The run config and this host's facts.",
        "install -d -m 700 /etc/rlax " + SECRETS_DIR,
        f"cat > {CONFIG_PATH} <<'RLAX_RUN_CONFIG'",
        cluster_config.yaml().rstrip(),
        "RLAX_RUN_CONFIG",
        f'sed -i "s/{TRANSPORT_HOST_PLACEHOLDER}/${{TRANSPORT_HOST}}/g" {CONFIG_PATH}',
        f"chmod 600 {CONFIG_PATH}",
    ]
    for key, content in sorted(cluster_config.credential_files.items()):
        encoded = base64.encodebytes(content).decode().rstrip()
        lines += [
            f"base64 -d > {SECRETS_DIR}/{key} <<'RLAX_SECRET'",
            encoded,
            "RLAX_SECRET",
            f"chmod 600 {SECRETS_DIR}/{key}",
        ]
    lines.append(f": > {HOST_ENV}")
    lines += [f'echo "{v}=${{{v}}}" >> {HOST_ENV}' for v in variables]
    lines += ["", "# The roles, as systemd services."]
    for unit in units:
        lines += _unit_lines(unit, stop_timeout_s)
    lines.append("systemctl daemon-reload")
    for unit in units:
        start = f"systemctl enable {unit.name}.service && systemctl restart {unit.name}.service"
        if unit.only_on_host_0:
            start = f'if [ "$PROCESS_ID" = 0 ]; then {start}; fi'
        lines.append(start)
    return "\n".join(lines) + "\n"


def trainer_host_facts() -> str:
    """Shell lines of a trainer host: its process id, and host 0's address."""
    return "\n".join(
        [
            "PROCESS_ID=$(metadata agent-worker-number)",
            "# The slice's hosts, host 0 first, as IPs or name:id:IP; host 0 coordinates",
            "# jax.distributed and runs the transport server.",
            "ENDPOINTS=$(metadata worker-network-endpoints)",
            "FIRST_HOST=${ENDPOINTS%%,*}",
            "COORDINATOR_IP=${FIRST_HOST##*:}",
            "TRANSPORT_HOST=$COORDINATOR_IP",
        ]
    )


def worker_host_facts(*, trainer_node: str, project: str, zone: str) -> str:
    """Shell lines of a worker host: its worker id, and where the transport server is."""
    return "\n".join(
        [
            "PROCESS_ID=$(metadata agent-worker-number)",
            f"WORKER_ID=$(metadata {WORKER_SLICE_METADATA_KEY})-$PROCESS_ID",
            _transport_host_line(trainer_node=trainer_node, project=project, zone=zone),
        ]
    )


def verifier_host_facts(*, trainer_node: str, project: str, zone: str) -> str:
    """Shell lines of a verifier machine: its verifier id, and where the transport server is.

    Args:
        trainer_node: the trainer slice, whose host 0 runs the transport server.
        project: the project of the TPU VMs.
        zone: the zone of the trainer slice (not of the verifier machine).
    """
    return "\n".join(
        [
            "# One verifier per machine; PROCESS_ID is in every host's env file.",
            "PROCESS_ID=0",
            f"VERIFIER_ID=$(metadata {VERIFIER_ID_METADATA_KEY})",
            _transport_host_line(trainer_node=trainer_node, project=project, zone=zone),
        ]
    )


def _transport_host_line(*, trainer_node: str, project: str, zone: str) -> str:
    describe = shlex.join(
        [
            "gcloud",
            "compute",
            "tpus",
            "tpu-vm",
            "describe",
            trainer_node,
            f"--project={project}",
            f"--zone={zone}",
            "--format=value(networkEndpoints[0].ipAddress)",
        ]
    )
    return "\n".join(
        [
            "# The transport server runs on the trainer slice's host 0; wait for its address.",
            f'until TRANSPORT_HOST=$({describe}) && [ -n "$TRANSPORT_HOST" ]; do sleep 30; done',
        ]
    )


def _unit_lines(unit: Unit, stop_timeout_s: int) -> list[str]:
    return [
        f"cat > /etc/systemd/system/{unit.name}.service <<'RLAX_UNIT'",
        "[Unit]",
        f"Description={unit.description}",
        "Wants=network-online.target",
        "After=network-online.target"
        + ("" if unit.name == "rlax-transport" else " rlax-transport.service"),
        "",
        "[Service]",
        f"EnvironmentFile={HOST_ENV}",
        f"ExecStart={systemd_command_line([f'{VENV}/bin/{unit.command[0]}', *unit.command[1:]])}",
        f"Restart={unit.restart}",
        "RestartSec=10",
        # 143: the role exited on SIGTERM as it should (a stop or a preemption); a trainer
        # host stopped by a terminated peer exits 75 instead, so it is restarted and
        # rejoins its peers. 2: the config is bad, and restarting would not mend it.
        "SuccessExitStatus=143",
        "RestartPreventExitStatus=2",
        f"TimeoutStopSec={stop_timeout_s}",
        f"StandardOutput=append:/var/log/{unit.name}.log",
        "StandardError=inherit",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "RLAX_UNIT",
    ]


def systemd_command_line(argv: list[str]) -> str:
    """``argv`` quoted for ``ExecStart=``: double quotes where needed, ``%`` doubled.

    ``${VAR}`` words stay as they are: systemd fills them from the unit's environment.
    """
    quoted = []
    for arg in argv:
        arg = arg.replace("%", "%%")
        if arg and not any(c in arg for c in " \t\"'\\;"):
            quoted.append(arg)
        else:
            quoted.append('"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return " ".join(quoted)


def _variables(argv: list[str]) -> set[str]:
    found = set()
    for arg in argv:
        start = arg.find("${")
        while start != -1:
            end = arg.index("}", start)
            found.add(arg[start + 2 : end])
            start = arg.find("${", end)
    return found
