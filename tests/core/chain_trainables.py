"""Trainables for the chained-trial tests: each reports where it ran (process, Dask task) and what it saw."""

from __future__ import annotations

import json
import os
import tempfile

import tuneplat as tune
from tuneplat import train


def _task_key() -> str:
    from distributed.worker import thread_state

    return str(thread_state.key)


def _where(extra: dict | None = None) -> dict:
    ctx = train.get_context()
    return {
        "task": _task_key(),
        "worker_pid": os.getpid(),
        "ctx_trial_id": ctx.get_trial_id(),
        "attempt": ctx.get_attempt(),
        "env_rank": os.environ.get("RANK"),
        "env_world_size": os.environ.get("WORLD_SIZE"),
        "env_master_addr": os.environ.get("MASTER_ADDR"),
        "had_checkpoint": train.get_checkpoint() is not None,
        **(extra or {}),
    }


def fail_or_report(config):
    """Reports where it runs; a trial with ``fail`` then dirties the runner's environment and raises."""
    tune.report({"loss": 1.0, **_where()})
    if config["fail"]:
        os.environ["RANK"] = "7"  # what a careless trainable might leave behind
        os.environ["MASTER_ADDR"] = "10.9.9.9"
        raise ValueError("planned failure")


def _load_epoch() -> int:
    ckpt = train.get_checkpoint()
    if ckpt is None:
        return 0
    with ckpt.as_directory() as d, open(os.path.join(d, "state.json")) as f:
        return json.load(f)["epoch"]


def _report_epoch(epoch: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "state.json"), "w") as f:
            json.dump({"epoch": epoch}, f)
        train.report({"loss": 1.0 / epoch, "epoch": epoch, **_where()}, checkpoint=tune.Checkpoint.from_directory(d))


def checkpointed(config):
    """Checkpoints every epoch; ``fail_at`` raises on attempt 0 at that epoch; ``kill_at`` SIGKILLs the worker."""
    import signal

    start = _load_epoch()
    for epoch in range(start + 1, config["epochs"] + 1):
        if train.get_context().get_attempt() == 0 and epoch == config.get("fail_at"):
            raise RuntimeError(f"planned failure at epoch {epoch}")
        if train.get_context().get_attempt() == 0 and epoch == config.get("kill_at"):
            os.kill(os.getpid(), signal.SIGKILL)
        _report_epoch(epoch)


def make_closure():
    """A trainable pickled by value (a closure, as a notebook's function would be), with state of its own."""
    seen: list[int] = []

    def remembers(config):
        seen.append(config["i"])
        tune.report({"loss": 1.0, "seen": len(seen), "task": _task_key()})

    return remembers


def short_sleep(config):
    import time

    time.sleep(config.get("sleep", 0.05))  # the workload
    tune.report({"loss": 1.0, "task": _task_key()})
