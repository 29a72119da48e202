"""Module-level trainables for the checkpoint tests (workers import them by reference)."""

from __future__ import annotations

import json
import os
import tempfile

import tuneplat as tune
from tuneplat import train


def counts_with_checkpoints(config):
    """Reports `steps` times, each with a checkpoint holding the step; resumes from its checkpoint."""
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            start = json.load(open(os.path.join(d, "state.json")))["step"]
    for step in range(start + 1, config["steps"] + 1):
        if config.get("fail_at") == step and train.get_context().get_attempt() == 0:
            raise RuntimeError(f"planned failure at step {step}")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step, "resumed_from": start}, f)
            score = config.get("scores", {}).get(str(step), float(step))
            tune.report({"score": score, "step": step}, checkpoint=tune.Checkpoint.from_directory(d))


def sharded(config):
    """2 ranks: each writes its own shard; on restart every rank sees both shards."""
    ctx = train.get_context()
    rank = ctx.get_world_rank()
    seen = []
    ckpt = train.get_checkpoint()
    start = 0
    if ckpt is not None:
        with ckpt.as_directory() as d:
            seen = sorted(os.listdir(d))
            start = json.load(open(os.path.join(d, f"shard_{rank}.json")))["step"]
    for step in range(start + 1, 4):
        if step == 3 and ctx.get_attempt() == 0:
            raise RuntimeError("planned failure after two sharded checkpoints")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, f"shard_{rank}.json"), "w") as f:
                json.dump({"step": step, "rank": rank}, f)
            tune.report({"step": step, "seen": ",".join(seen)}, checkpoint=tune.Checkpoint.from_directory(d))


def saves_torch(config):
    import torch

    with tempfile.TemporaryDirectory() as d:
        torch.save({"w": torch.arange(4.0) * config["k"]}, os.path.join(d, "model.pt"))
        tune.report({"k": config["k"]}, checkpoint=tune.Checkpoint.from_directory(d))


def pbt_accumulate(config):
    """acc grows by lr each step; the checkpoint holds acc, the step and the trial that wrote it (for PBT)."""
    me = tune.get_context().get_trial_id()
    acc, step, came_from = 0.0, 0, None
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            with open(os.path.join(d, "state.json")) as f:
                state = json.load(f)
        acc, step, came_from = state["acc"], state["step"], state["writer"]
    while step < config["steps"]:
        step += 1
        acc += config["lr"]
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"acc": acc, "step": step, "writer": me}, f)
            tune.report({"acc": acc, "came_from": came_from}, checkpoint=tune.Checkpoint.from_directory(d))


def empty_then_listed(config):
    """Reports an empty-folder checkpoint per step (Ray: a checkpoint of an empty folder is a checkpoint), then
    reports what ``train.get_all_reported_checkpoints()`` lists, with the metrics each was reported with."""
    earlier = train.get_all_reported_checkpoints()  # (a retry: the first attempt's, to go on after the last)
    restored = train.get_checkpoint() is not None
    start = int(earlier[-1].metrics["score"]) if earlier else 0
    for step in range(start + 1, config["steps"] + 1):
        if config.get("fail_at") == step and train.get_context().get_attempt() == 0:
            raise RuntimeError(f"planned failure at step {step}")
        with tempfile.TemporaryDirectory() as d:
            tune.report({"score": float(step)}, checkpoint=tune.Checkpoint.from_directory(d))
    listed = train.get_all_reported_checkpoints()
    tune.report({"listed": [[os.path.basename(r.checkpoint.path.rstrip("/")), r.metrics.get("score"),
                             r.status.value] for r in listed],
                 "restored": restored, "start": start})


def fails_once_at_3(config):
    """Steps 1..4, a checkpoint each; without a checkpoint to start from, it fails at step 3."""
    ckpt = train.get_checkpoint()
    start = 0
    if ckpt is not None:
        with ckpt.as_directory() as d:
            start = json.load(open(os.path.join(d, "state.json")))["step"]
    for step in range(start + 1, 5):
        if ckpt is None and step == 3:
            raise RuntimeError(f"the first run broke at step {step}")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            train.report({"step": step, "start": start}, checkpoint=tune.Checkpoint.from_directory(d))
