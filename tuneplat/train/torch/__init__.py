"""PyTorch helpers for code running inside a rank (``tuneplat.train.torch``, like ``ray.train.torch``).

The same training function runs on one rank, on several CPU ranks (gloo) or
on several GPUs (nccl): :func:`prepare_model` places the model on the rank's
device and wraps it in ``DistributedDataParallel`` when the trial has more
than one rank; :func:`prepare_data_loader` shards a ``DataLoader`` with a
``DistributedSampler`` (keeping batch size, shuffle, collate function,
workers...), advances the sampler's epoch on every pass and moves batches to
the device.

Example:
    >>> from tuneplat import train
    >>> from tuneplat.train.torch import prepare_data_loader, prepare_model
    >>> def train_loop(config):  # doctest: +SKIP
    ...     model = prepare_model(torch.nn.Linear(8, 1))
    ...     loader = prepare_data_loader(DataLoader(dataset, batch_size=32, shuffle=True))
    ...     opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    ...     for epoch in range(3):
    ...         for x, y in loader:
    ...             opt.zero_grad()
    ...             torch.nn.functional.mse_loss(model(x), y).backward()
    ...             opt.step()
    ...         train.report({"epoch": epoch})

Importing this module imports torch; ``import tuneplat`` alone does not.
"""

from __future__ import annotations

from ...storage._checkpoint import load_torch
from .._trainer import TorchTrainer
from ._torch import (
    TorchConfig,
    accelerate,
    backward,
    enable_reproducibility,
    get_device,
    get_devices,
    prepare_data_loader,
    prepare_model,
    prepare_optimizer,
)

__all__ = ["TorchConfig", "TorchTrainer", "accelerate", "backward", "enable_reproducibility", "get_device",
           "get_devices", "load_torch", "prepare_data_loader", "prepare_model", "prepare_optimizer"]
