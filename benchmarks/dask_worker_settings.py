"""What Dask's worker profiler and tick cost a trial's thread: a pure-Python loop in a worker thread, per setting.

    python benchmarks/dask_worker_settings.py            # 3 rounds of 4 s per setting, interleaved
    python benchmarks/dask_worker_settings.py --quick

A one-worker ``LocalCluster`` per setting runs the same function in its worker thread: a loop of small Python
operations at the bottom of a call stack ``--depth`` frames deep (a trial's stack under Dask's and tuneplat's
frames is about 30 deep; user code adds its own). Dask's profiler walks every thread's stack each
``distributed.worker.profile.interval`` holding the GIL, and the event loop's tick wakes the process each
``distributed.admin.tick.interval``. Settings compared: Dask's defaults (10 ms, 20 ms), the embedded cluster's
(``tuneplat.execution._local_procs.LEAN_WORKER_SETTINGS``: 100 ms, 500 ms) and the profiler off. Prints JSON: the
loop's iterations/s per setting (median of the rounds) and each setting's ratio to Dask's defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_loop(depth: int, seconds: float) -> float:
    """Iterations/s of a small pure-Python loop run ``depth`` frames down."""
    if depth > 0:
        return python_loop(depth - 1, seconds)
    n, i = 0, 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(1000):
            n += sum([j for j in range(20)])
        i += 1
    return i / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--depth", type=int, default=60)
    parser.add_argument("--quick", action="store_true", help="1 round of 1 s")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds = 1, 1.0
    sys.path.insert(0, ROOT)
    import dask
    from distributed import Client, LocalCluster

    from tuneplat.execution._local_procs import LEAN_WORKER_SETTINGS

    settings: dict[str, dict[str, Any]] = {
        "dask_defaults": {k: default for k, (default, _) in LEAN_WORKER_SETTINGS.items()},
        "tuneplat_embedded": {k: ours for k, (_, ours) in LEAN_WORKER_SETTINGS.items()},
        "profiler_off": {"distributed.worker.profile.enabled": False,
                         **{k: ours for k, (_, ours) in LEAN_WORKER_SETTINGS.items() if "tick" in k}},
    }
    rates: dict[str, list[float]] = {name: [] for name in settings}
    for r in range(args.rounds):
        order = list(settings) if r % 2 == 0 else list(reversed(settings))  # neither always first
        for name in order:
            with dask.config.set(settings[name]), \
                    LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                                 dashboard_address=None) as cluster, Client(cluster) as client:
                client.submit(python_loop, 1, 0.5, pure=False).result()  # warm: the function shipped, caches filled
                rates[name].append(client.submit(python_loop, args.depth, args.seconds, pure=False).result())
    medians = {name: sorted(v)[len(v) // 2] for name, v in rates.items()}
    with open("/proc/loadavg", encoding="utf-8") as f:
        load = f.read().split()[:3]
    print(json.dumps({"depth": args.depth, "seconds": args.seconds, "loadavg": load,
                      "iterations_per_s": {k: [round(x, 1) for x in v] for k, v in rates.items()},
                      "ratio_to_dask_defaults": {k: round(m / medians["dask_defaults"], 3)
                                                 for k, m in medians.items()}}, indent=2))


if __name__ == "__main__":
    main()
