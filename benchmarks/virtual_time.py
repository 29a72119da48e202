"""The virtual-time executor: a whole Tuner (searcher, ASHA, journal) over 1,000 trials, without Dask.

Two trainables, the same learning curve: a generator yielding results (``curve``: issue #12's goal, a 1,000-trial
ASHA sweep in under 1 s) and a function trainable calling ``tune.report()`` (``function``: each trial runs in a
thread of its own; issue #23's goal, under 2 s). Prints JSON.

    python benchmarks/virtual_time.py [--trials 1000] [--repeat 3] [--trainable function|curve|both]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

# this folder has a schedulers.py of its own: import the project's packages, not it
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import tuneplat as tune  # noqa: E402
from tuneplat.schedulers import ASHAScheduler  # noqa: E402
from tuneplat.testing import VirtualTimeExecutor  # noqa: E402


def curve(config):
    for step in range(1, 51):
        yield {"loss": config["floor"] + math.exp(-step / 10), "time_this_iter_s": 1.0}


def function(config):
    for step in range(1, 51):
        tune.report({"loss": config["floor"] + math.exp(-step / 10)})


def one(trials: int, trainable) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        executor = VirtualTimeExecutor(num_slots=8)
        t0 = time.perf_counter()
        grid = tune.Tuner(trainable, param_space={"floor": tune.uniform(0, 1)},
                          tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=trials, seed=0,
                                                      scheduler=ASHAScheduler(max_t=50, grace_period=1,
                                                                              reduction_factor=3)),
                          run_config=tune.RunConfig(name="bench", storage_path=tmp, verbose=0, mlflow=False),
                          executor=executor).fit()
        wall = time.perf_counter() - t0
        return {"wall_s": round(wall, 3), "trials": len(grid), "iterations": executor.iterations,
                "virtual_s": round(executor.now(), 1), "per_trial_ms": round(1000 * wall / trials, 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trainable", choices=("function", "curve", "both"), default="both")
    args = ap.parse_args()
    kinds = ("function", "curve") if args.trainable == "both" else (args.trainable,)
    out = {"benchmark": "virtual_time_asha", "trials": args.trials, "load_average": os.getloadavg()[0]}
    for kind, trainable, goal in (("function", function, 2.0), ("curve", curve, 1.0)):
        if kind not in kinds:
            continue
        runs = [one(args.trials, trainable) for _ in range(args.repeat)]
        best = min(r["wall_s"] for r in runs)
        out[kind] = {"runs": runs, "best_wall_s": best, "goal_s": goal, "goal_met": best < goal}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
