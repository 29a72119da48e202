"""Trainables for the multi-host tests (imported by the Dask workers on the simulated hosts)."""

from __future__ import annotations

import socket

import tuneplat


def _resumed_step() -> int:
    """The step of the trial's checkpoint (``step.txt``), 0 for a fresh start."""
    import os

    ckpt = tuneplat.get_checkpoint()
    if ckpt is None:
        return 0
    with ckpt.as_directory() as d, open(os.path.join(d, "step.txt")) as f:
        return int(f.read())


def _report_step(step: int, start: int, folder: str | None = None) -> None:
    """Report ``step`` with a checkpoint holding it (written under ``folder``, default the temporary folder)."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory(dir=folder) as d:
        with open(os.path.join(d, "step.txt"), "w") as f:
            f.write(str(step))
        tuneplat.report({"loss": float(step), "host": socket.gethostname(), "start": start},
                        checkpoint=tuneplat.Checkpoint.from_directory(d))


def sweep(config):
    for i in range(3):
        tuneplat.report({"loss": config["x"] + i, "host": socket.gethostname(), "canary": config["canary"]})


def ddp(config):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(dist.get_rank())  # different initial weights per rank: DDP must make them equal
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hosts: list[str] = [""] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    for _ in range(3):
        x = torch.randn(8, 4)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        gathered = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, flat)
        same = all(torch.equal(gathered[0], g) for g in gathered)
        tuneplat.report({"loss": float(loss), "hosts": ",".join(sorted(hosts)), "params_equal": same})


def where(config):
    from tuneplat.train._session import _get_session

    s = _get_session("report")
    tuneplat.report({"loss": 0.0, "peer": str(s.sock.getpeername()), "local": str(s.sock.getsockname()),
                     "addr": str(s.spec.tuner_addr)})


def checkpointing(config):
    import os
    import tempfile

    for i in range(3):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.txt"), "w") as f:
                f.write(str(i))
            tuneplat.report({"loss": float(i), "host": socket.gethostname()},
                            checkpoint=tuneplat.Checkpoint.from_directory(d))


def host_dies(config):
    """Checkpoints every step; on host w2, at step 3, it says so (a marker file) and waits for its host to die."""
    import time

    start = _resumed_step()
    for step in range(start + 1, 6):
        if step == 3 and socket.gethostname() == "w2":
            with open(config["marker"], "w") as f:
                f.write("w2")
            time.sleep(600)  # held for the test to kill (every process of host w2); never reached as a delay
        _report_step(step, start)


def path_lost(config):
    """Checkpoints every step; on host w2, at step 3, it says so (a marker file) and goes on reporting while the
    test cuts w2's path to the tuner (Dask still reaches w2)."""
    import os
    import time

    start = _resumed_step()
    for step in range(start + 1, 6):
        if step == 3 and socket.gethostname() == "w2" and not os.path.exists(config["marker"]):
            with open(config["marker"], "w") as f:
                f.write("w2")
            # the test process writes this file once the path is cut (another process's file on a shared disk,
            # across network namespaces: nothing to block on, so poll it)
            while not os.path.exists(config["marker"] + ".cut"):
                time.sleep(0.05)
        _report_step(step, start, folder=os.path.dirname(config["marker"]))  # pytest's tmp_path


def path_lost_group(config):
    """path_lost for a group of ranks: at step 3, rank 0 writes its host's name in the marker file and waits for
    the test to cut that host's path to the tuner; every rank checkpoints every step."""
    import os
    import time

    from tuneplat import train

    start = _resumed_step()
    rank = train.get_context().get_world_rank()
    for step in range(start + 1, 6):
        if step == 3 and rank == 0 and not os.path.exists(config["marker"]):
            with open(config["marker"], "w") as f:
                f.write(socket.gethostname())
            while not os.path.exists(config["marker"] + ".cut"):  # another process's file: poll it
                time.sleep(0.05)
        _report_step(step, start, folder=os.path.dirname(config["marker"]))


def elastic_hosts(config):
    """An elastic group (ScalingConfig(num_workers=(1, 2))) across hosts w1 and w2; a checkpoint every step.

    On 2 ranks, at step 3, the rank on w2 says so (marker ``lost``) and waits for its host to die. On 1 rank,
    two steps after its restart, it says so (marker ``shrunk``) and waits until a second worker is in the
    cluster again (the test starts one on w2), so that the group grows at its next checkpoint.
    """
    import os
    import tempfile
    import time

    import torch
    import torch.distributed as dist
    from distributed import get_client

    ctx = tuneplat.get_context()
    world = ctx.get_world_size()
    start = _resumed_step()
    hosts = [socket.gethostname()]
    if world > 1:
        hosts = [""] * world
        dist.all_gather_object(hosts, socket.gethostname())
    for step in range(start + 1, config["steps"] + 1):
        if world > 1:
            t = torch.ones(1)
            dist.all_reduce(t)  # a collective every step: a lost peer fails it
        if step == 3 and world == 2 and socket.gethostname() == "w2":
            with open(config["marker_lost"], "w") as f:
                f.write("w2")
            time.sleep(600)  # held for the test to kill (every process of host w2); never reached as a delay
        if world == 1 and step == start + 2 and not os.path.exists(config["marker_shrunk"]):
            with open(config["marker_shrunk"], "w") as f:
                f.write(socket.gethostname())
            get_client().wait_for_workers(2, timeout=180)  # the test brings a worker up on w2 again
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "step.txt"), "w") as f:
                f.write(str(step))
            tuneplat.report({"loss": float(step), "world_size": world, "hosts": ",".join(sorted(hosts))},
                            checkpoint=tuneplat.Checkpoint.from_directory(d))
