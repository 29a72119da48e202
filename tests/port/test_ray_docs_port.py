"""Ray Tune docs examples with only the imports changed, plus tune.run and Ray's small compatibility objects."""

from __future__ import annotations

import os

import port_trainables as P
import pytest

import tuneplat as tune
from tuneplat import train
from tuneplat.schedulers import ASHAScheduler
from tuneplat.search import ConcurrencyLimiter
from tuneplat.stopper import MaximumIterationStopper
from tuneplat.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig


def test_ray_docs_tuner_with_optuna_asha_stopper_and_checkpoints(dask_client, storage):
    from tuneplat.search.optuna import OptunaSearch

    algo = ConcurrencyLimiter(OptunaSearch(seed=0), max_concurrent=2)
    tuner = tune.Tuner(
        P.checkpointing,
        param_space={"lr": tune.loguniform(1e-4, 1e-1), "batch_size": tune.choice([16, 32])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", num_samples=4, search_alg=algo,
                                    scheduler=ASHAScheduler(max_t=6, grace_period=2)),
        run_config=RunConfig(name="docs", storage_path=storage, stop=MaximumIterationStopper(5), verbose=0,
                             mlflow=False, failure_config=FailureConfig(max_failures=1),
                             checkpoint_config=CheckpointConfig(num_to_keep=3, checkpoint_score_attribute="loss",
                                                                checkpoint_score_order="min"),
                             progress_reporter=tune.CLIReporter(metric_columns=["loss", "acc"])),
        client=dask_client,
    )
    results = tuner.fit()
    assert len(results) == 4 and results.num_errors == 0 and results.num_terminated == 4
    best = results.get_best_result(metric="loss", mode="min")
    assert isinstance(best.checkpoint, Checkpoint) and os.path.isdir(best.path)
    assert best.metrics["training_iteration"] <= 5
    df = results.get_dataframe(filter_metric="loss", filter_mode="min")
    assert len(df) == 4 and "config/lr" in df.columns
    # the best kept checkpoint by loss is not the latest one when the curve went up
    first = results[0]
    assert first.get_best_checkpoint("loss", "min") in [c for c, _ in first.best_checkpoints]
    with pytest.raises(ValueError, match="`mode` is 'best'"):
        first.get_best_checkpoint("loss", "best")
    with pytest.raises(RuntimeError, match="numeric 'nope'"):
        first.get_best_checkpoint("nope", "min")
    assert tune.Tuner.can_restore(os.path.join(storage, "docs"))
    again = tune.Tuner.restore(os.path.join(storage, "docs"), P.checkpointing).get_results()
    assert [r.trial_id for r in again] == [r.trial_id for r in results]


def test_best_checkpoint_by_metric_is_the_best_reported(dask_client, storage):
    results = tune.Tuner(P.checkpointing, param_space={"lr": 0.01, "steps": 4},
                         tune_config=tune.TuneConfig(metric="loss", mode="min"),
                         run_config=RunConfig(storage_path=storage, verbose=0, mlflow=False),
                         client=dask_client).fit()
    r = results[0]
    losses = [m["loss"] for _, m in r.best_checkpoints]
    assert r.get_best_checkpoint("loss", "min") == r.best_checkpoints[losses.index(min(losses))][0]
    assert r.get_best_checkpoint("loss", "max").path.endswith("checkpoint_000001")


def test_legacy_tune_run_returns_an_analysis(dask_client, storage):
    analysis = tune.run(P.objective, config={"x": tune.grid_search([1.0, 3.0, 5.0])}, metric="loss", mode="min",
                        storage_path=storage, name="legacy", verbose=0, stop={"training_iteration": 2},
                        resources_per_trial={"cpu": 1}, client=dask_client)
    assert analysis.best_config["x"] == 3.0
    assert analysis.best_result["training_iteration"] == 2
    assert len(analysis.results_df) == 3 and len(analysis.trials) == 3
    assert analysis.get_best_config(metric="loss", mode="max")["x"] in (1.0, 5.0)
    assert analysis.best_logdir == analysis.best_trial.path
    assert analysis.experiment_path.endswith("legacy")


def test_legacy_tune_run_raises_on_failed_trials_and_unknown_arguments(dask_client, storage, tmp_path):
    space = {"marker_dir": str(tmp_path), "name": "x", "always_fail": True}
    with pytest.raises(tune.TuneError, match="1 trial"):
        tune.run(P.fails_once_then_checkpoints, config=space, storage_path=storage, verbose=0, client=dask_client)
    analysis = tune.run(P.fails_once_then_checkpoints, config=space, storage_path=storage, verbose=0,
                        client=dask_client, raise_on_failed_trial=False)
    assert analysis.result_grid.num_errors == 1
    with pytest.raises(TypeError, match=r"\['keep_checkpoints_num'\]"):
        tune.run(P.objective, config={"x": 1}, keep_checkpoints_num=2)


def test_ray_compat_objects():
    rc = train.RunConfig(progress_reporter=tune.CLIReporter(max_report_frequency=30), sync_config=train.SyncConfig())
    assert rc.progress_interval_s == 30.0
    with pytest.raises(ValueError, match="max_report_frequency"):
        tune.CLIReporter(max_report_frequency=0)
    assert tune.JupyterNotebookReporter(overwrite=False).overwrite is False
