"""Seeing what each rank does: the per-rank table, system metrics on the MLflow run, stacks of hung ranks."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import threading
import time

import obs_trainables as ot
import pytest
from mlflow import MlflowClient

import tuneplat as tune
from tuneplat import cli
from tuneplat.execution._observe import read_workers


def _journal(path: str) -> list[dict]:
    with open(os.path.join(path, "journal.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(list(args))
    return code, out.getvalue()


def _line_of(marker: str) -> int:
    with open(ot.__file__, encoding="utf-8") as f:
        return next(i for i, line in enumerate(f, 1) if marker in line)


def _may_read_other_processes() -> bool:
    """py-spy reads a process through ptrace: root may; others only where Linux's Yama allows (ptrace_scope 0)."""
    if os.geteuid() == 0:
        return True
    if sys.platform == "darwin":
        return False
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope", encoding="utf-8") as f:
            return f.read().strip() == "0"
    except OSError:
        return True


needs_ptrace = pytest.mark.skipif(not _may_read_other_processes(),
                                  reason="py-spy cannot read another process here (not root, and Linux's "
                                         "kernel.yama.ptrace_scope is above 0, or macOS): run as root")


@pytest.fixture
def fast_heartbeats(monkeypatch):
    monkeypatch.setenv("TUNEPLAT_HEARTBEAT_TIMEOUT_S", "5")  # a ping every 0.5 s
    monkeypatch.setenv("TUNEPLAT_SYSTEM_METRICS_S", "0.5")
    monkeypatch.setenv("TUNEPLAT_SYSTEM_METRICS_JOURNAL_S", "0")
    monkeypatch.setenv("TUNEPLAT_WORKERS_FILE_S", "0.2")


def test_per_rank_table_and_system_metrics_on_the_mlflow_run(dask_client, tmp_path, fast_heartbeats):
    storage = str(tmp_path / "res")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    grid = tune.Tuner(ot.observed_training, scaling_config=tune.ScalingConfig(num_workers=2),
                      run_config=tune.RunConfig(name="obs", storage_path=storage, verbose=0,
                                                mlflow=tune.MLflowConfig(tracking_uri=uri)),
                      client=dask_client).fit()
    result = grid[0]
    assert result.error is None, result.error
    exp = os.path.join(storage, "obs")

    code, text = _cli("status", exp, "--workers", "--json")
    assert code == 0
    doc = json.loads(text)
    rows = doc["finished"][result.metrics["trial_id"]]
    assert sorted(r["rank"] for r in rows) == [0, 1]
    for r in rows:
        assert r["pid"] and r["host"] and r["device"] == "cpu" and r["state"] == "done"
        assert r["steps"] > 0 and r["samples_per_s"] is not None and r["data_wait_s"] is not None
        assert r["system"]["cpu_utilization_percentage"] >= 0 and r["system"]["process_memory_rss_megabytes"] > 10
    code, table = _cli("status", exp, "--workers")
    assert code == 0
    header = table.splitlines()[0].split()
    assert header[:6] == ["trial", "rank", "host", "pid", "device", "state"] and "samples/s" in header
    assert len(table.splitlines()) == 3

    events = [e for e in _journal(exp) if e["event"] == "system_metrics"]
    assert events and set(events[0]["ranks"]) <= {"0", "1"}
    client = MlflowClient(uri)
    for rank in (0, 1):
        cpu = client.get_metric_history(result.mlflow_run_id, f"system/rank_{rank}/cpu_utilization_percentage")
        rss = client.get_metric_history(result.mlflow_run_id, f"system/rank_{rank}/process_memory_rss_megabytes")
        assert cpu and rss and all(m.value > 10 for m in rss)


@pytest.fixture(params=["by_reference", "by_value"])
def shipped(request):
    """How the trainables reach the ranks: ``shipped(fn)`` is ``fn`` by reference (an importable module), or a
    closure over it with its module pickled by value, as a script's functions travel (cloudpickle gives their code
    the file name ``<dynamic-code>``: the stacks must still name the script's file and line)."""
    if request.param == "by_reference":
        yield lambda fn: fn
        return
    import cloudpickle

    cloudpickle.register_pickle_by_value(ot)

    def by_value(fn):
        def trainable(config):  # (a closure: no pickle by reference reaches it)
            return fn(config)

        return trainable

    try:
        yield by_value
    finally:
        cloudpickle.unregister_pickle_by_value(ot)


