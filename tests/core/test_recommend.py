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


def test_predictive_curves_recommend_one_iteration_then_the_top_one(storage):
    # the best trial comes last: an asynchronous scheduler lets the earlier, worse ones run on first
    path = _record(storage, predictive, {"final": tune.grid_search([0.05 * i for i in range(11, -1, -1)])}, "pred")
    rec = recommend(path, tolerance=0.001)
    assert rec.best_recorded == pytest.approx(1.0 / 27)
    assert rec.winner.label == "1 iteration each, keep top 1"
    assert rec.winner.compute_to_target == pytest.approx(12 + 26)  # one iteration each, then the best to the end
    fifo = next(c for c in rec.candidates if c.scheduler == "FIFOScheduler")
    assert fifo.reached and fifo.compute_total == 12 * 27
    assert rec.constructor() == ("ASHAScheduler(metric='loss', mode='min', max_t=27, rung_levels=[1], "
                                 "reduction_factor=12)")
    assert rec.sweep_snippet() == "scheduler: {type: asha, max_t: 27, rung_levels: [1], reduction_factor: 12}"
    labels = {c.label for c in rec.candidates}
    assert {"asha eta=3 grace=1", "hyperband eta=3", "pasha eta=3", "median grace=1"} <= labels


def test_late_bloomers_are_not_given_to_the_one_iteration_baseline(storage):
    path = _record(storage, late_bloomers, {"i": tune.grid_search(list(range(8)))}, "late")
    rec = recommend(path, tolerance="1%")
    top1 = next(c for c in rec.candidates if c.label == "1 iteration each, keep top 1")
    assert not top1.reached  # it keeps the worst trial
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
    assert data["winner"] == "1 iteration each, keep top 1" and data["sweep"].startswith("scheduler: {type: asha")
    assert data["constructor"].startswith(data["candidates"][0]["scheduler"] + "(")
    table = recommend(path, tolerance=0.001).table()
    assert "winner: 1 iteration each, keep top 1" in table and "  scheduler: {type: asha" in table
    bad = subprocess.run([sys.executable, "-m", "tuneplat.cli", "simulate", path, "--recommend", "--set", "max_t=3"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300, check=False, env=env)
    assert bad.returncode == 2 and "drop --set" in bad.stderr
