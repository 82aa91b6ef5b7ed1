"""The start-up scripts of the TPU VM slices (and of the verifier machines).

Every host of a slice runs its slice's script at boot (the ``startup-script`` metadata
key), so one script serves all hosts (``--worker=all`` by construction), and a host that
reboots after maintenance comes back into the run by itself. The script:

1. asks the metadata server which host it is (``agent-worker-number``, the
   ``jax.distributed`` process id) and, on the trainer slice, where host 0 is
   (``worker-network-endpoints``: the coordinator and the transport server);
2. installs the image's Python (``python3.11`` and ``python3.11-venv`` from Ubuntu's
   archive, ``python_version``) with apt and makes the virtual environment with it, so
   nothing downloads an interpreter; then copies the RLAX wheels ``--apply`` uploaded to
   the run directory, checks their sha256 and installs them (their third-party
   dependencies, and ``jax[tpu]``, from the index; see :mod:`~rlax_launchers.tpu_vm.wheels`);
3. writes the run config and its role's folder of the run's transport credentials
   (mode 600 in a folder of mode 700, at :data:`MOUNT_DIR`; the trainer slice's hosts
   get the trainer's and the server's, worker slices the workers', verifier machines
   the verifiers'; see :mod:`rlax_launchers.run_credentials`), or, for a run without
   them, the credential files of the transport section;
4. writes systemd units for its roles and starts them: on the trainer slice, the
   transport server on host 0 and a trainer process on every host; on a worker slice,
   one worker per host; on a verifier machine (a CPU instance, one host), one verifier.
   systemd restarts a role that fails; ``systemctl stop`` sends SIGTERM, so a trainer
   writes its checkpoint before teardown.

Workers and verifiers find the transport server (the trainer slice's host 0) with
``gcloud compute tpus tpu-vm describe``, and not once: :data:`RESOLVE_SCRIPT` runs before
every (re)start of their role (``ExecStartPre=``) and writes the address it finds into
the run config (from :data:`CONFIG_TEMPLATE_PATH`) and the host env file. A trainer slice
that was preempted and created again has a new address; a worker that cannot reach the
old one exits after ``transport.reconnect_timeout_s``, systemd restarts it, and the
restart reaches the new one. While the trainer slice is missing, the lookup waits.

With per-run credentials the clients check the server's certificate, which cannot name
an address that changes with every recreated trainer slice: it names
``NAME-transport`` (``transport_name``), the run config connects to that name, and the
trainer's start-up and the lookup map it to the address in ``/etc/hosts``.
"""

from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass

from rlax_core.kit.launcher import MOUNT_DIR
from rlax_launchers.cluster_config import ClusterRunConfig
from rlax_launchers.tpu_vm.wheels import UNBUILT, Wheel