def test_a_deadlocked_rank_is_named_with_its_function_and_line(dask_client, storage, monkeypatch, shipped):
    monkeypatch.setenv("TUNEPLAT_REPORT_TIMEOUT_S", "3")
    grid = tune.Tuner(shipped(ot.one_rank_deadlocks), scaling_config=tune.ScalingConfig(num_workers=2),
                      run_config=tune.RunConfig(name="dead", storage_path=storage, verbose=0, mlflow=False),
                      client=dask_client).fit()
    error = str(grid[0].error)
    assert "rank(s) 0 did not reach report()" in error
    assert f"rank 0 in deadlock_forever ({ot.__file__}:{_line_of('DEADLOCK-LINE')})" in error
    assert f"rank 1 in one_rank_deadlocks ({ot.__file__}:{_line_of('REPORT-LINE')})" in error
    stacks = [e for e in _journal(os.path.join(storage, "dead")) if e["event"] == "stacks"]
    assert stacks and os.path.isfile(stacks[0]["path"]) and stacks[0]["path"] in error
    with open(stacks[0]["path"], encoding="utf-8") as f:
        text = f.read()
    assert "deadlock_forever" in text and "the rank's training thread" in text


@needs_ptrace
def test_a_rank_stuck_in_c_holding_the_gil_is_named_with_the_c_call(dask_client, storage, fast_heartbeats):
    """The hang no Python-level reader can place (the worker's event loop never answers): py-spy's native dump,
    on the tuner's host, names the rank's Python line and the C function in which its thread holds the GIL."""
    grid = tune.Tuner(ot.one_rank_holds_the_gil_in_c, scaling_config=tune.ScalingConfig(num_workers=2),
                      run_config=tune.RunConfig(name="gil", storage_path=storage, verbose=0, mlflow=False),
                      client=dask_client).fit()
    error = str(grid[0].error)
    assert "sent nothing for 5s" in error, error
    assert f"rank 0 in holds_the_gil_in_c ({ot.__file__}:{_line_of('GIL-LINE')}), while thread " in error, error
    assert "holds the GIL in pause" in error, error
    stacks = [e for e in _journal(os.path.join(storage, "gil")) if e["event"] == "stacks"]
    with open(stacks[0]["path"], encoding="utf-8") as f:
        text = f.read()
    assert "py-spy dump --native" in text and "pause (libc" in text, text


def test_tuneplat_stacks_prints_the_stacks_of_a_running_trial(dask_client, storage, shipped):
    tuner = tune.Tuner(shipped(ot.waits_for_release), run_config=tune.RunConfig(name="live", storage_path=storage, verbose=0,
                                                                      mlflow=False), client=dask_client)
    box: dict = {}
    runner = threading.Thread(target=lambda: box.setdefault("grid", tuner.fit()), daemon=True)
    runner.start()
    exp = os.path.join(storage, "live")
    deadline = time.monotonic() + 120
    trial_dir = None
    while trial_dir is None and time.monotonic() < deadline:  # readiness probe: the trial's rank runs
        try:
            running = json.load(open(os.path.join(exp, "workers.json"), encoding="utf-8"))["running"]
            trial_dir = next((os.path.join(exp, d) for d in os.listdir(exp) if os.path.isdir(os.path.join(exp, d))
                              and any(t in d for t in running)), None)
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    try:
        assert trial_dir is not None, "the trial never showed as running"
        code, text = _cli("stacks", exp)
        assert code == 0, text
        assert f"rank 0 in parked_until_released ({ot.__file__}:{_line_of('PARKED-LINE')})" in text
        assert "the rank's training thread" in text
    finally:
        if trial_dir is not None:
            open(os.path.join(trial_dir, "release"), "w").close()
        runner.join(120)
    assert box["grid"][0].error is None
    assert any(e["event"] == "stacks" and e["reason"] == "requested" for e in _journal(exp))
    code, text = _cli("stacks", exp)
    assert code != 0  # not running any more


