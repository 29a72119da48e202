"""Trial retries from checkpoints: rank kills, worker kills, poison trials, hangs (chaos tests)."""

from __future__ import annotations

import os

import ft_trainables as F
import pytest

import tuneplat as tune
from tuneplat import read_journal
from tuneplat.testing import VirtualTimeExecutor


def _tuner(client, storage, fn, space, max_failures, **kw):
    return tune.Tuner(
        fn, param_space=space,
        tune_config=tune.TuneConfig(metric="loss", mode="min", **kw.pop("tc", {})),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, mlflow=False,
                                  failure_config=tune.FailureConfig(max_failures=max_failures), **kw.pop("rc", {})),
        client=client, **kw,
    )


def _epochs(result):
    return list(result.metrics_dataframe["epoch"])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_kill_one_rank_of_a_two_rank_group_ten_times(dask_client, storage):
    seeds = list(range(10))
    print("seeds for the kill epochs/ranks:", seeds)
    epochs = 4
    results = _tuner(dask_client, storage, F.kill_one_rank_once, {"seed": tune.grid_search(seeds), "epochs": epochs},
                     max_failures=2, scaling_config=tune.ScalingConfig(num_workers=2)).fit()
    assert results.num_errors == 0, [str(e) for e in results.errors]
    assert len(results) == 10
    events = read_journal(os.path.join(results.experiment_path, "journal.jsonl"))
    for r in results:
        assert _epochs(r) == list(range(1, epochs + 1))  # each epoch exactly once
        assert set(r.metrics_dataframe["world"]) == {2.0}  # a real 2-rank all_reduce every epoch
        failures = [e for e in events if e["event"] == "trial_failure" and e["trial_id"] == r.trial_id]
        assert len(failures) == 1 and failures[0]["retry"] is True
        # at most one epoch of work is repeated per kill: everything reported was checkpointed,
        # so nothing was superseded
        superseded = [e for e in events if e["event"] == "superseded" and e["trial_id"] == r.trial_id]
        assert sum(e["count"] for e in superseded) <= 1


@pytest.mark.slow
def test_worker_sigkill_mid_trial_is_retried_and_poison_ends_error(dask_client, storage):
    results = _tuner(dask_client, storage, F.kill_worker_once, {"epochs": 4}, max_failures=1).fit()
    r = results[0]
    assert r.status == "TERMINATED" and _epochs(r) == [1, 2, 3, 4]
    results = _tuner(dask_client, storage, F.poison, {}, max_failures=2).fit()
    events = read_journal(os.path.join(results.experiment_path, "journal.jsonl"))
    starts = [e for e in events if e["event"] == "trial_start"]
    assert results[0].status == "ERROR" and len(starts) == 3  # exactly max_failures + 1 attempts
    assert "lost its connection" in str(results[0].error)
    # the cluster is whole again and the next experiment runs normally
    ok = _tuner(dask_client, storage, F.steady, {"epochs": tune.grid_search([2, 3])}, max_failures=0).fit()
    assert ok.num_terminated == 2


@pytest.mark.slow
def test_poison_trial_does_not_stop_the_others(dask_client, storage):
    results = _tuner(dask_client, storage, F.poison_or_steady, {"poison": tune.grid_search([True, False, False])},
                     max_failures=1).fit()
    by = {r.config["poison"]: r for r in results}
    assert by[True].status == "ERROR"
    assert sorted(r.status for r in results) == ["ERROR", "TERMINATED", "TERMINATED"]


@pytest.mark.slow
def test_hung_rank_is_detected_by_heartbeat_and_retried(dask_client, storage, monkeypatch):
    monkeypatch.setenv("TUNEPLAT_HEARTBEAT_TIMEOUT_S", "3")
    results = _tuner(dask_client, storage, F.hangs_once, {"epochs": 3}, max_failures=1).fit()
    r = results[0]
    assert r.status == "TERMINATED", r.error
    assert _epochs(r) == [1, 2, 3]
    events = read_journal(os.path.join(results.experiment_path, "journal.jsonl"))
    assert any(e["event"] == "rank_failure" and "sent nothing" in e["message"] for e in events)


