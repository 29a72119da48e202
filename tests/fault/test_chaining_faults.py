"""Chained trials under chaos: a worker killed or hung while a chained trial runs on it (fresh 3-worker cluster)."""

from __future__ import annotations

import os

import ft_trainables as F
import pytest

import tuneplat as tune
from tuneplat import read_journal


def _fit(client, storage, modes):
    return tune.Tuner(
        F.chained_kill_or_hang, param_space={"epochs": 3, "mode": tune.grid_search(modes)},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, mlflow=False,
                                  failure_config=tune.FailureConfig(max_failures=1)),
        client=client,
    ).fit()


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill", "hang"])
def test_fault_in_a_chained_trial_retries_that_trial_only(dask_client, storage, monkeypatch, fault):
    monkeypatch.setenv("TUNEPLAT_HEARTBEAT_TIMEOUT_S", "3")
    results = _fit(dask_client, storage, ["steady", fault, "steady"])
    assert results.num_errors == 0 and results.num_terminated == 3, [str(e) for e in results.errors]
    events = read_journal(os.path.join(results.experiment_path, "journal.jsonl"))
    order = [e["trial_id"] for e in events if e["event"] == "trial_add"]
    rows = {r.trial_id: r.metrics_dataframe.to_dict("records") for r in results}
    first, faulty, _ = (rows[t] for t in order)
    for r in rows.values():
        assert [row["epoch"] for row in r] == [1, 2, 3]  # each epoch exactly once
    # the faulty trial's first attempt ran chained, in the first trial's Dask task and process
    assert faulty[0]["attempt"] == 0 and faulty[0]["task"] == first[0]["task"]
    assert faulty[0]["worker_pid"] == first[0]["worker_pid"]
    assert [row["attempt"] for row in faulty] == [0, 1, 1]  # retried once, from its checkpoint of epoch 1
    assert faulty[1]["worker_pid"] != first[0]["worker_pid"]  # that process is gone
    failures = [e for e in events if e["event"] == "trial_failure"]
    assert [(e["trial_id"], e["retry"]) for e in failures] == [(order[1], True)]
    if fault == "hang":
        assert any(e["event"] == "rank_failure" and "sent nothing" in e["message"] for e in events)
    # nothing else was lost or repeated: one start per trial, two for the faulty one
    starts = [e["trial_id"] for e in events if e["event"] == "trial_start"]
    assert sorted(starts) == sorted([order[0], order[1], order[1], order[2]])
    assert not [e for e in events if e["event"] in ("superseded", "trial_requeued")]
