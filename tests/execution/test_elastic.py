"""Clusters that grow: fit() waits for workers (and asks an adaptive cluster for them) instead of refusing."""

from __future__ import annotations

import logging

import dask
from distributed import Client, LocalCluster

import tuneplat
from tuneplat import RunConfig, TuneConfig, Tuner
from tuneplat.execution._cluster import scheduler_workers


def one_report(config):
    tuneplat.report({"loss": config["x"]})


def test_adaptive_cluster_at_zero_scales_up_for_the_trials(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TUNEPLAT_WORKER_WAIT_S", "120")
    with dask.config.set({"distributed.worker.daemon": False}):
        cluster = LocalCluster(n_workers=0, threads_per_worker=1, processes=True, host="127.0.0.1",
                               dashboard_address="127.0.0.1:0", resources={"CPU": 1}, silence_logs=logging.ERROR)
    cluster.adapt(minimum=0, maximum=1, interval="200ms")
    client = Client(cluster, set_as_default=False)
    try:
        assert len(scheduler_workers(client)) == 0
        grid = Tuner(one_report, param_space={"x": tuneplat.grid_search([1.0, 2.0])},
                     tune_config=TuneConfig(metric="loss", mode="min"), client=client,
                     run_config=RunConfig(storage_path=str(tmp_path), mlflow=False, verbose=1)).fit()
        assert [r.error for r in grid] == [None, None]
        assert sorted(r.metrics["loss"] for r in grid) == [1.0, 2.0]
    finally:
        client.close()
        cluster.close()
    assert "waiting up to 120s for 1 worker(s) with {CPU=1}" in capsys.readouterr().out
