"""One XGBoost model over 2 ranks: tuneplat's XGBoostTrainer vs xgboost.dask.train vs one process (vs Ray's).

Same data (generated here, in memory), same cluster (a 2-worker LocalCluster, one thread per worker process),
same parameters (``tree_method="hist"``); each distributed rank uses ``nthread=1`` and the one process
``nthread=2`` (the same 2 cores). For each: seconds inside ``xgboost.train`` (the ranks' own measure, max over
ranks), end-to-end seconds (the call the user makes: ``trainer.fit()``, ``xgboost.dask.train`` with its
``DaskDMatrix``), rounds/s, and peak resident memory of the processes that trained (the worker processes, sampled
every 50 ms; the driver for the one process). Ray 2.x's ``XGBoostTrainer`` (Ray Data input, 2 workers) runs when
``ray`` imports, unless ``--no-ray``. The models' predictions are compared (max abs difference).

xgboost.dask and XGBoostTrainer run once cold (``cold_first_call``: end-to-end seconds of each library's first call
in the worker processes, imports included), then ``--repeats`` times each, interleaved; the figures are the median
warm run's (all warm runs listed).

Usage:
  python benchmarks/boosting.py [--rows 100000] [--features 30] [--rounds 20] [--repeats 3] [--no-ray]
  python benchmarks/boosting.py --sweep 64 [--no-ray]   # 64 boosting trials under ASHA, tuneplat vs Ray Tune

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np
import pandas as pd
import psutil


def make_frame(rows: int, features: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    y = x[:, 0] * 2 - x[:, 1] * x[:, 2] + np.sin(3 * x[:, 3]) + rng.normal(0, 0.1, rows).astype(np.float32)
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(features)])
    frame["y"] = y
    return frame


PARAMS = {"tree_method": "hist", "objective": "reg:squarederror", "max_depth": 6, "eta": 0.1, "max_bin": 256}


class PeakRSS:
    """The highest summed RSS of some processes, sampled in a thread."""

    def __init__(self, pids: list[int]) -> None:
        self.procs = [psutil.Process(p) for p in pids]
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            total = 0
            for p in self.procs:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def rank_loop(config: dict) -> None:
    """Each rank: its shard → DMatrix → xgboost.train inside xgboost's collective; times itself."""
    import xgboost

    from tuneplat import train
    from tuneplat.train.backend import get_rank_group
    from tuneplat.train.xgboost import RayTrainReportCallback

    t0 = time.perf_counter()
    frame = train.get_dataset_shard("train").materialize().to_pandas()
    t1 = time.perf_counter()
    dtrain = xgboost.DMatrix(frame.drop("y", axis=1), label=frame["y"], nthread=1)
    t2 = time.perf_counter()
    booster = xgboost.train({**config["params"], "nthread": 1}, dtrain, num_boost_round=config["rounds"])
    t3 = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        ckpt = None
        if train.get_context().get_world_rank() == 0:
            booster.save_model(os.path.join(folder, RayTrainReportCallback.CHECKPOINT_NAME))
            ckpt = train.Checkpoint(folder)
        group = get_rank_group()
        assert group is not None, "XGBoostTrainer's ranks run in a rank group"
        times = group.all_gather([t1 - t0, t2 - t1, t3 - t2])  # the slowest rank of each phase
        train.report({"shard_s": max(t[0] for t in times), "dmatrix_s": max(t[1] for t in times),
                      "train_s": max(t[2] for t in times)}, checkpoint=ckpt)


def _torch_imported() -> bool:
    return "torch" in sys.modules


def bench_tuneplat(client, ddf, rounds: int, storage: str) -> dict:
    import tuneplat as tune
    from tuneplat.train.xgboost import RayTrainReportCallback, XGBoostTrainer

    pids = [int(v) for v in client.run(os.getpid).values()]
    trainer = XGBoostTrainer(rank_loop, train_loop_config={"params": PARAMS, "rounds": rounds},
                             datasets={"train": ddf}, scaling_config=tune.ScalingConfig(num_workers=2),
                             run_config=tune.RunConfig(name="bench", storage_path=storage, verbose=0, mlflow=False),
                             client=client)
    with PeakRSS(pids) as mem:
        t0 = time.perf_counter()
        result = trainer.fit()
        wall = time.perf_counter() - t0
    booster = RayTrainReportCallback.get_model(result.checkpoint)
    m = result.metrics
    train_s = float(m["train_s"])
    return {"train_s": train_s, "end_to_end_s": wall, "rounds_per_s": rounds / train_s, "peak_rss_mb": mem.peak / 2**20,
            "in_rank_s": {"read_shard": m["shard_s"], "dmatrix": m["dmatrix_s"], "train": m["train_s"]},
            "booster": booster, "note": "train_s: xgboost.train in the ranks (slowest rank); end_to_end_s: fit()"}


