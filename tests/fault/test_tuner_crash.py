"""The tuner process itself dies (SIGKILL), is interrupted (Ctrl-C) or terminated (SIGTERM): nothing is lost."""

from __future__ import annotations

import collections
import os
import random
import signal
import subprocess
import sys
import time

import psutil
import pytest
from procs import terminal_sigint

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.core._replay import load_trials
from tuneplat.testing import VirtualTimeExecutor

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tuner_script.py")


_STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _end_started_tuners():
    """A test that fails (a timeout, an assertion) leaves no tuner process group running after it."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.communicate()


def _start(storage, name, gate=None):
    env = {**os.environ, "FT_GATE": gate} if gate else None
    proc = subprocess.Popen([sys.executable, SCRIPT, storage, name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, env=env, preexec_fn=terminal_sigint)
    _STARTED.append(proc)
    return proc


def _journal_lines(path, of=b"\n"):
    """How many lines the experiment's journal holds so far (``of``: how many times it holds those bytes)."""
    try:
        with open(os.path.join(path, "journal.jsonl"), "rb") as f:
            return f.read().count(of)
    except FileNotFoundError:
        return 0


def _wait_for(predicate, proc, timeout=120.0):
    """Wait until predicate() holds or the process ended (a condition, not a fixed delay)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate() or proc.poll() is not None:
            return
        time.sleep(0.02)  # polling another process's journal file: there is nothing to block on
    raise AssertionError("condition not reached in time")


def _group_processes(pgid):
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p.pid)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            pass
    return out


def _assert_no_leftovers(pgid):
    deadline = time.monotonic() + 30
    while _group_processes(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)  # bounded poll until the killed group's processes are reaped
    assert _group_processes(pgid) == [], "processes of the tuner's group are left behind"


def _listening_ports(pids):
    ports = set()
    for c in psutil.net_connections(kind="inet"):
        if c.status == psutil.CONN_LISTEN and c.pid in pids:
            ports.add(c.laddr.port)
    return ports


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigkill_tuner_at_random_moments_then_restore(tmp_path):
    storage, name = str(tmp_path / "res"), "crashy"
    path = os.path.join(storage, name)
    rng = random.Random(1234)
    kills = []
    for _ in range(5):
        target = _journal_lines(path) + rng.randint(1, 40)
        kills.append(target)
        proc = _start(storage, name)
        _wait_for(lambda target=target: _journal_lines(path) >= target, proc)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        _assert_no_leftovers(proc.pid)
    print("killed the tuner at journal lines", kills, "(seed 1234)")
    proc = _start(storage, name)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert "FIT_DONE 27 0" in out, out
    _assert_no_leftovers(proc.pid)

    trials, _ = load_trials(path)
    assert len(trials) == 27
    assert all(t.status.value == "TERMINATED" for t in trials)
    for key in ("a", "b"):
        counts = collections.Counter(t.config[key] for t in trials)
        assert counts == {1: 9, 2: 9, 3: 9}
    combos = collections.Counter((t.config["a"], t.config["b"]) for t in trials)
    assert set(combos.values()) == {3}
    for t in trials:  # each epoch exactly once, whatever was repeated after a crash is superseded
        assert [r["epoch"] for r in t.results] == [1, 2, 3]
    grid = tune.Tuner.restore(path, __import__("ft_trainables").grid_epochs).get_results()
    assert len(grid) == 27 and grid.num_terminated == 27


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_ends_cleanly_and_is_restorable(tmp_path, sig):
    storage, name = str(tmp_path / "res"), "interrupted"
    path = os.path.join(storage, name)
    gate = str(tmp_path / "gate")  # trials wait at epoch 2 until it exists: the sweep cannot end before the signal
    proc = _start(storage, name, gate)
    ps = psutil.Process(proc.pid)
    # two trials have reported epoch 1 and wait at the gate
    _wait_for(lambda: _journal_lines(path, of=b'"event": "result"') >= 2, proc)
    assert proc.poll() is None
    pids = {proc.pid} | {c.pid for c in ps.children(recursive=True)}
    assert _listening_ports(pids), "the tuner and its cluster listen while running"
    if sig == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal reaches the whole foreground group
    else:
        os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    _assert_no_leftovers(proc.pid)
    assert not _listening_ports(pids)
    events = read_journal(os.path.join(path, "journal.jsonl"))
    assert events[-1]["event"] == "experiment_end" and events[-1]["status"] == "interrupted"
    trials, _ = load_trials(path)
    assert any(not t.status.is_finished() for t in trials) or len(trials) < 27
    open(gate, "w").close()
    proc = _start(storage, name, gate)
    out, _ = proc.communicate(timeout=600)
    assert "FIT_DONE 27 0" in out, out


def test_missing_newest_checkpoint_and_torn_journal_recover(tmp_path):
    import ft_trainables as F

    storage = str(tmp_path / "res")
    tuner = tune.Tuner(F.steady, param_space={"epochs": 3}, tune_config=tune.TuneConfig(metric="loss", mode="min"),
                       run_config=tune.RunConfig(storage_path=storage, name="x", verbose=0, mlflow=False),
                       executor=VirtualTimeExecutor(num_slots=2))
    results = tuner.fit()
    path = results.experiment_path
    trial_dir = results[0].path
    # pretend the tuner died after epoch 3's checkpoint but before the trial ended:
    jpath = os.path.join(path, "journal.jsonl")
    with open(jpath) as f:
        lines = f.read().splitlines()
    cut = max(i for i, line in enumerate(lines) if '"trial_end"' in line)
    with open(jpath, "w") as f:
        f.write("\n".join(lines[:cut]) + "\n" + '{"event": "trial_end", "tri')  # torn last line
    # and the newest checkpoint vanished from disk
    import shutil

    newest = sorted(p for p in os.listdir(trial_dir) if p.startswith("checkpoint_"))[-1]
    shutil.rmtree(os.path.join(trial_dir, newest))
    restored = tune.Tuner.restore(path, F.steady, executor=VirtualTimeExecutor(num_slots=2))
    final = restored.fit()
    r = final[0]
    assert r.status == "TERMINATED"
    assert list(r.metrics_dataframe["epoch"]) == [1, 2, 3]  # epoch 3 redone from checkpoint 2, not doubled
    events = read_journal(jpath)
    assert any(e["event"] == "superseded" for e in events)


def test_result_journaled_with_its_checkpoint_survives_a_crash_before_its_result_line(tmp_path):
    import ft_trainables as F

    storage = str(tmp_path / "res")
    results = tune.Tuner(F.steady, param_space={"epochs": 3}, tune_config=tune.TuneConfig(metric="loss", mode="min"),
                         run_config=tune.RunConfig(storage_path=storage, name="y", verbose=0, mlflow=False),
                         executor=VirtualTimeExecutor(num_slots=2)).fit()
    jpath = os.path.join(results.experiment_path, "journal.jsonl")
    with open(jpath) as f:
        lines = f.read().splitlines()
    # the tuner died right after committing (and journaling) checkpoint 3, before the result line of that report
    last_ckpt = max(i for i, line in enumerate(lines) if '"event": "checkpoint"' in line)
    with open(jpath, "w") as f:
        f.write("\n".join(lines[: last_ckpt + 1]) + "\n")
    final = tune.Tuner.restore(results.experiment_path, F.steady, executor=VirtualTimeExecutor(num_slots=2)).fit()
    assert final[0].status == "TERMINATED"
    assert list(final[0].metrics_dataframe["epoch"]) == [1, 2, 3]
    assert not any(e["event"] == "superseded" for e in read_journal(jpath))
