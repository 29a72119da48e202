"""MO-ASHA on a two-objective multi-fidelity problem: hypervolume at equal compute, several seeds.

The problem is ZDT1 (5 variables, both objectives minimised) observed through a fidelity: at iteration ``t``
of ``T = 27`` each objective reads ``f_k(x) + c_k(x) / t``, with a config-dependent offset ``c_k(x)`` in
[0.1, 0.6] (a learning curve that flattens onto the true value; early readings are informative but biased
differently per config). Every method runs through the real ``Tuner`` on the virtual-time executor with
4 slots and the same budget of virtual time (``TuneConfig(time_budget_s=...)``: 4 slots busy for the whole
budget, so the same iterations of compute):

* ``random_full``: random search, every trial trained to ``T`` (FIFO);
* ``nsga2_full``: Optuna's NSGA-II (``NSGAIISampler(population_size=10)``) via ``OptunaSearch``, no early
  stopping (the peer: Optuna's multi-objective sampler without pruning, which Optuna does not offer for several
  objectives);
* ``mo_asha_random``: random search + ``ASHAScheduler`` with both metrics (MO-ASHA, crowding tie-break);
* ``mo_asha_epsnet``: the same with the epsilon-net tie-break;
* ``mo_asha_nsga2``: NSGA-II + MO-ASHA.

The figure is the hypervolume (reference point (1.1, 11)) of every trial's last reported values: a trial
stopped early reports its biased, worse, low-fidelity values, so stopping never inflates the figure. The true
front's hypervolume is printed beside (``true_front_hypervolume``). Prints JSON.

    python benchmarks/mo_asha.py [--seeds 5] [--budget 1080]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time

# this folder has a schedulers.py of its own: import the project's packages, not it
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import tuneplat as tune  # noqa: E402
from tuneplat.schedulers import ASHAScheduler  # noqa: E402
from tuneplat.testing import VirtualTimeExecutor  # noqa: E402
from tuneplat.testing._simulate import _hypervolume_2d  # noqa: E402

T = 27
DIM = 5
REF = (1.1, 11.0)
SLOTS = 4


def zdt1(x: list[float]) -> tuple[float, float]:
    f1 = x[0]
    g = 1.0 + 9.0 / (DIM - 1) * sum(x[1:])
    return f1, g * (1.0 - math.sqrt(f1 / g))


def offsets(x: list[float]) -> tuple[float, float]:
    """Per-config fidelity bias in [0.1, 0.6] (deterministic, not monotone in the objectives)."""
    a = 0.5 * (math.sin(12.9898 * x[1] + 78.233 * x[2]) * 0.5 + 0.5)
    b = 0.5 * (math.sin(39.3468 * x[3] + 11.135 * x[4]) * 0.5 + 0.5)
    return 0.1 + a, 0.1 + 10.0 * b / 5.0


def curve(config):
    x = [config[f"x{i}"] for i in range(DIM)]
    f1, f2 = zdt1(x)
    c1, c2 = offsets(x)
    for step in range(1, T + 1):
        yield {"f1": f1 + c1 / step, "f2": f2 + c2 / step, "time_this_iter_s": 1.0}


def hypervolume(points: list[tuple[float, float]], ref: tuple[float, float] = REF) -> float:
    """2-D hypervolume (both minimised) dominated by ``points`` and bounded by ``ref`` (as ``tuneplat simulate``
    computes it)."""
    return _hypervolume_2d(list(points), ref)


def run(method: str, seed: int, budget: int) -> dict:
    import optuna

    from tuneplat.search.optuna import OptunaSearch

    space = {f"x{i}": tune.uniform(0.0, 1.0) for i in range(DIM)}
    scheduler = None
    search = None
    if method.startswith("mo_asha"):
        scheduler = ASHAScheduler(max_t=T, grace_period=1, reduction_factor=3,
                                  mo_tiebreak="epsnet" if method.endswith("epsnet") else "crowding")
    if "nsga2" in method:
        search = OptunaSearch(sampler=optuna.samplers.NSGAIISampler(population_size=10, seed=seed), seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        executor = VirtualTimeExecutor(num_slots=SLOTS)
        t0 = time.perf_counter()
        grid = tune.Tuner(curve, param_space=space,
                          tune_config=tune.TuneConfig(metric=["f1", "f2"], mode=["min", "min"], num_samples=-1,
                                                      time_budget_s=budget / SLOTS, seed=seed,
                                                      scheduler=scheduler, search_alg=search),
                          run_config=tune.RunConfig(name="mo", storage_path=tmp, verbose=0, mlflow=False),
                          executor=executor).fit()
        wall = time.perf_counter() - t0
    points = [(r.metrics["f1"], r.metrics["f2"]) for r in grid if r.metrics and "f1" in r.metrics]
    full = sum(1 for r in grid if r.metrics and r.metrics.get("training_iteration") == T)
    return {"hypervolume": hypervolume(points), "trials": len(grid), "full_trials": full,
            "iterations": executor.iterations, "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=40 * T, help="iterations of compute for every method")
    args = parser.parse_args()
    logging.getLogger("optuna").setLevel(logging.WARNING)
    logging.getLogger("tuneplat").setLevel(logging.ERROR)
    methods = ["random_full", "nsga2_full", "mo_asha_random", "mo_asha_epsnet", "mo_asha_nsga2"]
    out: dict = {"problem": f"ZDT1, {DIM} variables, fidelity T={T}, c_k(x)/t offsets", "budget_iterations":
                 args.budget, "slots": SLOTS, "reference_point": list(REF), "seeds": args.seeds,
                 "true_front_hypervolume": round(hypervolume([(i / 1000, 1 - math.sqrt(i / 1000))
                                                              for i in range(1001)]), 3),
                 "methods": {}}
    for method in methods:
        runs = [run(method, seed, args.budget) for seed in range(args.seeds)]
        hv = [r["hypervolume"] for r in runs]
        out["methods"][method] = {
            "hypervolume_mean": round(statistics.fmean(hv), 3),
            "hypervolume_std": round(statistics.pstdev(hv), 3),
            "hypervolume_per_seed": [round(v, 3) for v in hv],
            "trials_mean": statistics.fmean(r["trials"] for r in runs),
            "full_trials_mean": statistics.fmean(r["full_trials"] for r in runs),
            "iterations_mean": statistics.fmean(r["iterations"] for r in runs),
            "wall_s_mean": round(statistics.fmean(r["wall_s"] for r in runs), 2),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
