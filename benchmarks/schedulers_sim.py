"""Simulated scheduler benchmarks (pure Python, deterministic, a few seconds).

1. ASHA (and HyperBand) vs FIFO on random search: the same 64 sampled
   configurations of a synthetic learning-curve family, max_t=81, 4 slots;
   total iterations consumed and best loss found, per seed and on average.
2. The PBT toy problem of Jaderberg et al. 2017 (Fig. 2): Q(θ) = 1.2 − (θ0² + θ1²),
   trained by gradient ascent on the surrogate 1.2 − (h0 θ0² + h1 θ1²) with
   θ0 = θ1 = 0.9 and step size 0.01; PBT (2 members starting at h=(1,0) and
   (0,1), h explored within the budget of 120 steps per member) against a
   grid search over h ∈ {(1,0), (0,1), (1,1), (0,0)}: best Q and whether
   Q ≥ 1.19 is reached (h=(1,1) needs 126 steps, so the grid cannot).

Usage: ``python benchmarks/schedulers_sim.py`` (prints JSON).
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
from collections.abc import Mapping
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from schedulers import (  # noqa: E402
    ASHAScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    PopulationBasedTraining,
)
from schedulers.testing import simulate  # noqa: E402

MAX_T = 81
N_TRIALS = 64
SEEDS = (0, 1, 2, 3, 4)


# -- 1. ASHA vs FIFO ------------------------------------------------------
def sample_config(rng: random.Random) -> dict[str, float]:
    """Random search over a 3-d space: log-uniform lr, uniform width and momentum."""
    return {"lr": 10 ** rng.uniform(-4, -1), "width": rng.uniform(0.0, 1.0),
            "momentum": rng.uniform(0.0, 1.0)}


def learning_curve(config: dict[str, float], seed: int) -> Any:
    """Loss after ``step`` epochs: exponential decay to a config-dependent floor.

    The floor is lowest at lr≈10^-2.5, width≈0.7; the speed depends on
    momentum only, so curves cross (fast-but-mediocre vs slow-but-good);
    the noise is deterministic.
    """
    floor = 0.05 + 0.08 * (math.log10(config["lr"]) + 2.5) ** 2 + 0.3 * (config["width"] - 0.7) ** 2
    speed = 0.05 + 0.3 * config["momentum"]
    noise = random.Random(f"{seed}-{config['lr']}")
    offsets = [noise.gauss(0.0, 0.005) for _ in range(MAX_T)]
    return lambda step: floor + (1.0 - floor) * math.exp(-speed * step) + offsets[step - 1]


def random_search(seed: int) -> list[tuple[dict[str, float], Any]]:
    rng = random.Random(seed)
    configs = [sample_config(rng) for _ in range(N_TRIALS)]
    return [(c, learning_curve(c, seed)) for c in configs]


def asha_vs_fifo() -> dict[str, Any]:
    factories = {
        "fifo": lambda seed: FIFOScheduler(),
        "asha": lambda seed: ASHAScheduler(max_t=MAX_T, grace_period=1, reduction_factor=3,
                                           seed=seed),
        "hyperband": lambda seed: HyperBandScheduler(max_t=MAX_T, reduction_factor=3),
    }
    per_seed: dict[str, list[dict[str, Any]]] = {name: [] for name in factories}
    for seed in SEEDS:
        trials = random_search(seed)
        for name, factory in factories.items():
            run = simulate(factory(seed), trials, max_concurrent=4, max_t=MAX_T)
            per_seed[name].append({"seed": seed, "total_iterations": run.total_iterations,
                                   "best_loss": None if run.best_value is None else round(run.best_value, 4),
                                   "virtual_time": run.ticks})
    summary = {}
    for name, runs in per_seed.items():
        summary[name] = {
            "mean_total_iterations": sum(r["total_iterations"] for r in runs) / len(runs),
            "mean_best_loss": round(sum(r["best_loss"] for r in runs) / len(runs), 4),
            "mean_virtual_time": sum(r["virtual_time"] for r in runs) / len(runs),
        }
    fifo = summary["fifo"]
    for name in ("asha", "hyperband"):
        summary[name]["iterations_vs_fifo"] = round(
            summary[name]["mean_total_iterations"] / fifo["mean_total_iterations"], 3)
        summary[name]["best_loss_regret_vs_fifo"] = round(
            summary[name]["mean_best_loss"] - fifo["mean_best_loss"], 4)
    return {"trials": N_TRIALS, "max_t": MAX_T, "slots": 4, "seeds": list(SEEDS),
            "summary": summary, "per_seed": per_seed}


# -- 2. PBT toy problem ---------------------------------------------------
PBT_STEPS = 120  # h=(1,1) needs 126 steps to reach Q >= 1.19 with lr 0.01
PBT_SEEDS = tuple(range(10))
TARGET_Q = 1.19


class ToyModel:
    """θ trained by gradient ascent on the surrogate Q̂(θ|h) = 1.2 − (h0 θ0² + h1 θ1²)."""

    def __init__(self, lr: float = 0.01) -> None:
        self.theta = [0.9, 0.9]
        self.lr = lr

    def train(self, config: Mapping[str, Any]) -> float:
        h = (config["h0"], config["h1"])
        self.theta = [t - self.lr * 2.0 * hi * t for t, hi in zip(self.theta, h)]
        return 1.2 - (self.theta[0] ** 2 + self.theta[1] ** 2)  # the true objective Q


class Uniform:
    """A search-space domain, duck-typed the way tuneplat's are (``.sample(rng)``)."""

    def __init__(self, lower: float, upper: float) -> None:
        self.lower, self.upper = lower, upper

    def sample(self, rng: random.Random) -> float:
        return rng.uniform(self.lower, self.upper)


