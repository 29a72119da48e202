"""Hooks (callbacks, the searcher) edit their own copies: trial.config, a result's nested values, trial.last_result.

Ray's order on each result: the scheduler decides, the searcher hears it, then the callbacks; Ray lets callbacks edit
the result they get. In tuneplat such an edit, or one of ``trial.config`` in place, stays the hook's own: it reaches
neither the scheduler, the journal, the next attempt of the trial nor ``get_best_result``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.schedulers import FIFOScheduler
from tuneplat.search import BasicVariantGenerator
from tuneplat.testing import LOSE_WORKER, VirtualTimeExecutor


def _curve(config: dict[str, Any]):
    """8 steps; the first attempt of each trial loses its worker at step 4 (the retry resumes from step 3)."""
    marker = os.path.join(config["dir"], f"lost-{config['floor']}")
    for step in range(1, 9):
        if step == 4 and not os.path.exists(marker):
            open(marker, "w").close()
            yield LOSE_WORKER
        yield {"loss": config["floor"] + 1.0 / step, "extra": {"floor": config["floor"], "steps": [step]}}


class _Scheduler(FIFOScheduler):
    """Records the floor it sees in every result (its input)."""

    def __init__(self) -> None:
        super().__init__()
        self.floors: list[float] = []

    def on_trial_result(self, trial_id, result):
        self.floors.append(result["extra"]["floor"])
        assert result["loss"] > 0
        return super().on_trial_result(trial_id, result)


class _EditingSearcher(BasicVariantGenerator):
    """Edits each result it hears in place (nested values too)."""

    def on_trial_result(self, trial_id, result):
        result["extra"]["steps"].append(-1)
        result["searcher_was_here"] = True


class _Editor(tune.Callback):
    """Edits in place everything it is given: the trial's config, the result (nested), the trial's last result."""

    def __init__(self) -> None:
        self.own_config_kept = 0
        self.trials_seen: set[Any] = set()
        self.same_objects = True

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if trial.config["floor"] == -1.0:  # its own copy keeps its edit (as Ray's callbacks do)
            self.own_config_kept += 1
        self.same_objects &= any(t is trial for t in trials)  # ctrl.trials holds the very objects hooks get
        self.trials_seen.add(trial)
        trial.config["floor"] = -1.0
        trial.config["edited"] = True
        result["extra"]["floor"] = -1.0
        result["loss"] = -1000.0
        trial.last_result["extra"]["floor"] = -1.0
        trial.last_result["loss"] = -1000.0


def test_hooks_in_place_edits_reach_neither_the_scheduler_the_journal_a_retry_nor_the_best_result(tmp_path):
    storage = str(tmp_path / "results")
    scheduler, editor = _Scheduler(), _Editor()
    floors = [0.1, 0.3]
    tuner = tune.Tuner(
        _curve, param_space={"floor": tune.grid_search(floors), "dir": str(tmp_path)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", scheduler=scheduler, search_alg=_EditingSearcher()),
        run_config=tune.RunConfig(name="edits", storage_path=storage, verbose=0, mlflow=False, callbacks=[editor],
                                  failure_config=tune.FailureConfig(max_failures=1)),
        executor=VirtualTimeExecutor(num_slots=2))
    grid = tuner.fit()

    assert not grid.errors and {r.config["floor"] for r in grid} == set(floors)
    assert all("edited" not in r.config for r in grid)
    # the scheduler saw the trials' own values on every result, the retried attempts' too (they ran with the
    # config the trial had, not the callback's edit of it: 3 results before the loss, 5 after it, per trial)
    assert sorted(set(scheduler.floors)) == floors and len(scheduler.floors) == 2 * 8
    lines = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    assert sum(e["event"] == "trial_failure" for e in lines) == 2  # each trial lost its worker once, then resumed
    results = [e["result"] for e in lines if e["event"] == "result"]
    assert results and all(r["loss"] > 0 and r["extra"]["floor"] in floors for r in results)
    assert all(r["extra"]["steps"] == [r["training_iteration"]] and "searcher_was_here" not in r for r in results)
    assert all(e["config"]["floor"] in floors and "edited" not in e["config"]
               for e in lines if e["event"] in ("trial_add", "trial_start") and "config" in e)
    best = grid.get_best_result()
    assert best.config == {"floor": 0.1, "dir": str(tmp_path)}
    assert best.metrics["loss"] == pytest.approx(0.1 + 1 / 8) and best.metrics["extra"] == {"floor": 0.1, "steps": [8]}
    # the callback's edits stayed its own: from the second result on, each trial's config it sees is its copy
    assert editor.own_config_kept == 2 * 8 - 2
    assert editor.same_objects and len(editor.trials_seen) == 2  # one object per trial, in every hook


def test_a_callback_gets_read_only_lists_and_a_clear_error_on_assignment(tmp_path):
    from tuneplat.core._trial import ReadOnlyTrial

    problems: list[str] = []

    class Pokes(tune.Callback):
        def on_trial_complete(self, iteration, trials, trial, **info):
            try:
                trial.status = "ERROR"
            except ReadOnlyTrial as exc:
                problems.append(str(exc))
            try:
                trial.results.append({"loss": -1})  # type: ignore[attr-defined]
            except AttributeError:
                problems.append("results")

    def curve(config):
        yield {"loss": 1.0}

    grid = tune.Tuner(curve, param_space={"x": tune.grid_search([1])},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(name="pokes", storage_path=str(tmp_path), verbose=0, mlflow=False,
                                                callbacks=[Pokes()]),
                      executor=VirtualTimeExecutor(num_slots=1)).fit()
    assert grid[0].metrics["loss"] == 1.0 and not grid.errors
    assert len(problems) == 2 and "read-only" in problems[0] and problems[1] == "results"


def test_a_controller_callback_edits_of_checkpoint_metrics_and_exploit_events_stay_its_own(tmp_path):
    """The internal hooks' arguments that are the trial's own state (a checkpoint's metrics, PBT's lineage entry)
    reach callbacks as copies too."""
    from tuneplat.core._callbacks import ControllerCallback
    from tuneplat.schedulers import PopulationBasedTraining

    exploits: list[dict[str, Any]] = []
    lineage: list[dict[str, Any]] = []

    class Edits(ControllerCallback):
        def on_checkpoint(self, ctrl, trial, checkpoint, metrics):
            metrics["score"] = -1.0
            metrics.clear()

        def on_trial_exploit(self, ctrl, trial, event):
            exploits.append(dict(event))
            event.clear()

        def on_experiment_end(self, ctrl, status):
            lineage.extend(dict(entry) for t in ctrl.trials for entry in t.lineage)

    def pbt_curve(config):
        for step in range(1, 16):
            yield {"score": config["lr"] * step}

    grid = tune.Tuner(
        pbt_curve, param_space={"lr": tune.grid_search([0.1, 0.5, 1.0, 2.0])},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=PopulationBasedTraining(
            time_attr="training_iteration", perturbation_interval=4, seed=1,
            hyperparam_mutations={"lr": [0.1, 0.5, 1.0, 2.0]})),
        run_config=tune.RunConfig(name="pbt", storage_path=str(tmp_path), verbose=0, mlflow=False,
                                  callbacks=[Edits()]),
        executor=VirtualTimeExecutor(num_slots=4)).fit()
    assert exploits, "PBT exploited (the seeded run does)"
    for result in grid:
        assert result.metrics["score"] > 0  # the checkpoints' metrics (Result.metrics) kept their values
        assert all(metrics.get("score", 0) > 0 for _, metrics in result.best_checkpoints)
    lines = read_journal(os.path.join(grid.experiment_path, "journal.jsonl"))
    assert sum(e["event"] == "exploit" for e in lines) == len(exploits)
    # the live trials' lineage at the end (what fit() and a restore's replay hold) kept every exploit entry whole
    assert len(lineage) == len(exploits) and all(lineage)
