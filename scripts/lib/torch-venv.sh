#!/usr/bin/env bash
# Makes the side venv with PyTorch (CPU) and transformers that the parity tests and the
# generate benchmark use as their reference. It is kept out of the workspace lock on
# purpose: PyPI's Linux torch is a multi-GB CUDA build, while `pip install torch==2.13.0`
# takes the CPU wheel that lies on the CI machine's disk (pip's find-links).
# Prints the venv's python. Idempotent: reuses the venv when its requirements match.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv="$root/.cache/torch-venv"
requirements="torch==2.13.0 transformers==5.24.0 safetensors numpy jinja2 tokenizers"
stamp="$venv/.requirements"
# One maker at a time (test processes may ask together): the others wait, then reuse it.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$requirements" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  # shellcheck disable=SC2086
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
