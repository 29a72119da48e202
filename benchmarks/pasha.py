"""PASHA vs ASHA: compute spent and final quality, on generated learning curves and on a recorded digits run.

1. Generated curves (``schedulers.testing.simulate``, pure and deterministic): ``--curves`` configs whose loss
   is ``final_i + a_i * t**-b_i`` (LCBench-like power laws, seeded), ``max_t=81``, 4 slots, ASHA and PASHA with
   grace 1 and η=3, several seeds. Figures: iterations spent, the best final value found, and its regret against
   the best final value of all configs.
2. A real recorded experiment: the digits MLP of ``examples/digits.py`` (``--trials`` configs, FIFO, 20 epochs,
   recorded on the embedded Dask cluster, MLflow off; or ``--experiment PATH`` to reuse one), replayed with
   ``tuneplat.testing.simulate`` under ASHA and PASHA (same η and grace): iterations, trial-seconds and the best
   ``val_loss`` each would have found, beside the recorded FIFO run. Prints JSON.

    python benchmarks/pasha.py [--seeds 5] [--curves 81] [--trials 16] [--experiment PATH]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Any

# this folder has a schedulers.py of its own: import the project's packages, not it
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from schedulers import ASHAScheduler, PASHAScheduler  # noqa: E402
from schedulers.testing import simulate as simulate_curves  # noqa: E402

MAX_T = 81


def generated(seed: int, n: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    curves = {}
    for i in range(n):
        final = rng.uniform(0.05, 0.5)
        a = rng.uniform(0.2, 1.5)
        b = rng.uniform(0.3, 1.2)
        curves[f"c{i:03d}"] = [final + a * t ** -b for t in range(1, MAX_T + 1)]
    return curves


def on_generated(seeds: int, n: int) -> dict:
    rows: dict[str, list[dict[str, Any]]] = {"asha": [], "pasha": []}
    for seed in range(seeds):
        curves = generated(seed, n)
        optimum = min(c[-1] for c in curves.values())
        for name, sched in (("asha", ASHAScheduler(max_t=MAX_T, grace_period=1, reduction_factor=3)),
                            ("pasha", PASHAScheduler(max_t=MAX_T, grace_period=1, reduction_factor=3))):
            run = simulate_curves(sched, curves, max_concurrent=4, max_t=MAX_T, metric="loss", mode="min")
            assert run.best_value is not None, f"{name}: no trial reported a finite loss"
            rows[name].append({"iterations": run.total_iterations, "best": run.best_value,
                               "regret": run.best_value - optimum,
                               "max_t_reached": getattr(sched, "current_max_t", MAX_T)})
    out: dict[str, Any] = {}
    for name, runs in rows.items():
        out[name] = {
            "iterations_mean": statistics.fmean(r["iterations"] for r in runs),
            "regret_mean": round(statistics.fmean(r["regret"] for r in runs), 4),
            "regret_per_seed": [round(r["regret"], 4) for r in runs],
            "iterations_per_seed": [r["iterations"] for r in runs],
        }
        if name == "pasha":
            out[name]["final_max_t_per_seed"] = [r["max_t_reached"] for r in runs]
    out["fifo_iterations"] = n * MAX_T
    out["pasha_iterations_vs_asha"] = round(out["pasha"]["iterations_mean"] / out["asha"]["iterations_mean"], 3)
    return out


def record_digits(trials: int, storage: str) -> str:
    import tuneplat as tune
    from examples.digits import train_loop

    grid = tune.Tuner(train_loop, param_space={"lr": tune.loguniform(1e-4, 1e-1),
                                               "hidden": tune.choice([32, 64, 128, 256]),
                                               "batch_size": tune.choice([32, 64]), "epochs": 20},
                      tune_config=tune.TuneConfig(metric="val_loss", mode="min", num_samples=trials, seed=0),
                      run_config=tune.RunConfig(name="digits-fifo", storage_path=storage, verbose=0, mlflow=False,
                                                checkpoint_config=tune.CheckpointConfig(num_to_keep=1))).fit()
    assert grid.experiment_path is not None
    return grid.experiment_path


def on_digits(path: str) -> dict:
    from tuneplat.testing import simulate

    out: dict = {"experiment": path}
    for name in ("asha", "pasha"):
        report = simulate(path, name, {"max_t": 20, "grace_period": 1, "reduction_factor": 3})
        out["recorded_fifo"] = {"iterations": report.recorded.iterations,
                                "trial_seconds": round(report.recorded.trial_seconds, 1),
                                "best_val_loss": report.recorded.best_value}
        out[name] = {"iterations": report.simulated.iterations,
                     "trial_seconds": round(report.simulated.trial_seconds, 1),
                     "best_val_loss": report.simulated.best_value}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--curves", type=int, default=81)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--experiment", help="a recorded digits experiment to replay (default: record one)")
    args = parser.parse_args()
    logging.getLogger("tuneplat").setLevel(logging.ERROR)
    t0 = time.perf_counter()
    result: dict = {"generated": on_generated(args.seeds, args.curves)}
    result["generated_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    if args.experiment:
        result["digits"] = on_digits(args.experiment)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = record_digits(args.trials, tmp)
            result["digits_record_s"] = round(time.perf_counter() - t0, 1)
            result["digits"] = on_digits(path)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