def run_pbt(seed: int, interval: int = 2,
            factors: tuple[float, float] = (1.5, 0.75)) -> dict[str, Any]:
    scheduler = PopulationBasedTraining(time_attr="training_iteration",
        metric="Q", mode="max", perturbation_interval=interval,
        hyperparam_mutations={"h0": Uniform(0.0, 1.0), "h1": Uniform(0.0, 1.0)},
        resample_probability=0.25, perturbation_factors=factors, seed=seed)
    members = [({"h0": 1.0, "h1": 0.0}, ToyModel()), ({"h0": 0.0, "h1": 1.0}, ToyModel())]
    run = simulate(scheduler, members, max_concurrent=2, max_t=PBT_STEPS, metric="Q", mode="max")
    return _toy_summary(run, exploits=sum(1 for d in run.decisions if d[1] == "launch"))


def run_grid() -> dict[str, Any]:
    grid = [{"h0": 1.0, "h1": 0.0}, {"h0": 0.0, "h1": 1.0}, {"h0": 1.0, "h1": 1.0},
            {"h0": 0.0, "h1": 0.0}]
    run = simulate(FIFOScheduler(), [(h, ToyModel()) for h in grid], max_concurrent=4,
                   max_t=PBT_STEPS, metric="Q", mode="max")
    return _toy_summary(run)


def _toy_summary(run: Any, **extra: Any) -> dict[str, Any]:
    return {"best_Q": round(run.best_value, 5), "best_member": run.best_trial,
            "reached_target": run.best_value >= TARGET_Q,
            "final_h": {t: {k: round(v, 3) for k, v in c.items()} for t, c in run.configs.items()},
            **extra}


def pbt_toy() -> dict[str, Any]:
    grid = run_grid()
    report: dict[str, Any] = {"budget_steps_per_member": PBT_STEPS, "target_Q": TARGET_Q,
                              "lr": 0.01, "population": 2, "seeds": list(PBT_SEEDS),
                              "grid": grid, "grid_reaches_target": grid["reached_target"]}
    for label, interval, factors in (("pbt", 2, (1.5, 0.75)),
                                     ("pbt_ray_default_factors", 4, (1.2, 0.8))):
        runs = {seed: run_pbt(seed, interval, factors) for seed in PBT_SEEDS}
        report[label] = {
            "perturbation_interval": interval, "perturbation_factors": list(factors),
            "resample_probability": 0.25, "h_domain": [0.0, 1.0],
            "seeds_reaching_target": sum(r["reached_target"] for r in runs.values()),
            "min_best_Q": min(r["best_Q"] for r in runs.values()),
            "mean_best_Q": round(sum(r["best_Q"] for r in runs.values()) / len(runs), 5),
            "per_seed": runs,
        }
    return report


def main() -> dict[str, Any]:
    report = {"asha_vs_fifo": asha_vs_fifo(), "pbt_toy": pbt_toy()}
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
