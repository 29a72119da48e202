"""Cold start: ``fit()`` to the first report, in a fresh process each time, before/after, interleaved.

Two ways to compare:

* ``--builds BEFORE_TREE AFTER_TREE``: two checkouts (e.g. ``main`` in a ``git worktree`` and this one), each run
  with ``PYTHONPATH`` and the working directory set to its tree, alternating BEFORE/AFTER then AFTER/BEFORE
  round by round, so a machine getting busier or quieter favours neither.
* without it: this checkout twice, "before" with ``TUNEPLAT_PRELOAD_IMPORTS=0`` and "after" with ``=1`` (the
  opt-in worker preload of the trainable's imports; see benchmarks/README.md).

Workloads (``--shape``): ``one`` (one trial, one epoch of the README's digits MLP) or ``readme`` (the README's
sweep: ``examples/digits_asha.yaml --set num_samples=12``, TPE + ASHA, 2 worker processes here). MLflow off
unless ``--mlflow`` (its uploader's start is measured in benchmarks/mlflow_overhead.py).

Usage:
  python benchmarks/cold_start.py [--repeats 3] [--shape one|readme] [--builds BEFORE AFTER] [--mlflow]
                                  [--slow-worker S]   # one worker starts S s late (a slow node)

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SCRIPT = """
import dataclasses, json, os, sys, time
t_start = time.perf_counter()
import tuneplat as tune

storage, shape, mlflow = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
first = []

class First(tune.Callback):
    def on_trial_result(self, iteration, trials, trial, result, **info):
        if not first:
            first.append(time.perf_counter())

if shape == "readme":
    from tuneplat.config import load_sweep

    sweep = load_sweep("examples/digits_asha.yaml", overrides=["num_samples=12"])
    rc = dataclasses.replace(sweep.run_config, name="cold", storage_path=storage, verbose=0,
                             callbacks=[First()], **({} if mlflow else {"mlflow": False}))
    tuner = tune.Tuner(sweep.trainable, param_space=sweep.param_space, tune_config=sweep.tune_config,
                       run_config=rc, scaling_config=sweep.scaling_config)
else:
    from examples.digits import train_loop

    tuner = tune.Tuner(train_loop, param_space={"lr": 0.01, "hidden": 64, "batch_size": 64, "epochs": 1},
                       tune_config=tune.TuneConfig(metric="val_loss", mode="min"),
                       run_config=tune.RunConfig(name="cold", storage_path=storage, verbose=0,
                                                 callbacks=[First()], **({} if mlflow else {"mlflow": False})))
t0 = time.perf_counter()
tuner.fit()
t1 = time.perf_counter()
print(json.dumps({"fit_to_first_report_s": first[0] - t0, "fit_s": t1 - t0, "imports_s": t0 - t_start}))
"""


def _run(tree: str, settings: dict[str, str], storage: str, shape: str, mlflow: bool,
         slow_worker_s: float = 0.0) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=tree, **settings)
    if slow_worker_s > 0:  # one worker process starts late (benchmarks/slow_worker/sitecustomize.py)
        env["PYTHONPATH"] = os.pathsep.join([tree, os.path.join(HERE, "slow_worker")])
        env["TUNEPLAT_BENCH_SLOW_WORKER_S"] = str(slow_worker_s)
        env["TUNEPLAT_BENCH_SLOW_WORKER_CLAIM"] = storage + ".slow-worker"
    out = subprocess.run([sys.executable, "-c", SCRIPT, storage, shape, "1" if mlflow else "0"], env=env, cwd=tree,
                         capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shape", choices=("one", "readme"), default="one")
    parser.add_argument("--builds", nargs=2, metavar=("BEFORE", "AFTER"),
                        help="two checkouts to compare (default: this one, preload off/on)")
    parser.add_argument("--mlflow", action="store_true", help="MLflow on (the default sqlite store)")
    parser.add_argument("--slow-worker", type=float, default=0.0, metavar="S",
                        help="one worker process of each run starts S seconds late (a slow or busy node)")
    args = parser.parse_args()
    runs_of: dict[str, tuple[str, dict[str, str]]]
    if args.builds:
        runs_of = {"before": (os.path.abspath(args.builds[0]), {}), "after": (os.path.abspath(args.builds[1]), {})}
    else:
        runs_of = {"before": (ROOT, {"TUNEPLAT_PRELOAD_IMPORTS": "0"}),
                   "after": (ROOT, {"TUNEPLAT_PRELOAD_IMPORTS": "1"})}
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="tuneplat-cold-") as tmp:
        for i in range(args.repeats):
            order = ("before", "after") if i % 2 == 0 else ("after", "before")  # interleaved, alternating
            for label in order:
                tree, settings = runs_of[label]
                runs[label].append(_run(tree, settings, os.path.join(tmp, f"{label}{i}"), args.shape, args.mlflow,
                                        args.slow_worker))
                loads.append(os.getloadavg()[0])
    summary = {
        label: {
            "fit_to_first_report_s": [round(r["fit_to_first_report_s"], 2) for r in rs],
            "median_fit_to_first_report_s": round(statistics.median(r["fit_to_first_report_s"] for r in rs), 2),
            "fit_s": [round(r["fit_s"], 2) for r in rs],
            "median_fit_s": round(statistics.median(r["fit_s"] for r in rs), 2),
        }
        for label, rs in runs.items()
    }
    workload = ("the README's sweep (digits_asha.yaml, num_samples=12, TPE + ASHA)" if args.shape == "readme"
                else "digits MLP, 1 trial, 1 epoch")
    slow = f", one worker process {args.slow_worker:g} s late" if args.slow_worker > 0 else ""
    print(json.dumps({"benchmark": "cold_start", "workload": f"{workload}, embedded cluster, MLflow "
                      f"{'on' if args.mlflow else 'off'}, fresh process per run{slow}",
                      "builds": {k: v[0] for k, v in runs_of.items()} if args.builds else "preload off/on",
                      "repeats": args.repeats, "cpus": os.cpu_count(),
                      "load_average_1min": {"min": min(loads), "max": max(loads)},
                      "python": platform.python_version(), **summary}, indent=2))


if __name__ == "__main__":
    main()
