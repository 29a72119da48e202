"""The tuner's CPU per result with a user callback, two builds interleaved (what hooks' copies cost).

A Tuner on the VirtualTimeExecutor (no Dask: only the tuner's own work is measured), 10 trials x 200 reports, with
a user callback that reads ``trial.config``, the result and ``trials`` on every result, and the default per-trial
files on, MLflow off. ``time.process_time()`` of the whole ``fit()`` divided by the results: CPU time, so the load
other users put on the machine matters less than for wall-clock figures (it still moves caches and frequency).

    python benchmarks/hook_copies.py BEFORE_TREE AFTER_TREE [--rounds 4]

Each round runs both trees in a fresh process (``PYTHONPATH`` = the tree), alternating which goes first. Prints
one JSON object: every run's microseconds per result, the medians and their ratio (AFTER / BEFORE).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r'''
import json, tempfile, time
import tuneplat as tune
from tuneplat.testing import VirtualTimeExecutor

def curve(config):
    for step in range(1, 201):
        yield {"loss": config["x"] + 1.0 / step, "extra": {"step": step}}

class Reader(tune.Callback):
    n = 0

    def on_trial_result(self, iteration, trials, trial, result, **info):
        Reader.n += len(trial.config) + len(result) + len(trials)

with tempfile.TemporaryDirectory() as d:
    t0 = time.process_time()
    grid = tune.Tuner(curve, param_space={"x": tune.grid_search([i / 10 for i in range(10)]), "lr": 0.1,
                                          "layers": [64, 32]},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name="h", storage_path=d, verbose=0, mlflow=False,
                                                callbacks=[Reader()]),
                      executor=VirtualTimeExecutor(num_slots=2)).fit()
    cpu = time.process_time() - t0
    n = sum(len(r.metrics_dataframe) for r in grid)
print(json.dumps({"results": n, "us_per_result": round(1e6 * cpu / n, 1)}))
'''


def run_one(tree: str) -> float:
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True,
                         cwd=tree)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["us_per_result"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {"before": [], "after": []}
    for i in range(args.rounds):
        for which in (("before", "after") if i % 2 == 0 else ("after", "before")):
            runs[which].append(run_one(os.path.abspath(getattr(args, which))))
    med = {w: statistics.median(v) for w, v in runs.items()}
    print(json.dumps({"us_per_result": runs, "median": med, "after_over_before": round(med["after"] / med["before"], 3),
                      "load_avg": os.getloadavg()}, indent=2))


if __name__ == "__main__":
    main()
