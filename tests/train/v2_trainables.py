"""Training functions for the Ray Train V2 parity tests (module level: the workers import them by reference)."""

from __future__ import annotations

import os
import tempfile

from tuneplat import train


def rank_1_fails_at_step_2(config):
    """Every rank reports step 1 with a checkpoint; at step 2 rank 1 raises."""
    rank = train.get_context().get_world_rank()
    for step in (1, 2):
        if step == 2 and rank == config.get("failing_rank", 1):
            raise ValueError(f"rank {rank} broke at step {step}")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step.txt"), "w") as f:
                f.write(str(step))
            train.report({"step": step, "rank": rank}, checkpoint=train.Checkpoint.from_directory(d))


def where_am_i(config):
    """Reports the process and the resources the rank got."""
    ctx = train.get_context()
    train.report({"pid": os.getpid(), "rank": ctx.get_world_rank(), "world_size": ctx.get_world_size()})


def resumable(config):
    """Steps 1..4, a checkpoint each; on the first run (no checkpoint) it fails at ``fail_at``."""
    ckpt = train.get_checkpoint()
    start = 0
    if ckpt is not None:
        with ckpt.as_directory() as d:
            with open(os.path.join(d, "step.txt")) as f:
                start = int(f.read())
    for step in range(start + 1, 5):
        if ckpt is None and step == config.get("fail_at"):
            raise RuntimeError(f"the driver's first run broke at step {step}")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step.txt"), "w") as f:
                f.write(str(step))
            train.report({"step": step, "start": start}, checkpoint=train.Checkpoint.from_directory(d))


def stops_its_driver(config):
    """Steps 1..4 with a checkpoint each; on the first run (no checkpoint), at step 2, it asks the driver to die
    (SIGKILL, by the driver's own watcher thread) and waits until it is gone: a crashed driver (Ray's job-level
    fault tolerance case). Rank 0 asks; every rank then finds its tuner gone at its next report."""
    import time

    ckpt = train.get_checkpoint()
    start = 0
    if ckpt is not None:
        with ckpt.as_directory() as d:
            with open(os.path.join(d, "step.txt")) as f:
                start = int(f.read())
    for step in range(start + 1, 5):
        if ckpt is None and step == 2 and config.get("kill_file"):
            if train.get_context().get_world_rank() == 0:
                open(config["kill_file"], "w").close()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # until the driver process is gone (signal 0 only asks)
                try:
                    os.kill(config["driver_pid"], 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step.txt"), "w") as f:
                f.write(str(step))
            train.report({"step": step, "start": start}, checkpoint=train.Checkpoint.from_directory(d))
