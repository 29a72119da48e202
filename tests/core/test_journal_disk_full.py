"""A full disk under the experiment folder (issue 33): the journal rides out a transient ENOSPC and, past
``TUNEPLAT_JOURNAL_FULL_S``, ends the experiment cleanly: the error names ENOSPC and the journal's path, the
embedded cluster is closed, the journal stays readable and ``Tuner.restore`` continues.

The disk is a small tmpfs each test mounts (root only) and unmounts; a filler file takes all its space.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import subprocess

import harden_trainables as H
import psutil
import pytest

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.core._callbacks import ControllerCallback
from tuneplat.core._journal import Journal

_KEPT = ("resource_tracker", "_mlflow import _child_main", "tracking/_writer_proc.py")  # kept for the next fit


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk) -> str:
    """Take every free byte of ``disk`` with a filler file; its path."""
    path = os.path.join(disk, "filler")
    with open(path, "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)
    return path


def test_the_journal_rides_out_a_transient_full_disk_and_tells_once(small_disk, caplog):
    journal = Journal(os.path.join(small_disk, "journal.jsonl"))
    journal.append({"event": "result", "trial_id": "t", "result": {"message": "before"}})
    assert journal.sync(force=True)
    filler = fill(small_disk)
    with caplog.at_level(logging.WARNING, logger="tuneplat"):
        for i in range(200):  # ~40 KB: cannot be written now
            journal.append({"event": "result", "trial_id": "t", "result": {"message": f"while full {i} " + "x" * 200}})
        assert journal.sync(force=True) is False  # (before: a raw OSError out of the sync)
        assert journal.sync(force=True) is False
        os.remove(filler)
        assert journal.sync(force=True)
        journal.close()
    told = [r for r in caplog.records if "no space left" in r.getMessage()]
    assert len(told) == 1 and "journal.jsonl" in told[0].getMessage()
    events = read_journal(os.path.join(small_disk, "journal.jsonl"))
    assert [e["result"]["message"].split(" x")[0] for e in events] == ["before"] + [f"while full {i}" for i in range(200)]


class _FillAt(ControllerCallback):
    """Fills the disk when the trial reports iteration ``at``; frees it once the journal said so (``free``)."""

    filled: set[str] = set()

    def __init__(self, disk, at: int, free: bool) -> None:
        self.disk, self.at, self.free = disk, at, free
        self.filler: str | None = None
        self.told = False

    def on_trial_result(self, ctrl, trial, result):
        if result["i"] == self.at and str(self.disk) not in _FillAt.filled:  # once (a restore unpickles a copy)
            _FillAt.filled.add(str(self.disk))
            self.filler = fill(self.disk)
        if self.filler and not self.told:
            # a sync now meets the full disk once the journal's last page is used up (before: the OSError ended
            # the experiment)
            self.told = ctrl.sync_journal() is False
        elif self.free and self.filler and self.told:
            os.remove(self.filler)
            self.filler = None


@pytest.mark.timeout(600)
def test_a_transient_full_disk_during_a_sweep_changes_no_result(small_disk, dask_client, caplog):
    cb = _FillAt(small_disk, at=2, free=True)
    with caplog.at_level(logging.WARNING, logger="tuneplat"):
        results = tune.Tuner(
            H.counts, param_space={"x": 0.0, "n": 300},
            tune_config=tune.TuneConfig(metric="loss", mode="min"),
            run_config=tune.RunConfig(storage_path=str(small_disk), name="full", verbose=0, mlflow=False,
                                      callbacks=[cb]),
            client=dask_client,
        ).fit()
    assert cb.told and cb.filler is None  # the disk was full, the journal could not write, then space came back
    told = [r for r in caplog.records if "no space left on the device of the journal" in r.getMessage()]
    assert len(told) == 1  # said once
    (r,) = list(results)
    assert r.error is None and r.metrics_dataframe["i"].tolist() == list(range(1, 301))
    events = read_journal(os.path.join(results.experiment_path, "journal.jsonl"))
    assert [e["result"]["i"] for e in events if e["event"] == "result"] == list(range(1, 301))


@pytest.mark.timeout(600)
def test_a_disk_that_stays_full_ends_the_experiment_cleanly_and_restore_continues(small_disk, monkeypatch):
    monkeypatch.setenv("TUNEPLAT_JOURNAL_FULL_S", "2")
    cb = _FillAt(small_disk, at=2, free=False)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    tuner = tune.Tuner(
        H.counts, param_space={"x": 0.0, "n": 300},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=str(small_disk), name="full", verbose=0, mlflow=False,
                                  callbacks=[cb]),
    )  # the embedded cluster: it must be closed when fit() raises
    journal = os.path.join(small_disk, "full", "journal.jsonl")
    with pytest.raises(tune.TuneError) as info:
        tuner.fit()
    message = str(info.value)
    assert "ENOSPC" in message and journal in message and "Tuner.restore" in message, message
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC
    left = {}
    for p in psutil.Process().children(recursive=True):
        if p.pid in before:
            continue
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if not any(kept in cmd for kept in _KEPT):
            left[p.pid] = cmd[:200]
    assert not left, f"processes outlived fit(): {left}"
    events = read_journal(journal)  # readable: whole lines only
    assert events and events[0]["event"] == "experiment"
    os.remove(cb.filler)
    results = tune.Tuner.restore(os.path.join(small_disk, "full"), H.counts).fit()
    (r,) = list(results)
    assert r.error is None and r.metrics_dataframe["i"].tolist() == list(range(1, 301))
