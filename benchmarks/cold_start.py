"""Cold start: ``fit()`` to the first report of the README's digits trainable, in a fresh process each time.

Before: worker processes import torch (and the trainable's module) only when the first trial lands on them.
After: the embedded cluster's workers import what the trainable needs in the background as they start
(``TUNEPLAT_PRELOAD_IMPORTS=1``, opt-in since the measurements in benchmarks/README.md; "0": the "before" runs). Runs alternate before/after, each a new
``python`` process (nothing imported, no cluster), MLflow off (its uploader's start is measured elsewhere:
benchmarks/mlflow_overhead.py). One trial, one epoch of the digits MLP.

Usage:
  python benchmarks/cold_start.py [--repeats 3]

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
import json, sys, time
t_start = time.perf_counter()
import tuneplat as tune
from examples.digits import train_loop

first = []

class First(tune.Callback):
    def on_trial_result(self, iteration, trials, trial, result, **info):
        if not first:
            first.append(time.perf_counter())

t0 = time.perf_counter()
tune.Tuner(train_loop, param_space={"lr": 0.01, "hidden": 64, "batch_size": 64, "epochs": 1},
           tune_config=tune.TuneConfig(metric="val_loss", mode="min"),
           run_config=tune.RunConfig(name="cold", storage_path=sys.argv[1], verbose=0, mlflow=False,
                                     callbacks=[First()])).fit()
t1 = time.perf_counter()
print(json.dumps({"fit_to_first_report_s": first[0] - t0, "fit_s": t1 - t0, "imports_s": t0 - t_start}))
"""


def _run(preload: bool, storage: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               TUNEPLAT_PRELOAD_IMPORTS="1" if preload else "0")
    out = subprocess.run([sys.executable, "-c", SCRIPT, storage], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="tuneplat-cold-") as tmp:
        for i in range(args.repeats):
            for label in ("before", "after"):  # interleaved: the machine's load hits both alike
                runs[label].append(_run(label == "after", os.path.join(tmp, f"{label}{i}")))
    summary = {
        label: {
            "fit_to_first_report_s": [round(r["fit_to_first_report_s"], 2) for r in rs],
            "median_fit_to_first_report_s": round(statistics.median(r["fit_to_first_report_s"] for r in rs), 2),
            "median_fit_s": round(statistics.median(r["fit_s"] for r in rs), 2),
        }
        for label, rs in runs.items()
    }
    print(json.dumps({"benchmark": "cold_start", "workload": "digits MLP, 1 trial, 1 epoch, embedded cluster, "
                      "MLflow off, fresh process per run", "repeats": args.repeats, "cpus": os.cpu_count(),
                      "load_average": os.getloadavg(), "python": platform.python_version(), **summary}, indent=2))


if __name__ == "__main__":
    main()