def test_fail_fast_ends_the_experiment_and_it_stays_restorable(storage):
    tuner = tune.Tuner(
        F.fail_or_steady, param_space={"fail": tune.grid_search([True, False, False, False])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=storage, name="ff", verbose=0, mlflow=False,
                                  failure_config=tune.FailureConfig(fail_fast=True)),
        executor=VirtualTimeExecutor(num_slots=2),
    )
    results = tuner.fit()
    assert results.num_errors == 1
    assert len(results) < 4  # it stopped starting trials
    path = results.experiment_path
    assert tune.Tuner.can_restore(path)
    restored = tune.Tuner.restore(path, F.fail_or_steady, executor=VirtualTimeExecutor(num_slots=2),
                                  run_config=tune.RunConfig(storage_path=storage, name="ff", verbose=0, mlflow=False))
    final = restored.fit()
    assert len(final) == 4 and final.num_errors == 1 and final.num_terminated == 3


@pytest.mark.slow
def test_a_retry_after_os_exit_is_never_placed_on_the_dead_worker(dask_client, storage, tmp_path):
    """os._exit in a trainable: the scheduler may list the dead worker a moment longer; the retry goes elsewhere
    (before, it was sometimes pinned to the dead worker and failed 90 s later as "did not start")."""
    dirs = []
    for i in range(4):
        d = tmp_path / f"m{i}"
        d.mkdir()
        dirs.append(str(d))
    results = _tuner(dask_client, storage, F.exits_once, {"marker_dir": tune.grid_search(dirs)}, max_failures=1,
                     tc={"max_concurrent_trials": 1}).fit()
    assert results.num_terminated == 4 and results.num_errors == 0
    events = read_journal(os.path.join(results.experiment_path, "journal.jsonl"))
    for r in results:
        starts = [e["workers"] for e in events if e["event"] == "trial_start" and e["trial_id"] == r.trial_id]
        assert len(starts) == 2 and starts[1] != starts[0], (r.trial_id, starts)


