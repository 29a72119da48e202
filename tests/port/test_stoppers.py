"""tune.stopper: Ray's stoppers, alone and through RunConfig(stop=...)."""

from __future__ import annotations

import datetime

import port_trainables as P
import pytest

import tuneplat as tune
from tuneplat import train
from tuneplat.stopper import (
    CombinedStopper,
    ExperimentPlateauStopper,
    FunctionStopper,
    MaximumIterationStopper,
    NoopStopper,
    TimeoutStopper,
    TrialPlateauStopper,
)


def test_maximum_iteration_stopper_counts_results_per_trial():
    s = MaximumIterationStopper(max_iter=3)
    assert [s("a", {}) for _ in range(3)] == [False, False, True]
    assert s("b", {}) is False and s.stop_all() is False


def test_trial_plateau_stopper_waits_for_grace_and_window_then_threshold():
    s = TrialPlateauStopper(metric="loss", std=0.01, num_results=3, grace_period=4)
    assert [s("t", {"loss": 1.0}) for _ in range(4)] == [False, False, False, True]
    s = TrialPlateauStopper(metric="loss", num_results=2, grace_period=0, metric_threshold=0.5, mode="min")
    assert [s("t", {"loss": 1.0}) for _ in range(3)] == [False, False, False]  # flat but not good enough
    assert [s("u", {"loss": 0.4}) for _ in range(2)] == [False, True]
    assert s("v", {"other": 1.0}) is False  # the metric missing: no opinion


def test_experiment_plateau_stopper_stops_all_after_patience():
    s = ExperimentPlateauStopper(metric="loss", top=3, std=0.001, mode="min", patience=2)
    out = [s(f"t{i}", {"loss": 1.0}) for i in range(5)]
    assert out == [False, False, False, True, True]  # plateaued from the 3rd result, 2 in a row at the 4th
    assert s.stop_all() is True


def test_timeout_combined_function_noop():
    t = TimeoutStopper(datetime.timedelta(seconds=3600))
    assert t("a", {}) is False and t.stop_all() is False
    assert TimeoutStopper(1e-9).stop_all() is True
    f = FunctionStopper(lambda tid, r: r["loss"] < 0.1)
    c = CombinedStopper(MaximumIterationStopper(2), f)
    assert c("a", {"loss": 0.05}) is True and c("b", {"loss": 1.0}) is False and c("b", {"loss": 1.0}) is True
    assert NoopStopper()("a", {}) is False and not NoopStopper().stop_all()


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match=r"`MaximumIterationStopper.max_iter` is 0"):
        MaximumIterationStopper(0)
    with pytest.raises(ValueError, match=r"`TrialPlateauStopper.mode` is None.*metric_threshold"):
        TrialPlateauStopper("loss", metric_threshold=0.1)
    with pytest.raises(ValueError, match=r"`ExperimentPlateauStopper.mode` is 'best'"):
        ExperimentPlateauStopper("loss", mode="best")
    with pytest.raises(ValueError, match=r"`TimeoutStopper.timeout` is -1"):
        TimeoutStopper(-1)
    with pytest.raises(TypeError, match="not a Stopper"):
        CombinedStopper(MaximumIterationStopper(1), lambda t, r: True)
    with pytest.raises(TypeError, match="FunctionStopper needs a function"):
        FunctionStopper(3)


def _fit(client, storage, fn, space, stop, **tc):
    return tune.Tuner(fn, param_space=space, tune_config=tune.TuneConfig(metric="loss", mode="min", **tc),
                      run_config=train.RunConfig(storage_path=storage, verbose=0, mlflow=False, stop=stop),
                      client=client).fit()


def test_stopper_in_run_config_stops_each_trial(dask_client, storage):
    stop = CombinedStopper(MaximumIterationStopper(max_iter=4), TrialPlateauStopper("loss", num_results=3))
    results = _fit(dask_client, storage, P.count, {"x": tune.grid_search([0.0, 1.0])}, stop)
    assert results.num_errors == 0
    by_x = {r.config["x"]: r.metrics["training_iteration"] for r in results}
    assert by_x == {0.0: 4, 1.0: 4}  # x=0 is flat from the start, but the plateau stopper's grace period is 4


class StopAllAfter(tune.Stopper):
    """A user stopper (Ray's interface): ends the experiment after ``n`` results in all."""

    def __init__(self, n):
        self.n = n
        self.seen = 0

    def __call__(self, trial_id, result):
        self.seen += 1
        return False

    def stop_all(self):
        return self.seen >= self.n


def test_stop_all_ends_running_and_unstarted_trials(dask_client, storage):
    results = _fit(dask_client, storage, P.count, {"x": tune.grid_search([1.0, 2.0, 3.0, 4.0])}, StopAllAfter(5),
                   max_concurrent_trials=1)
    assert results.num_errors == 0
    assert all(r.status == "TERMINATED" for r in results)
    ran = [r for r in results if r.metrics]
    assert 1 <= len(ran) < 4 and sum(r.metrics["training_iteration"] for r in ran) <= 6


def test_timeout_stopper_ends_the_experiment(dask_client, storage):
    results = _fit(dask_client, storage, P.slow_count, {"x": tune.grid_search([1.0, 2.0])},
                   TimeoutStopper(1.0), max_concurrent_trials=1)
    assert results.num_errors == 0 and all(r.status == "TERMINATED" for r in results)
    assert all(r.metrics.get("training_iteration", 0) < 100 for r in results)


def _fit_stop(client, storage, fn, space, stop):
    return tune.Tuner(fn, param_space=space, client=client,
                      run_config=tune.RunConfig(storage_path=storage, verbose=0, mlflow=False, stop=stop)).fit()


def test_a_result_with_done_true_ends_a_function_trial(dask_client, storage):
    (r,) = _fit_stop(dask_client, storage, P.says_done, {"done_at": 2}, None)
    assert r.error is None and r.metrics["training_iteration"] == 2
    assert r.stop_reason == "the trial reported done=True"


def test_stop_dict_takes_bools_and_compares_with_ge(dask_client, storage):
    (r,) = _fit_stop(dask_client, storage, P.count, {"steps": 9}, {"done": True, "training_iteration": 4})
    assert r.metrics["training_iteration"] == 4  # "done" is never reported as True here: the iteration stops it


def test_a_misspelt_stop_key_fails_the_trial_saying_which(dask_client, storage):
    (r,) = _fit_stop(dask_client, storage, P.count, {"steps": 9}, {"trainig_iteration": 2})
    assert r.error is not None
    assert "RunConfig(stop=...) names ['trainig_iteration'], which trial" in str(r.error)
    assert r.metrics == {} or r.metrics["training_iteration"] == 1
