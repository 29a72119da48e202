"""Module-level trainables for the worker-group tests (Dask workers import them by reference)."""

from __future__ import annotations

import json
import os
import tempfile

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import tuneplat as tune
from tuneplat.train.torch import get_device, prepare_data_loader, prepare_model

STEPS = 4
BATCH = 4  # rows per rank per step


def make_data(world_size: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(123)
    x = torch.randn(STEPS * BATCH * world_size, 5, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [0.0], [3.0]]) + 0.1 * torch.randn(len(x), 1, generator=g)
    return x, y


def initial_model() -> nn.Module:
    torch.manual_seed(7)
    return nn.Linear(5, 1)


def ddp_linear(config: dict) -> None:
    """Each rank trains on its own rows of every step's batch; saves its parameters in the checkpoint."""
    ctx = tune.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    model = prepare_model(initial_model())
    opt = torch.optim.SGD(model.parameters(), lr=config.get("lr", 0.1))
    x, y = make_data(world)
    for step in range(STEPS):
        lo = (step * world + rank) * BATCH
        opt.zero_grad()
        nn.functional.mse_loss(model(x[lo:lo + BATCH]), y[lo:lo + BATCH]).backward()
        opt.step()
        with tempfile.TemporaryDirectory() as d:
            plain = model.module if hasattr(model, "module") else model
            torch.save({k: v.detach().clone() for k, v in plain.state_dict().items()}, os.path.join(d, f"rank{rank}.pt"))
            tune.report({"step": step}, checkpoint=tune.Checkpoint.from_directory(d))


