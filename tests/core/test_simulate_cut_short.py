"""``tuneplat simulate --scheduler fifo``: only curves the recorded scheduler cut short make its figures lower bounds."""

from __future__ import annotations

import os

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.schedulers import ASHAScheduler
from tuneplat.testing import VirtualTimeExecutor, simulate


def curve(config):
    for step in range(1, 11):
        yield {"loss": config["floor"] + 1.0 / step}


def test_fifo_replay_counts_only_the_curves_asha_cut_short(storage):
    grid = tune.Tuner(
        curve, param_space={"floor": tune.grid_search([0.1 * i for i in range(8)])},
        tune_config=tune.TuneConfig(metric="loss", mode="min",
                                    scheduler=ASHAScheduler(max_t=10, grace_period=1, reduction_factor=2)),
        run_config=tune.RunConfig(name="asha", storage_path=storage, verbose=0, mlflow=False,
                                  stop={"training_iteration": 10}),
        executor=VirtualTimeExecutor(num_slots=2)).fit()
    events = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    stops = [e for e in events if e["event"] == "decision" and e["decision"] == "STOP"]
    pruned = [e for e in stops if e["iteration"] < 10]
    whole = [e for e in stops if e["iteration"] == 10]
    assert pruned and whole  # some cut short by ASHA, some ran their 10 iterations (stop criteria met)
    assert all(e["pruned"] for e in pruned) and not any(e["pruned"] for e in whole)

    report = simulate(grid.experiment_path, "fifo")
    assert report.truncated == len(pruned)
    assert f"{len(pruned)} recorded curve(s) were cut short" in report.table()


def test_a_journal_without_the_flag_is_judged_by_the_stop_reason(storage):
    grid = tune.Tuner(
        curve, param_space={"floor": tune.grid_search([0.1, 0.2, 0.3])},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(name="fifo", storage_path=storage, verbose=0, mlflow=False,
                                  stop={"training_iteration": 10}),
        executor=VirtualTimeExecutor(num_slots=2)).fit()
    path = os.path.join(grid.experiment_path, "journal.jsonl")
    lines = open(path).read().replace(', "pruned": false', "")
    assert '"pruned"' not in lines
    with open(path, "w") as f:
        f.write(lines)
    report = simulate(grid.experiment_path, "fifo")
    assert report.truncated == 0 and "lower bounds" not in report.table()