CONFIG_PATH = "/etc/rlax/run.yaml"
CONFIG_TEMPLATE_PATH = "/etc/rlax/run.yaml.in"
RESOLVE_SCRIPT = "/etc/rlax/resolve-transport-host"
WHEELS_DIR = "/opt/rlax/wheels"
SECRETS_DIR = "/etc/rlax/secrets"
HOST_ENV = "/etc/rlax/host.env"
HOSTS_FILE = "/etc/hosts"
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
    wheels: list[Wheel],
    requirements: list[str],
    apt_packages: list[str],
    python_version: str,
    units: list[Unit],
    stop_timeout_s: int,
    transport_lookup: list[str] | None = None,
    role_credentials: dict[str, bytes] | None = None,
    transport_name: str | None = None,
) -> str:
    """The whole script of one slice.

    Args:
        title: first comment line, e.g. ``RLAX run demo: trainer slice demo-trainer``.
        host_facts: shell lines that set ``PROCESS_ID``, ``TRANSPORT_HOST`` (unless
            ``transport_lookup`` finds it) and whatever else the units' ``${VAR}`` words
            use (see :func:`trainer_host_facts`).
        cluster_config: the run config the processes read.
        wheels: the RLAX wheels, copied from the run directory and checked by sha256.
        requirements: pip requirements installed with them from the index (``jax[tpu]``;
            or all of ``launcher.pip_packages``, with no wheels).
        apt_packages: Debian packages installed first.
        python_version: the Python of the virtual environment, ``python{X.Y}`` from apt.
        units: the slice's roles.
        stop_timeout_s: seconds a role has after SIGTERM.
        transport_lookup: the command that prints the transport server's address; when
            given, :func:`resolve_script` runs it before every start of a role.
        role_credentials: the files of the slice's folder of the run's credentials (path
            inside it → content), written under :data:`MOUNT_DIR`; None: the run has none.
        transport_name: the name the run config reaches the server by (its certificate's),
            mapped to the server's address in :data:`HOSTS_FILE`; None: the config holds
            the address itself.
    """
    variables = sorted({v for unit in units for v in _variables(unit.command)} | {"PROCESS_ID"})
    python = f"python{python_version}"
    apt = " ".join(shlex.quote(p) for p in [python, f"{python}-venv", *apt_packages])
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
        "# The venv is made with the image's Python, from apt: no interpreter is downloaded.",
        "export DEBIAN_FRONTEND=noninteractive",
        # Waits for the dpkg lock that unattended-upgrades holds after boot (apt >= 1.9.11).
        "APT='apt-get -o DPkg::Lock::Timeout=900'",
        f"$APT update -qq && $APT install -y -qq --no-install-recommends {apt}",
        f"[ -x {VENV}/bin/python ] || /usr/bin/{python} -m venv {VENV}",
        f"{VENV}/bin/python -m pip install --quiet --upgrade pip",
        *_install_lines(wheels, requirements),
        "",
        "# The run config and this host's facts.",
        "install -d -m 700 /etc/rlax " + SECRETS_DIR,
    ]
    if transport_lookup is None:
        lines += [
            f"cat > {CONFIG_PATH} <<'RLAX_RUN_CONFIG'",
            cluster_config.yaml().rstrip(),
            "RLAX_RUN_CONFIG",
            f'sed -i "s/{TRANSPORT_HOST_PLACEHOLDER}/${{TRANSPORT_HOST}}/g" {CONFIG_PATH}',
            f"chmod 600 {CONFIG_PATH}",
        ]
        if transport_name is not None:
            lines.append(hosts_entry_line(transport_name))
    else:
        lines += [
            f"# {RESOLVE_SCRIPT} writes {CONFIG_PATH} from this before every start of a role.",
            f"cat > {CONFIG_TEMPLATE_PATH} <<'RLAX_RUN_CONFIG'",
            cluster_config.yaml().rstrip(),
            "RLAX_RUN_CONFIG",
            f"chmod 600 {CONFIG_TEMPLATE_PATH}",
            f"cat > {RESOLVE_SCRIPT} <<'RLAX_RESOLVE'",
            resolve_script(transport_lookup, transport_name=transport_name).rstrip(),
            "RLAX_RESOLVE",
            f"chmod 700 {RESOLVE_SCRIPT}",
        ]
    for key, content in sorted(cluster_config.credential_files.items()):
        encoded = base64.encodebytes(content).decode().rstrip()
        lines += [
            f"base64 -d > {SECRETS_DIR}/{key} <<'RLAX_SECRET'",
            encoded,
            "RLAX_SECRET",
            f"chmod 600 {SECRETS_DIR}/{key}",
        ]
    if role_credentials is not None:
        lines += _credential_lines(role_credentials)
    lines.append(f": > {HOST_ENV}")
    lines += [f'echo "{v}=${{{v}}}" >> {HOST_ENV}' for v in variables]
    lines += ["", "# The roles, as systemd services."]
    resolves = transport_lookup is not None
    for unit in units:
        lines += _unit_lines(unit, stop_timeout_s, resolves=resolves)
    lines.append("systemctl daemon-reload")
    # --no-block: a role whose start waits for the trainer slice's address (ExecStartPre)
    # must not hold up the end of the start-up script.
    restart = "systemctl restart --no-block" if resolves else "systemctl restart"
    for unit in units:
        start = f"systemctl enable {unit.name}.service && {restart} {unit.name}.service"
        if unit.only_on_host_0:
            start = f'if [ "$PROCESS_ID" = 0 ]; then {start}; fi'
        lines.append(start)
    return "\n".join(lines) + "\n"


def _credential_lines(files: dict[str, bytes]) -> list[str]:
    """Writes a folder of the run's credentials at :data:`MOUNT_DIR`, root's alone.

    The files travel base64 in heredocs, never as arguments: nothing secret is on a
    command line, where ``ps`` would show it."""
    folders = sorted({f"{MOUNT_DIR}/{p.rsplit('/', 1)[0]}" for p in files if "/" in p})
    lines = [
        "# The run's transport credentials: this slice's role's folder (rlax_launchers/",
        "# run_credentials.py), which the run config names.",
        f"rm -rf {MOUNT_DIR} && install -d -m 700 {' '.join([MOUNT_DIR, *folders])}",
    ]
    for path, content in sorted(files.items()):
        lines += [
            f"(umask 077 && base64 -d > {MOUNT_DIR}/{path}) <<'RLAX_SECRET'",
            base64.encodebytes(content).decode().rstrip(),
            "RLAX_SECRET",
        ]
    return lines


def hosts_entry_line(name: str) -> str:
    """The shell line that maps ``name`` to ``$TRANSPORT_HOST`` in :data:`HOSTS_FILE`,
    replacing the line it wrote before (the file is rewritten in place: others hold it)."""
    return (
        f"{{ grep -v ' {name}$' {HOSTS_FILE} || true; "
        f'echo "${{TRANSPORT_HOST}} {name}"; }} > {HOSTS_FILE}.rlax && '
        f"cat {HOSTS_FILE}.rlax > {HOSTS_FILE} && rm -f {HOSTS_FILE}.rlax"
    )


