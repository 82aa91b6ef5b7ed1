"""Chaos: a locally launched run under faults beside the same run undisturbed.

For each transport (NATS, gRPC; --quick: NATS only) the chaos config
(rlax_launchers.testing.chaos_config: the quickstart, 40 steps, 3 worker processes) is
launched twice with ``rlax launch``: undisturbed, then under the chaos plan (a worker
SIGKILLed every 15 s, one preempted with ``rlax preempt``, the trainer SIGKILLed once,
the transport server SIGKILLed once; see rlax_launchers.testing.chaos). Recorded: final
pass@1 and the wall time from step 1 to the last step (step 1 waits for the first
compilations), chaos beside undisturbed. Both runs share one JAX compilation cache. The
notes hold the chaos run's accounting and the time lost to each kind of fault (the gap
from the last step before a fault to the first step past it, minus the median step
interval).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from rlax_core.bench import Bench
from rlax_launchers.testing.chaos import ChaosPlan, launch_log, run_chaos
from rlax_launchers.testing.chaos_config import chaos_run_config

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart.yaml"
TIMEOUT_S = 900


def run(bench: Bench) -> None:
    """Runs the chaos suite."""
    transports = ["nats"] if bench.quick else ["nats", "grpc"]
    with tempfile.TemporaryDirectory(prefix="rlax-chaos-") as tmp:
        for transport in transports:
            folder = Path(tmp) / transport
            results = {}
            for label, plan in (("undisturbed", None), ("chaos", ChaosPlan())):
                cache = {"env": {"JAX_COMPILATION_CACHE_DIR": str(Path(tmp) / "jax-cache")}}
                config = chaos_run_config(QUICKSTART, folder / label, transport, launcher=cache)
                result = run_chaos(config, folder / label / "run", plan, timeout_s=TIMEOUT_S)
                if result.returncode != 0 or result.errors:
                    raise RuntimeError(
                        f"{label} run over {transport} failed ({result.returncode}, "
                        f"{result.errors}): {launch_log(folder / label / 'run')}"
                    )
                results[label] = result.report
            chaos, calm = results["chaos"], results["undisturbed"]
            bench.record(
                f"{transport}: final eval pass@1",
                subject=chaos["pass@1"]["final"],
                baseline=calm["pass@1"]["final"],
                unit="pass@1",
                higher_is_better=True,
                subject_label="under chaos",
                baseline_label="undisturbed",
            )
            bench.record(
                f"{transport}: wall time, step 1 to the last step",
                subject=chaos["wall_s"],
                baseline=calm["wall_s"],
                unit="s",
                higher_is_better=False,
                subject_label="under chaos",
                baseline_label="undisturbed",
            )
            bench.notes[f"{transport}_chaos"] = chaos
            bench.notes[f"{transport}_undisturbed"] = {
                k: calm[k] for k in ("wall_s", "median_step_interval_s", "groups", "pass@1")
            }
