"""Tuner overhead: tuneplat vs Ray Tune on the same workloads, same machine, same run.

Workloads (2 trials at a time, 2 worker slots):
  (a) 200 trials, each reports once            -> fit() seconds once the cluster is up
  (b) 16 trials x 100 reports                  -> results/s through the tuner (scheduler included)
  (c) N trials that sleep 0.1 s, report once    -> bookkeeping efficiency, ideal/wall measured as the
      difference between a small and a large N so that start-up cancels.

Usage:
  python benchmarks/overhead.py                 # tuneplat, plus Ray Tune (reuse_actors=True) if installed
  python benchmarks/overhead.py --ray-default   # also Ray's default reuse_actors=False (minutes)
  python benchmarks/overhead.py --no-ray
  python benchmarks/overhead.py --tls           # (b) over a TLS cluster vs a plaintext one, interleaved runs
  python benchmarks/overhead.py --no-ray --embedded   # on the embedded cluster, with every default on
  python benchmarks/overhead.py --system-metrics   # (b) with ranks' system metrics off / on (5 s) / on every
                                                   # 0.1 s (heartbeat 0.1 s), interleaved rounds

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
# the checkout under test: this one, or another (benchmarks/compare_builds.py runs two builds interleaved)
sys.path.insert(0, os.environ.get("TUNEPLAT_BENCH_ROOT") or os.path.dirname(HERE))


def tp_once(config):
    import tuneplat

    tuneplat.report({"loss": config["x"]})


def tp_many(config):
    import tuneplat

    for i in range(100):
        tuneplat.report({"loss": config["x"] + i})


def tp_sleep(config):
    import tuneplat

    time.sleep(0.1)
    tuneplat.report({"loss": config["x"]})


def ray_once(config):
    from ray import tune

    tune.report({"loss": config["x"]})


def ray_many(config):
    from ray import tune

    for i in range(100):
        tune.report({"loss": config["x"] + i})


def ray_sleep(config):
    from ray import tune

    time.sleep(0.1)
    tune.report({"loss": config["x"]})


def run_tuneplat(client, fn, n: int, storage: str) -> tuple[float, int]:
    import tuneplat as tune

    tuner = tune.Tuner(
        fn, param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=n, max_concurrent_trials=2),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, mlflow=False),
        client=client,
    )
    t0 = time.perf_counter()
    results = tuner.fit()
    wall = time.perf_counter() - t0
    errors = [r.error for r in results if r.error is not None]
    if errors:
        raise RuntimeError(f"{len(errors)} trial(s) failed; first: {errors[0]}")
    return wall, sum(len(r._history) for r in results)


def run_ray(fn, n: int, storage: str, reuse: bool) -> tuple[float, int]:
    from ray import tune

    tuner = tune.Tuner(
        fn, param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=n, max_concurrent_trials=2,
                                    reuse_actors=reuse),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    )
    t0 = time.perf_counter()
    results = tuner.fit()
    wall = time.perf_counter() - t0
    frames = [results[i].metrics_dataframe for i in range(len(results))]  # (Ray's grid has no __iter__)
    return wall, sum(len(df) for df in frames if df is not None)


def efficiency(run, small: int, large: int) -> dict:
    w_small, _ = run(small)
    w_large, _ = run(large)
    ideal = 0.1 * (math.ceil(large / 2) - math.ceil(small / 2))
    return {"small_n": small, "large_n": large, "wall_small_s": round(w_small, 3), "wall_large_s": round(w_large, 3),
            "efficiency": round(ideal / (w_large - w_small), 4)}


def bench_tuneplat(storage: str, sizes: dict, embedded: bool = False, only: str = "abc") -> dict:
    import dask
    from distributed import Client, LocalCluster

    t0 = time.perf_counter()
    cluster: Any
    if embedded:  # the cluster Tuner() starts by default (TLS unless TUNEPLAT_LOCAL_TLS=0), with its defaults
        from tuneplat.execution._cluster import Cluster

        cluster = Cluster()
        client = cluster.client
    else:
        with dask.config.set({"distributed.worker.daemon": False}):
            cluster = LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                                   dashboard_address="127.0.0.1:0", resources={"CPU": 1})
        client = Client(cluster, set_as_default=False)
    startup = time.perf_counter() - t0
    try:
        run_tuneplat(client, tp_once, 4, storage)  # warm the workers' imports
        a = b = math.nan
        n_b = 0
        c = {"efficiency": math.nan}
        if "a" in only:
            a, _ = run_tuneplat(client, tp_once, sizes["a"], storage)
        if "b" in only:
            b, n_b = run_tuneplat(client, tp_many, sizes["b"], storage)
        if "c" in only:
            c = efficiency(lambda n: run_tuneplat(client, tp_sleep, n, storage), sizes["c_small"], sizes["c_large"])
    finally:
        if not embedded:
            client.close()
        cluster.close()
    return {"embedded_defaults": embedded, "cluster_startup_s": round(startup, 3), "a_fit_s": round(a, 3), "a_ms_per_trial": round(1000 * a / sizes["a"], 2),
            "b_results_per_s": round(n_b / b, 1), "b_wall_s": round(b, 3), "c": c}


def bench_tls(storage: str, sizes: dict, rounds: int) -> dict:
    """(b) results/s with the rank<->tuner channel on TLS (a TLS cluster) vs plaintext, interleaved rounds."""
    import statistics

    import dask
    from distributed import Client, LocalCluster

    from tuneplat.execution._cluster import temporary_security  # what the embedded cluster uses (ECDSA P-256)

    clients, clusters = {}, []
    for mode in ("plain", "tls"):
        sec = temporary_security() if mode == "tls" else None
        with dask.config.set({"distributed.worker.daemon": False}):
            cluster = LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                                   dashboard_address="127.0.0.1:0", resources={"CPU": 1}, security=sec)
        clusters.append(cluster)
        clients[mode] = Client(cluster, set_as_default=False, security=sec)
    rates: dict[str, list[float]] = {"plain": [], "tls": []}
    try:
        for mode in ("plain", "tls"):
            run_tuneplat(clients[mode], tp_once, 4, storage)  # warm the workers' imports
        for i in range(rounds):
            for mode in (("plain", "tls") if i % 2 == 0 else ("tls", "plain")):
                wall, n = run_tuneplat(clients[mode], tp_many, sizes["b"], storage)
                rates[mode].append(n / wall)
    finally:
        for c in clients.values():
            c.close()
        for cl in clusters:
            cl.close()
    med = {m: statistics.median(v) for m, v in rates.items()}
    return {"rounds": rounds, "b_results_per_s_plain": [round(x, 1) for x in rates["plain"]],
            "b_results_per_s_tls": [round(x, 1) for x in rates["tls"]],
            "median_plain": round(med["plain"], 1), "median_tls": round(med["tls"], 1),
            "tls_cost_pct": round(100 * (1 - med["tls"] / med["plain"]), 1), "goal_cost_pct": 20}


_SYSTEM_MODES = {
    "off": {"TUNEPLAT_SYSTEM_METRICS_S": "0"},
    "on": {"TUNEPLAT_SYSTEM_METRICS_S": "5"},  # the default
    "on_fast": {"TUNEPLAT_SYSTEM_METRICS_S": "0.1", "TUNEPLAT_HEARTBEAT_TIMEOUT_S": "1"},  # a sample every ping
}


def bench_system_metrics(storage: str, sizes: dict, rounds: int, reports: int) -> dict:
    """(b) results/s with the ranks' system metrics off, on (default period) and on at 0.1 s, interleaved."""
    import statistics

    import dask
    from distributed import Client, LocalCluster

    def many(config):
        import tuneplat

        for i in range(config["reports"]):
            tuneplat.report({"loss": config["x"] + i})

    with dask.config.set({"distributed.worker.daemon": False}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                               resources={"CPU": 1})
    client = Client(cluster, set_as_default=False)
    rates: dict[str, list[float]] = {m: [] for m in _SYSTEM_MODES}
    saved = {k: os.environ.get(k) for m in _SYSTEM_MODES.values() for k in m}
    import tuneplat as tune

    def run(mode: str) -> float:
        for k in saved:
            os.environ.pop(k, None)
        os.environ.update(_SYSTEM_MODES[mode])
        tuner = tune.Tuner(
            many, param_space={"x": tune.uniform(0, 1), "reports": reports},
            tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=sizes["b"], max_concurrent_trials=2),
            run_config=tune.RunConfig(storage_path=storage, verbose=0, mlflow=False), client=client)
        t0 = time.perf_counter()
        results = tuner.fit()
        wall = time.perf_counter() - t0
        assert not results.errors, results.errors
        return sum(len(r._history) for r in results) / wall

    try:
        run("off")  # warm the workers' imports
        modes = list(_SYSTEM_MODES)
        for i in range(rounds):
            for mode in (modes if i % 2 == 0 else modes[::-1]):
                rates[mode].append(run(mode))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        client.close()
        cluster.close()
    med = {m: statistics.median(v) for m, v in rates.items()}
    return {"rounds": rounds, "trials": sizes["b"], "reports_per_trial": reports,
            **{f"b_results_per_s_{m}": [round(x, 1) for x in v] for m, v in rates.items()},
            **{f"median_{m}": round(x, 1) for m, x in med.items()},
            "cost_pct_on": round(100 * (1 - med["on"] / med["off"]), 2),
            "cost_pct_on_fast": round(100 * (1 - med["on_fast"] / med["off"]), 2), "goal_cost_pct": 3}


