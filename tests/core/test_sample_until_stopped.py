"""``TuneConfig(num_samples=-1)``: sample until stopped (Ray's meaning), ended by the time budget or a stopper."""

from __future__ import annotations

import os

import pytest

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.core._callbacks import ControllerCallback
from tuneplat.search.optuna import OptunaSearch
from tuneplat.stopper import MaximumIterationStopper, Stopper
from tuneplat.testing import VirtualTimeExecutor


def one_report(config):
    yield {"loss": config["x"], "time_this_iter_s": 0.5}


def _fit(storage, *, search_alg=None, budget=20.0, stop=None, name="forever"):
    executor = VirtualTimeExecutor(num_slots=2)
    grid = tune.Tuner(
        one_report, param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=-1, time_budget_s=budget,
                                    search_alg=search_alg, seed=0),
        run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False, stop=stop),
        executor=executor).fit()
    return grid, executor


@pytest.mark.parametrize("searcher", ["default", "optuna"])
def test_minus_one_samples_until_the_budget_and_ends_on_time(storage, searcher):
    grid, executor = _fit(storage, search_alg=OptunaSearch(seed=0) if searcher == "optuna" else None)
    # 2 slots, half a (virtual) second per trial, 20 s: about 80 trials, none after the budget
    assert len(grid) >= 60 and grid.num_errors == 0
    assert grid.get_best_result().metrics["loss"] < 0.1
    events = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    assert any(e["event"] == "time_budget_reached" for e in events)
    assert executor.now() <= 20.0 + 1.0


class _AfterTen(Stopper):
    def __init__(self):
        self.done = 0

    def __call__(self, trial_id, result):
        self.done += 1
        return False

    def stop_all(self):
        return self.done >= 10


def test_minus_one_with_a_stopper_that_ends_the_experiment(storage):
    grid = tune.Tuner(
        one_report, param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=-1),
        run_config=tune.RunConfig(name="stopper", storage_path=storage, verbose=0, mlflow=False, stop=_AfterTen()),
        executor=VirtualTimeExecutor(num_slots=2)).fit()
    assert 10 <= len(grid) <= 12


@pytest.mark.parametrize("stop", [None, {"training_iteration": 3}, MaximumIterationStopper(3)])
def test_minus_one_without_an_end_is_refused_saying_what_ray_does(storage, stop):
    with pytest.raises(ValueError) as info:
        tune.Tuner(one_report, param_space={"x": tune.uniform(0, 1)},
                   tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=-1),
                   run_config=tune.RunConfig(storage_path=storage, verbose=0, mlflow=False, stop=stop),
                   executor=VirtualTimeExecutor(num_slots=2))
    text = str(info.value)
    assert "num_samples=-1" in text and "Ray Tune would start trials forever" in text
    assert "time_budget_s" in text and "TimeoutStopper" in text


class _SlowMirror(ControllerCallback):
    """A mirror (as the MLflow uploader) that writes one trial's run per virtual second: its backlog in seconds."""

    def __init__(self, executor):
        self.executor = executor
        self.added = 0

    def on_trial_add(self, ctrl, trial):
        self.added += 1

    def backlog_s(self):
        return max(0.0, self.added - self.executor.now())


def test_no_trial_starts_once_the_mirrors_backlog_would_carry_the_end_past_the_budget(storage, capsys):
    executor = VirtualTimeExecutor(num_slots=2)
    mirror = _SlowMirror(executor)
    grid = tune.Tuner(
        one_report, param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=-1, time_budget_s=20),
        run_config=tune.RunConfig(name="mirror", storage_path=storage, verbose=1, mlflow=False, callbacks=[mirror]),
        executor=executor).fit()
    # unthrottled: ~80 trials (2 slots x 0.5 s) and a mirror 60 s behind at the budget; throttled: it keeps up
    assert len(grid) <= 22 and mirror.backlog_s() <= 2.0
    assert "not starting more trials for now: the MLflow mirror has" in capsys.readouterr().out
