"""Schedulers through the REAL tuner (``Tuner.fit()`` on a 2-worker Dask LocalCluster).

1. ASHA vs FIFO on random search, same seeds, same trial count, on
   (a) the synthetic learning-curve family of ``benchmarks/schedulers_sim.py``
       (64 trials, max_t=81, 5 seeds; ASHA with grace_period 1, 3 and 9), and
   (b) an MLP on scikit-learn's digits (torch, one epoch per iteration,
       32 trials, max_t=27, 3 seeds, ASHA grace_period 1; validation cross-entropy).
   For each: the total training iterations consumed, the best loss found
   (best validation loss ever reported, i.e. ``get_best_result(scope="all")``,
   and the best last-reported loss) and the wall time.
   Goal: ASHA within 1 % of FIFO's best loss using <= 1/3 of the iterations.
2. The PBT toy problem of Jaderberg et al. 2017 (2 members, 120 steps each)
   against the 4-point grid over h, with checkpoints, pauses and clones
   really going through the tuner and the Dask workers; PBT with
   ``synch=True`` (members exploit at common boundaries, as in the paper's
   toy) and asynchronous (each member at its own boundaries).

Usage::

    python benchmarks/schedulers.py            # ~2-3 min on 2 cores; prints JSON
    python benchmarks/schedulers.py --quick    # smoke run (fewer trials and seeds)

The digits model is self-contained here (``examples/digits.py`` did not exist
when this was written).
"""

from __future__ import annotations

import os
import sys

# This file is called schedulers.py: keep its folder off sys.path so that
# ``import schedulers`` finds the package, not this script.
_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, _ROOT)

import argparse
import json
import logging
import math
import random
import tempfile
import time
from typing import Any

import tuneplat as tune
from tuneplat.schedulers import ASHAScheduler, FIFOScheduler, PopulationBasedTraining


# -- trainables (defined in __main__: shipped to the workers by value) ------------------
def synthetic_curve(config: dict[str, Any]) -> None:
    """The family of benchmarks/schedulers_sim.py: decay to a config-dependent floor, crossing curves."""
    floor = 0.05 + 0.08 * (math.log10(config["lr"]) + 2.5) ** 2 + 0.3 * (config["width"] - 0.7) ** 2
    speed = 0.05 + 0.3 * config["momentum"]
    noise = random.Random(f"{config['noise_seed']}-{config['lr']}")
    for step in range(1, config["max_t"] + 1):
        loss = floor + (1.0 - floor) * math.exp(-speed * step) + noise.gauss(0.0, 0.005)
        tune.report({"loss": loss})


def digits_mlp(config: dict[str, Any]) -> None:
    """One hidden-layer MLP on sklearn's digits (80/20 split), SGD; one epoch per report."""
    import torch
    from sklearn.datasets import load_digits

    torch.set_num_threads(1)
    x, y = load_digits(return_X_y=True)
    gen = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(x), generator=gen)
    x = torch.tensor(x, dtype=torch.float32)[perm] / 16.0
    y = torch.tensor(y, dtype=torch.long)[perm]
    n_train = int(0.8 * len(x))
    xt, yt, xv, yv = x[:n_train], y[:n_train], x[n_train:], y[n_train:]
    torch.manual_seed(config["init_seed"])
    model = torch.nn.Sequential(torch.nn.Linear(64, config["hidden"]), torch.nn.ReLU(),
                                torch.nn.Linear(config["hidden"], 10))
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"],
                          weight_decay=config["wd"])
    bs = config["batch_size"]
    loss_fn = torch.nn.CrossEntropyLoss()
    order = torch.Generator().manual_seed(config["init_seed"])
    for _epoch in range(config["max_t"]):
        model.train()
        for idx in torch.randperm(n_train, generator=order).split(bs):
            opt.zero_grad()
            loss_fn(model(xt[idx]), yt[idx]).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            logits = model(xv)
            val = float(loss_fn(logits, yv))
            acc = float((logits.argmax(1) == yv).float().mean())
        tune.report({"loss": val if math.isfinite(val) else float("inf"), "accuracy": acc})


