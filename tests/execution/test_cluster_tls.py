"""TLS on real Dask clusters: the embedded one by default, a given one through RunConfig(address=..., security=...)."""

from __future__ import annotations

import logging
import socket

import pytest
from distributed import Client, LocalCluster
from distributed.security import Security

import tuneplat
from tuneplat import RunConfig, TuneConfig, Tuner
from tuneplat.execution._cluster import Cluster


def channel_trainable(config):
    from tuneplat.train._session import _get_session  # the rank's connection to the tuner

    session = _get_session("report")
    for i in range(3):
        tuneplat.report({"loss": config["x"] + i, "tls": type(session.sock).__name__ == "SSLSocket",
                         "local": session.sock.family == socket.AF_UNIX})


def test_embedded_cluster_is_tls_and_refuses_other_local_clients():
    cluster = Cluster()
    try:
        address = cluster.client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        assert cluster.tls
        # another local user has neither the certificates nor plain TCP access
        with pytest.raises((OSError, TimeoutError)):
            Client(address, security=Security.temporary(), timeout=3, set_as_default=False)
        with pytest.raises((OSError, TimeoutError)):
            Client(address.replace("tls://", "tcp://"), timeout=3, set_as_default=False)
        assert cluster.client.submit(sum, [1, 2]).result(timeout=30) == 3
    finally:
        cluster.close()


def test_local_tls_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("TUNEPLAT_LOCAL_TLS", "0")
    cluster = Cluster()
    try:
        assert cluster.client.scheduler.address.startswith("tcp://")
        assert cluster.channel_server_context() is None
    finally:
        cluster.close()
    monkeypatch.setenv("TUNEPLAT_LOCAL_TLS", "maybe")
    with pytest.raises(ValueError, match="TUNEPLAT_LOCAL_TLS='maybe'"):
        Cluster()


def test_a_trial_on_the_embedded_cluster_never_talks_plain_tcp(tmp_path, monkeypatch):
    """Ranks on the tuner's host use its local socket (the bytes never leave the kernel); with it turned off
    (TUNEPLAT_LOCAL_SOCKET=0) or from another host, the channel is TLS like the cluster."""
    grid = Tuner(channel_trainable, param_space={"x": tuneplat.grid_search([0.0, 1.0])},
                 tune_config=TuneConfig(metric="loss", mode="min"),
                 run_config=RunConfig(storage_path=str(tmp_path), mlflow=False, verbose=0)).fit()
    assert [r.error for r in grid] == [None, None]
    assert all(r.metrics["local"] is True and r.metrics["training_iteration"] == 3 for r in grid)
    monkeypatch.setenv("TUNEPLAT_LOCAL_SOCKET", "0")
    grid = Tuner(channel_trainable, param_space={"x": tuneplat.grid_search([0.0, 1.0])},
                 tune_config=TuneConfig(metric="loss", mode="min"),
                 run_config=RunConfig(storage_path=str(tmp_path), mlflow=False, verbose=0)).fit()
    assert [r.error for r in grid] == [None, None]
    assert all(r.metrics["tls"] is True and r.metrics["local"] is False for r in grid)


def test_run_config_address_tls_with_security(tmp_path):
    sec = Security.temporary()
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, security=sec, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR) as lc:
        address = lc.scheduler_address
        assert address.startswith("tls://")
        with pytest.raises(ValueError, match="TLS scheduler but no certificates.*--tls-ca-file"):
            Tuner(channel_trainable, param_space={"x": 1.0}, tune_config=TuneConfig(metric="loss", mode="min"),
                  run_config=RunConfig(storage_path=str(tmp_path), mlflow=False, verbose=0, address=address)).fit()
        security = {"tls_ca_file": sec.tls_ca_file, "tls_client_cert": sec.tls_client_cert,
                    "tls_client_key": sec.tls_client_key, "require_encryption": True}
        grid = Tuner(channel_trainable, param_space={"x": 1.0}, tune_config=TuneConfig(metric="loss", mode="min"),
                     run_config=RunConfig(storage_path=str(tmp_path), mlflow=False, verbose=0, address=address,
                                          security=security, tuner_port="20000-20100")).fit()
        assert grid[0].error is None
        assert grid[0].metrics["tls"] is True or grid[0].metrics["local"] is True


def test_bad_security_and_port_say_what_is_wrong():
    with pytest.raises(ValueError, match="RunConfig.tuner_port='9-1'"):
        RunConfig(tuner_port="9-1")
    with pytest.raises(ValueError, match="RunConfig.security.*tls_ca_file"):
        Cluster(address="tls://127.0.0.1:1", security={"tls_bogus": 1})