def bench_dask(client, ddf, rounds: int) -> dict:
    import xgboost
    import xgboost.dask

    pids = [int(v) for v in client.run(os.getpid).values()]
    with client.as_current(), PeakRSS(pids) as mem:
        t0 = time.perf_counter()
        dtrain = xgboost.dask.DaskDMatrix(client, ddf.drop(columns="y"), ddf["y"])
        t1 = time.perf_counter()
        out = xgboost.dask.train(client, {**PARAMS, "nthread": 1}, dtrain, num_boost_round=rounds)
        t2 = time.perf_counter()
    return {"train_s": t2 - t1, "end_to_end_s": t2 - t0, "rounds_per_s": rounds / (t2 - t1),
            "peak_rss_mb": mem.peak / 2**20, "booster": out["booster"],
            "note": "train_s: xgboost.dask.train (DMatrix built inside it on the workers)"}


def bench_one_process(frame: pd.DataFrame, rounds: int) -> dict:
    import xgboost

    me = psutil.Process()
    before = me.memory_info().rss
    with PeakRSS([os.getpid()]) as mem:
        t0 = time.perf_counter()
        dtrain = xgboost.DMatrix(frame.drop("y", axis=1), label=frame["y"], nthread=2)
        t1 = time.perf_counter()
        booster = xgboost.train({**PARAMS, "nthread": 2}, dtrain, num_boost_round=rounds)
        t2 = time.perf_counter()
    return {"train_s": t2 - t1, "end_to_end_s": t2 - t0, "rounds_per_s": rounds / (t2 - t1),
            "peak_rss_mb": mem.peak / 2**20, "rss_growth_mb": (mem.peak - before) / 2**20, "booster": booster}


def ray_rank_loop(config: dict) -> None:
    import os
    import tempfile
    import time

    import ray.train
    import xgboost

    frame = ray.train.get_dataset_shard("train").materialize().to_pandas()
    dtrain = xgboost.DMatrix(frame.drop("y", axis=1), label=frame["y"], nthread=1)
    t0 = time.perf_counter()
    booster = xgboost.train({**config["params"], "nthread": 1}, dtrain, num_boost_round=config["rounds"])
    seconds = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as folder:
        ckpt = None
        if ray.train.get_context().get_world_rank() == 0:
            booster.save_model(os.path.join(folder, "model.ubj"))
            ckpt = ray.train.Checkpoint.from_directory(folder)
        ray.train.report({"train_s": seconds}, checkpoint=ckpt)


def bench_ray(frame: pd.DataFrame, rounds: int, storage: str) -> dict:
    import ray
    import ray.data
    import ray.train
    from ray.train.xgboost import RayTrainReportCallback, XGBoostTrainer

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        ds = ray.data.from_pandas(frame)
        trainer = XGBoostTrainer(ray_rank_loop, train_loop_config={"params": PARAMS, "rounds": rounds},
                                 datasets={"train": ds}, scaling_config=ray.train.ScalingConfig(num_workers=2),
                                 run_config=ray.train.RunConfig(name="bench_ray", storage_path=storage))
        t0 = time.perf_counter()
        result = trainer.fit()
        wall = time.perf_counter() - t0
        assert result.checkpoint is not None, "Ray's trainer returned no checkpoint"
        booster = RayTrainReportCallback.get_model(result.checkpoint)
        train_s = float((result.metrics or {}).get("train_s", float("nan")))  # (rank 0's)
        return {"train_s": train_s, "end_to_end_s": wall, "rounds_per_s": rounds / train_s, "booster": booster,
                "note": "end_to_end_s: trainer.fit() once ray.init() returned; peak memory not sampled"}
    finally:
        ray.shutdown()


SWEEP_SPACE = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"], "nthread": 1,
               "max_depth": ("randint", 1, 9), "min_child_weight": ("choice", [1, 2, 3]),
               "subsample": ("uniform", 0.5, 1.0), "eta": ("loguniform", 1e-4, 1e-1)}


