"""Trainables and a test backend for test_backend.py (importable by the Dask workers)."""

from __future__ import annotations

import json
import os
import sys

from tuneplat import train
from tuneplat.train.backend import Backend, BackendConfig, get_rank_group


class AddressesConfig(BackendConfig):
    """Every rank learns every rank's host:port, as a framework's launch needs (e.g. LightGBM's machines)."""

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self.timeout_s = 30

    @property
    def backend_cls(self) -> type[Backend]:
        return AddressesBackend


def _log(log_dir: str, event: dict) -> None:
    with open(os.path.join(log_dir, "events.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(event) + "\n")


class AddressesBackend(Backend):
    def on_start(self, worker_group, backend_config) -> None:
        port = worker_group.free_port()
        peers = worker_group.all_gather(f"{worker_group.host}:{port}")
        token = worker_group.broadcast(f"from-rank-{worker_group.rank}")
        os.environ["TEST_BACKEND_PEERS"] = ",".join(peers)
        _log(backend_config.log_dir, {"hook": "start", "rank": worker_group.rank, "peers": peers, "token": token,
                                      "attempt": train.get_context().get_attempt(), "own": f"{worker_group.host}:{port}"})

    def on_shutdown(self, worker_group, backend_config) -> None:
        os.environ.pop("TEST_BACKEND_PEERS", None)
        _log(backend_config.log_dir, {"hook": "shutdown", "rank": worker_group.rank, "failed": worker_group.failed,
                                      "attempt": train.get_context().get_attempt()})


def loop(config: dict) -> None:
    """Reads what on_start set up; fails rank 1 on the first attempt when asked."""
    ctx = train.get_context()
    group = get_rank_group()
    torch_group = False
    if "torch.distributed" in sys.modules:
        import torch.distributed as dist

        torch_group = dist.is_available() and dist.is_initialized()
    _log(config["log_dir"], {"hook": "loop", "rank": ctx.get_world_rank(), "attempt": ctx.get_attempt(),
                             "peers": os.environ.get("TEST_BACKEND_PEERS", "").split(","),
                             "torch_group": torch_group, "world": group.world_size if group else None,
                             "store": group is not None and group.store is not None,
                             "gathered_in_loop": group.all_gather(ctx.get_world_rank() * 10) if group else None})
    if config.get("fail_first") and ctx.get_attempt() == 0 and ctx.get_world_rank() == 1:
        raise RuntimeError("rank 1 fails its first attempt")
    train.report({"done": 1})


def only_rank0_gathers(config: dict) -> None:
    """Rank 0 joins an exchange that rank 1 never joins (rank 1 returns at once): a user's bug."""
    group = get_rank_group()
    if train.get_context().get_world_rank() == 0:
        group.all_gather("waiting")


class FreshProcessConfig(BackendConfig):
    """A backend whose worker processes are not reused (as TensorFlow's): each group's ranks get new ones."""

    @property
    def backend_cls(self) -> type[Backend]:
        return FreshProcessBackend


class FreshProcessBackend(Backend):
    reuses_worker_process = False


def pid_loop(config: dict) -> None:
    """Logs which process ran which trial's rank."""
    ctx = train.get_context()
    _log(config["log_dir"], {"hook": "pid", "trial": config["trial"], "rank": ctx.get_world_rank(),
                             "pid": os.getpid()})
    train.report({"done": 1})
