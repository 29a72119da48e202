"""MO-ASHA, PASHA and cost-aware ASHA driven by the real tuner loop, in virtual time."""

from __future__ import annotations

import os

import pytest

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.schedulers import ASHAScheduler, HyperBandScheduler, PASHAScheduler
from tuneplat.search.optuna import OptunaSearch
from tuneplat.testing import VirtualTimeExecutor


def zdt_curve(config):
    """Two objectives of a ZDT1-like problem, approached with fidelity (epochs); 27 iterations."""
    x, y = config["x"], config["y"]
    g = 1.0 + 9.0 * y
    f1, f2 = x, g * (1.0 - (x / g) ** 0.5)
    for step in range(1, 28):
        noise = 1.0 / step
        yield {"f1": f1 + 0.1 * noise, "f2": f2 + noise, "time_this_iter_s": 1.0 + x}


def _fit(storage, fn, space, tc, slots=4, name="sched"):
    return tune.Tuner(fn, param_space=space, tune_config=tc,
                      run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False),
                      executor=VirtualTimeExecutor(num_slots=slots)).fit()


def test_mo_asha_with_optuna_nsga2_in_the_tuner(storage):
    tc = tune.TuneConfig(metric=["f1", "f2"], mode=["min", "min"], num_samples=30,
                         scheduler=ASHAScheduler(max_t=27, grace_period=1, reduction_factor=3),
                         search_alg=OptunaSearch(sampler="nsgaii", seed=3))
    grid = _fit(storage, zdt_curve, {"x": tune.uniform(0, 1), "y": tune.uniform(0, 1)}, tc)
    assert len(grid) == 30 and grid.num_errors == 0
    iterations = [r.metrics["training_iteration"] for r in grid]
    assert max(iterations) == 27 and sum(iterations) < 30 * 27 / 2  # MO-ASHA stopped most trials early
    front = grid.get_best_results()
    assert front and all(r.metrics["training_iteration"] >= 1 for r in front)
    events = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    described = next(e for e in events if e["event"] == "experiment")["scheduler"]
    assert described["metric"] == ["f1", "f2"] and described["mo_tiebreak"] == "crowding"
    reasons = [e.get("stop_reason") or "" for e in events if e["event"] == "trial_end"]
    assert any("stopped by MO-ASHA" in r for r in reasons)


def test_mo_hyperband_in_the_tuner(storage):
    tc = tune.TuneConfig(metric=["f1", "f2"], mode=["min", "min"], num_samples=13,
                         scheduler=HyperBandScheduler(max_t=27, reduction_factor=3, mo_tiebreak="epsnet"))
    grid = _fit(storage, zdt_curve, {"x": tune.uniform(0, 1), "y": tune.uniform(0, 1)}, tc)
    assert len(grid) == 13 and grid.num_errors == 0
    assert max(r.metrics["training_iteration"] for r in grid) == 27


def curve(config):
    for step in range(1, 28):
        yield {"loss": config["final"] + 1.0 / step}


def test_pasha_pauses_resumes_and_stops_through_the_loop(storage):
    pasha = PASHAScheduler(max_t=27, grace_period=1, reduction_factor=3)
    tc = tune.TuneConfig(metric="loss", mode="min", scheduler=pasha)
    grid = _fit(storage, curve, {"final": tune.grid_search([0.1 * i for i in range(9)])}, tc, slots=3)
    assert len(grid) == 9 and grid.num_errors == 0
    assert grid.get_best_result().config["final"] == 0.0
    # a stable ranking: PASHA never needed more than its second rung
    assert pasha.current_max_t == 3 and max(r.metrics["training_iteration"] for r in grid) == 3
    events = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    assert any("stopped by PASHA at max_t=3" in (e.get("stop_reason") or "") for e in events
               if e["event"] == "trial_end")


def test_cost_aware_asha_through_the_loop(storage):
    def costly(config):
        for step in range(1, 10):
            yield {"loss": config["final"] + 1.0 / step, "time_this_iter_s": config["cost"]}

    tc = tune.TuneConfig(metric="loss", mode="min",
                         scheduler=ASHAScheduler(max_t=9, grace_period=1, reduction_factor=3,
                                                 cost_attr="time_total_s"))
    space = {"final": tune.grid_search([0.0, 0.05, 0.3, 0.35]), "cost": tune.grid_search([1.0, 10.0])}
    grid = _fit(storage, costly, space, tc, slots=2)
    assert len(grid) == 8 and grid.num_errors == 0
    full = {(r.config["final"], r.config["cost"]) for r in grid if r.metrics["training_iteration"] == 9}
    assert (0.0, 1.0) in full  # the best and cheapest always goes on


def test_simulate_replays_a_multi_objective_experiment_under_mo_asha(storage):
    from tuneplat.testing import recommend, simulate

    tc = tune.TuneConfig(metric=["f1", "f2"], mode=["min", "min"], num_samples=24, seed=1)
    grid = _fit(storage, zdt_curve, {"x": tune.uniform(0, 1), "y": tune.uniform(0, 1)}, tc, name="mo_fifo")
    report = simulate(grid.experiment_path, "asha", {"max_t": 27, "reduction_factor": 3})
    assert report.metric == ["f1", "f2"]
    assert report.simulated.iterations < report.recorded.iterations == 24 * 27
    assert report.recorded.pareto_size >= 1 and report.simulated.pareto_size >= 1
    assert 0 < report.simulated.hypervolume <= report.recorded.hypervolume  # the same curves, stopped earlier
    table = report.table()
    assert "Pareto front (trials)" in table and "hypervolume" in table
    with pytest.raises(ValueError, match="several objectives"):
        recommend(grid.experiment_path)
    with pytest.raises(ValueError, match="PASHAScheduler decides on one metric"):
        simulate(grid.experiment_path, "pasha", {"max_t": 27})