def pbt_toy(config: dict[str, Any]) -> None:
    """Jaderberg et al.'s toy: gradient ascent (step 0.01) on 1.2 - (h0 θ0² + h1 θ1²); reports Q = 1.2 - |θ|²."""
    ckpt = tune.get_checkpoint()
    theta = [0.9, 0.9]
    if ckpt is not None:
        with open(os.path.join(ckpt.path, "theta.json"), encoding="utf-8") as f:
            theta = json.load(f)
    while True:  # the tuner's stop criterion ends it (training_iteration == budget)
        theta = [t - 0.01 * 2.0 * h * t for t, h in zip(theta, (config["h0"], config["h1"]))]
        folder = tempfile.mkdtemp(prefix="pbt-toy-")
        with open(os.path.join(folder, "theta.json"), "w", encoding="utf-8") as f:
            json.dump(theta, f)
        tune.report({"Q": 1.2 - (theta[0] ** 2 + theta[1] ** 2)},
                    checkpoint=tune.Checkpoint.from_directory(folder))


def _warm_up() -> None:
    """Import torch and sklearn and take one optimizer step (torch imports more lazily on the first one)."""
    import torch
    from sklearn.datasets import load_digits

    load_digits()
    layer = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.5)
    layer(torch.zeros(1, 4)).sum().backward()
    opt.step()


# -- runs -----------------------------------------------------------------------------
def _fit(client: Any, storage: str, name: str, fn: Any, space: dict[str, Any], **tc: Any) -> tuple[Any, float]:
    stop = tc.pop("stop", None)
    t0 = time.perf_counter()
    results = tune.Tuner(
        fn, param_space=space, tune_config=tune.TuneConfig(**tc),
        run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False, stop=stop),
        client=client,
    ).fit()
    return results, time.perf_counter() - t0


def _summary(results: Any, wall: float) -> dict[str, Any]:
    errors = results.num_errors
    iterations = sum(int(r.metrics.get("training_iteration", 0)) for r in results)
    best_all = results.get_best_result(scope="all")
    best_last = results.get_best_result(scope="last")
    best_ever = min(float(v) for v in best_all.metrics_dataframe["loss"] if math.isfinite(float(v)))
    return {"trials": len(results), "errors": errors, "total_iterations": iterations,
            "best_loss": round(best_ever, 5), "best_last_loss": round(float(best_last.metrics["loss"]), 5),
            "best_config": {k: v for k, v in best_all.config.items() if k not in ("max_t", "noise_seed", "init_seed")},
            "wall_s": round(wall, 2)}


def asha_vs_fifo(client: Any, storage: str, problem: str, seeds: list[int], n_trials: int, max_t: int,
                 grace_periods: tuple[int, ...] = (1,)) -> dict[str, Any]:
    """FIFO and ASHA (``reduction_factor=3``, one variant per grace period) on the same sampled configs."""
    if problem == "synthetic":
        fn = synthetic_curve
        space: dict[str, Any] = {"lr": tune.loguniform(1e-4, 1e-1), "width": tune.uniform(0.0, 1.0),
                                 "momentum": tune.uniform(0.0, 1.0), "max_t": max_t}
    else:
        fn = digits_mlp
        space = {"lr": tune.loguniform(1e-3, 1.0), "momentum": tune.uniform(0.0, 0.95),
                 "hidden": tune.lograndint(8, 257), "wd": tune.loguniform(1e-6, 1e-2),
                 "batch_size": tune.choice([32, 64, 128, 256]), "init_seed": tune.randint(0, 1000), "max_t": max_t}
    variants = {"fifo": None, **{f"asha_grace{g}": g for g in grace_periods}}
    per_seed: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for seed in seeds:
        if problem == "synthetic":
            space["noise_seed"] = seed
        for name, grace in variants.items():
            scheduler = (FIFOScheduler() if grace is None
                         else ASHAScheduler(max_t=max_t, grace_period=grace, reduction_factor=3, seed=seed))
            results, wall = _fit(client, storage, f"{problem}-{name}-{seed}", fn, space, metric="loss", mode="min",
                                 num_samples=n_trials, seed=seed, scheduler=scheduler)
            per_seed[name].append({"seed": seed, **_summary(results, wall)})
    fifo = per_seed["fifo"]
    vs_fifo = {}
    for name in variants:
        if name == "fifo":
            continue
        runs = per_seed[name]
        ratios = [a["total_iterations"] / f["total_iterations"] for f, a in zip(fifo, runs)]
        gaps = [(a["best_loss"] - f["best_loss"]) / abs(f["best_loss"]) for f, a in zip(fifo, runs)]
        last_gaps = [(a["best_last_loss"] - f["best_last_loss"]) / abs(f["best_last_loss"]) for f, a in zip(fifo, runs)]
        vs_fifo[name] = {
            "iterations_ratio_per_seed": [round(r, 3) for r in ratios],
            "best_loss_rel_gap_per_seed": [round(g, 4) for g in gaps],
            "best_last_loss_rel_gap_per_seed": [round(g, 4) for g in last_gaps],
            "goal_met_per_seed": [r <= 1 / 3 and g <= 0.01 for r, g in zip(ratios, gaps)],
        }
    return {
        "problem": problem, "trials": n_trials, "max_t": max_t, "seeds": seeds, "workers": 2,
        "asha_reduction_factor": 3, "vs_fifo": vs_fifo,
        "mean": {name: {k: round(sum(r[k] for r in runs) / len(runs), 5)
                        for k in ("total_iterations", "best_loss", "best_last_loss", "wall_s")}
                 for name, runs in per_seed.items()},
        "per_seed": per_seed,
    }


