"""What a user sees when trials error: each error in the plain log, one final state per trial, Ray's best trial."""

from __future__ import annotations

import os

import pytest

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.cli import main
from tuneplat.core._replay import load_trials, prepare_resume
from tuneplat.testing import VirtualTimeExecutor


def raises(config):
    raise ValueError(f"boom {config['x']}")
    yield  # a generator trainable (never reached)


def reports_then_raises(config):
    yield {"loss": config["x"]}
    raise ValueError("late failure")


def misspelt(config):
    for _ in range(3):
        yield {"loss": config["x"]}


def _fit(storage, fn, *, metric="loss", n=4, name="exp", verbose=1):
    return tune.Tuner(fn, param_space={"x": tune.grid_search([0.1 * (i + 1) for i in range(n)])},
                      tune_config=tune.TuneConfig(metric=metric, mode="min"),
                      run_config=tune.RunConfig(name=name, storage_path=storage, verbose=verbose, mlflow=False),
                      executor=VirtualTimeExecutor(num_slots=2)).fit()


def test_plain_log_prints_each_error_and_where_its_traceback_is(storage, capsys):
    grid = _fit(storage, raises)
    out = capsys.readouterr().out
    for r in grid:
        assert f"trial {r.trial_id} ERROR: " in out and f"boom {r.config['x']}" in out
        assert f"tuneplat status {grid.experiment_path} --trial {r.trial_id}" in out
        error_file = os.path.join(r.path, "error.txt")
        assert error_file in out and "ValueError" in open(error_file).read()
    assert "results.errors" in out


def test_all_trials_errored_is_said_and_get_best_result_refuses_like_ray(storage, capsys):
    grid = _fit(storage, raises)
    out = capsys.readouterr().out
    assert "finished with all 4 trials errored" in out
    with pytest.raises(RuntimeError, match="No best trial found for the given metric: 'loss'.*All 4 trials errored"):
        grid.get_best_result()
    with pytest.raises(ValueError):  # (our earlier type, kept)
        grid.get_best_result()
    assert main(["status", grid.experiment_path]) == 0
    assert "finished with all 4 trials errored" in capsys.readouterr().out


def test_an_errored_trial_with_a_finite_metric_is_a_candidate_as_in_ray_and_the_view_agrees(storage, capsys):
    grid = _fit(storage, reports_then_raises)
    out = capsys.readouterr().out
    best = grid.get_best_result()
    assert best.config["x"] == pytest.approx(0.1) and best.error is not None
    assert f"best trial {best.trial_id}: loss=0.1" in out and "errored" in out


def test_a_misspelt_metric_leaves_one_final_state_per_trial_everywhere(storage, capsys):
    grid = _fit(storage, misspelt, metric="los", n=2, name="typo")
    out = capsys.readouterr().out
    assert ".;" not in out and "did you mean 'loss'?" in out
    summary = [line for line in out.splitlines() if line.startswith("tuneplat: failed after")]
    assert summary and "PENDING" not in summary[0] and "RUNNING" not in summary[0]
    assert {r.status for r in grid} <= {"ERROR", "TERMINATED"}
    trials, _ = load_trials(grid.experiment_path)
    assert {t.trial_id: str(t.status) for t in trials} == {r.trial_id: r.status for r in grid}
    assert main(["status", grid.experiment_path]) == 0
    status_out = capsys.readouterr().out
    assert "RUNNING" not in status_out and "PENDING" not in status_out
    # what the failure stopped is resumable, not finished
    stopped = [t for t in trials if str(t.status) == "TERMINATED"]
    assert stopped and all(t.resumable for t in stopped)
    assert all(str(t.status) == "PENDING" for t in prepare_resume(grid.experiment_path)
               if t.trial_id in {s.trial_id for s in stopped})
    ends = [e for e in read_journal(os.path.join(grid.experiment_path, "journal.jsonl")) if e["event"] == "trial_end"]
    assert len(ends) == len(grid)


def test_status_of_a_missing_folder_says_it_does_not_exist(tmp_path, capsys):
    missing = str(tmp_path / "nope")
    assert main(["status", missing]) != 0
    err = capsys.readouterr().err
    assert f"{missing}: no such folder" in err and "storage folder" in err
    assert main(["plot", missing]) != 0
    assert "no such folder" in capsys.readouterr().err


def test_before_the_first_report_the_progress_line_says_what_the_wait_is():
    from tuneplat.core._trial import Trial, TrialStatus
    from tuneplat.tracking._progress import ProgressReporter

    class Executor:
        heavy_imports = ["torch"]

    class Loop:
        executor = Executor()
        tc = tune.TuneConfig(num_samples=2)
        searcher = None
        running: dict = {}
        trials: list = []

    rep = ProgressReporter("loss", "min")
    rep.attach(Loop())
    trials = [Trial(trial_id=f"t{i}", config={}, path="", name=f"t{i}", status=TrialStatus.RUNNING) for i in range(2)]
    assert "first trials starting (importing torch, data loading)" in rep.status_line(trials)
    trials[0].results.append({"loss": 1.0, "training_iteration": 1})
    assert "first trials starting" not in rep.status_line(trials)
