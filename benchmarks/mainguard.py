"""A script that fits at its top level (no main guard) vs the same script under ``if __name__ == "__main__":``.

Both run workload (a) of ``benchmarks/overhead.py`` (200 trials that each report once, 2 at a time) on the
embedded cluster that ``fit()`` starts, as separate ``python script.py`` processes, interleaved. Measured:
the whole process (interpreter start to exit) and ``fit()`` alone (printed by the script). Since tuneplat's
worker processes never run the user's script, the two should match; before, the unguarded one was refused and the
guarded one imported the script again in every worker.

Usage:
  python benchmarks/mainguard.py [--repeats 3] [--trials 200]

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
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

BODY = """
import time
import tuneplat as tune

def objective(config):
    tune.report({{"loss": config["x"]}})

{guard}t0 = time.perf_counter()
{indent}tuner = tune.Tuner(objective, param_space={{"x": tune.uniform(0, 1)}},
{indent}                   tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples={n},
{indent}                                               max_concurrent_trials=2),
{indent}                   run_config=tune.RunConfig(storage_path={storage!r}, verbose=0, mlflow=False))
{indent}grid = tuner.fit()
{indent}print("FIT_S", time.perf_counter() - t0, len(grid))
"""


def write(folder: str, guarded: bool, n: int) -> str:
    src = BODY.format(guard='if __name__ == "__main__":\n    ' if guarded else "", indent="    " if guarded else "",
                      n=n, storage=os.path.join(folder, "results"))
    path = os.path.join(folder, "guarded.py" if guarded else "toplevel.py")
    with open(path, "w") as f:
        f.write(src)
    return path


def run(path: str, cwd: str, root: str = ROOT) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, path], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{path} failed:\n{proc.stderr[-3000:]}")
    fit = float(next(ln for ln in proc.stdout.splitlines() if ln.startswith("FIT_S")).split()[1])
    return wall, fit


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--baseline", help="another checkout of tuneplat (e.g. the build before): its guarded run "
                                           "is measured too, as 'guarded_baseline'")
    args = parser.parse_args()
    out: dict[str, list[tuple[float, float]]] = {"toplevel": [], "guarded": []}
    if args.baseline:
        out["guarded_baseline"] = []
    with tempfile.TemporaryDirectory() as tmp:
        scripts = {"toplevel": write(tmp, False, args.trials), "guarded": write(tmp, True, args.trials)}
        scripts["guarded_baseline"] = scripts["guarded"]
        kinds = list(out)
        for i in range(args.repeats):
            order = kinds if i % 2 == 0 else kinds[::-1]
            for kind in order:
                root = os.path.abspath(args.baseline) if kind == "guarded_baseline" else ROOT
                out[kind].append(run(scripts[kind], tmp, root))
    summary: dict[str, Any] = {
        kind: {"process_s": [round(w, 2) for w, _ in runs], "fit_s": [round(f, 2) for _, f in runs],
               "median_process_s": round(statistics.median(w for w, _ in runs), 2),
               "median_fit_s": round(statistics.median(f for _, f in runs), 2)}
        for kind, runs in out.items()
    }
    summary["ratio_toplevel_over_guarded_process"] = round(
        summary["toplevel"]["median_process_s"] / summary["guarded"]["median_process_s"], 3)
    summary["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    summary["workload"] = f"(a) {args.trials} trials, one report each, 2 at a time, embedded cluster"
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
