"""Trainables for the multi-host tests (imported by the Dask workers on the simulated hosts)."""

from __future__ import annotations

import socket

import tuneplat


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
