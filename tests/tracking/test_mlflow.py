"""MLflow tracking against a real ``mlflow server`` and against the embedded sqlite default."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time

import mlflow
import mlflow_trainables as T
import psutil
import pytest
from conftest import free_port, stop_group
from mlflow import MlflowClient

import tuneplat as tune
from tuneplat import read_journal

SPACE = {"x": tune.grid_search([0.5, -1.0, 2.0, 3.0]), "opt": {"lr": 0.1, "name": "sgd"}}


def _fit(client, storage, name, mlflow_cfg, space=SPACE, **run_kw):
    tuner = tune.Tuner(T.curve, param_space=space, tune_config=tune.TuneConfig(metric="loss", mode="min"),
                       run_config=tune.RunConfig(name=name, storage_path=storage, verbose=0, mlflow=mlflow_cfg,
                                                 **run_kw),
                       client=client)
    return tuner.fit()


def _runs(uri, name):
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(name)
    runs = c.search_runs([exp.experiment_id], max_results=1000)
    parent = [r for r in runs if r.data.tags.get("tuneplat.kind") == "experiment"]
    children = [r for r in runs if r.data.tags.get("tuneplat.kind") == "trial"]
    return c, parent, children


def test_server_runs_nesting_params_metrics_statuses_artifacts_registry(dask_client, storage, mlflow_server):
    space = {**SPACE, "fail": tune.sample_from(lambda spec: spec.config["x"] == 3.0)}
    results = _fit(dask_client, storage, "srv_sweep", tune.MLflowConfig(
        tracking_uri=mlflow_server, register_best_model="srv-best", tags={"team": "tests"}), space=space)
    c, parent, children = _runs(mlflow_server, "srv_sweep")
    assert len(parent) == 1 and len(children) == 4
    p = parent[0]
    assert p.info.status == "FINISHED"
    assert p.data.params["searcher"] == "BasicVariantGenerator"
    assert p.data.params["scheduler"] == "FIFOScheduler"
    assert p.data.params["metric"] == "loss" and p.data.params["scaling/num_workers"] == "1"
    assert "space/x" in p.data.params and p.data.tags["team"] == "tests"
    best = results.get_best_result()
    assert p.data.tags["tuneplat.best_run_id"] == best.mlflow_run_id
    # the best trial's values are tags of the parent (metrics there would make an empty chart section)
    assert float(p.data.tags["tuneplat.best.loss"]) == pytest.approx(best.metrics["loss"])
    assert not [k for k in p.data.metrics if k.startswith("best")]
    exp = c.get_experiment_by_name("srv_sweep")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"  # the UI's classic view, not GenAI
    view = json.loads(exp.tags["mlflow.sharedViewState.tuneplat"])
    state = json.loads(view["state"])
    assert state["selectedColumns"][:3] == ["metrics.`loss`", "params.`x`", "params.`opt/lr`"]
    # grouped by the sweep's run (parent and trials in one expanded group, its row the best loss); no sort by the
    # metric, which would list the runs flat
    assert "orderByKey" not in state
    assert state["groupBy"] == {"aggregateFunction": "min",
                                "groupByKeys": [{"mode": "tag", "groupByData": "tuneplat.experiment_dir"}]}
    assert {r.data.tags["tuneplat.experiment_dir"] for r in [p, *children]} == {results.experiment_path}

    by_id = {r.info.run_id: r for r in children}
    assert {r.mlflow_run_id for r in results} == set(by_id)
    for res in results:
        run = by_id[res.mlflow_run_id]
        assert run.data.tags["mlflow.parentRunId"] == p.info.run_id
        assert run.data.tags["tuneplat.trial_id"] == res.trial_id
        assert run.data.params["x"] == str(res.config["x"]) and run.data.params["opt/lr"] == "0.1"
        history = c.get_metric_history(run.info.run_id, "loss")
        assert sorted(m.step for m in history) == [h["training_iteration"] for h in res._history]
        assert run.data.metrics["nested/m"] == res.metrics["nested"]["m"]
        arts = [a.path for a in c.list_artifacts(run.info.run_id, "checkpoints")]
        assert arts == [f"checkpoints/{os.path.basename(ck.path)}" for ck, _ in res.best_checkpoints]
        if res.config["x"] == 3.0:
            assert res.error is not None and run.info.status == "FAILED"
            assert run.data.tags["tuneplat.status"] == "ERROR"
            error_txt = c.download_artifacts(run.info.run_id, "error.txt", dst_path=storage)
            assert "planned failure at step 3" in open(error_txt).read()
        else:
            assert run.info.status == "FINISHED" and run.data.tags["tuneplat.status"] == "TERMINATED"

    mlflow.set_tracking_uri(mlflow_server)
    df = mlflow.search_runs(experiment_names=["srv_sweep"], order_by=["metrics.loss ASC"])
    assert df.iloc[0]["run_id"] == best.mlflow_run_id

    (mv,) = c.search_model_versions("name='srv-best'")
    assert mv.run_id == best.mlflow_run_id and mv.run_link == f"runs:/{best.mlflow_run_id}/model"
    assert [a.path for a in c.list_artifacts(best.mlflow_run_id, "model")] == ["model/state.json"]


def test_embedded_default_store_and_restore_continues_the_same_runs(dask_client, storage, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    space = {"x": tune.grid_search([1.0, 2.0]), "fail_once": True}
    results = _fit(dask_client, storage, "embedded", None, space=space)  # mlflow=None: the default
    uri = f"sqlite:///{storage}/mlflow.db"
    assert os.path.isfile(os.path.join(storage, "mlflow.db"))
    c, parent, children = _runs(uri, "embedded")
    assert c.get_experiment_by_name("embedded").artifact_location.startswith(f"file://{storage}/mlartifacts")
    assert results.num_errors == 2
    assert [r.info.status for r in children] == ["FAILED", "FAILED"]
    first_ids = {r.trial_id: r.mlflow_run_id for r in results}
    events = read_journal(os.path.join(results.experiment_path, "journal.jsonl"))
    assert {(e["trial_id"], e["run_id"]) for e in events if e["event"] == "mlflow_run"} == set(first_ids.items())

    tuner = tune.Tuner.restore(results.experiment_path, T.curve, resume_errored=True, client=dask_client)
    again = tuner.fit()
    assert again.num_errors == 0
    assert {r.trial_id: r.mlflow_run_id for r in again} == first_ids  # the same runs continue
    c, parent2, children2 = _runs(uri, "embedded")
    assert [p.info.run_id for p in parent2] == [p.info.run_id for p in parent]
    assert len(children2) == 2 and all(r.info.status == "FINISHED" for r in children2)
    for r in children2:
        steps = sorted({m.step for m in c.get_metric_history(r.info.run_id, "loss")})
        assert steps == [1, 2, 3, 4]
        assert r.data.metrics["loss"] == pytest.approx(again[0].metrics["loss"] if
                                                       again[0].mlflow_run_id == r.info.run_id else
                                                       again[1].metrics["loss"])


def test_mlflow_false_logs_nothing(dask_client, storage):
    results = _fit(dask_client, storage, "off", False, space={"x": 1.0})
    assert results[0].mlflow_run_id is None
    assert not os.path.exists(os.path.join(storage, "mlflow.db"))


def test_dead_tracking_server_does_not_stall_the_sweep(dask_client, storage, monkeypatch, caplog):
    monkeypatch.setenv("TUNEPLAT_MLFLOW_FLUSH_TIMEOUT_S", "3")
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with caplog.at_level(logging.WARNING, logger="tuneplat"):
        results = _fit(dask_client, storage, "dead", tune.MLflowConfig(tracking_uri=dead))
    assert results.num_terminated == 4 and all(r.metrics["training_iteration"] == 4 for r in results)
    report = json.load(open(os.path.join(results.experiment_path, "mlflow_unlogged.json")))
    assert report["tracking_uri"] == dead
    assert report["not_logged"]["metric values"] > 0 and report["not_logged"]["run creation"] == 5
    (line,) = [r.getMessage() for r in caplog.records if "not logged" in r.getMessage()]  # one line, counts and runs
    assert line.startswith(f"tuneplat: MLflow at {dead}") and "not logged 5 run creation, " in line, line
    assert " metric values, " in line and "5 run end for 5 runs (last error: MlflowException" in line, line


def _uploader_pids() -> set[int]:
    """The MLflow uploader processes this test process has started (and that are still running)."""
    pids = set()
    for p in psutil.Process().children():
        try:
            if "_child_main" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                pids.add(p.pid)
        except psutil.Error:
            pass
    return pids


def test_one_uploader_process_serves_successive_fits_and_a_dead_one_is_replaced(dask_client, storage,
                                                                                monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{storage}/mlflow.db"
    _fit(dask_client, storage, "reuse_1", None, space={"x": 1.0})
    first = _uploader_pids()
    assert first
    _fit(dask_client, storage, "reuse_2", None, space={"x": 2.0})
    assert _uploader_pids() == first  # the second fit() started no uploader: it used the idle one

    for pid in first:  # an uploader that died between two fits (OOM killer, a user's kill)
        proc = psutil.Process(pid)
        proc.kill()
        proc.wait(timeout=30)
    results = _fit(dask_client, storage, "reuse_3", None, space={"x": 3.0})
    third = _uploader_pids()
    assert third and not third & first  # replaced by a new one
    for name, x in (("reuse_1", 1.0), ("reuse_2", 2.0), ("reuse_3", 3.0)):
        c, parent, children = _runs(uri, name)
        assert parent[0].info.status == "FINISHED" and len(children) == 1
        assert children[0].data.params["x"] == str(x) and children[0].info.status == "FINISHED"
        assert sorted(m.step for m in c.get_metric_history(children[0].info.run_id, "loss")) == [1, 2, 3, 4]
    assert results[0].mlflow_run_id == children[0].info.run_id

    # the idle uploader keeps its sqlite connections; the database file alone is still complete
    copy = os.path.join(storage, "copy")
    os.makedirs(copy)
    shutil.copy(os.path.join(storage, "mlflow.db"), copy)
    c, parent, children = _runs(f"sqlite:///{copy}/mlflow.db", "reuse_3")
    assert parent[0].info.status == "FINISHED" and children[0].info.status == "FINISHED"
    assert len(c.get_metric_history(children[0].info.run_id, "loss")) == 4


def test_uploader_process_ends_with_the_interpreter(storage, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(here)), here]))
    out = subprocess.run([sys.executable, os.path.join(here, "exit_fit.py"), storage], env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    pids = [int(p) for p in out.stdout.split()]
    assert pids  # the fit used an uploader process ...
    assert not [p for p in pids if psutil.pid_exists(p)]  # ... which ended before the interpreter did
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    _c, parent, children = _runs(f"sqlite:///{storage}/mlflow.db", "exits")
    assert parent[0].info.status == "FINISHED" and children[0].info.status == "FINISHED"


@pytest.mark.slow
def test_sigkilled_tuner_restore_reconciles_running_runs(dask_client, storage, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(here)), here]))
    proc = subprocess.Popen([sys.executable, os.path.join(here, "crash_fit.py"), storage], env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = os.path.join(storage, "crashy", "journal.jsonl")
    try:
        seen: list[dict] = []
        # wait (on the external process) until two trial runs exist and results are flowing
        ids = os.path.join(storage, "crashy", "mlflow_runs.jsonl")
        created: list[str] = []
        while len(created) < 3 or sum(e["event"] == "result" for e in seen) < 18:  # parent + 2 trial runs
            assert proc.poll() is None, "the sweep ended before it could be killed"
            if os.path.exists(journal):
                seen = read_journal(journal)
            if os.path.exists(ids):
                created = open(ids).read().splitlines()
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        stop_group(proc)
    uri = f"sqlite:///{storage}/mlflow.db"
    c, parent, children = _runs(uri, "crashy")
    assert parent[0].info.status == "RUNNING" and any(r.info.status == "RUNNING" for r in children)
    before = {d["key"]: d["run_id"] for d in map(json.loads, created) if d["key"] != "__parent__"}

    open(os.path.join(storage, "crashy", "restoring"), "w").close()  # the trials run through from now on
    results = tune.Tuner.restore(os.path.join(storage, "crashy"), T.slow_reports, client=dask_client).fit()
    assert results.num_terminated == 4
    c, parent2, children2 = _runs(uri, "crashy")
    assert [p.info.run_id for p in parent2] == [parent[0].info.run_id]
    assert parent2[0].info.status == "FINISHED"
    assert not [r for r in c.search_runs([parent2[0].info.experiment_id]) if r.info.status == "RUNNING"]
    ids = {r.trial_id: r.mlflow_run_id for r in results}
    assert {t: ids[t] for t in before} == before  # trials with a run before the crash kept it
    finished = {r.info.run_id for r in children2 if r.info.status == "FINISHED"}
    assert set(ids.values()) <= finished


def test_a_rerun_of_the_same_sweep_gets_a_parent_run_named_after_each_folder(dask_client, storage, mlflow_server,
                                                                              tmp_path):
    cfg = tune.MLflowConfig(tracking_uri=mlflow_server)
    space = {"x": tune.grid_search([0.5])}
    for _ in range(3):
        _fit(dask_client, storage, "rerun_sweep", cfg, space=space)
    c, parents, children = _runs(mlflow_server, "rerun_sweep")
    moved = sorted(n for n in os.listdir(storage) if n.startswith("rerun_sweep."))  # the earlier runs' folders
    assert len(moved) == 2
    assert sorted(p.info.run_name for p in parents) == sorted(["rerun_sweep", *moved])
    assert len(children) == 3
    # the same experiment name from another storage folder: a numbered parent run
    _fit(dask_client, str(tmp_path / "elsewhere"), "rerun_sweep", cfg, space=space)
    _c, parents, _children = _runs(mlflow_server, "rerun_sweep")
    assert "rerun_sweep #2" in [p.info.run_name for p in parents]
    # an experiment whose owner chose a kind keeps it
    exp = c.get_experiment_by_name("rerun_sweep")
    c.set_experiment_tag(exp.experiment_id, "mlflow.experimentKind", "genai_development")
    _fit(dask_client, storage, "rerun_sweep", cfg, space=space)
    assert c.get_experiment_by_name("rerun_sweep").tags["mlflow.experimentKind"] == "genai_development"


def test_an_explicit_sqlite_store_keeps_artifacts_beside_its_database(dask_client, tmp_path, monkeypatch):
    """MLflow's own default would put artifacts in ./mlruns of whatever folder the tuner runs in."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    db_dir = tmp_path / "db"
    uri = f"sqlite:///{db_dir}/tracking.db"
    db_dir.mkdir()
    results = _fit(dask_client, str(tmp_path / "res"), "explicit_sqlite", tune.MLflowConfig(tracking_uri=uri),
                   space={"x": 1.0})
    c = MlflowClient(uri)
    assert c.get_experiment_by_name("explicit_sqlite").artifact_location.startswith(f"file://{db_dir}/mlartifacts/")
    assert c.list_artifacts(results[0].mlflow_run_id, "checkpoints")  # curve checkpoints; they were logged there
    assert os.listdir(work) == []