@pytest.mark.slow
def test_a_rank_placed_on_a_worker_that_just_left_is_placed_again(dask_client, storage, monkeypatch):
    """The scheduler can list a worker a moment after its process died (its removal not yet processed): a tuner
    that reads the list then places a rank there, whose task then waits for a worker that never comes. The tuner
    reads the cluster again while ranks start: the rank is placed again, not failed after TUNEPLAT_START_TIMEOUT_S
    (before: "rank(s) [0] did not start within 90s", seen when an experiment followed one whose hung rank's worker
    it had just killed). The race is made certain by handing the tuner the list as the scheduler gave it just
    before the kill."""
    import psutil
    from cluster_fixtures import worker_removal

    from tuneplat.execution._cluster import Cluster, scheduler_workers

    stale = scheduler_workers(dask_client)
    assert len(stale) == 3
    victim = sorted(stale)[0]
    process = psutil.Process(dask_client.run(os.getpid, workers=[victim])[victim])
    # the scheduler has removed the dead worker before the tuner starts, so that only the stale list below names it
    # and the retry cannot be placed there again
    with worker_removal(dask_client, victim) as removed:
        process.kill()
        process.wait(timeout=60)
        removed(60)
    assert victim not in scheduler_workers(dask_client)
    real, calls = Cluster.workers, []

    def first_read_is_stale(self):
        calls.append(1)
        return dict(stale) if len(calls) == 1 else real(self)

    monkeypatch.setattr(Cluster, "workers", first_read_is_stale)
    monkeypatch.setenv("TUNEPLAT_START_TIMEOUT_S", "60")  # (without the re-read the trial fails after this)
    results = _tuner(dask_client, storage, F.steady, {"epochs": 2}, max_failures=0,
                     scaling_config=tune.ScalingConfig(num_workers=3)).fit()
    assert results.num_errors == 0, str(results[0].error)
    events = read_journal(os.path.join(results.experiment_path, "journal.jsonl"))
    starts = [e["workers"] for e in events if e["event"] == "trial_start"]
    assert victim in starts[0] and victim not in starts[-1] and len(starts) == 2, starts
    assert _epochs(results[0]) == [1, 2]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_worker_at_a_fixed_port_is_placed_on_again_once_its_nanny_restarted_it(tmp_path, monkeypatch):
    """Deployments often pin the worker port (containers, firewalls): the nanny's new process after a crash has
    the dead one's address. The tuner quarantined that address for the dead process; the new process must end the
    quarantine (before: the scheduler's worker info carries no pid, so it never ended, and the retry waited for a
    worker forever on a one-worker cluster)."""
    from cluster_fixtures import NoNannyCluster

    from tuneplat.execution._cluster import Cluster, scheduler_workers

    monkeypatch.setenv("TUNEPLAT_START_TIMEOUT_S", "60")
    cluster = NoNannyCluster(tmp_path, [os.path.dirname(os.path.abspath(__file__))])
    try:
        port = _free_port()
        cluster.add_worker(nanny=True, worker_port=port)
        cluster.client.wait_for_workers(1, timeout=120)
        address = next(iter(scheduler_workers(cluster.client)))
        assert address.endswith(f":{port}")
        # the tuner must not rely on seeing the address leave the cluster between the old process and the new one
        # (a quick restart, or a tuner reading the cluster only now and then, never sees it gone): while the
        # scheduler lists no worker, the tuner is handed the last listing that had one
        real, last = Cluster.workers, {}

        def never_gone(self):
            got = real(self)
            if address in got:
                last.clear()
                last.update(got)
                return got
            return dict(last)

        monkeypatch.setattr(Cluster, "workers", never_gone)
        results = _tuner(cluster.client, str(tmp_path / "results"), F.kill_worker_once, {"epochs": 3},
                         max_failures=1).fit()
        assert results.num_errors == 0, str(results[0].error)
        events = read_journal(os.path.join(results.experiment_path, "journal.jsonl"))
        starts = [e["workers"] for e in events if e["event"] == "trial_start"]
        assert len(starts) == 2 and all(address in s for s in starts), starts
        assert _epochs(results[0])[-1] == 3
    finally:
        cluster.close()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["abort", "stop"])
def test_a_rank_process_tuneplat_ends_takes_its_torch_build_lock_along(dask_client, storage, tmp_path, monkeypatch,
                                                                        how):
    """A process ended while it holds torch's extension build lock leaves the file, and every later load of that
    extension on the host waits for it forever (train/_lock_wait.py). When tuneplat ends a rank's process itself, the
    lock goes with it: "abort", a rank that does not unwind within TUNEPLAT_ABORT_GRACE_S of its group's failure
    (the rank's own exit); "stop", a hung rank (SIGSTOP) whose worker the tuner kills after the heartbeat timeout."""
    monkeypatch.setenv("TUNEPLAT_ABORT_GRACE_S", "2")
    monkeypatch.setenv("TUNEPLAT_HEARTBEAT_TIMEOUT_S", "3")
    root = str(tmp_path / "torch_extensions")
    lock = os.path.join(root, "op", "lock")
    scaling = tune.ScalingConfig(num_workers=2 if how == "abort" else 1)
    results = _tuner(dask_client, storage, F.holds_a_build_lock_then_hangs, {"root": root, "how": how},
                     max_failures=0, scaling_config=scaling).fit()
    error = str(results[0].error)
    assert ("rank 1 fails while rank 0 holds a build lock" if how == "abort" else "sent nothing") in error, error
    import psutil

    with open(os.path.join(root, "rank0.pid"), encoding="utf-8") as f:
        pid = int(f.read())
    try:  # the process may end after fit() returns (a rank deaf to its abort ends itself): its end, then the lock
        psutil.Process(pid).wait(timeout=60)
    except psutil.NoSuchProcess:
        pass
    assert not os.path.exists(lock), "the ended rank's build lock was left behind"
    assert os.path.isdir(os.path.dirname(lock))  # (only the lock: the build folder stays)
