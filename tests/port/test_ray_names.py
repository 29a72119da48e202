"""Names a Ray script imports that exist under the same path here."""

from __future__ import annotations

import port_returning_trainables as R

import tuneplat as tune
from tuneplat.train import Result, RunConfig  # from ray.train import Result, RunConfig


def test_train_result_is_the_tuner_result(dask_client, storage):
    results = tune.Tuner(R.objective, param_space={"a": 1.0, "b": 2},
                         run_config=RunConfig(storage_path=storage, verbose=0, mlflow=False), client=dask_client).fit()
    assert Result is tune.Result and isinstance(results[0], Result)


def test_enable_reproducibility_seeds_every_trial_alike(dask_client, storage):
    results = tune.Tuner(R.reproducible, param_space={"seed": 7, "x": tune.grid_search([1, 2])},
                         run_config=RunConfig(storage_path=storage, verbose=0, mlflow=False), client=dask_client).fit()
    draws = {r.metrics["draw"] for r in results}
    assert len(draws) == 1 and all(r.metrics["deterministic"] for r in results)
