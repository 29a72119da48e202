"""The framework seam (train/_backend.py): a non-torch backend's ranks share the rendezvous, join no torch group."""

from __future__ import annotations

import json
import os

import backend_trainables as bt
import pytest

import tuneplat as tune
from tuneplat.train import DataParallelTrainer, TrainingFailedError
from tuneplat.train.backend import Backend, BackendConfig, get_rank_group


def _events(log_dir: str) -> list[dict]:
    with open(os.path.join(log_dir, "events.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _trainer(tmp_path, name: str, **loop_config) -> DataParallelTrainer:
    log_dir = str(tmp_path / "log")
    os.makedirs(log_dir, exist_ok=True)
    return DataParallelTrainer(
        bt.loop, train_loop_config={"log_dir": log_dir, **loop_config},
        backend_config=bt.AddressesConfig(log_dir), scaling_config=tune.ScalingConfig(num_workers=2),
        run_config=tune.RunConfig(name=name, storage_path=str(tmp_path / "results"), verbose=0, mlflow=False,
                                  failure_config=tune.FailureConfig(max_failures=1)))


def test_two_ranks_gather_addresses_without_a_torch_group(dask_client, tmp_path):
    trainer = _trainer(tmp_path, "addresses")
    trainer.client = dask_client
    result = trainer.fit()
    assert result.metrics["done"] == 1
    events = _events(str(tmp_path / "log"))
    starts = sorted((e for e in events if e["hook"] == "start"), key=lambda e: e["rank"])
    assert [e["rank"] for e in starts] == [0, 1]
    own = [e["own"] for e in starts]
    assert own[0] != own[1]  # each rank's own free port (the two workers share 127.0.0.1)
    for e in starts:
        assert e["peers"] == own, "all_gather must give every rank every rank's address, in rank order"
        assert e["token"] == "from-rank-0"  # broadcast from rank 0
    loops = sorted((e for e in events if e["hook"] == "loop"), key=lambda e: e["rank"])
    assert [e["peers"] for e in loops] == [own, own]  # on_start ran in the rank before the user's function
    assert [e["torch_group"] for e in loops] == [False, False]  # no gloo group was joined
    assert [e["store"] for e in loops] == [False, False]  # no TCPStore either: the exchanges went through the tuner
    assert [e["gathered_in_loop"] for e in loops] == [[0, 10], [0, 10]]
    assert [e["world"] for e in loops] == [2, 2]
    shutdowns = [e for e in events if e["hook"] == "shutdown"]
    assert sorted(e["rank"] for e in shutdowns) == [0, 1] and not any(e["failed"] for e in shutdowns)
    assert events.index(shutdowns[0]) > max(events.index(e) for e in loops if e["rank"] == shutdowns[0]["rank"])


def test_hooks_run_on_every_attempt(dask_client, tmp_path):
    trainer = _trainer(tmp_path, "retry", fail_first=True)
    trainer.client = dask_client
    result = trainer.fit()
    assert result.metrics["done"] == 1
    events = _events(str(tmp_path / "log"))
    by_attempt: dict[int, list[str]] = {}
    for e in events:
        by_attempt.setdefault(e["attempt"], []).append(e["hook"])
    assert sorted(by_attempt) == [0, 1]
    for attempt, hooks in by_attempt.items():
        assert sorted(hooks) == ["loop", "loop", "shutdown", "shutdown", "start", "start"], (attempt, hooks)
    failed = {(e["attempt"], e["rank"]): e["failed"] for e in events if e["hook"] == "shutdown"}
    assert failed[(0, 1)] is True and failed[(1, 0)] is False and failed[(1, 1)] is False


def test_a_rank_that_returns_without_joining_an_exchange_fails_the_group_at_once(dask_client, tmp_path):
    # rank 0 waits in all_gather; rank 1 returned: the tuner sees rank 1 end while the exchange misses it and fails
    # the group then (not when rank 0's wait times out: 600 s here, longer than the test's own timeout)
    config = bt.AddressesConfig(str(tmp_path))
    config.timeout_s = 600
    trainer = DataParallelTrainer(bt.only_rank0_gathers, backend_config=config,
                                  scaling_config=tune.ScalingConfig(num_workers=2),
                                  run_config=tune.RunConfig(name="stranded", storage_path=str(tmp_path / "results"),
                                                            verbose=0, mlflow=False), client=dask_client)
    with pytest.raises(TrainingFailedError) as err:
        trainer.fit()
    message = str(err.value)
    assert "rank 1 returned from the training function without joining the group's exchange" in message, message
    assert "rank(s) [0] wait in" in message


def test_backend_config_is_checked_and_outside_a_rank_there_is_no_group():
    assert get_rank_group() is None
    assert BackendConfig().backend_cls is Backend and BackendConfig().framework is None
    with pytest.raises(TypeError, match="backend_config must be a tuneplat.train.backend.BackendConfig"):
        DataParallelTrainer(bt.loop, backend_config={"timeout_s": 5})


@pytest.mark.parametrize("fresh,world", [(True, 2), (False, 2), (True, 1)],
                         ids=["fresh_processes", "reused_processes", "fresh_single_rank"])
def test_a_backend_that_does_not_reuse_worker_processes_gets_new_ones_for_each_group(dask_client, tmp_path, fresh,
                                                                                    world):
    """Backend.reuses_worker_process=False (TensorFlow's): after a group ends, the nannies restart its workers before
    anything else is placed there; the next trial's ranks run in new processes, and once fit() returns the cluster
    has its workers back, all new. A backend that reuses them (the default) runs both trials in the same ones. A
    single rank's runner, which would wait for another trial, is told to leave at once."""
    log_dir = str(tmp_path / "log")
    os.makedirs(log_dir)
    config = bt.FreshProcessConfig() if fresh else bt.AddressesConfig(log_dir)
    trainer = DataParallelTrainer(bt.pid_loop, backend_config=config,
                                  scaling_config=tune.ScalingConfig(num_workers=world))
    grid = tune.Tuner(trainer, param_space={"train_loop_config": {"log_dir": log_dir,
                                                                  "trial": tune.grid_search([0, 1])}},
                      tune_config=tune.TuneConfig(max_concurrent_trials=1),
                      run_config=tune.RunConfig(name="fresh", storage_path=str(tmp_path / "results"), verbose=0,
                                                mlflow=False), client=dask_client).fit()
    assert not grid.errors, grid.errors
    pids: dict[int, set[int]] = {0: set(), 1: set()}
    for e in _events(log_dir):
        if e["hook"] == "pid":
            pids[e["trial"]].add(e["pid"])
    assert len(pids[0]) == world and len(pids[1]) == world, pids  # each trial's ranks, each in its worker process
    now = set(dask_client.run(os.getpid).values())  # the worker processes there are now
    if fresh:
        assert not pids[0] & pids[1], pids
        assert len(now) == 2 and not now & (pids[0] | pids[1]), (now, pids)
    else:
        assert pids[0] == pids[1] == now, (pids, now)


def test_workers_without_a_nanny_are_reused_with_a_warning(tmp_path, caplog):
    """`dask worker --no-nanny`: nothing would start a worker again, and the scheduler's restart would only end it.
    A backend asking for new processes then runs in the same ones, says so once, and loses no worker."""
    from cluster_fixtures import NoNannyCluster

    cluster = NoNannyCluster(tmp_path, [os.path.dirname(os.path.abspath(__file__))])
    try:
        cluster.start(2)
        log_dir = str(tmp_path / "log")
        os.makedirs(log_dir)
        trainer = DataParallelTrainer(bt.pid_loop, backend_config=bt.FreshProcessConfig(),
                                      scaling_config=tune.ScalingConfig(num_workers=2))
        with caplog.at_level("WARNING", logger="tuneplat"):
            grid = tune.Tuner(trainer, param_space={"train_loop_config": {"log_dir": log_dir,
                                                                          "trial": tune.grid_search([0, 1])}},
                              tune_config=tune.TuneConfig(max_concurrent_trials=1),
                              run_config=tune.RunConfig(name="nonanny", storage_path=str(tmp_path / "results"),
                                                        verbose=0, mlflow=False), client=cluster.client).fit()
        assert not grid.errors, grid.errors
        pids: dict[int, set[int]] = {0: set(), 1: set()}
        for e in _events(log_dir):
            if e["hook"] == "pid":
                pids[e["trial"]].add(e["pid"])
        assert pids[0] == pids[1] == {p.pid for p in cluster.procs}, pids  # the same two processes, both alive
        assert all(p.poll() is None for p in cluster.procs)
        said = [r.getMessage() for r in caplog.records if "has no nanny" in r.getMessage()]
        assert len(said) == 1 and "not restarted" in said[0], said
    finally:
        cluster.close()
