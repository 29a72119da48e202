"""Real experiments for the plot tests: small trainables on the session's real Dask cluster, run once."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # plot_trainables, for the workers too

import plot_trainables as T  # noqa: E402

import tuneplat as tune  # noqa: E402
from tuneplat.schedulers import ASHAScheduler, HyperBandScheduler, PopulationBasedTraining  # noqa: E402

# a fixed shuffle of floors: the best trial is neither first nor last
FLOORS = [0.45, 0.3, 0.75, 0.0, 0.6, 0.9, 0.15, 0.525, 0.225, 0.825, 0.375, 0.675]


def fit(client, storage, fn, space, name, **tc):
    return tune.Tuner(fn, param_space=space, tune_config=tune.TuneConfig(**tc),
                      run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=False),
                      client=client).fit()


@pytest.fixture(scope="session")
def plot_storage(tmp_path_factory):
    return str(tmp_path_factory.mktemp("plot_results"))


@pytest.fixture(scope="session")
def asha_grid(dask_client, plot_storage):
    return fit(dask_client, plot_storage, T.curve, {"floor": tune.grid_search(FLOORS), "steps": 9}, "asha",
               metric="loss", mode="min", scheduler=ASHAScheduler(max_t=9, grace_period=1, reduction_factor=3))


@pytest.fixture(scope="session")
def hyperband_grid(dask_client, plot_storage):
    return fit(dask_client, plot_storage, T.checkpointed_curve, {"floor": tune.grid_search(FLOORS), "steps": 9},
               "hyperband", metric="loss", mode="min", scheduler=HyperBandScheduler(max_t=9, reduction_factor=3))


@pytest.fixture(scope="session")
def pbt_grid(dask_client, plot_storage):
    from examples.toy import pbt_toy

    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=4, hyperparam_mutations={"lr": tune.loguniform(1e-4, 1.0)},
                                  quantile_fraction=0.25, resample_probability=0.25, seed=0)
    return fit(dask_client, plot_storage, pbt_toy, {"lr": tune.grid_search([1e-4, 1e-3, 0.05, 0.3]), "steps": 16},
               "pbt", metric="score", mode="max", scheduler=pbt)


@pytest.fixture(scope="session")
def quadratic_grid(dask_client, plot_storage):
    return fit(dask_client, plot_storage, T.quadratic, {"x": tune.uniform(-1, 1), "noise": tune.uniform(0, 1)},
               "quadratic", metric="loss", mode="min", num_samples=40, seed=3)


@pytest.fixture(scope="session")
def pareto_grid(dask_client, plot_storage):
    return fit(dask_client, plot_storage, T.two_objectives,
               {"width": tune.grid_search([4, 16, 64, 256, 1024]), "jitter": tune.uniform(0, 1)}, "pareto",
               metric=["error", "cost"], mode=["min", "min"], seed=0)
