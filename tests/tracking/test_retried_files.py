"""A retried trial's files follow the journal's supersede rule (issue 33): each iteration once, after a retry
from a checkpoint, in the journal, ``result.json``, ``progress.csv`` and the TensorBoard events."""

from __future__ import annotations

import csv
import glob
import json
import os

import harden_trainables as H
import pytest

import tuneplat as tune
from tuneplat import read_journal


def _tensorboard_steps(trial_dir: str) -> list[int]:
    """Every ``ray/tune/i`` step in the trial's event files (tensorboardX's own protobuf reads them)."""
    from tensorboardX.proto import event_pb2

    steps = []
    for path in sorted(glob.glob(os.path.join(trial_dir, "events.out.tfevents.*"))):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            n = int.from_bytes(data[pos:pos + 8], "little")
            event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + n])
            steps += [event.step for v in event.summary.value if v.tag == "ray/tune/i"]
            pos += 16 + n
    return steps


@pytest.mark.timeout(600)
def test_a_retried_two_rank_trials_files_hold_each_iteration_once(dask_client, tmp_path):
    n = 8
    results = tune.Tuner(
        H.fails_once_after_checkpoint, param_space={"n": n, "every": 3, "fail_at": 5},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        scaling_config=tune.ScalingConfig(num_workers=2),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, mlflow=False,
                                  failure_config=tune.FailureConfig(max_failures=1)),
        client=dask_client,
    ).fit()
    (r,) = list(results)
    assert r.error is None, r.error
    events = read_journal(os.path.join(results.experiment_path, "journal.jsonl"))
    starts = [e for e in events if e["event"] == "trial_start"]
    assert [e["start_iteration"] for e in starts] == [0, 3]  # really retried, from the checkpoint of iteration 3
    once = list(range(1, n + 1))
    assert r.metrics_dataframe["i"].tolist() == once  # the journal's view
    with open(os.path.join(r.path, "result.json")) as f:
        assert [json.loads(line)["i"] for line in f] == once  # before: 1..5, 4..8
    with open(os.path.join(r.path, "progress.csv"), newline="") as f:
        assert [int(row["i"]) for row in csv.DictReader(f)] == once
    if _files_tensorboard():
        assert _tensorboard_steps(r.path) == once


def _files_tensorboard() -> bool:
    from tuneplat.tracking import _files

    return _files.tensorboard_available()