def _install_lines(wheels: list[Wheel], requirements: list[str]) -> list[str]:
    """Copies the wheels, checks their sha256, installs them with ``requirements``."""
    pip = f"{VENV}/bin/python -m pip install --quiet"
    if not wheels:
        return [" ".join([pip, *(shlex.quote(r) for r in requirements)])]
    lines = ["# RLAX itself: the wheels `rlax launch --apply` built, checked by their sha256."]
    if any(w.sha256 == UNBUILT for w in wheels):
        lines.append(
            "# (A dry run: --apply builds and uploads the wheels, and writes their hashes here.)"
        )
    lines += [
        f"rm -rf {WHEELS_DIR} && install -d {WHEELS_DIR}",
        shlex.join(["gcloud", "storage", "cp", *(w.url for w in wheels), f"{WHEELS_DIR}/"]),
        "sha256sum --check --strict <<'RLAX_WHEELS'",
        *(f"{w.sha256}  {WHEELS_DIR}/{w.file_name}" for w in wheels),
        "RLAX_WHEELS",
    ]
    installs = [
        f"{w.package.name}{f'[{w.package.extra}]' if w.package.extra else ''} "
        f"@ file://{WHEELS_DIR}/{w.file_name}"
        for w in wheels
    ]
    lines.append(" ".join([pip, *(shlex.quote(r) for r in [*installs, *requirements])]))
    return lines


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


def worker_host_facts() -> str:
    """Shell lines of a worker host: its worker id (its transport: :func:`resolve_script`)."""
    return "\n".join(
        [
            "PROCESS_ID=$(metadata agent-worker-number)",
            f"WORKER_ID=$(metadata {WORKER_SLICE_METADATA_KEY})-$PROCESS_ID",
        ]
    )


def verifier_host_facts() -> str:
    """Shell lines of a verifier machine: its verifier id (its transport:
    :func:`resolve_script`)."""
    return "\n".join(
        [
            "# One verifier per machine; PROCESS_ID is in every host's env file.",
            "PROCESS_ID=0",
            f"VERIFIER_ID=$(metadata {VERIFIER_ID_METADATA_KEY})",
        ]
    )


def transport_lookup_command(*, trainer_node: str, project: str, zone: str) -> list[str]:
    """The command that prints the transport server's address: the trainer slice's host 0.

    Args:
        trainer_node: the trainer slice, whose host 0 runs the transport server.
        project: the project of the TPU VMs.
        zone: the zone of the trainer slice (not of a verifier machine).
    """
    return [
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


def resolve_script(
    lookup: list[str], *, retry_s: int = 30, transport_name: str | None = None
) -> str:
    """The script a worker's or verifier's unit runs before every start (``ExecStartPre=``).

    It runs ``lookup`` until that prints an address (the trainer slice may be missing
    while ``--apply`` creates it again), then writes the run config from
    :data:`CONFIG_TEMPLATE_PATH` with that address, and ``TRANSPORT_HOST`` into the host
    env file, each replaced whole (a new file renamed over the old).

    Args:
        lookup: the command that prints the address (:func:`transport_lookup_command`).
        retry_s: seconds between lookups.
        transport_name: also map this name to the address in :data:`HOSTS_FILE` (the
            name the server's certificate holds; see the module docstring).
    """
    hosts = [] if transport_name is None else [hosts_entry_line(transport_name)]
    return (
        "\n".join(
            [
                "#!/bin/bash",
                "# Finds the transport server and writes its address into the run config and the",
                "# host env file; systemd runs it before every (re)start of the role, so a role",
                "# restarted after its transport moved (a recreated trainer slice) reaches the new",
                "# address. See rlax_launchers/tpu_vm/startup.py.",
                "set -euo pipefail",
                'export PATH="$PATH:/snap/bin"  # gcloud of Ubuntu images (systemd lacks it)',
                f'until TRANSPORT_HOST=$({shlex.join(lookup)}) && [ -n "$TRANSPORT_HOST" ]; do',
                f'  echo "no transport server address yet; looking again in {retry_s}s" >&2',
                f"  sleep {retry_s}",
                "done",
                f'sed "s/{TRANSPORT_HOST_PLACEHOLDER}/${{TRANSPORT_HOST}}/g" {CONFIG_TEMPLATE_PATH}'
                f" > {CONFIG_PATH}.new",
                f"chmod 600 {CONFIG_PATH}.new",
                f"mv -f {CONFIG_PATH}.new {CONFIG_PATH}",
                f"{{ grep -v '^TRANSPORT_HOST=' {HOST_ENV} || true; "
                f'echo "TRANSPORT_HOST=${{TRANSPORT_HOST}}"; }} > {HOST_ENV}.new',
                f"mv -f {HOST_ENV}.new {HOST_ENV}",
                *hosts,
                'echo "transport server: ${TRANSPORT_HOST}" >&2',
            ]
        )
        + "\n"
    )


def _unit_lines(unit: Unit, stop_timeout_s: int, *, resolves: bool) -> list[str]:
    # A role that looks up its transport first waits as long as the trainer slice is
    # missing: no start timeout (the default 90 s would fail it, over and over).
    resolve = [f"ExecStartPre={RESOLVE_SCRIPT}", "TimeoutStartSec=infinity"] if resolves else []
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
        *resolve,
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
