"""Session-wide test setup (runs before any test module imports JAX).

* JAX on the CPU exposes one device unless told otherwise; sharding tests need eight.
* XLA's CPU compiler takes seconds per program: a persistent compilation cache under
  .cache/ lets repeated shapes (within a run and across local runs) skip it.
"""

import os
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", str(Path(__file__).resolve().parent / ".cache" / "jax-compile")
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
