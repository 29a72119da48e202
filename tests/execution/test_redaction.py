"""Credentials stay out of messages and files: tracking URIs, storage filesystems, TLS keys."""

from __future__ import annotations

import json
import logging
import os
import socket
import stat

import tuneplat
from tuneplat import MLflowConfig, RunConfig, TuneConfig, Tuner
from tuneplat._redact import redact, strip_credentials
from tuneplat.core._replay import STATE_FILE, load_tuner_state, save_tuner_state

SECRET = "s3cr3t-Pa55"


def test_redact():
    assert redact(f"http://bob:{SECRET}@mlflow:5000/x") == "http://***@mlflow:5000/x"
    assert redact(f"failed: https://tok{SECRET}@h/api?x=1&token={SECRET}&y=2") == \
        "failed: https://***@h/api?x=1&token=***&y=2"
    assert redact("sqlite:////tmp/mlflow.db") == "sqlite:////tmp/mlflow.db"
    assert strip_credentials(f"http://bob:{SECRET}@mlflow:5000") == "http://mlflow:5000"


class _FakeFS:
    """Stands for an fsspec filesystem holding keys."""

    def __init__(self) -> None:
        self.secret = SECRET


def test_tuner_pkl_is_private_and_holds_no_credentials(tmp_path, caplog):
    rc = RunConfig(storage_path=str(tmp_path), mlflow=MLflowConfig(tracking_uri=f"http://bob:{SECRET}@mlflow:5000"))
    rc.storage_filesystem = _FakeFS()
    rc.security = {"tls_ca_file": "ca.pem", "tls_client_key": "-----BEGIN PRIVATE KEY-----\nabc\n"}
    save_tuner_state(str(tmp_path), {"run_config": rc, "param_space": {}})
    path = tmp_path / STATE_FILE
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    data = path.read_bytes()
    assert SECRET.encode() not in data and b"PRIVATE KEY" not in data
    with caplog.at_level(logging.WARNING, logger="tuneplat"):
        state = load_tuner_state(str(tmp_path))
    assert state["run_config"].storage_filesystem is None
    assert state["run_config"].security is None
    assert state["run_config"].mlflow.tracking_uri == "http://mlflow:5000"
    assert "storage_filesystem" in caplog.text and "give them again" in caplog.text


def mlflow_trainable(config):
    tuneplat.report({"loss": 1.0})


def test_unreachable_mlflow_with_credentials_is_reported_redacted(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    monkeypatch.setenv("TUNEPLAT_MLFLOW_FLUSH_TIMEOUT_S", "2")  # (what is unlogged is written then, not after 30 s)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    uri = f"http://bob:{SECRET}@127.0.0.1:{port}"
    with caplog.at_level(logging.WARNING, logger="tuneplat"):
        Tuner(mlflow_trainable, param_space={}, tune_config=TuneConfig(metric="loss", mode="min"),
              run_config=RunConfig(storage_path=str(tmp_path), name="exp", verbose=0,
                                   mlflow=MLflowConfig(tracking_uri=uri))).fit()
    assert "not reachable" in caplog.text or "did not take everything" in caplog.text
    assert SECRET not in caplog.text
    assert "***@127.0.0.1" in caplog.text
    report = tmp_path / "exp" / "mlflow_unlogged.json"
    assert stat.S_IMODE(os.stat(report).st_mode) == 0o600
    assert SECRET not in report.read_text()
    assert json.loads(report.read_text())["tracking_uri"] == f"http://***@127.0.0.1:{port}"
    pkl = tmp_path / "exp" / STATE_FILE
    assert stat.S_IMODE(os.stat(pkl).st_mode) == 0o600 and SECRET.encode() not in pkl.read_bytes()
    for root, _dirs, files in os.walk(tmp_path):
        for name in files:
            path = os.path.join(root, name)
            if name == "mlflow_target.json":  # setup_mlflow on the workers needs the URI: the owner's eyes only
                assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
                continue
            with open(path, "rb") as f:
                assert SECRET.encode() not in f.read(), path




def test_tracking_uri_from_the_environment_never_reaches_the_console(tmp_path, capfd, monkeypatch):
    """$MLFLOW_TRACKING_URI with a password: the end-of-run hints (and everything else printed) hide it."""
    from tuneplat.testing import VirtualTimeExecutor

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    monkeypatch.setenv("TUNEPLAT_MLFLOW_FLUSH_TIMEOUT_S", "2")  # (what is unlogged is written then, not after 30 s)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://bob:{SECRET}@127.0.0.1:{port}/")
    Tuner(mlflow_trainable, param_space={}, tune_config=TuneConfig(metric="loss", mode="min"),
          run_config=RunConfig(storage_path=str(tmp_path), name="exp", verbose=1),
          executor=VirtualTimeExecutor(num_slots=1)).fit()
    out, err = capfd.readouterr()
    assert "look further" in out + err  # the summary with the MLflow hint was printed
    assert f"open http://127.0.0.1:{port}/#/experiments" in out + err
    assert SECRET not in out + err


def test_mlflow_ui_hint_hides_credentials_of_a_backend_store_uri():
    from tuneplat.tracking._progress import mlflow_ui_hint

    lines = mlflow_ui_hint(f"postgresql://bob:{SECRET}@db:5432/mlflow", "1")
    assert lines and SECRET not in "\n".join(lines) and "***@db:5432" in lines[0]
