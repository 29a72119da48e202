"""A function trainable's return value (or what it yields) is reported, as in Ray Tune."""

from __future__ import annotations

import port_returning_trainables as R
import pytest

import tuneplat as tune
from tuneplat.train import RunConfig
from tuneplat.trainables._adapt import report_returns
from tuneplat.trainables._function import ReportsReturn
from tuneplat.trainables._trainable import TrainableFunction


def _fit(trainable, space, storage, client, **tc):
    return tune.Tuner(trainable, param_space=space, tune_config=tune.TuneConfig(**tc),
                      run_config=RunConfig(storage_path=storage, verbose=0, mlflow=False), client=client).fit()


def test_ray_quickstart_returned_dict_is_the_result(dask_client, storage):
    results = _fit(R.objective, {"a": tune.grid_search([0.1, 1.0]), "b": tune.choice([1])}, storage, dask_client)
    best = results.get_best_result(metric="score", mode="min")
    assert best.config["a"] == 0.1 and best.metrics["score"] == pytest.approx(1.01)
    assert best.metrics["training_iteration"] == 1 and results.num_errors == 0


def test_returned_number_yielded_dicts_and_with_parameters(dask_client, storage):
    number = _fit(R.returns_number, {"a": 2.0}, storage + "/n", dask_client)
    assert number[0].metrics["_metric"] == 20.0  # Ray's DEFAULT_METRIC
    gen = _fit(R.yields_results, {"a": 3.0}, storage + "/g", dask_client, metric="loss", mode="min")
    assert gen[0].metrics["training_iteration"] == 3 and gen[0].metrics["loss"] == pytest.approx(1.0)
    both = _fit(tune.with_parameters(R.reports_then_returns, offset=0.5), {"a": 1.0}, storage + "/p", dask_client)
    assert list(both[0].metrics_dataframe["score"]) == [100.0, 1.5]  # the report, then the return value


def test_returning_something_else_fails_the_trial_clearly(dask_client, storage):
    results = _fit(R.returns_text, {"a": 1.0}, storage, dask_client)
    assert results.num_errors == 1
    assert "return or yield a dict of metrics or a single number" in str(results[0].error)


def test_only_plain_functions_are_wrapped():
    class T(tune.Trainable):
        def setup(self, config, data=None):
            self.data = data

        def step(self):
            return {"x": 1}

    wrapped = report_returns(R.objective)
    assert isinstance(wrapped, ReportsReturn) and report_returns(wrapped) is wrapped
    assert wrapped.__name__ == "objective"
    assert isinstance(report_returns(tune.with_parameters(T, data=1))._fn, TrainableFunction)
    assert isinstance(report_returns(tune.with_parameters(R.reports_then_returns, offset=1))._fn, ReportsReturn)
