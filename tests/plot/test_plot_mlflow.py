"""The MLflow parent run gets ``plots/*.png`` at the end of a sweep (a real sqlite tracking store)."""

from __future__ import annotations

import os

import plot_trainables as T

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.schedulers import ASHAScheduler


def _parent_run(storage, name):
    events = read_journal(os.path.join(storage, name, "journal.jsonl"))
    return next(e for e in events if e["event"] == "mlflow_parent_run")


def _fit(client, storage, name, mlflow):
    return tune.Tuner(
        T.curve, param_space={"floor": tune.grid_search([0.0, 0.3, 0.6, 0.9]), "steps": 6},
        tune_config=tune.TuneConfig(metric="loss", mode="min",
                                    scheduler=ASHAScheduler(max_t=6, grace_period=1, reduction_factor=2)),
        run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=mlflow), client=client).fit()


def test_the_parent_run_has_the_plots_as_artifacts(dask_client, tmp_path, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    storage = str(tmp_path / "results")
    grid = _fit(dask_client, storage, "ml", tune.MLflowConfig())
    parent = _parent_run(storage, "ml")
    client = MlflowClient(parent["tracking_uri"])
    names = sorted(a.path for a in client.list_artifacts(parent["run_id"], "plots"))
    assert names == sorted(f"plots/{k}.png" for k in ("learning_curves", "optimization_history", "param_importances",
                                                       "parallel_coordinates", "intermediate_values", "timeline"))
    local = client.download_artifacts(parent["run_id"], "plots/learning_curves.png", str(tmp_path / "dl"))
    with open(local, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert client.get_run(parent["run_id"]).info.status == "FINISHED"
    assert not os.path.exists(os.path.join(grid.experiment_path, "mlflow_unlogged.json"))
    # the trials' own runs have no plots
    child = grid[0].mlflow_run_id
    assert child and not client.list_artifacts(child, "plots")


def test_log_plots_false_logs_none(dask_client, tmp_path, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    storage = str(tmp_path / "results")
    _fit(dask_client, storage, "noplots", tune.MLflowConfig(log_plots=False))
    parent = _parent_run(storage, "noplots")
    client = MlflowClient(parent["tracking_uri"])
    assert client.list_artifacts(parent["run_id"], "plots") == []
    assert [a.path for a in client.list_artifacts(parent["run_id"])] == ["best_config.json"]
