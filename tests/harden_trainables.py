"""Trainables for the hardening tests (issue 33): importable by the Dask workers (tests/ is on their PYTHONPATH)."""

from __future__ import annotations

import json
import os
import tempfile

import tuneplat as tune
from tuneplat import train


def counts(config):
    """Reports iterations 1..n; the loss says which trial it is."""
    for i in range(1, config["n"] + 1):
        train.report({"loss": config["x"] + i / 100, "i": i})


def two_rank_counts(config):
    """A 2-rank group (a real gloo all_reduce each iteration) reporting iterations 1..n."""
    import torch
    import torch.distributed as dist

    for i in range(1, config["n"] + 1):
        t = torch.ones(1)
        dist.all_reduce(t)
        train.report({"loss": config["x"] + i / 100, "i": i, "world": float(t.item())})


def big_report(config):
    """One report of ``config["mib"]`` MiB (a string metric)."""
    train.report({"loss": 1.0, "blob": "x" * (config["mib"] << 20)})


def fails_once_after_checkpoint(config):
    """2 ranks; a checkpoint every ``every`` iterations; on the first attempt rank 1 raises after reporting
    iteration ``fail_at`` (past the last checkpoint): the retry starts from that checkpoint and reports the
    iterations after it again."""
    import torch
    import torch.distributed as dist

    ctx = train.get_context()
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d, open(os.path.join(d, "state.json")) as f:
            start = json.load(f)["i"]
    for i in range(start + 1, config["n"] + 1):
        t = torch.ones(1)
        dist.all_reduce(t)
        with tempfile.TemporaryDirectory(prefix=".scratch-", dir=ctx.get_trial_dir()) as d:
            ck = None
            if ctx.get_world_rank() == 0 and i % config["every"] == 0:
                with open(os.path.join(d, "state.json"), "w") as f:
                    json.dump({"i": i}, f)
                ck = tune.Checkpoint.from_directory(d)
            train.report({"loss": 1.0 / i, "i": i, "attempt": ctx.get_attempt()}, checkpoint=ck)
        if ctx.get_attempt() == 0 and i == config["fail_at"] and ctx.get_world_rank() == 1:
            raise RuntimeError(f"rank 1 fails after iteration {i} (first attempt only)")


def returns_at_once(config):
    """Returns without reporting anything."""
    return None