def test_mlflow_logger_callback_without_a_uri_logs_to_mlflows_default(dask_client, tmp_path, monkeypatch):
    """Ray's mlflow_example.py without --tracking-uri: the runs are where the script's own
    ``mlflow.get_experiment_by_name`` looks (MLflow's default: here sqlite:///mlflow.db in the working directory)."""
    from tuneplat.air.integrations.mlflow import MLflowLoggerCallback

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    mlflow.set_tracking_uri(None)  # (what a fresh script has)
    try:
        default = mlflow.get_tracking_uri()
        assert "mlflow.db" in default or "mlruns" in default
        results = tune.Tuner(T.curve, param_space={"x": 1.0}, tune_config=tune.TuneConfig(metric="loss", mode="min"),
                             run_config=tune.RunConfig(name="default_uri", storage_path=str(tmp_path / "res"),
                                                       verbose=0, callbacks=[MLflowLoggerCallback(
                                                           experiment_name="example")]),
                             client=dask_client).fit()
        exp = mlflow.get_experiment_by_name("example")  # (as the script does)
        assert exp is not None
        runs = mlflow.search_runs([exp.experiment_id], output_format="list")
        assert results[0].mlflow_run_id in {r.info.run_id for r in runs}
    finally:
        mlflow.set_tracking_uri(None)