def _space(tune_module) -> dict:
    """Ray's xgboost_example.py search space, built with either library's ``tune``."""
    out = {}
    for k, v in SWEEP_SPACE.items():
        out[k] = getattr(tune_module, v[0])(*v[1:]) if isinstance(v, tuple) else v
    return out


def _breast_cancer_trial(report_callback):
    def train_breast_cancer(config: dict) -> None:
        import sklearn.datasets
        import xgboost as xgb
        from sklearn.model_selection import train_test_split

        data, labels = sklearn.datasets.load_breast_cancer(return_X_y=True)
        train_x, test_x, train_y, test_y = train_test_split(data, labels, test_size=0.25, random_state=0)
        xgb.train(config, xgb.DMatrix(train_x, label=train_y), evals=[(xgb.DMatrix(test_x, label=test_y), "test")],
                  verbose_eval=False, callbacks=[report_callback(frequency=1)])

    return train_breast_cancer


def sweep_tuneplat(n: int, storage: str) -> dict:
    from tuneplat.tune.integration.xgboost import TuneReportCheckpointCallback

    import tuneplat as tune
    from tuneplat.schedulers import ASHAScheduler

    tuner = tune.Tuner(tune.with_resources(_breast_cancer_trial(TuneReportCheckpointCallback), {"cpu": 1}),
                       param_space=_space(tune),
                       tune_config=tune.TuneConfig(metric="test-logloss", mode="min", num_samples=n,
                                                   scheduler=ASHAScheduler(max_t=10, grace_period=1,
                                                                           reduction_factor=2)),
                       run_config=tune.RunConfig(storage_path=storage, name="sweep", verbose=0, mlflow=False))
    t0 = time.perf_counter()
    grid = tuner.fit()  # (the embedded cluster's start is inside: 2 worker processes)
    wall = time.perf_counter() - t0
    rounds = [int(r.metrics.get("training_iteration", 0)) for r in grid]
    return {"wall_s": wall, "trials": len(rounds), "errors": len(grid.errors), "rounds_total": sum(rounds),
            "stopped_early": sum(1 for x in rounds if x < 10),
            "best_test_logloss": float(grid.get_best_result().metrics["test-logloss"])}


def sweep_ray(n: int, storage: str) -> dict:
    import ray
    from ray import tune
    from ray.tune.integration.xgboost import TuneReportCheckpointCallback
    from ray.tune.schedulers import ASHAScheduler

    t_init = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    init_s = time.perf_counter() - t_init
    try:
        tuner = tune.Tuner(tune.with_resources(_breast_cancer_trial(TuneReportCheckpointCallback), {"cpu": 1}),
                           param_space=_space(tune),
                           tune_config=tune.TuneConfig(metric="test-logloss", mode="min", num_samples=n,
                                                       scheduler=ASHAScheduler(max_t=10, grace_period=1,
                                                                               reduction_factor=2)),
                           run_config=tune.RunConfig(storage_path=storage, name="sweep_ray", verbose=0))
        t0 = time.perf_counter()
        grid = tuner.fit()
        wall = time.perf_counter() - t0
    finally:
        ray.shutdown()
    rounds = [int((grid[i].metrics or {}).get("training_iteration", 0)) for i in range(len(grid))]  # (no __iter__)
    return {"wall_s": wall, "ray_init_s": init_s, "trials": len(rounds), "errors": len(grid.errors),
            "rounds_total": sum(rounds), "stopped_early": sum(1 for x in rounds if x < 10),
            "best_test_logloss": float((grid.get_best_result().metrics or {})["test-logloss"])}