_CHILD = """
import sys, threading, time
from tuneplat.execution import _stacks

def stuck_in_child(ready):
    _stacks.arm("t1", 0, sys.argv[1])
    ready.set()
    while True:
        time.sleep(0.05)  # CHILD-LINE

ready = threading.Event()
threading.Thread(target=stuck_in_child, args=(ready,), daemon=True).start()
ready.wait()
print("armed", flush=True)
time.sleep(120)
"""


def test_faulthandler_signal_reads_a_rank_on_this_host(tmp_path):
    """The fallback when the worker does not answer: SIGUSR2 and faulthandler's file in the trial folder."""
    import subprocess
    import sys

    from tuneplat.execution import _stacks

    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "armed"
        got = _stacks._via_signal(proc.pid, str(tmp_path), 0, 5.0)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert got is not None and got["how"].startswith("faulthandler")
    line = next(i for i, text in enumerate(_CHILD.splitlines(), 1) if "CHILD-LINE" in text)
    assert got["where"] == f"stuck_in_child ({script}:{line})", got["text"]


_GIL_CHILD = """
import ctypes

def stuck_in_c_holding_the_gil():
    print("armed", flush=True)
    ctypes.PyDLL(None).pause()  # CHILD-LINE: a C call made without releasing the GIL
"""


