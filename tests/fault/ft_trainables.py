"""Trainables for the fault-tolerance tests: they checkpoint every epoch and can kill their own process."""

from __future__ import annotations

import json
import os
import random
import signal
import tempfile
import threading

import tuneplat as tune
from tuneplat import train


def _load_epoch() -> int:
    ckpt = train.get_checkpoint()
    if ckpt is None:
        return 0
    with ckpt.as_directory() as d, open(os.path.join(d, "state.json")) as f:
        return json.load(f)["epoch"]


def _report_epoch(epoch: int, extra: dict | None = None) -> None:
    ctx = train.get_context()
    # in the trial's folder (the test's tmp_path): a process these tests kill mid-report leaves its scratch there
    with tempfile.TemporaryDirectory(prefix=".scratch-", dir=ctx.get_trial_dir()) as d:
        ckpt = None
        if ctx.get_world_rank() == 0:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"epoch": epoch}, f)
            ckpt = tune.Checkpoint.from_directory(d)
        train.report({"loss": 1.0 / epoch, "epoch": epoch, **(extra or {})}, checkpoint=ckpt)


def kill_one_rank_once(config):
    """A 2-rank group; on the first attempt one rank SIGKILLs its own worker process at a seeded random epoch."""
    import torch.distributed as dist

    ctx = train.get_context()
    rng = random.Random(config["seed"])
    kill_epoch, kill_rank = rng.randint(1, config["epochs"]), rng.randint(0, 1)
    start = _load_epoch()
    for epoch in range(start + 1, config["epochs"] + 1):
        if ctx.get_attempt() == 0 and epoch == kill_epoch and ctx.get_world_rank() == kill_rank:
            os.kill(os.getpid(), signal.SIGKILL)
        t = __import__("torch").ones(1)
        dist.all_reduce(t)
        _report_epoch(epoch, {"world": float(t.item()), "attempt": ctx.get_attempt()})


def kill_worker_once(config):
    """Single rank: SIGKILLs its Dask worker process at epoch 2 of its first attempt."""
    start = _load_epoch()
    for epoch in range(start + 1, config["epochs"] + 1):
        if train.get_context().get_attempt() == 0 and epoch == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        _report_epoch(epoch)


def poison(config):
    """Kills its worker on every attempt."""
    train.report({"loss": 1.0})
    os.kill(os.getpid(), signal.SIGKILL)


def stop_self() -> None:
    """SIGSTOP this process, stopped before this call returns.

    ``os.kill(os.getpid(), SIGSTOP)`` signals the process's main thread, which
    starts the group stop only once it runs: the calling thread (a rank runs in
    a Dask worker's task thread) went on meanwhile and sent its next report
    (seen on a loaded machine, 11 ms later). A signal directed at the calling
    thread is handled by it on its way out of the system call.
    """
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


def steady(config):
    start = _load_epoch()
    for epoch in range(start + 1, config.get("epochs", 3) + 1):
        _report_epoch(epoch)


def hangs_once(config):
    """Stops its own process (SIGSTOP) on the first attempt: only the heartbeat can tell."""
    start = _load_epoch()
    for epoch in range(start + 1, config["epochs"] + 1):
        if train.get_context().get_attempt() == 0 and epoch == 2:
            stop_self()
        _report_epoch(epoch)


def grid_epochs(config):
    """For the tuner-kill test: a few checkpointed epochs, each a little slow."""
    import time

    start = _load_epoch()
    gate = os.environ.get("FT_GATE")  # the interrupt test's gate: epoch 2 waits until the file exists
    for epoch in range(start + 1, 4):
        while epoch == 2 and gate and not os.path.exists(gate):
            time.sleep(0.01)  # waiting for the test to open the gate (a condition, polled)
        time.sleep(0.05)  # the workload itself (gives the tuner-kill test moments to kill), not a synchronisation
        _report_epoch(epoch, {"a": config["a"], "b": config["b"]})


def poison_or_steady(config):
    if config["poison"]:
        poison(config)
    else:
        steady({"epochs": 3})


def fail_or_steady(config):
    if config["fail"]:
        raise RuntimeError("fail_fast test failure")
    steady({"epochs": 2})


def _task_key() -> str:
    from distributed.worker import thread_state

    return str(thread_state.key)


def chained_kill_or_hang(config):
    """For the chained-trial chaos tests: checkpointed epochs; on attempt 0, ``mode`` "kill" SIGKILLs the worker and
    "hang" SIGSTOPs it at epoch 2; every report says which Dask task and process ran it."""
    start = _load_epoch()
    ctx = train.get_context()
    for epoch in range(start + 1, config["epochs"] + 1):
        if ctx.get_attempt() == 0 and epoch == 2 and config["mode"] != "steady":
            if config["mode"] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            else:
                stop_self()
        _report_epoch(epoch, {"task": _task_key(), "worker_pid": os.getpid(), "attempt": ctx.get_attempt()})


def exits_once(config):
    """os._exit(1) on the first attempt (after a report), then trains: the retry must start promptly."""
    marker = os.path.join(config["marker_dir"], "exited")
    train.report({"loss": 1.0})
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    steady({"epochs": 2})


def grab_memory(config):
    """Holds ``config["mib"]`` MiB of host memory (every page written), then reports: a host OOM where it is limited."""
    size = config["mib"] * 2**20
    block = bytearray(size)
    block[::4096] = b"\x01" * len(range(0, size, 4096))
    train.report({"loss": 1.0 / config["mib"], "held_mib": len(block) // 2**20})


def holds_a_build_lock_then_hangs(config):
    """Rank 0 writes its pid to ``<root>/rank0.pid`` and takes a torch extension's build lock as
    ``torch.utils.cpp_extension.load`` does around its build (``FileBaton`` in ``config["root"]``, its extensions
    root), then never unwinds: with ``how="abort"`` it ignores the abort that rank 1's failure brings (rank 1 raises
    once a barrier says the lock is taken); with ``how="stop"`` it stops its own process (SIGSTOP, a single rank)."""
    import torch.distributed as dist
    from torch.utils.file_baton import FileBaton

    lock = os.path.join(config["root"], "op", "lock")
    if train.get_context().get_world_rank() == 0:
        os.environ["TORCH_EXTENSIONS_DIR"] = config["root"]  # (this process is ended: it takes the setting along)
        os.makedirs(os.path.dirname(lock), exist_ok=True)
        with open(os.path.join(config["root"], "rank0.pid"), "w") as f:
            f.write(str(os.getpid()))
        if not FileBaton(lock).try_acquire():
            raise RuntimeError(f"{lock} is taken already")
        if config["how"] == "stop":
            stop_self()
        dist.barrier()  # rank 1 goes on: the lock is held
        threading.Event().wait()  # deaf to the abort: only the end of its process ends it
    dist.barrier()  # (returns once rank 0 holds the lock)
    raise RuntimeError("rank 1 fails while rank 0 holds a build lock")
