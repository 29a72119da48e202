"""The loop's failure paths where the point is the real thing: worker processes, ports, a real Dask cluster."""

from __future__ import annotations

import os

import psutil
import pytest
import trainables as T

import tuneplat as tune
from tuneplat import read_journal

_KEPT = ("resource_tracker", "_mlflow import _child_main", "tracking/_writer_proc.py")  # kept for the next fit


def _children() -> dict[int, str]:
    out = {}
    for p in psutil.Process().children(recursive=True):
        try:
            out[p.pid] = " ".join(p.cmdline())[:200]
        except psutil.Error:
            pass
    return out


def _listening() -> set[int]:
    me = psutil.Process()
    return {c.laddr.port for c in me.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}


def test_an_error_in_the_loop_tears_down_the_embedded_cluster_and_is_recorded_as_error(storage):
    """A user callback raising inside the loop: fit() raises, the experiment says "error", nothing is left running."""

    class Boom(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            raise RuntimeError("callback bug")

    before_children, before_ports = _children(), _listening()
    tuner = tune.Tuner(T.quadratic, param_space={"x": 1, "steps": 50},
                       tune_config=tune.TuneConfig(metric="loss", mode="min"),
                       run_config=tune.RunConfig(name="boom", storage_path=storage, verbose=0, callbacks=[Boom()]))
    with pytest.raises(tune.TuneError, match="RuntimeError: callback bug"):
        tuner.fit()
    events = read_journal(os.path.join(storage, "boom", "journal.jsonl"))
    assert events[-1]["event"] == "experiment_end" and events[-1]["status"] == "error"
    assert "callback bug" in events[-1]["traceback"]
    # (Python's resource tracker, the MLflow uploader and the writer of progress.csv/TensorBoard files live as long
    # as the interpreter, by design: they serve the process's next experiment)
    left = {pid: cmd for pid, cmd in _children().items() if pid not in before_children
            and not any(kept in cmd for kept in _KEPT)}
    assert not left, f"processes outlived fit(): {left}"
    assert _listening() <= before_ports, "listening sockets outlived fit()"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{os.path.join(storage, 'mlflow.db')}")
    exp = client.get_experiment_by_name("boom")
    parents = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" not in r.data.tags]
    assert [r.info.status for r in parents] == ["FAILED"]
    assert tune.Tuner.can_restore(os.path.join(storage, "boom"))


def test_time_budget_ends_a_trial_that_does_not_report(dask_client, storage, monkeypatch):
    """One long epoch: the budget ends it after a short grace instead of waiting for its next report()."""
    monkeypatch.setenv("TUNEPLAT_STOP_GRACE_S", "1")
    tuner = tune.Tuner(T.one_long_epoch, param_space={"x": tune.grid_search([1, 2])},
                       tune_config=tune.TuneConfig(metric="loss", mode="min", time_budget_s=3),
                       run_config=tune.RunConfig(storage_path=storage, verbose=0, mlflow=False), client=dask_client)
    results = tuner.fit()
    assert [r.status for r in results] == ["TERMINATED", "TERMINATED"]
    assert all("time budget" in r.stop_reason for r in results)
    assert all(r.metrics["training_iteration"] == 1 for r in results)


def test_an_error_mid_sweep_ends_what_the_ranks_started_too(storage, tmp_path):
    """The operator's report, with the process they saw: ranks that started helper processes (multiprocessing's
    spawn context, `python -c from multiprocessing.spawn import spawn_main ...`); a callback raises on the 5th
    result. When fit() has raised, the helpers are gone: a helper orphaned by its worker's exit is re-parented to
    init, so it is looked up by the pid the rank reported, not among the tuner's children."""

    class BoomOnFifth(tune.Callback):
        seen = 0
        pids: set[int] = set()

        def on_trial_result(self, iteration, trials, trial, result, **info):
            BoomOnFifth.pids.add(int(result["helper_pid"]))
            BoomOnFifth.seen += 1
            if BoomOnFifth.seen == 5:
                raise RuntimeError("callback bug on the 5th result")

    markers = tmp_path / "markers"
    markers.mkdir()
    tuner = tune.Tuner(T.with_spawned_helper, param_space={"x": tune.grid_search([1, 2]), "marker_dir": str(markers)},
                       tune_config=tune.TuneConfig(metric="loss", mode="min"),
                       run_config=tune.RunConfig(name="boom5-helpers", storage_path=storage, verbose=0, mlflow=False,
                                                 callbacks=[BoomOnFifth()]))
    with pytest.raises(tune.TuneError, match="5th result"):
        tuner.fit()
    assert BoomOnFifth.pids
    alive = {}
    for pid in BoomOnFifth.pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                alive[pid] = " ".join(p.cmdline())[:200]
        except psutil.NoSuchProcess:
            pass
    for pid in alive:  # never leave them behind, whatever the outcome
        psutil.Process(pid).kill()
    assert not alive, f"helper processes a rank started outlived fit(): {alive}"


def test_an_error_mid_sweep_leaves_no_worker_process_not_even_a_zombie(storage, dask_client):
    """The operator's report: a callback raising on the 5th result, two trials busy reporting; right after fit()
    raised, every worker process of the embedded cluster is gone and reaped (none running, none defunct), and
    another cluster's in this process (the suite's shared one) still runs: a nanny there may restart a worker an
    earlier test ended (a hung rank's) while this test runs, and the embedded cluster must not end it."""

    class BoomOnFifth(tune.Callback):
        seen = 0

        def on_trial_result(self, iteration, trials, trial, result, **info):
            BoomOnFifth.seen += 1
            if BoomOnFifth.seen == 5:
                raise RuntimeError("callback bug on the 5th result")

    before = {p.pid for p in psutil.Process().children(recursive=True)}  # zombies of earlier tests too
    tuner = tune.Tuner(T.quadratic, param_space={"x": tune.grid_search([1, 2]), "steps": 200},
                       tune_config=tune.TuneConfig(metric="loss", mode="min"),
                       run_config=tune.RunConfig(name="boom5", storage_path=storage, verbose=0, mlflow=False,
                                                 callbacks=[BoomOnFifth()]))
    with pytest.raises(tune.TuneError, match="5th result"):
        tuner.fit()
    dask_client.wait_for_workers(2, timeout=120)  # the other cluster is whole
    # its worker processes, asked of its nannies (objects in this process), not over the network: a broadcast to a
    # worker that a nanny is restarting fails ("Connection reset by peer", seen on a loaded machine)
    others = {n.pid for n in dask_client.cluster.workers.values() if n.pid}
    left = {}
    for p in psutil.Process().children(recursive=True):
        if p.pid in before or p.pid in others:
            continue
        try:
            cmd = " ".join(p.cmdline())
        except psutil.ZombieProcess:
            cmd = "<defunct>"
        except psutil.Error:
            continue
        if not any(kept in cmd for kept in _KEPT):
            left[p.pid] = cmd[:200]
    assert not left, f"processes outlived fit(): {left}"

