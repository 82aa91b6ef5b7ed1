"""Measures the peak resident memory of loading a checkpoint, in a fresh process.

    python -m benchmarks._load_memory CHECKPOINT_DIR {rlax|naive}   # from the repository root

Prints JSON: the checkpoint's bytes, RSS before loading, and the peak RSS while loading
(the kernel's high-water mark, reset just before the load). ``naive`` is the baseline a
loader without file mapping gets: read every tensor into host memory, then place it.
Used, through :func:`measure`, by the `checkpoint` benchmark suite and by rlax-core's
tests/models/test_load_memory.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks import run_module


def measure(path: Path, mode: str) -> dict[str, int]:
    """Loads the checkpoint in a fresh interpreter (``mode`` rlax or naive); its JSON answer.

    A process boundary, not an import: the peak resident memory must be this load's alone.
    """
    result = run_module(
        sys.executable, __name__, path, mode, capture_output=True, text=True, timeout=600,
        check=True,
    )  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def main() -> None:
    path, mode = Path(sys.argv[1]), sys.argv[2]
    import jax
    import numpy as np

    from rlax_core.models import load_pretrained
    from rlax_core.models.safetensors_file import SafetensorsReader

    jax.numpy.zeros(1).block_until_ready()  # initialise the backend before measuring
    files = sorted(path.glob("*.safetensors"))
    size = sum(f.stat().st_size for f in files)
    before = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS high-water mark
    if mode == "rlax":
        model = load_pretrained(path)
    else:
        arrays = {}
        for file in files:
            with SafetensorsReader(file) as reader:
                for name in reader.entries:
                    host = np.array(reader.array(name))  # a full host copy
                    arrays[name] = jax.device_put(host)
        model = arrays
    peak = _status("VmHWM")
    del model
    print(json.dumps({"checkpoint_bytes": size, "rss_before": before, "peak": peak}))


if __name__ == "__main__":
    main()
