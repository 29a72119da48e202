"""``tuneplat simulate --recommend`` on recorded experiments whose answer is known."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import tuneplat as tune
from tuneplat.testing import VirtualTimeExecutor, recommend
from tuneplat.testing._recommend import parse_tolerance
from tuneplat.testing._simulate import simulate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def predictive(config):
    """The ranking after one iteration is the final ranking: keeping the top 1 after one iteration is optimal."""
    for step in range(1, 28):
        yield {"loss": config["final"] + 1.0 / step}


def late_bloomers(config):
    """The ranking after one iteration is the reverse of the final one: judging after one iteration misleads."""
    i = config["i"]
    for step in range(1, 28):  # for 3 iterations the higher i, the better; then the lower i, the better
        yield {"loss": 2.0 - 0.1 * i if step < 4 else 0.1 * i + 0.1 / step}


def _record(storage, fn, space, name):
    grid = tune.Tuner(fn, param_space=space, tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False,
                                                checkpoint_config=tune.CheckpointConfig(num_to_keep=1)),
                      executor=VirtualTimeExecutor(num_slots=3)).fit()
    return grid.experiment_path


def test_the_one_iteration_baseline_is_the_scheduler_it_prints(storage):
    # the best trial comes last: an asynchronous scheduler lets the earlier, worse ones run on first
    path = _record(storage, predictive, {"final": tune.grid_search([0.05 * i for i in range(11, -1, -1)])}, "pred")
    rec = recommend(path, tolerance=0.001)
    assert rec.best_recorded == pytest.approx(1.0 / 27)
    top1 = next(c for c in rec.candidates if c.label == "1 iteration each, keep top 1")
    assert (top1.scheduler, top1.settings) == ("ASHAScheduler", {"max_t": 27, "rung_levels": [1],
                                                                  "reduction_factor": 12})
    # its figures are those of replaying that very scheduler (not of a synchronous "keep the top 1" it is not)
    replay = simulate(path, "asha", top1.settings)
    assert (top1.compute_total, top1.iterations) == (replay.simulated.trial_seconds, replay.simulated.iterations)
    assert top1.iterations > 12 + 26  # asynchronous: early trials go on before the best one is seen
    fifo = next(c for c in rec.candidates if c.scheduler == "FIFOScheduler")
    assert fifo.reached and fifo.compute_total == 12 * 27 and not fifo.bound  # nothing was cut short
    w = rec.winner
    assert rec.constructor() == f"{w.scheduler}(metric='loss', mode='min', " + ", ".join(
        f"{k}={v!r}" for k, v in w.settings.items()) + ")"
    labels = {c.label for c in rec.candidates}
    assert {"asha eta=3 grace=1", "hyperband eta=3", "pasha eta=3", "median grace=1"} <= labels


def _record_asha(storage, fn, space, name):
    sched = tune.schedulers.ASHAScheduler(max_t=27, grace_period=1, reduction_factor=3)
    grid = tune.Tuner(fn, param_space=space, tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=sched),
                      run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False,
                                                checkpoint_config=tune.CheckpointConfig(num_to_keep=1)),
                      executor=VirtualTimeExecutor(num_slots=3)).fit()
    return grid.experiment_path


def test_figures_from_curves_the_recorded_run_cut_short_are_bounds_ranked_below_exact_ones(storage):
    # recorded under ASHA: the late bloomers were stopped early; a more patient candidate would have trained them
    # on, which the replay cannot price: its figure is a lower bound, never recommended over an exact one
    path = _record_asha(storage, late_bloomers, {"i": tune.grid_search(list(range(8)))}, "cut")
    rec = recommend(path, tolerance="1%")
    bounds = [c for c in rec.candidates if c.bound]
    exact = [c for c in rec.candidates if c.reached and not c.bound]
    assert bounds and exact
    assert all(c.truncated > 0 for c in bounds)
    recorded = next(c for c in rec.candidates if c.label == "asha eta=3 grace=1")
    assert recorded.reached and not recorded.bound  # the recorded setting replays its own curves exactly
    order = [c.label for c in rec.candidates]
    for b in bounds:  # an exact figure always ranks above a bound (the bound may not beat it)
        assert all(order.index(e.label) < order.index(b.label) for e in exact), (b.label, order)
    assert not rec.winner.bound
    table = rec.table()
    fifo = next(c for c in rec.candidates if c.scheduler == "FIFOScheduler")
    assert fifo.bound and f">={fifo.compute_to_target:.1f}" in table and "lower bound" not in table


def test_late_bloomers_are_not_given_to_the_one_iteration_baseline(storage):
    path = _record(storage, late_bloomers, {"i": tune.grid_search(list(range(8)))}, "late")
    rec = recommend(path, tolerance="1%")
    top1 = next(c for c in rec.candidates if c.label == "1 iteration each, keep top 1")
    assert rec.winner.reached and rec.winner.label != top1.label
    assert rec.winner.compute_to_target < next(c for c in rec.candidates if c.scheduler == "FIFOScheduler").compute_total
    assert rec.candidates[-1].compute_to_target is None  # those that never get there rank last


def test_tolerance_parsing_and_the_cli(storage):
    assert parse_tolerance("1%") == (0.01, True) and parse_tolerance(0.5) == (0.5, False)
    with pytest.raises(ValueError, match="The value of `tolerance` is 'lots'"):
        parse_tolerance("lots")
    with pytest.raises(ValueError, match="tolerance >= 0"):
        parse_tolerance("-1")
    path = _record(storage, predictive, {"final": tune.grid_search([0.1 * i for i in range(5, -1, -1)])}, "cli")
    env = {**os.environ, "PYTHONPATH": ROOT}
    js = subprocess.run([sys.executable, "-m", "tuneplat.cli", "simulate", path, "--recommend", "--tolerance",
                         "0.001", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False, env=env)
    assert js.returncode == 0, js.stderr
    data = json.loads(js.stdout)
    winner = data["candidates"][0]
    assert data["winner"] == winner["label"] and not winner["bound"] and data["sweep"].startswith("scheduler: {type: ")
    assert data["constructor"].startswith(winner["scheduler"] + "(")
    table = recommend(path, tolerance=0.001).table()
    assert f"winner: {winner['label']}" in table and "  scheduler: {type: " in table
    bad = subprocess.run([sys.executable, "-m", "tuneplat.cli", "simulate", path, "--recommend", "--set", "max_t=3"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300, check=False, env=env)
    assert bad.returncode == 2 and "drop --set" in bad.stderr