class Indices(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def collate_as_dict(items: list[int]) -> dict:
    return {"idx": torch.tensor(items)}


def sharding(config: dict) -> None:
    """Records which indices each rank sees per epoch, its batch sizes and its context, into its trial dir."""
    ctx = tune.get_context()
    loader = prepare_data_loader(DataLoader(Indices(config["n"]), batch_size=config["batch_size"], shuffle=True,
                                            collate_fn=collate_as_dict, num_workers=config.get("num_workers", 0)))
    seen, sizes = [], []
    for _epoch in range(2):
        epoch_seen = []
        for batch in loader:
            assert isinstance(batch, dict), type(batch)
            epoch_seen.extend(batch["idx"].tolist())
            sizes.append(len(batch["idx"]))
        seen.append(epoch_seen)
    info = {
        "seen": seen, "sizes": sizes, "len": len(loader), "device": str(get_device()),
        "world_rank": ctx.get_world_rank(), "world_size": ctx.get_world_size(), "local_rank": ctx.get_local_rank(),
        "local_world_size": ctx.get_local_world_size(), "node_rank": ctx.get_node_rank(),
        "trial_id": ctx.get_trial_id(), "trial_name": ctx.get_trial_name(),
        "experiment_name": ctx.get_experiment_name(), "trial_dir": ctx.get_trial_dir(),
        "env": {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")},
        "daemon": __import__("multiprocessing").current_process().daemon,
    }
    with open(os.path.join(ctx.get_trial_dir(), f"rank{ctx.get_world_rank()}.json"), "w") as f:
        json.dump(info, f)
    tune.report({"n_seen": len(seen[0])})


def fail_one_rank(config: dict) -> None:
    """A DDP loop where ``fail_rank`` raises mid-step while the other rank waits in the gradient all-reduce."""
    rank = tune.get_context().get_world_rank()
    model = prepare_model(nn.Linear(10, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(4):
        loss = model(torch.randn(8, 10)).pow(2).mean()
        if step == 2 and rank == config["fail_rank"]:
            raise ValueError(f"rank {rank} fails on purpose")
        loss.backward()
        opt.step()
        opt.zero_grad()
        tune.report({"loss": loss.item(), "step": step})


def short_loop(config: dict) -> None:
    """A few DDP (or single-rank) steps."""
    model = prepare_model(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _step in range(config.get("steps", 3)):
        opt.zero_grad()
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        opt.step()
        tune.report({"loss": loss.item(), "world_size": tune.get_context().get_world_size()})


def listeners(config: dict) -> None:
    """Reports the addresses this rank's process listens on (from /proc), after a DDP step."""
    model = prepare_model(nn.Linear(2, 1))
    model(torch.randn(2, 2)).sum().backward()
    tune.report({"listening": _listening_addresses()})


def _listening_addresses() -> list[str]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            with open(table, encoding="ascii") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] != "0A" or parts[9] not in inodes:  # 0A = LISTEN
                continue
            addr_hex, port_hex = parts[1].split(":")
            found.append(f"{_decode(addr_hex, v6)}:{int(port_hex, 16)}")
    return found


def _decode(addr_hex: str, v6: bool) -> str:
    import ipaddress

    raw = bytes.fromhex(addr_hex)
    if not v6:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return str(ipaddress.IPv6Address(words))


def digits_fails_once(config: dict) -> None:
    """examples.digits.train_loop that crashes after 2 epochs on its first attempt (the retry must resume)."""
    from examples.digits import train_loop

    if tune.get_context().get_attempt() == 0:
        train_loop({**config, "epochs": 2})
        raise RuntimeError("crash after epoch 1, on purpose")
    train_loop(config)


def gpu_info(config: dict) -> None:
    """Reports the rank's device, CUDA's current device and whether DDP kept ranks in step (GPU tests)."""
    ctx = tune.get_context()
    device = get_device()
    model = prepare_model(initial_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(config.get("steps", 3)):
        x = torch.randn(16, 5, device=device)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        plain = model.module if hasattr(model, "module") else model
        checksum = float(sum(p.detach().double().sum().item() for p in plain.parameters()))
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, f"rank{ctx.get_world_rank()}.json"), "w") as f:
                json.dump({"device": str(device), "current": torch.cuda.current_device(), "checksum": checksum,
                           "backend": torch.distributed.get_backend() if torch.distributed.is_initialized() else None,
                           "gpu_ids": ctx.get_trial_resources()["gpu_ids"]}, f)
            tune.report({"device": str(device), "current_device": torch.cuda.current_device(), "step": step},
                        checkpoint=tune.Checkpoint.from_directory(d))


def loader_after_crash(config):
    """Attempt 0 kills its worker process; the retry (on a worker the nanny restarted, or the other one) loads
    data with DataLoader worker processes, which a daemonic Dask worker cannot start."""
    if tune.get_context().get_attempt() == 0:
        os._exit(1)
    rows = [int(b.sum()) for b in DataLoader(torch.arange(8), batch_size=4, num_workers=1)]
    tune.report({"rows": sum(rows), "pid": os.getpid()})


_RANK_KEYS = ("RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE")


def _unpickled_here() -> EnvAtUnpickle:
    return EnvAtUnpickle({k: os.environ.get(k) for k in _RANK_KEYS})


class EnvAtUnpickle:
    """What a module-level import of the user's script sees in a rank: the environment when it is unpickled."""

    def __init__(self, seen: dict | None = None) -> None:
        self.seen = seen

    def __reduce__(self):
        return (_unpickled_here, ())


def script_like_train_func():
    """A training function as a user's script ships it: by value (a closure), with a Dataset class of its own.

    Each rank writes ``probe<rank>.json`` to a *relative* path (its working directory): the environment its
    globals saw while being unpickled, the rows a 2-worker DataLoader over that class read, the start method.
    """
    probe = EnvAtUnpickle()

    class Squares(Dataset):  # defined here: pickled by value, not importable by name (as a class in __main__)
        def __len__(self) -> int:
            return 8

        def __getitem__(self, i: int) -> torch.Tensor:
            return torch.tensor(float(i * i))

    def train_func(config: dict) -> None:
        import multiprocessing

        total = sum(float(b.sum()) for b in DataLoader(Squares(), batch_size=4, num_workers=2))
        rank = tune.get_context().get_world_rank()
        with open(f"probe{rank}.json", "w", encoding="utf-8") as f:
            json.dump({"at_unpickle": probe.seen, "total": total, "start": multiprocessing.get_start_method()}, f)
        tune.report({"total": total})

    return train_func


def _rank0_task_states(dask_scheduler, trial_id: str) -> list[str]:
    return [ts.state for key, ts in dask_scheduler.tasks.items()
            if isinstance(key, str) and key.startswith(f"tuneplat-{trial_id}-") and "-r0-" in key]


def rank1_uses_the_store_after_rank0_ended(config: dict) -> None:
    """A group whose function never communicates: rank 0 returns at once; rank 1 uses the rendezvous store (which
    rank 0 hosts) only once the scheduler says rank 0's task has ended (a slower rank, made deterministic)."""
    import time

    import torch.distributed as dist
    from distributed import get_client

    ctx = tune.get_context()
    if ctx.get_world_rank() == 0:
        return
    client = get_client()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # readiness probe of another process's task (bounded)
        # (rank 0 rendezvoused with this rank, so its task was there: gone, or holding its result, it has ended)
        if set(client.run_on_scheduler(_rank0_task_states, trial_id=ctx.get_trial_id())) <= {"memory"}:
            break
        time.sleep(0.05)
    else:
        raise RuntimeError("rank 0's task never ended")
    store = dist.distributed_c10d._get_default_store()
    store.set("late", b"still here")
    assert store.get("late") == b"still here"


def threads_of_a_rank(config: dict) -> None:
    """The thread pools a rank's numeric libraries get (Ray sizes them to the CPUs the rank holds)."""
    tune.report({"loss": float(config.get("x", 0)), "omp": int(os.environ.get("OMP_NUM_THREADS", "0")),
                 "mkl": int(os.environ.get("MKL_NUM_THREADS", "0")), "torch_threads": torch.get_num_threads()})


def steps_from_checkpoint(config: dict) -> None:
    """TorchTrainer loop: goes on from its checkpoint's step; each step all-reduces over the group (how many ranks
    there are, and how many of them started from a checkpoint) and reports that with a checkpoint from rank 0."""
    import torch.distributed as dist

    ctx = tune.get_context()
    ck = tune.get_checkpoint()
    start = 0
    if ck is not None:
        with ck.as_directory() as d, open(os.path.join(d, "step.json")) as f:
            start = json.load(f)["step"]
    counts = torch.tensor([1.0, 1.0 if ck is not None else 0.0])
    if dist.is_initialized():
        dist.all_reduce(counts)  # (gloo: the group's real ranks answer)
    for step in range(start, config["steps"]):
        with tempfile.TemporaryDirectory() as d:
            checkpoint = None
            if ctx.get_world_rank() == 0:
                with open(os.path.join(d, "step.json"), "w") as f:
                    json.dump({"step": step + 1}, f)
                checkpoint = tune.Checkpoint.from_directory(d)
            tune.report({"world_size": ctx.get_world_size(), "ranks_in_group": counts[0].item(),
                         "ranks_from_checkpoint": counts[1].item(), "started_at": start}, checkpoint=checkpoint)
