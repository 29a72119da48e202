"""Elastic worker groups, ``ScalingConfig(num_workers=(min, max))``, on a real LocalCluster.

The cluster is a ``LocalCluster`` scheduler whose workers are ``dask worker --no-nanny`` processes
started by the test: a killed worker stays dead (as when its host is gone), and the test adds one
to make the group grow. The trainable is full-batch gradient descent on a fixed dataset, sharded
across the ranks by ``prepare_data_loader``: the mean of the ranks' gradients (equal shards) is the
whole batch's gradient, so the parameters after N steps are those of an uninterrupted run at any
world size (up to float64 rounding of the sums), whatever resizes happened in between.
"""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest
from cluster_fixtures import NoNannyCluster

from tuneplat import FailureConfig, MLflowConfig, RunConfig, ScalingConfig
from tuneplat.train import TorchTrainer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 8
LR = 0.05


def _data():
    import torch

    x = torch.arange(48, dtype=torch.float64).reshape(24, 2) / 24.0
    y = x @ torch.tensor([1.5, -2.0], dtype=torch.float64) + 0.25
    return x, y


def reference_weights(steps: int = STEPS) -> list[float]:
    """The parameters after ``steps`` steps of the same descent, in this process, on one rank."""
    import torch

    x, y = _data()
    w = torch.zeros(2, dtype=torch.float64)
    for _ in range(steps):
        w = w - LR * 2 * x.T @ (x @ w - y) / len(x)
    return w.tolist()


def descent(config):
    """Full-batch gradient descent; checkpoints every ``every`` steps and when ``should_checkpoint()``."""
    import tempfile

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset

    from tuneplat.train import (
        Checkpoint,
        get_checkpoint,
        get_context,
        get_preemption_info,
        report,
        should_checkpoint,
    )
    from tuneplat.train.torch import prepare_data_loader

    ctx = get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    x, y = _data()
    loader = prepare_data_loader(DataLoader(TensorDataset(x, y), batch_size=len(x), shuffle=False))
    w = torch.zeros(2, dtype=torch.float64)
    start = 0
    ckpt = get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), weights_only=True)
        w, start = state["w"], int(state["step"])
    for step in range(start, config["steps"]):
        if config.get("until_resized") and world == 1 and step - start >= 3:
            return  # (the preemption test: three steps on the smaller group, then done)
        if config.get("until_grown") and world == 2 and step - start >= 2:
            return  # (the Tuner test: two steps on the larger group, then done)
        (xs, ys), = list(loader)  # one batch: this rank's whole shard
        grad = 2 * xs.T @ (xs @ w - ys) / len(xs)
        before = config.get("before_reduce")
        if before is not None:
            before(step + 1, rank, world, ctx.get_attempt())
        if world > 1:
            dist.all_reduce(grad)
            grad /= world
        w = w - LR * grad
        hook = config.get("hook")
        if hook is not None:
            hook(step + 1, rank, world, ctx.get_attempt())
        asked = should_checkpoint()
        notice = get_preemption_info()  # (Ray Train V2's way to ask the same)
        metrics = {"step": step + 1, "world_size": world, "shard": len(xs), "asked": asked, "pid": os.getpid(),
                   "w0": float(w[0]), "w1": float(w[1]),
                   "preempted_ranks": notice.preempted_ranks if notice is not None else None,
                   "preempted_nodes": [dict(notice.preempted_node_to_ranks), notice.preempted_node_ids]
                   if notice is not None else None}
        if (step + 1) % config["every"] == 0 or asked:
            with tempfile.TemporaryDirectory() as folder:
                torch.save({"w": w, "step": step + 1}, os.path.join(folder, "state.pt"))
                report(metrics, checkpoint=Checkpoint.from_directory(folder))
        else:
            report(metrics)


class Cluster(NoNannyCluster):
    """A LocalCluster scheduler and ``dask worker --no-nanny`` processes the test starts and ends."""

    def __init__(self, tmp_path) -> None:
        super().__init__(tmp_path, [ROOT, HERE])


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


