"""Chained trials: a single-rank runner runs the experiment's next trial in the same Dask task (Ray's reuse_actors).

Every test runs trials one at a time (max_concurrent_trials=1) on the session's real 2-worker LocalCluster, so
consecutive trials chain on one runner; each trial reports the Dask task it ran in (``thread_state.key``).
"""

from __future__ import annotations

import os

import chain_trainables as C
import pytest

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.execution._cluster import scheduler_workers
from tuneplat.schedulers import Decision, FIFOScheduler, Resume


def _tuner(client, storage, fn, space, max_failures=0, scheduler=None, stop=None, concurrent=1):
    return tune.Tuner(
        fn, param_space=space,
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=concurrent, scheduler=scheduler),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, mlflow=False, stop=stop,
                                  failure_config=tune.FailureConfig(max_failures=max_failures)),
        client=client,
    )


def _rows(result):
    return result.metrics_dataframe.to_dict("records")


def _events(results, kind=None):
    events = read_journal(os.path.join(results.experiment_path, "journal.jsonl"))
    return [e for e in events if kind is None or e["event"] == kind]


def _assert_workers_free(client):
    """Every worker's only thread takes a new task at once: no runner is left waiting for a trial."""
    futures = [client.submit(os.getpid, workers=[w], allow_other_workers=False, pure=False)
               for w in scheduler_workers(client)]
    assert len({f.result(timeout=20) for f in futures}) == len(futures)


def test_trial_after_an_error_runs_in_the_same_task_with_clean_env_and_session(dask_client, storage):
    results = _tuner(dask_client, storage, C.fail_or_report, {"fail": tune.grid_search([True, False, True, False])}).fit()
    assert sorted(r.status for r in results) == ["ERROR", "ERROR", "TERMINATED", "TERMINATED"]
    rows = {r.trial_id: _rows(r)[0] for r in results}
    # one Dask task (the first trial's), one process, for all four trials, errors included
    assert len({row["task"] for row in rows.values()}) == 1
    assert len({row["worker_pid"] for row in rows.values()}) == 1
    for trial_id, row in rows.items():
        assert row["ctx_trial_id"] == trial_id  # the session is the trial's own
        assert row["attempt"] == 0 and not row["had_checkpoint"]
        # the runner's variables are the trial's; what the failed trial set is gone
        assert (row["env_rank"], row["env_world_size"]) == ("0", "1")
        # (each torch rank gets MASTER_ADDR/MASTER_PORT, single ranks too, for libraries that make their own
        # 1-rank group: the worker's address, never what the failed trial left)
        assert row["env_master_addr"] == "127.0.0.1"
    errors = [r for r in results if r.status == "ERROR"]
    assert all("planned failure" in str(r.error) for r in errors)
    starts = _events(results, "trial_start")
    assert len(starts) == 4 and len({tuple(e["workers"]) for e in starts}) == 1
    _assert_workers_free(dask_client)


def test_retry_chains_with_its_attempt_and_checkpoint(dask_client, storage):
    space = {"epochs": 3, "fail_at": tune.grid_search([2, None])}
    results = _tuner(dask_client, storage, C.checkpointed, space, max_failures=1).fit()
    assert results.num_errors == 0 and results.num_terminated == 2
    by = {r.config["fail_at"]: r for r in results}
    rows = _rows(by[2])
    assert [row["epoch"] for row in rows] == [1, 2, 3]  # epoch 1 from attempt 0, then the retry from its checkpoint
    assert [row["attempt"] for row in rows] == [0, 1, 1]
    assert [row["had_checkpoint"] for row in rows] == [False, True, True]
    tasks = {row["task"] for r in results for row in _rows(r)}
    assert len(tasks) == 1  # the retry and the next trial ran in the same Dask task
    failures = _events(results, "trial_failure")
    assert len(failures) == 1 and failures[0]["retry"] is True