def main_sweep(args: argparse.Namespace) -> None:
    out: dict = {"benchmark": "boosting_sweep", "trials": args.sweep, "example": "Ray's xgboost_example.py space, "
                 "ASHA(max_t=10, grace_period=1, reduction_factor=2), 1 CPU per trial, nthread=1",
                 "loadavg_before": open("/proc/loadavg").read().split()[:3]}
    with tempfile.TemporaryDirectory(prefix="tuneplat-bench-sweep-") as tmp:
        out["tuneplat"] = sweep_tuneplat(args.sweep, os.path.join(tmp, "tp"))
        if not args.no_ray:
            try:
                import ray  # noqa: F401
            except ImportError:
                out["ray"] = "not installed"
            else:
                with contextlib.redirect_stdout(sys.stderr):  # Ray prints its tables: stdout stays the JSON
                    out["ray"] = sweep_ray(args.sweep, os.path.join(tmp, "ray"))
                out["ratio_wall_tuneplat_over_ray"] = out["tuneplat"]["wall_s"] / out["ray"]["wall_s"]
    out["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
    print(json.dumps(out, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3, help="warm runs of xgboost.dask and XGBoostTrainer "
                        "(interleaved; medians reported)")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--sweep", type=int, default=0, metavar="N",
                        help="instead: an N-trial Tune sweep with ASHA (Ray's xgboost_example.py) vs Ray Tune's")
    args = parser.parse_args()
    if args.sweep:
        main_sweep(args)
        return

    import dask.dataframe as dd
    import xgboost
    from distributed import Client, LocalCluster

    frame = make_frame(args.rows, args.features)
    X = xgboost.DMatrix(frame.drop("y", axis=1))
    out: dict = {"benchmark": "boosting", "rows": args.rows, "features": args.features, "rounds": args.rounds,
                 "params": PARAMS, "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                               "xgboost": xgboost.__version__,
                                               "loadavg_before": open("/proc/loadavg").read().split()[:3]}}
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="tuneplat-bench-boosting-") as tmp:
        results["one_process"] = bench_one_process(frame, args.rounds)
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=None) as cluster, Client(cluster) as client:
            ddf = client.persist(dd.from_pandas(frame, npartitions=2, sort=False))
            client.wait_for_workers(2)
            runs: dict[str, list[dict]] = {"xgboost_dask": [], "tuneplat_XGBoostTrainer": []}
            for i in range(1 + args.repeats):  # run 0 is cold: each library's first call in these worker processes
                order: list[tuple[str, Callable[[], dict[str, Any]]]] = [
                    ("xgboost_dask", lambda: bench_dask(client, ddf, args.rounds)),
                    ("tuneplat_XGBoostTrainer",
                     functools.partial(bench_tuneplat, client, ddf, args.rounds, os.path.join(tmp, f"tp_{i}")))]
                for name, run in order if i % 2 == 0 else order[::-1]:  # interleaved: load drift favours neither
                    runs[name].append(run())
            cold = {f"{name}_end_to_end_s": rs[0]["end_to_end_s"] for name, rs in runs.items()}
            for name, rs in runs.items():
                warm = rs[1:]
                med = sorted(warm, key=lambda r: r["train_s"])[len(warm) // 2]  # the median run (by train_s)
                med["end_to_end_s"] = statistics.median(r["end_to_end_s"] for r in warm)
                med["all_warm_train_s"] = [round(r["train_s"], 3) for r in warm]
                med["all_warm_end_to_end_s"] = [round(r["end_to_end_s"], 3) for r in warm]
                for r in rs:
                    if r is not med:
                        r.pop("booster", None)
                results[name] = med
            out["cold_first_call"] = cold
            # which processes imported torch by now (tuneplat's non-torch backends never do; xgboost.dask neither)
            out["torch_imported"] = {"worker_processes": sorted(client.run(_torch_imported).values()),
                                     "driver": _torch_imported()}
        if not args.no_ray:
            try:
                import ray  # noqa: F401
            except ImportError:
                out["ray"] = "not installed"
            else:
                with contextlib.redirect_stdout(sys.stderr):  # Ray prints its tables: stdout stays the JSON
                    results["ray_XGBoostTrainer"] = bench_ray(frame, args.rounds, os.path.join(tmp, "ray"))
    reference = results["tuneplat_XGBoostTrainer"]["booster"].predict(X)
    for r in results.values():
        diff = np.abs(r.pop("booster").predict(X) - reference)
        r["prediction_diff_vs_tuneplat"] = {"max_abs": float(diff.max()), "mean_abs": float(diff.mean())}
    out["results"] = results
    tp = results["tuneplat_XGBoostTrainer"]
    out["ratios"] = {f"tuneplat_train_s / {k}_train_s": tp["train_s"] / r["train_s"]
                     for k, r in results.items() if k != "tuneplat_XGBoostTrainer"}
    out["ratios"].update({f"tuneplat_end_to_end_s / {k}_end_to_end_s": tp["end_to_end_s"] / r["end_to_end_s"]
                          for k, r in results.items() if k != "tuneplat_XGBoostTrainer"})
    rank_work = tp["in_rank_s"]["dmatrix"] + tp["in_rank_s"]["train"]
    out["ratios"]["tuneplat_in_rank_dmatrix_plus_train_s / xgboost_dask_train_s"] = \
        rank_work / results["xgboost_dask"]["train_s"]
    out["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
