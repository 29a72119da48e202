"""Module-level trainables for the GPU-memory tests (Dask workers import them by reference)."""

from __future__ import annotations

import torch

import tuneplat as tune
from tuneplat.train.torch import get_device


def hold_memory(config: dict) -> None:
    """Allocate ``config["mib"]`` MiB on the trial's GPU, then report a few steps (its peak is then >= that)."""
    device = get_device()
    block = torch.empty(int(config["mib"]) * 2**20, dtype=torch.uint8, device=device)
    for step in range(int(config.get("steps", 3))):
        block.add_(1)
        tune.report({"loss": 1.0 / (step + 1), "device": str(device)})


def matmul_load(config: dict) -> None:
    """A GPU workload of ``config["mib"]`` MiB of activations for ``config["steps"]`` steps (benchmarks/gpu_packing)."""
    device = get_device()
    n = int((int(config["mib"]) * 2**20 / 4 / 3) ** 0.5)
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    for step in range(int(config.get("steps", 20))):
        for _ in range(int(config.get("inner", 10))):
            c = a @ b
        torch.cuda.synchronize(device)
        tune.report({"loss": float(c[0, 0]) / (step + 1)})
