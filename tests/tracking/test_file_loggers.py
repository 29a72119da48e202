"""Ray's per-trial files (progress.csv, TensorBoard events): complete when fit() returns, one writer process kept."""

from __future__ import annotations

import csv
import glob
import os

import psutil
import pytest

import tuneplat as tune
from tuneplat.testing import VirtualTimeExecutor
from tuneplat.tracking import _files


def burst(config):
    for i in range(config["n"]):  # reports as fast as the loop answers: a burst the writer gets in batches
        tune.report({"loss": config["x"] + i, "nested": {"v": i}})


def _fit(storage, name, n=300):
    return tune.Tuner(burst, param_space={"x": tune.grid_search([0.0, 1000.0]), "n": n},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(storage_path=storage, name=name, verbose=0, mlflow=False),
                      executor=VirtualTimeExecutor(num_slots=2)).fit()


def _tensorboard_losses(trial_dir):
    from tensorboardX.proto import event_pb2
    from tensorboardX.record_writer import masked_crc32c  # an independent check of the framing

    (path,) = glob.glob(os.path.join(trial_dir, "events.out.tfevents.*"))
    with open(path, "rb") as f:
        data = f.read()
    pos, losses = 0, {}
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 8], "little")
        assert int.from_bytes(data[pos + 8:pos + 12], "little") == masked_crc32c(data[pos:pos + 8])
        payload = data[pos + 12:pos + 12 + n]
        assert int.from_bytes(data[pos + 12 + n:pos + 16 + n], "little") == masked_crc32c(payload)
        event = event_pb2.Event.FromString(payload)
        for value in event.summary.value:
            if value.tag == "ray/tune/loss":
                losses[event.step] = value.simple_value
        pos += 16 + n
    return losses


def _writer_pids():
    pids = set()
    for p in psutil.Process().children():
        try:
            if "_writer_proc.py" in " ".join(p.cmdline()):
                pids.add(p.pid)
        except psutil.Error:  # a child another test left ended (a zombie) has no command line
            pass
    return pids


def _assert_complete(grid, n):
    for r in grid:
        with open(os.path.join(r.path, "progress.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        x = r.config["x"]
        assert [float(row["loss"]) for row in rows] == [x + i for i in range(n)]  # every row, when fit() returns
        assert [int(row["nested/v"]) for row in rows] == list(range(n))
        assert _tensorboard_losses(r.path) == {i + 1: pytest.approx(x + i) for i in range(n)}


def test_files_are_complete_when_fit_returns_and_one_writer_serves_every_fit(storage):
    _assert_complete(_fit(storage, "first"), 300)
    (pid,) = _writer_pids()  # kept for the next experiment of this process
    _assert_complete(_fit(storage, "second"), 300)
    assert _writer_pids() == {pid}


def test_a_writer_that_died_between_fits_is_replaced(storage):
    _fit(storage, "before", n=5)
    for pid in _writer_pids():
        psutil.Process(pid).kill()
        psutil.Process(pid).wait(10)
    _assert_complete(_fit(storage, "after", n=50), 50)
    assert len(_writer_pids()) == 1


def test_a_writer_that_dies_mid_run_costs_the_files_not_the_experiment(storage, caplog):
    class KillWriter(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            if result["training_iteration"] == 3:
                for w in _files._writers.values():
                    w.proc.kill()
                    w.proc.wait()

    grid = tune.Tuner(burst, param_space={"x": 0.0, "n": 2000},
                      tune_config=tune.TuneConfig(metric="loss", mode="min"),
                      run_config=tune.RunConfig(storage_path=storage, name="dies", verbose=0, mlflow=False,
                                                callbacks=[KillWriter()]),
                      executor=VirtualTimeExecutor()).fit()
    assert grid.num_errors == 0 and grid[0].metrics["training_iteration"] == 2000
    assert "writer of progress.csv / TensorBoard files" in caplog.text
    _assert_complete(_fit(storage, "next", n=20), 20)  # and the next experiment gets a new writer
