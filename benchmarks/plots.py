"""Time to draw each plot of a 1,000-trial experiment, with Optuna's matplotlib plots as the peer. Prints JSON.

The experiments are real tuner runs on the virtual-time executor (ASHA over
1,000 synthetic learning curves with 4 parameters; PBT over a population of
``--pbt-trials``), written to a temporary folder. Each figure is timed from the
experiment folder (or the loaded :class:`tuneplat.plot.Experiment`) to a PNG on
disk. Optuna draws from the same experiment converted to an in-memory study
(:func:`tuneplat.plot.to_optuna_study`, timed apart), with its default settings
(fANOVA for importances in both).

Goal (issue #15): all plots of a 1,000-trial experiment in under 10 s.

    python benchmarks/plots.py [--trials 1000] [--repeat 3] [--no-optuna]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

# this folder has a schedulers.py of its own: import the project's packages, not it
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import tuneplat as tune  # noqa: E402
from tuneplat import plot  # noqa: E402
from tuneplat.schedulers import ASHAScheduler, PopulationBasedTraining  # noqa: E402
from tuneplat.testing import VirtualTimeExecutor  # noqa: E402


def asha_curve(config):
    rng = random.Random(int(config["noise"] * 1e9))
    floor = 0.05 + 0.3 * abs(math.log10(config["lr"]) + 2.0) + 8.0 / config["width"] + 0.1 * config["dropout"]
    for step in range(1, 28):
        yield {"loss": floor + 2.0 * math.exp(-0.3 * step) + 0.01 * rng.random(), "time_this_iter_s": 1.0}


def pbt_curve(config):
    for step in range(1, 41):
        yield {"score": step * (1.0 - abs(math.log10(config["lr"]) + 1.0)), "time_this_iter_s": 1.0}


def make_experiments(root: str, trials: int, pbt_trials: int) -> dict[str, str]:
    tune.Tuner(asha_curve,
               param_space={"lr": tune.loguniform(1e-4, 1e-1), "width": tune.choice([16, 64, 256]),
                            "dropout": tune.uniform(0, 0.5), "noise": tune.uniform(0, 1)},
               tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=trials, seed=0,
                                           scheduler=ASHAScheduler(max_t=27, grace_period=1, reduction_factor=3)),
               run_config=tune.RunConfig(name="asha", storage_path=root, verbose=0, mlflow=False),
               executor=VirtualTimeExecutor(num_slots=16)).fit()
    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=5, hyperparam_mutations={"lr": tune.loguniform(1e-4, 1)},
                                  seed=0)
    tune.Tuner(pbt_curve, param_space={"lr": tune.loguniform(1e-4, 1)},
               tune_config=tune.TuneConfig(metric="score", mode="max", num_samples=pbt_trials, seed=0, scheduler=pbt),
               run_config=tune.RunConfig(name="pbt", storage_path=root, verbose=0, mlflow=False),
               executor=VirtualTimeExecutor(num_slots=pbt_trials)).fit()
    return {"asha": os.path.join(root, "asha"), "pbt": os.path.join(root, "pbt")}


def _save(fig, path: str) -> None:
    fig.savefig(path, dpi=110)


def time_tuneplat(path: str, out: str, kinds: list[str]) -> dict[str, float]:
    figures: dict[str, Callable[..., Any]] = {
        "learning_curves": plot.plot_learning_curves,
        "optimization_history": plot.plot_optimization_history,
        "param_importances": plot.plot_param_importances,
        "parallel_coordinates": plot.plot_parallel_coordinates,
        "intermediate_values": plot.plot_intermediate_values,
        "pbt_lineage": plot.plot_pbt_lineage,
        "timeline": plot.plot_timeline,
    }
    t0 = time.perf_counter()
    exp = plot.load_experiment(path)
    times = {"load_journal": time.perf_counter() - t0}
    for kind in kinds:
        t0 = time.perf_counter()
        _save(figures[kind](exp), os.path.join(out, f"tp_{kind}.png"))
        times[kind] = time.perf_counter() - t0
    if "param_importances" in kinds:  # the trials Optuna's plot uses: those that ran to their end
        t0 = time.perf_counter()
        _save(plot.plot_param_importances(exp, at="last"), os.path.join(out, "tp_importances_last.png"))
        times["param_importances_at_last"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    plot.save_plots(path, os.path.join(out, "all"))  # what `tuneplat plot` and the MLflow upload do
    times["save_plots_all_from_folder"] = time.perf_counter() - t0
    return times


def time_optuna(path: str, out: str) -> dict[str, float]:
    import matplotlib.pyplot as plt
    import optuna
    from optuna.visualization import matplotlib as ovm

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore")  # Optuna's matplotlib plots are marked experimental
    t0 = time.perf_counter()
    study = plot.to_optuna_study(path)
    times = {"to_optuna_study": time.perf_counter() - t0}
    peers: dict[str, Callable[..., Any]] = {
        "optimization_history": ovm.plot_optimization_history,
        "param_importances": ovm.plot_param_importances,
        "parallel_coordinates": ovm.plot_parallel_coordinate,
        "intermediate_values": ovm.plot_intermediate_values,
        "timeline": ovm.plot_timeline,
    }
    for kind, fn in peers.items():
        t0 = time.perf_counter()
        ax = fn(study)
        fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
        _save(fig, os.path.join(out, f"optuna_{kind}.png"))
        times[kind] = time.perf_counter() - t0
        plt.close("all")
    return times


_PEER = {"param_importances": "param_importances_at_last"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--pbt-trials", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-optuna", action="store_true")
    args = ap.parse_args()
    kinds_asha = ["learning_curves", "optimization_history", "param_importances", "parallel_coordinates",
                  "intermediate_values", "timeline"]
    with tempfile.TemporaryDirectory() as root:
        t0 = time.perf_counter()
        paths = make_experiments(root, args.trials, args.pbt_trials)
        synth = time.perf_counter() - t0
        exp = plot.load_experiment(paths["asha"])
        pexp = plot.load_experiment(paths["pbt"])
        runs_tp, runs_pbt, runs_op = [], [], []
        for _ in range(args.repeat):
            runs_tp.append(time_tuneplat(paths["asha"], root, kinds_asha))
            runs_pbt.append(time_tuneplat(paths["pbt"], root, ["pbt_lineage", "learning_curves"]))
            if not args.no_optuna:
                runs_op.append(time_optuna(paths["asha"], root))

    def med(runs: list[dict[str, float]]) -> dict[str, float]:
        return {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]} if runs else {}

    tp, op, pb = med(runs_tp), med(runs_op), med(runs_pbt)
    report = {
        "experiment": {"trials": len(exp.trials), "results": sum(len(t.results) for t in exp.trials),
                       "stopped_early": sum(t.stopped_early for t in exp.trials), "synthesised_s": round(synth, 2)},
        "pbt_experiment": {"trials": len(pexp.trials), "results": sum(len(t.results) for t in pexp.trials),
                           "exploits": sum(len(t.exploits) for t in pexp.trials)},
        "repeat": args.repeat,
        "tuneplat_s": tp,
        "tuneplat_pbt_s": pb,
        "all_plots_s": tp.get("save_plots_all_from_folder"),
        "goal_all_plots_s": 10.0,
        "optuna_s": op,
        # importances: Optuna's plot explains the last values of the trials that ran to their end; ours by
        # default the values at the first rung of all trials (at="auto"): compared with ours at="last"
        "ratio_optuna_over_tuneplat": {k: round(op[k] / tp[_PEER.get(k, k)], 2) for k in op
                                       if _PEER.get(k, k) in tp and tp[_PEER.get(k, k)] > 0},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