def pbt_toy_bench(client: Any, storage: str, seeds: list[int], budget: int = 120, synch: bool = True) -> dict[str, Any]:
    grid, wall = _fit(client, storage, "pbt-toy-grid", pbt_toy,
                      {"h0": tune.grid_search([0.0, 1.0]), "h1": tune.grid_search([0.0, 1.0])},
                      metric="Q", mode="max", stop={"training_iteration": budget})
    grid_best = max(float(v) for r in grid for v in r.metrics_dataframe["Q"])
    out: dict[str, Any] = {"budget_steps_per_member": budget, "target_Q": 1.19,
                           "grid": {"best_Q": round(grid_best, 5), "reached_target": grid_best >= 1.19,
                                    "wall_s": round(wall, 2)},
                           "pbt": {"population": 2, "perturbation_interval": 2, "perturbation_factors": [1.5, 0.75],
                                   "synch": synch,
                                   "resample_probability": 0.25, "per_seed": []}}
    for seed in seeds:
        pbt = PopulationBasedTraining(time_attr="training_iteration",
            perturbation_interval=2, hyperparam_mutations={"h0": tune.uniform(0.0, 1.0), "h1": tune.uniform(0.0, 1.0)},
            resample_probability=0.25, perturbation_factors=(1.5, 0.75), synch=synch, seed=seed)
        results, wall = _fit(client, storage, f"pbt-toy-{seed}-{'synch' if synch else 'async'}", pbt_toy,
                             # the two members start at h = (1, 0) and (0, 1)
                             {"h0": tune.grid_search([1.0, 0.0]), "h1": tune.sample_from(lambda spec: 1.0 - spec.config["h0"])},
                             metric="Q", mode="max", scheduler=pbt, stop={"training_iteration": budget})
        members = list(results)
        best_q = max(float(v) for r in members for v in r.metrics_dataframe["Q"])
        out["pbt"]["per_seed"].append({
            "seed": seed, "best_Q": round(best_q, 5), "reached_target": best_q >= 1.19,
            "exploits": sum(len(r.lineage) for r in members),
            "steps_per_member": [int(r.metrics["training_iteration"]) for r in members],
            "wall_s": round(wall, 2)})
    runs = out["pbt"]["per_seed"]
    out["pbt"]["seeds_reaching_target"] = sum(r["reached_target"] for r in runs)
    out["pbt"]["mean_best_Q"] = round(sum(r["best_Q"] for r in runs) / len(runs), 5)
    return out


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer trials and seeds (smoke run)")
    args = parser.parse_args()
    logging.getLogger("distributed").setLevel(logging.ERROR)
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.worker.daemon": False}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address="127.0.0.1:0", resources={"CPU": 1})
    client = Client(cluster, set_as_default=False)
    client.run(_warm_up)  # one-time imports per worker process, outside the timings
    seeds = [0] if args.quick else [0, 1, 2]
    report: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="tuneplat-sched-bench-") as storage:
            report["synthetic"] = asha_vs_fifo(client, storage, "synthetic", [0] if args.quick else [0, 1, 2, 3, 4],
                                               16 if args.quick else 64, 81, grace_periods=(1, 3, 9))
            report["digits_mlp"] = asha_vs_fifo(client, storage, "digits", seeds, 8 if args.quick else 32, 27,
                                                grace_periods=(1,))
            pbt_seeds = [0] if args.quick else list(range(5))
            report["pbt_toy"] = pbt_toy_bench(client, storage, pbt_seeds, synch=True)
            report["pbt_toy_async"] = pbt_toy_bench(client, storage, pbt_seeds, synch=False)
    finally:
        client.close()
        cluster.close()
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