class PauseOnceAtTwo(FIFOScheduler):
    """PAUSEs every trial at its 2nd iteration once, and resumes it at once (as HyperBand or PBT would later)."""

    def __init__(self):
        super().__init__()
        self.paused: set[str] = set()

    def on_trial_result(self, trial_id, result):
        super().on_trial_result(trial_id, result)
        if result["training_iteration"] == 2 and trial_id not in self.paused:
            self.paused.add(trial_id)
            self._actions.append(Resume(trial_id))
            return Decision.PAUSE
        return Decision.CONTINUE


def test_stop_and_pause_decisions_on_chained_trials(dask_client, storage):
    results = _tuner(dask_client, storage, C.checkpointed, {"epochs": 10, "n": tune.grid_search([0, 1, 2])},
                     scheduler=PauseOnceAtTwo(), stop={"training_iteration": 4}).fit()
    assert results.num_terminated == 3 and results.num_errors == 0
    tasks = set()
    for r in results:
        rows = _rows(r)
        assert [row["epoch"] for row in rows] == [1, 2, 3, 4]  # STOP obeyed at 4; nothing repeated after PAUSE
        assert [row["attempt"] for row in rows] == [0, 0, 1, 1]
        assert [row["had_checkpoint"] for row in rows] == [False, False, True, True]
        tasks |= {row["task"] for row in rows}
    assert len(tasks) == 1
    assert len(_events(results, "trial_paused")) == 3
    stops = [e for e in _events(results, "decision") if e["decision"] == "STOP"]
    assert sorted(e["iteration"] for e in stops) == [4, 4, 4]
    _assert_workers_free(dask_client)


@pytest.mark.parametrize("concurrent", [1, 2])
def test_runners_leave_when_the_experiment_ends(dask_client, storage, concurrent):
    results = _tuner(dask_client, storage, C.fail_or_report, {"fail": tune.grid_search([False] * 6)},
                     concurrent=concurrent).fit()
    assert results.num_terminated == 6
    assert len({_rows(r)[0]["task"] for r in results}) == concurrent
    _assert_workers_free(dask_client)


def test_each_chained_trial_gets_a_fresh_copy_of_a_by_value_trainable(dask_client, storage):
    # Each Dask task deserializes its own copy of a trainable pickled by value; a chained trial must too, so
    # what one trial leaves in the closure's state is not seen by the next.
    results = _tuner(dask_client, storage, C.make_closure(), {"i": tune.grid_search([1, 2, 3])}).fit()
    assert results.num_terminated == 3
    assert [_rows(r)[0]["seen"] for r in results] == [1, 1, 1]
    assert len({_rows(r)[0]["task"] for r in results}) == 1


def test_a_chain_yields_its_worker_to_another_tuners_ranks(dask_client, storage):
    """Two Tuners share the cluster: B's ranks, queued by Dask behind A's chained runners, start once the trial
    running there ends (as behind a task of its own), not when A's whole chain of 40 trials ends."""
    import threading

    started = threading.Event()

    class FirstResult(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            started.set()

    grids = {}
    errors = []

    def run_a():
        try:
            grids["a"] = tune.Tuner(
                C.short_sleep, param_space={"i": tune.grid_search(list(range(40)))},
                tune_config=tune.TuneConfig(max_concurrent_trials=2),
                run_config=tune.RunConfig(storage_path=storage, name="a", verbose=0, mlflow=False,
                                          callbacks=[FirstResult()]),
                client=dask_client).fit()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            started.set()

    thread = threading.Thread(target=run_a)
    thread.start()
    assert started.wait(120)
    b = tune.Tuner(C.fail_or_report, param_space={"fail": tune.grid_search([False, False])},
                   tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=2),
                   run_config=tune.RunConfig(storage_path=storage, name="b", verbose=0, mlflow=False),
                   client=dask_client).fit()
    thread.join(240)
    assert not thread.is_alive() and not errors, errors
    assert b.num_terminated == 2 and grids["a"].num_terminated == 40
    b_done = max(r.metrics["timestamp"] for r in b)
    a_later = [r for r in grids["a"] if r.metrics["timestamp"] - r.metrics["time_total_s"] > b_done]
    assert len(a_later) >= 5, len(a_later)  # A went on after B's trials ran
    _assert_workers_free(dask_client)