def bench_ray(storage: str, sizes: dict, reuse: bool) -> dict:
    import ray

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        run_ray(ray_once, 4, storage, reuse)
        a, _ = run_ray(ray_once, sizes["a"], storage, reuse)
        b, n_b = run_ray(ray_many, sizes["b"], storage, reuse)
        c = efficiency(lambda n: run_ray(ray_sleep, n, storage, reuse), sizes["c_small"], sizes["c_large"])
    finally:
        ray.shutdown()
    return {"reuse_actors": reuse, "a_fit_s": round(a, 3), "a_ms_per_trial": round(1000 * a / sizes["a"], 2),
            "b_results_per_s": round(n_b / b, 1), "b_wall_s": round(b, 3), "c": c}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray Tune peer")
    parser.add_argument("--ray-default", action="store_true", help="also run Ray with reuse_actors=False (slow)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke test)")
    parser.add_argument("--tls", type=int, nargs="?", const=9, default=0, metavar="ROUNDS",
                        help="only (b), TLS vs plaintext channel, interleaved (default 9 rounds each)")
    parser.add_argument("--embedded", action="store_true",
                        help="tuneplat on the cluster Tuner() starts by default (TLS, progress.csv/TensorBoard files): "
                             "what a user gets; without it, a plain LocalCluster as Ray's peer figures use")
    parser.add_argument("--only", default="abc", help="the workloads to run, e.g. 'bc' (default: abc)")
    parser.add_argument("--system-metrics", type=int, nargs="?", const=7, default=0, metavar="ROUNDS",
                        help="only (b), system metrics off/on/fast, interleaved (default 7 rounds each)")
    parser.add_argument("--reports", type=int, default=2000,
                        help="reports per trial for --system-metrics (long enough for samples to be taken)")
    args = parser.parse_args()
    sizes = {"a": 200, "b": 16, "c_small": 20, "c_large": 100}
    if args.quick:
        sizes = {"a": 40, "b": 4, "c_small": 4, "c_large": 12}
    storage = tempfile.mkdtemp(prefix="tuneplat_bench_")
    try:
        _run(args, sizes, storage)
    finally:
        shutil.rmtree(storage, ignore_errors=True)


