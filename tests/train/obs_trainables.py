"""Module-level trainables for the observability tests (Dask workers import them by reference)."""

from __future__ import annotations

import json
import os
import threading
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

import tuneplat as tune
from tuneplat.train.torch import prepare_data_loader, prepare_model


def _seen_by_tuner(experiment_dir: str, trial_id: str, world: int) -> bool:
    """Whether the tuner's per-rank table shows system metrics and throughput for every rank of this trial."""
    try:
        with open(os.path.join(experiment_dir, "workers.json"), encoding="utf-8") as f:
            rows = json.load(f)["running"].get(trial_id, [])
    except (OSError, ValueError, KeyError):
        return False
    return len(rows) == world and all(r.get("system") and r.get("samples_per_s") is not None for r in rows)


def observed_training(config):
    """Trains on 2 ranks until the tuner's table shows every rank's system metrics (bounded), reporting each pass."""
    ctx = tune.get_context()
    exp_dir = os.path.dirname(ctx.get_trial_dir())
    model = prepare_model(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(0)
    loader = prepare_data_loader(DataLoader(TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1,
                                                                                                       generator=g)),
                                            batch_size=8))
    deadline = time.monotonic() + 120
    while True:
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        done = torch.tensor([1.0 if _seen_by_tuner(exp_dir, ctx.get_trial_id(), ctx.get_world_size())
                             or time.monotonic() > deadline else 0.0])
        torch.distributed.all_reduce(done, op=torch.distributed.ReduceOp.MIN)  # every rank leaves at the same pass
        tune.report({"loss": 1.0, "num_samples": 32})
        if done.item():
            return


def deadlock_forever():
    """Waits on a lock it already holds: a Python-level deadlock (the heartbeat thread keeps running)."""
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()  # DEADLOCK-LINE


def one_rank_deadlocks(config):
    if tune.get_context().get_world_rank() == 0:
        deadlock_forever()
    tune.report({"loss": 1.0})  # REPORT-LINE


def holds_the_gil_in_c():
    """Stuck in a C call made without releasing the GIL: the process's other threads (its Dask worker's event loop,
    tuneplat's heartbeat) cannot run, so only a reader from outside (py-spy) sees where."""
    import ctypes

    while True:  # (a signal ends pause(); it is made again)
        ctypes.PyDLL(None).pause()  # GIL-LINE


def one_rank_holds_the_gil_in_c(config):
    if tune.get_context().get_world_rank() == 0:
        holds_the_gil_in_c()
    tune.report({"loss": 1.0})


def parked_until_released(trial_dir: str) -> None:
    """Waits (bounded) for the test to drop a file in the trial folder."""
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(trial_dir, "release")) and time.monotonic() < deadline:
        time.sleep(0.05)  # PARKED-LINE


def waits_for_release(config):
    parked_until_released(tune.get_context().get_trial_dir())
    tune.report({"loss": 1.0})


def waits_for_a_build_lock(config):
    """What ``torch.utils.cpp_extension.load`` does while another process holds the extension's build lock."""
    from torch.utils.file_baton import FileBaton

    FileBaton(config["lock"]).wait()
    tune.report({"loss": 1.0})