@needs_ptrace
def test_py_spy_reads_a_process_stuck_in_c_with_the_gil_and_names_that_frame(tmp_path):
    """A process stuck in C while holding the GIL (its Dask worker could not answer, faulthandler would show only
    the Python frame): py-spy's native dump names the C function, the Python line that called it, and the GIL's
    holder."""
    import subprocess
    import sys

    from tuneplat.execution import _stacks

    assert _stacks._pyspy() is not None, "py-spy is in the test extra: pip install -e '.[test]'"
    script = tmp_path / "child.py"
    script.write_text(_GIL_CHILD + "stuck_in_c_holding_the_gil()\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "armed"
        got = _stacks._via_pyspy(proc.pid, 20.0)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert got is not None and got["how"] == "py-spy dump --native", got
    line = next(i for i, text in enumerate(_GIL_CHILD.splitlines(), 1) if "CHILD-LINE" in text)
    assert got["where"] in (f"stuck_in_c_holding_the_gil ({script}:{line}), while {who} holds the GIL in pause"
                            for who in ("thread 'MainThread'", "the main thread")), got["where"]
    assert "holds the GIL" in got["text"] and "pause (libc" in got["text"], got["text"]


def test_the_live_view_shows_a_row_per_rank():
    """The live view's ranks table comes from the executor's per-rank rows (as ``status --workers`` does)."""
    from tuneplat.tracking._progress import ProgressReporter

    class Executor:  # the one method the view reads (DaskTrialExecutor.running_rows)
        def running_rows(self):
            row = {"trial_id": "t1", "host": "node-a", "pid": 4242, "device": "cpu", "state": "training",
                   "last_report_at": time.time() - 3, "steps_per_s": 12.5, "samples_per_s": 400.0,
                   "data_wait_fraction": 0.25, "system": {"cpu_utilization_percentage": 97.0,
                                                          "process_memory_rss_megabytes": 512.0}}
            return {"t1": [dict(row, rank=0), dict(row, rank=1, pid=4243, state="reporting")]}

    class Loop:
        executor = Executor()
        experiment_name = "live"

    reporter = ProgressReporter("loss", "min", verbose=1)
    reporter.attach(Loop())
    rows = reporter._rank_rows()  # what the live view's "ranks" table shows
    assert [r[:6] for r in rows] == [["t1", "0", "node-a", "4242", "cpu", "training"],
                                     ["t1", "1", "node-a", "4243", "cpu", "reporting"]]
    assert rows[0][7:12] == ["12.50", "400.0", "25%", "97", "512"]
    assert 2.5 < float(rows[0][6]) < 60  # seconds since its last report


# ------------------------------------------------------------------ a build lock left by a killed process
_HOLD = ("import signal, sys\nfrom torch.utils.file_baton import FileBaton\nb = FileBaton(sys.argv[1])\n"
         "assert b.try_acquire()\nprint('held', flush=True)\nsignal.pause()\n")  # (held until killed)


def _holder(lock) -> subprocess.Popen:
    """A process holding ``lock`` as torch's ``cpp_extension.load`` does while it builds (or checks) an extension."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(lock)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_lock_watch_names_an_unheld_lock_and_never_one_a_live_process_holds(tmp_path):
    from torch.utils.file_baton import FileBaton

    from tuneplat.train._lock_wait import LockWatch, baton_waits, holders

    lock = tmp_path / "lock"
    holder = _holder(lock)
    waiter = threading.Thread(target=FileBaton(str(lock)).wait, daemon=True)
    try:
        waiter.start()
        deadline = time.monotonic() + 60
        while str(lock) not in baton_waits():  # readiness probe: the thread reached FileBaton.wait
            assert time.monotonic() < deadline and waiter.is_alive()
            time.sleep(0.01)  # (torch's loop, not ours: nothing to block on)
        assert holders(str(lock)) == [holder.pid]
        watch = LockWatch(warn_s=60)
        t0 = time.monotonic()
        assert watch.check(t0) is None
        assert watch.check(t0 + 600) is None  # waited long, but a live process holds it: a build, not a leftover
        holder.kill()
        holder.wait()
        assert lock.exists() and holders(str(lock)) == []
        assert watch.check(t0 + 30) is None  # not yet waited warn_s
        assert watch.check(t0 + 61) == {"path": str(lock), "waited_s": 61.0}
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        lock.unlink(missing_ok=True)
        waiter.join(10)
    assert not waiter.is_alive()
    assert LockWatch(warn_s=0).check() is None  # nothing waits any more


class _Once(logging.Handler):
    def __init__(self, needle: str) -> None:
        super().__init__(logging.WARNING)
        self.needle, self.seen, self.text = needle, threading.Event(), ""

    def emit(self, record: logging.LogRecord) -> None:
        if self.needle in record.getMessage():
            self.text = record.getMessage()
            self.seen.set()


def test_a_rank_waiting_for_a_build_lock_left_by_a_killed_process_is_named_and_goes_on_once_it_is_deleted(
        dask_client, storage, tmp_path, monkeypatch):
    """A process killed while it held a torch extension's build lock (DeepSpeed's ops are built on first use) leaves
    the file; every later load of that extension waits for it forever, silently. The tuner warns, naming the rank
    and the file; deleting the file (as the warning says) lets the trial finish."""
    monkeypatch.setenv("TUNEPLAT_STALE_LOCK_S", "1")
    lock = tmp_path / "torch_extensions" / "some_op" / "lock"
    lock.parent.mkdir(parents=True)
    holder = _holder(lock)
    holder.kill()
    holder.wait()
    assert lock.exists()
    watcher = _Once("which no process on that host holds")
    log = logging.getLogger("tuneplat")
    log.addHandler(watcher)
    box: dict = {}
    tuner = tune.Tuner(ot.waits_for_a_build_lock, param_space={"lock": str(lock)},
                       run_config=tune.RunConfig(name="lock", storage_path=storage, verbose=0, mlflow=False),
                       client=dask_client)
    runner = threading.Thread(target=lambda: box.setdefault("grid", tuner.fit()), daemon=True)
    runner.start()
    try:
        assert watcher.seen.wait(120), "no warning about the lock file"
        assert f"the lock file {lock}," in watcher.text and "rank 0 of trial" in watcher.text
        assert "Delete that file" in watcher.text
        # `tuneplat status --workers` says so too (its table is written every 2 s: a readiness probe of that file)
        deadline, rows = time.monotonic() + 60, []
        while not any(r.get("state") == "stale lock" and r.get("stale_lock") == str(lock) for r in rows):
            assert time.monotonic() < deadline, rows
            time.sleep(0.1)  # (a file the tuner rewrites: nothing to block on)
            rows = [r for rows in (read_workers(os.path.join(storage, "lock")) or {}).get("running", {}).values()
                    for r in rows]
    finally:
        log.removeHandler(watcher)
        lock.unlink(missing_ok=True)  # what the user does
        runner.join(120)
    assert not runner.is_alive()
    (result,) = list(box["grid"])
    assert result.error is None and result.metrics["loss"] == 1.0