def _journal(path: str) -> list[dict]:
    with open(os.path.join(path, "journal.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _fit(cluster, tmp_path, name, config, num_workers=(1, 2), max_failures=0, mlflow=False):
    trainer = TorchTrainer(descent, train_loop_config=config, scaling_config=ScalingConfig(num_workers=num_workers),
                           client=cluster.client,
                           run_config=RunConfig(storage_path=str(tmp_path / "results"), name=name, mlflow=mlflow,
                                                verbose=0, failure_config=FailureConfig(max_failures=max_failures)))
    return trainer.fit()


def _trial_results(result) -> list[dict]:
    with open(os.path.join(result.path, "result.json"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# ---------------------------------------------------------------------------------------------- a host lost

def kill_rank_1_at_step_5(step, rank, world, attempt):
    if step == 5 and rank == 1 and world == 2:
        os._exit(1)  # the worker has no nanny: it stays dead, as when its host is gone


def test_a_killed_worker_shrinks_the_group_which_goes_on_from_its_checkpoint(tmp_path, cluster, capsys):
    cluster.start(2)
    result = _fit(cluster, tmp_path, "shrink", {"steps": STEPS, "every": 2, "hook": kill_rank_1_at_step_5},
                  max_failures=1)
    assert result.error is None
    assert [result.metrics["w0"], result.metrics["w1"]] == pytest.approx(reference_weights(), rel=1e-12, abs=1e-12)
    rows = _trial_results(result)
    # steps 1-4 on 2 ranks (12 rows each: prepare_data_loader split the data), then from checkpoint 4 on 1 rank
    assert [(r["step"], r["world_size"], r["shard"]) for r in rows] == (
        [(s, 2, 12) for s in range(1, 5)] + [(s, 1, 24) for s in range(5, STEPS + 1)])
    events = _journal(os.path.dirname(result.path))
    resizes = [e for e in events if e["event"] == "resize"]
    assert [(e["from_world_size"], e["to_world_size"], e["iteration"]) for e in resizes] == [(2, 1, 4)]
    assert resizes[0]["message"].startswith("resized from 2 to 1 ranks: ")
    assert "lost its connection" in resizes[0]["message"]
    assert [e["event"] for e in events].count("trial_failure") == 1  # a lost host is a failure (Ray's rule)

    # `tuneplat status` shows the ranks and the resize
    from tuneplat.cli import main

    assert main(["status", os.path.dirname(result.path)]) == 0
    table = capsys.readouterr().out
    assert "ranks" in table and "resized from 2 to 1 ranks" in table
    assert main(["status", os.path.dirname(result.path), "--trial", result.trial_id]) == 0
    detail = capsys.readouterr().out
    assert "ranks        1 (elastic, 1..2)" in detail
    assert "resize       at iteration 4: resized from 2 to 1 ranks: rank 1 on" in detail

    # a restore keeps the bounds (the ScalingConfig is saved with the experiment)
    from tuneplat import Tuner

    assert Tuner.restore(os.path.dirname(result.path), descent).scaling_config.num_workers == (1, 2)


def _stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return False


def stop_rank_1_before_the_reduce_of_step_5(step, rank, world, attempt):
    if step == 5 and rank == 1 and world == 2:
        # a host whose link is cut: no FIN, its peer waits in all_reduce (directed at this thread, which stops at
        # once; os.kill's SIGSTOP waits for the main thread, and this one could go on into the reduce meanwhile)
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


def test_a_silent_peer_releases_the_rank_blocked_in_all_reduce_which_goes_on_in_the_same_process(
        tmp_path, cluster, monkeypatch):
    """Rank 1 stops (SIGSTOP: nothing is closed, as when its host's link is cut) just before the all_reduce of step
    5, where rank 0 then waits. The tuner notices the silence (heartbeat timeout) and ends the group; rank 0's
    heartbeat sees the tuner hang up and shuts the gloo group's connections down, so its all_reduce fails at once
    and its worker process, healthy, runs the smaller group from the checkpoint of step 4. Without that, rank 0 waits
    in all_reduce (gloo's timeout and the abort grace are 600 s here) and the retry never starts."""
    import types

    from tuneplat.execution import _forensics
    from tuneplat.train.torch import TorchConfig

    monkeypatch.setenv("TUNEPLAT_HEARTBEAT_TIMEOUT_S", "8")
    monkeypatch.setenv("TUNEPLAT_ABORT_GRACE_S", "600")  # (neither the grace nor gloo's own timeout rescues rank 0)
    # the workers' host is not the tuner's, as when the link to a remote host is cut: the tuner cannot SIGKILL the
    # silent process (which would close its sockets, a FIN the remote case never gets); it asks its nanny (there is
    # none here: the process stays stopped, holding its connections open)
    monkeypatch.setattr(_forensics, "socket", types.SimpleNamespace(gethostname=lambda: "the-tuners-host"))
    cluster.start(2)
    trainer = TorchTrainer(descent, train_loop_config={"steps": STEPS, "every": 2,
                                                       "before_reduce": stop_rank_1_before_the_reduce_of_step_5},
                           scaling_config=ScalingConfig(num_workers=(1, 2)), torch_config=TorchConfig(timeout_s=600),
                           client=cluster.client,
                           run_config=RunConfig(storage_path=str(tmp_path / "results"), name="silent", mlflow=False,
                                                verbose=0, failure_config=FailureConfig(max_failures=1)))
    try:
        result = trainer.fit()
    finally:
        for p in cluster.procs:  # the stopped worker (the cut-off host) ends here: continued, it would sit in its
            if _stopped(p.pid):  # rank's 600 s all_reduce and outlast the clean-up's 30 s SIGTERM grace
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    assert result.error is None, result.error
    rows = _trial_results(result)
    assert [(r["step"], r["world_size"]) for r in rows] == [(s, 2) for s in range(1, 5)] + [
        (s, 1) for s in range(5, STEPS + 1)]
    assert [result.metrics["w0"], result.metrics["w1"]] == pytest.approx(reference_weights(), rel=1e-12, abs=1e-12)
    rank0_pid = rows[0]["pid"]  # (rank 0 reports for the group)
    assert {r["pid"] for r in rows} == {rank0_pid}  # the same worker process: never restarted
    resizes = [e for e in _journal(os.path.dirname(result.path)) if e["event"] == "resize"]
    assert [(e["from_world_size"], e["to_world_size"]) for e in resizes] == [(2, 1)]
    assert all(e["reason"] for e in resizes)


# ---------------------------------------------------------------------------------------------- a worker joins

def announce_step_3_then_wait_for_a_join(step, rank, world, attempt):
    from distributed import Event

    if step == 3 and rank == 0 and world == 1:
        Event("tuneplat-test-at-3").set()
        assert Event("tuneplat-test-joined").wait(timeout=120)


def test_a_joining_worker_grows_the_group_at_the_next_checkpoint(tmp_path, cluster):
    from distributed import Event

    cluster.start(1)
    at_3, joined = Event("tuneplat-test-at-3", client=cluster.client), Event("tuneplat-test-joined",
                                                                             client=cluster.client)

    def join() -> None:
        if at_3.wait(timeout=180):
            cluster.add_worker()
            cluster.client.wait_for_workers(2, timeout=120)
        joined.set()

    thread = threading.Thread(target=join, daemon=True)
    thread.start()
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    result = _fit(cluster, tmp_path, "grow", {"steps": STEPS, "every": 2, "hook": announce_step_3_then_wait_for_a_join},
                  mlflow=MLflowConfig(tracking_uri=uri))
    thread.join(timeout=60)
    assert result.error is None
    assert [result.metrics["w0"], result.metrics["w1"]] == pytest.approx(reference_weights(), rel=1e-12, abs=1e-12)
    rows = _trial_results(result)
    # the worker joined during step 3; the group grew at the checkpoint of step 4 and no step was lost
    assert [(r["step"], r["world_size"], r["shard"]) for r in rows] == (
        [(s, 1, 24) for s in range(1, 5)] + [(s, 2, 12) for s in range(5, STEPS + 1)])
    events = _journal(os.path.dirname(result.path))
    assert [e["message"] for e in events if e["event"] == "resize"] == [
        "resized from 1 to 2 ranks: 1 more worker(s) free"]
    assert not [e for e in events if e["event"] in ("superseded", "trial_failure")]

    # MLflow: the trial's run has its world size over time, and the resize as tags
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    history = client.get_metric_history(result.mlflow_run_id, "tuneplat/world_size")
    assert sorted((m.step, m.value) for m in history) == [(0, 1.0), (4, 2.0)]
    run = client.get_run(result.mlflow_run_id)
    assert run.data.tags["tuneplat.world_size"] == "2"
    assert run.data.tags["tuneplat.last_resize"] == "from 1 to 2 ranks: 1 more worker(s) free"


# ---------------------------------------------------------------------------------------------- preemption

def announce_rank_1_at_step_3(step, rank, world, attempt):
    from distributed import Event, Variable, get_worker

    if step == 3 and world == 2:
        if rank == 1:  # (it goes on to its report: its worker is the one that leaves)
            Variable("tuneplat-test-rank-1").set([get_worker().address, os.getpid()])
            Event("tuneplat-test-at-3").set()
        else:  # the group waits at step 3 until the worker was told to leave
            assert Event("tuneplat-test-retired").wait(timeout=120)


@pytest.mark.parametrize("how", ["retire_workers", "sigterm"])
def test_a_retiring_worker_is_checkpointed_before_it_goes_and_no_step_is_lost(tmp_path, cluster, how):
    """The worker of rank 1 is asked to leave (``client.retire_workers``, or SIGTERM to ``dask worker``)."""
    from distributed import Event, Variable

    cluster.start(2)
    client = cluster.client
    at_3, retired = Event("tuneplat-test-at-3", client=client), Event("tuneplat-test-retired", client=client)

    def retire() -> None:
        if at_3.wait(timeout=180):
            address, pid = Variable("tuneplat-test-rank-1", client=client).get(timeout=30)
            if how == "sigterm":
                os.kill(pid, signal.SIGTERM)  # `dask worker` closes its worker: it is closing from here on
            else:
                client.retire_workers([address], close_workers=True)  # the worker is closing from here on
        retired.set()

    thread = threading.Thread(target=retire, daemon=True)
    thread.start()
    # it trains on 2 ranks until the notice reaches it, then 3 steps on the rank that stays
    result = _fit(cluster, tmp_path, "preempt", {"steps": 100_000, "every": 10**9, "until_resized": True,
                                                 "hook": announce_rank_1_at_step_3})
    thread.join(timeout=60)
    assert result.error is None
    rows = _trial_results(result)
    last = rows[-1]["step"]
    assert [result.metrics["w0"], result.metrics["w1"]] == pytest.approx(reference_weights(last), rel=1e-12,
                                                                         abs=1e-12)
    assert [r["step"] for r in rows] == list(range(1, last + 1))  # every step once: none lost, none trained twice
    asked = [r["step"] for r in rows if r["asked"]]
    # the notice came during step 3 (the rank polls its worker's status): a later report asked for a checkpoint,
    # which every rank saw, with the leaving rank (Ray's get_preemption_info)
    assert len(asked) == 1 and asked[0] >= 4 and last == asked[0] + 3
    assert [r["preempted_ranks"] for r in rows if r["asked"]] == [[1]]
    # Ray V2's node fields: the leaving node is rank 1's Dask worker (its address), with rank 1 on it
    address = Variable("tuneplat-test-rank-1", client=client).get(timeout=30)[0]
    assert [r["preempted_nodes"] for r in rows if r["asked"]] == [[{address: [1]}, [address]]]
    assert [(r["world_size"], r["shard"]) for r in rows] == [(2, 12)] * asked[0] + [(1, 24)] * 3
    events = _journal(os.path.dirname(result.path))
    kinds = [e["event"] for e in events]
    assert "preempt_notice" in kinds and "trial_failure" not in kinds and "superseded" not in kinds
    resize = next(e for e in events if e["event"] == "resize")
    assert (resize["from_world_size"], resize["to_world_size"], resize["iteration"]) == (2, 1, asked[0])
    assert "preempted" in resize["message"]
    assert any(e["event"] == "checkpoint" and e["iteration"] == asked[0] for e in events)


# ---------------------------------------------------------------------------------------------- under Tuner

def test_under_tuner_elastic_trials_start_at_their_minimum_and_grow_once_nobody_waits(tmp_path, cluster):
    """Two (1, 2) trials on 2 workers: both start with 1 rank (neither takes 2 while the other waits); when the
    short one ends, the long one grows to 2 at its next checkpoint."""
    from tuneplat import Tuner, grid_search

    cluster.start(2)
    trainer = TorchTrainer(descent, scaling_config=ScalingConfig(num_workers=(1, 2)), client=cluster.client,
                           run_config=RunConfig(storage_path=str(tmp_path / "results"), name="tuner", mlflow=False,
                                                verbose=0))
    grid = Tuner(trainer, param_space={"train_loop_config": {
        "every": 1, "steps": grid_search([4, 100_000]), "until_grown": True}}).fit()
    assert [r.error for r in grid] == [None, None]
    by_steps = {r.config["train_loop_config"]["steps"]: r for r in grid}
    short, long = _trial_results(by_steps[4]), _trial_results(by_steps[100_000])
    assert [r["world_size"] for r in short] == [1] * 4
    sizes = [r["world_size"] for r in long]
    grown = sizes.index(2)
    assert sizes == [1] * grown + [2, 2] and [r["step"] for r in long] == list(range(1, len(long) + 1))
    events = _journal(os.path.dirname(by_steps[4].path))
    assert [(e["trial_id"], e["from_world_size"], e["to_world_size"]) for e in events if e["event"] == "resize"] == [
        (by_steps[100_000].trial_id, 1, 2)]
    short_end = next(e["time"] for e in events if e["event"] == "trial_end" and e["trial_id"] == by_steps[4].trial_id)
    resize_at = next(e["time"] for e in events if e["event"] == "resize")
    assert resize_at > short_end  # it grew only once the other trial had ended
