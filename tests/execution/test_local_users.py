"""Another local user against a running sweep (issue 33): they cannot make trials fail, vanish or end silently.

The attacker is a fork of the test process running as uid 65534 (``nobody``): it reads the tuner's local socket
name from ``/proc/net/unix`` as anyone can, and holds ~300 connections with half-sent handshakes to it and to the
tuner's TCP port on 127.0.0.1, reopening each one the tuner closes, for the whole sweep (bounded in time and count).
"""

from __future__ import annotations

import socket

import harden_trainables as H
import other_user
import pytest

import tuneplat as tune


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ended_silently(results) -> list[str]:
    """Trials that ended TERMINATED with neither a result nor a recorded reason."""
    return [r.trial_id for r in results if r.error is None and not r.metrics.get("training_iteration")
            and not r.stop_reason]


@pytest.mark.timeout(600)
def test_another_users_handshake_flood_changes_no_result(dask_client, tmp_path):
    reason = other_user.why_not()
    if reason:
        pytest.skip(reason)
    port = _free_port()
    n, xs = 5, [0.0, 1.0, 2.0, 3.0]
    with other_user.as_nobody(other_user.hold_half_handshakes, port, 300, 300.0) as attacker:
        results = tune.Tuner(
            H.two_rank_counts, param_space={"x": tune.grid_search(xs), "n": n},
            tune_config=tune.TuneConfig(metric="loss", mode="min"),
            scaling_config=tune.ScalingConfig(num_workers=2),
            run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, mlflow=False, tuner_port=port),
            client=dask_client,
        ).fit()
        flood = attacker.finish()
    print("flood:", flood)
    assert flood and "error" not in flood, flood
    assert flood["opened"] >= 300, flood  # the flood really ran through the sweep
    assert flood["answered"] == 0, flood  # nobody unauthenticated was told anything
    assert results.num_errors == 0, [str(e) for e in results.errors]
    assert _ended_silently(results) == []
    assert sorted(r.config["x"] for r in results) == xs
    for r in results:
        assert r.metrics_dataframe["i"].tolist() == list(range(1, n + 1))  # every iteration, once
        assert set(r.metrics_dataframe["world"]) == {2.0}


@pytest.mark.timeout(600)
def test_a_rank_that_never_authenticates_is_a_failure_with_its_cause_and_retried(dask_client, tmp_path, monkeypatch):
    """Every connection of the tuner is lost before it authenticates (its deadline is 0 s): the rank tries again
    with backoff, then fails naming why; the trial is retried as a failure and ends ERROR with that cause, never
    TERMINATED without a result (before: the rank returned 'not started' and the trial ended TERMINATED)."""
    from tuneplat import read_journal

    monkeypatch.setenv("TUNEPLAT_AUTH_TIMEOUT_S", "0")
    monkeypatch.setenv("TUNEPLAT_START_TIMEOUT_S", "12")  # the rank tries for 3/4 of it
    results = tune.Tuner(
        H.counts, param_space={"x": 0.0, "n": 3},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, mlflow=False,
                                  failure_config=tune.FailureConfig(max_failures=1)),
        client=dask_client,
    ).fit()
    assert _ended_silently(results) == []
    (r,) = list(results)
    assert r.error is not None and "could not authenticate with the tuner" in str(r.error), r.error
    events = read_journal(f"{results.experiment_path}/journal.jsonl")
    assert len([e for e in events if e["event"] == "trial_start"]) == 2  # retried once, as a failure
    failures = [e for e in events if e["event"] == "trial_failure"]
    assert [f["retry"] for f in failures] == [True, False]


def test_a_trial_that_reports_nothing_ends_with_a_recorded_reason(dask_client, tmp_path):
    results = tune.Tuner(
        H.returns_at_once, param_space={},
        tune_config=tune.TuneConfig(metric="loss", mode="min"),
        run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0, mlflow=False),
        client=dask_client,
    ).fit()
    (r,) = list(results)
    assert r.error is None and not r.metrics.get("training_iteration")
    assert r.stop_reason and "reported no result" in r.stop_reason, r.stop_reason  # (before: None)
    assert _ended_silently(results) == []
