"""MLflow overhead: result throughput of a sweep with MLflow logging on vs off.

Workload: 16 trials x 100 reports (4 metrics each), 2 trials at a time on a warm 2-worker
LocalCluster. "on" is the default embedded sqlite store in the storage path (every metric value
logged with its step, parent + 16 nested runs); "off" is RunConfig(mlflow=False).
"while training" is results / (last trial completed - experiment start): what the report path sees.
"whole fit" is results / fit() wall time, which also includes MLflow's end-of-experiment flush
(the uploader process writing the backlog to sqlite). Runs alternate off/on to share the machine's noise.

With --work-ms N each report follows N ms of busy CPU work in the trial (default 0: the
report path alone, the worst case for MLflow: ~25,000 metric values/s).

Usage:
  python benchmarks/mlflow_overhead.py             # 3 pairs; prints one JSON object
  python benchmarks/mlflow_overhead.py --pairs 1   # smoke run
  python benchmarks/mlflow_overhead.py --work-ms 10 --pairs 2   # trials that compute between reports
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

TRIALS, REPORTS = 16, 100


def many(config):
    import tuneplat

    work_s = config.get("work_ms", 0) / 1000
    for i in range(REPORTS):
        end = time.perf_counter() + work_s
        while time.perf_counter() < end:  # CPU work, as a training step would do
            pass
        tuneplat.report({"loss": config["x"] + 1.0 / (i + 1), "acc": i / REPORTS, "lr": 0.01, "step_s": 0.0})


def one_fit(client, storage: str, mlflow_on: bool, work_ms: float = 0.0) -> dict:
    import tuneplat as tune

    class Clock(tune.Callback):
        def setup(self, **info):
            self.start = time.perf_counter()

        def on_trial_complete(self, iteration, trials, trial, **info):
            self.last = time.perf_counter()

    clock = Clock()
    tuner = tune.Tuner(many, param_space={"x": tune.grid_search(list(range(TRIALS))), "work_ms": work_ms},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=2),
                       run_config=tune.RunConfig(storage_path=storage, verbose=0, callbacks=[clock],
                                                 mlflow=None if mlflow_on else False),
                       client=client)
    t0 = time.perf_counter()
    results = tuner.fit()
    wall = time.perf_counter() - t0
    n = sum(len(r._history) for r in results)
    assert n == TRIALS * REPORTS, n
    training = clock.last - clock.start
    if mlflow_on:
        from mlflow import MlflowClient

        c = MlflowClient(f"sqlite:///{storage}/mlflow.db")
        best = results.get_best_result()
        assert best.mlflow_run_id is not None, "the best trial has no MLflow run"
        logged = len(c.get_metric_history(best.mlflow_run_id, "loss"))
        assert logged == REPORTS, logged
    return {"training_s": round(training, 3), "results_per_s": round(n / training, 1),
            "fit_wall_s": round(wall, 3), "fit_results_per_s": round(n / wall, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--work-ms", type=float, default=0.0, help="busy CPU time before each report (ms)")
    args = ap.parse_args()
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    import dask
    from distributed import Client, LocalCluster

    os.environ["PYTHONPATH"] = os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])
    with dask.config.set({"distributed.worker.daemon": False}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                               resources={"CPU": 1})
    client = Client(cluster)
    load_before = os.getloadavg()[0]
    try:
        storage = tempfile.mkdtemp(prefix="mlflow_bench_")  # one storage path, as a user would keep
        one_fit(client, storage, False)  # warm-up: worker imports
        one_fit(client, storage, True)   # warm-up: creates the sqlite store (schema migrations, ~3 s)
        off, on = [], []
        for _ in range(args.pairs):
            off.append(one_fit(client, storage, False, args.work_ms))
            on.append(one_fit(client, storage, True, args.work_ms))
    finally:
        client.close()
        cluster.close()
    off_rate = statistics.median(r["results_per_s"] for r in off)
    on_rate = statistics.median(r["results_per_s"] for r in on)
    off_fit = statistics.median(r["fit_results_per_s"] for r in off)
    on_fit = statistics.median(r["fit_results_per_s"] for r in on)
    print(json.dumps({
        "workload": f"{TRIALS} trials x {REPORTS} reports, 2 at a time, 4 metrics per report, "
                    f"{args.work_ms:g} ms of CPU work before each report",
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, python {platform.python_version()}",
        "off": off, "on": on,
        "median_results_per_s_while_training": {"off": off_rate, "on": on_rate},
        "on_vs_off_while_training": round(on_rate / off_rate, 3),
        "median_results_per_s_whole_fit_incl_mlflow_flush": {"off": off_fit, "on": on_fit},
        "on_vs_off_whole_fit": round(on_fit / off_fit, 3),
        "goal": "on >= 0.8 x off",
        "met": on_rate >= 0.8 * off_rate,
        "met_whole_fit": on_fit >= 0.8 * off_fit,
        "load_avg_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
    }, indent=2))


if __name__ == "__main__":
    main()
