# Sourced by scripts/test: what the verifier sandboxes need on the machine, installed and
# started when missing (CI runs as root on a fresh Debian machine). Quick when done:
# a few `command -v` checks and one `docker info`.
#   bubblewrap, g++, /usr/bin/python3  the local sandbox (namespaces, C++, the programs' Python)
#   docker.io                          the docker sandbox's engine (dockerd, containerd, runc)

ensure_sandbox_tools() {
  local missing=()
  command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
  command -v g++ >/dev/null 2>&1 || missing+=(g++)
  [ -x /usr/bin/python3 ] || missing+=(python3)
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  [ ${#missing[@]} -eq 0 ] && return
  if [ "$(id -u)" != 0 ]; then
    echo "The sandbox tests need ${missing[*]}; install them (as root: apt-get install ${missing[*]})." >&2
    exit 2
  fi
  echo "installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Starts dockerd the way this machine allows (vfs storage, no iptables, no bridge: the
# sandbox containers have no network anyway) unless an engine already answers.
ensure_docker_engine() {
  if docker_answers; then
    return
  fi
  local log=${RLAX_DOCKERD_LOG:-/var/log/rlax-dockerd.log}
  if ! dockerd_running; then
    # A dockerd that was killed leaves its pid file, and a new one refuses to start.
    rm -f /var/run/docker.pid
    echo "starting dockerd (log: $log)" >&2
    nohup dockerd --storage-driver=vfs --iptables=false --bridge=none >"$log" 2>&1 &
  fi
  for _ in $(seq 1 60); do
    docker_answers && return
    sleep 0.5
  done
  echo "dockerd did not start; see $log" >&2
  tail -20 "$log" >&2
  exit 1
}

dockerd_running() {
  local pid state
  pid=$(cat /var/run/docker.pid 2>/dev/null) || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
  [ -n "$state" ] && [ "$state" != Z ]
}

docker_answers() {
  # The engine's API on its socket, without depending on a docker CLI being installed.
  [ -S /var/run/docker.sock ] &&
    curl --silent --max-time 2 --unix-socket /var/run/docker.sock http://localhost/_ping 2>/dev/null | grep -q OK
}
