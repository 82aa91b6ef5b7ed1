# Sourced by the scripts: makes `uv` available, installing it when the machine has none.
# Needs only Python >= 3.11 with venv and pip; uv goes into .cache/uv-bootstrap.

ensure_python() {
  local python
  python=$(command -v python3 || true)
  if [ -z "$python" ] || ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "RLAX needs Python >= 3.11 as python3 (found: ${python:-none})." >&2
    exit 2
  fi
}

ensure_uv() {
  ensure_python
  if command -v uv >/dev/null 2>&1; then
    return
  fi
  local root bootstrap
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  bootstrap="$root/.cache/uv-bootstrap"
  if [ ! -x "$bootstrap/bin/uv" ]; then
    echo "uv not found: installing it into $bootstrap" >&2
    python3 -m venv "$bootstrap"
    "$bootstrap/bin/python" -m pip install --quiet --disable-pip-version-check "uv>=0.9,<1"
  fi
  export PATH="$bootstrap/bin:$PATH"
}
