#!/usr/bin/env bash
# Makes the side venv with Google's Tunix that the generate benchmark compares against.
# Tunix pins its own JAX/Flax, so it never shares the workspace environment.
# Prints the venv's python. Idempotent.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv="$root/.cache/tunix-venv"
requirements="google-tunix==0.1.7"
stamp="$venv/.requirements"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$requirements" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  # (pip's notes about this machine's find-links folders are noise: filtered out)
  if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $requirements \
      2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); then
    rm -rf "$venv"
    echo "could not install $requirements into $venv" >&2
    exit 1
  fi
  echo "$requirements" > "$stamp"
fi
echo "$venv/bin/python"