def _run(args: argparse.Namespace, sizes: dict, storage: str) -> None:
    out: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "sizes": sizes}
    if args.system_metrics:
        out["system_metrics"] = bench_system_metrics(storage, sizes, args.system_metrics, args.reports)
        print(json.dumps(out, indent=2))
        return
    if args.tls:
        out["tls_vs_plain"] = bench_tls(storage, sizes, args.tls)
        print(json.dumps(out, indent=2))
        return
    out["tuneplat"] = bench_tuneplat(storage, sizes, embedded=args.embedded, only=args.only)
    try:
        import ray  # noqa: F401

        have_ray = not args.no_ray
    except ImportError:
        have_ray = False
    if have_ray:
        out["ray_reuse_actors"] = bench_ray(storage, sizes, reuse=True)
        if args.ray_default:
            out["ray_default"] = bench_ray(storage, sizes, reuse=False)
        for key in ("ray_reuse_actors", "ray_default"):
            if key in out:
                r, t = out[key], out["tuneplat"]
                out[f"ratio_vs_{key}"] = {
                    "a_speedup": round(r["a_fit_s"] / t["a_fit_s"], 2),
                    "b_throughput_ratio": round(t["b_results_per_s"] / r["b_results_per_s"], 2),
                    "c_efficiency_tuneplat_vs_ray": [t["c"]["efficiency"], r["c"]["efficiency"]],
                }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
