"""A real model on real data: an MLP on scikit-learn's bundled ``load_digits`` (8x8 images, 10 classes).

:func:`train_loop` is plain PyTorch plus three tuneplat calls
(``prepare_model``, ``prepare_data_loader``, ``report``), so the same
function runs on one rank, on several CPU ranks (gloo) or on GPUs (nccl).
Sweep files reference it as ``examples.digits:train_loop``.

Config keys:
    lr (float): Adam learning rate (default 0.01).
    hidden (int): hidden units (default 64).
    batch_size (int): per-rank batch size (default 32).
    epochs (int): passes over the training set (default 10).
    num_workers (int): DataLoader worker processes (default 0).
    seed (int): model initialisation and data split seed (default 0).

Reports each epoch: ``val_loss``, ``val_accuracy``, ``train_loss``, ``epoch``,
with a checkpoint (``model.pt``: model and optimizer state, epoch). Resumes
from :func:`tuneplat.get_checkpoint` when the trial restarts.

Example:
    >>> import tuneplat as tune
    >>> from examples.digits import train_loop
    >>> tuner = tune.Tuner(train_loop, param_space={"lr": tune.loguniform(1e-3, 1e-1), "epochs": 5},  # doctest: +SKIP
    ...                    tune_config=tune.TuneConfig(metric="val_accuracy", mode="max", num_samples=4))
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import tuneplat as tune
from tuneplat.train.torch import get_device, prepare_data_loader, prepare_model

__all__ = ["MLP", "evaluate", "load_data", "train_loop"]


def load_data(seed: int = 0, val_fraction: float = 0.2) -> tuple[TensorDataset, TensorDataset]:
    """Train and validation sets of the digits data (features scaled to [0, 1]), split stratified by ``seed``."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_tr, x_val, y_tr, y_val = train_test_split(x / 16.0, y, test_size=val_fraction, random_state=seed, stratify=y)

    def as_set(a: Any, b: Any) -> TensorDataset:
        return TensorDataset(torch.tensor(a, dtype=torch.float32), torch.tensor(b, dtype=torch.long))

    return as_set(x_tr, y_tr), as_set(x_val, y_val)


class MLP(nn.Module):
    """64 inputs → ``hidden`` ReLU units → 10 classes."""

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@torch.no_grad()
def evaluate(model: nn.Module, data: TensorDataset, device: torch.device) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of ``model`` on ``data``."""
    model.eval()
    x, y = (t.to(device) for t in data.tensors)
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y).item()
    accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    model.train()
    return loss, accuracy


def train_loop(config: dict[str, Any]) -> None:
    """Train the MLP; report validation loss/accuracy and a checkpoint every epoch."""
    lr = float(config.get("lr", 0.01))
    hidden = int(config.get("hidden", 64))
    batch_size = int(config.get("batch_size", 32))
    epochs = int(config.get("epochs", 10))
    num_workers = int(config.get("num_workers", 0))
    seed = int(config.get("seed", 0))

    torch.manual_seed(seed)  # same initial weights on every rank (DDP also broadcasts rank 0's)
    train_set, val_set = load_data(seed)
    model: nn.Module = MLP(hidden)  # (DDP-wrapped by prepare_model below)
    start_epoch = 0
    state = None
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            state = torch.load(os.path.join(folder, "model.pt"), map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        start_epoch = int(state["epoch"]) + 1

    model = prepare_model(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
    loader = prepare_data_loader(DataLoader(train_set, batch_size=batch_size, shuffle=True, num_workers=num_workers))
    device = get_device()
    rank = tune.get_context().get_world_rank()

    for epoch in range(start_epoch, epochs):
        total, count = 0.0, 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(y)
            count += len(y)
        val_loss, val_accuracy = evaluate(model, val_set, device)
        metrics = {"val_loss": val_loss, "val_accuracy": val_accuracy, "train_loss": total / max(count, 1),
                   "epoch": epoch}
        with tempfile.TemporaryDirectory() as folder:
            ckpt = None
            if rank == 0:  # the weights are the same on every rank: one copy is enough
                plain = getattr(model, "module", model)  # DDP's wrapped model, else the model
                torch.save({"model": plain.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                           os.path.join(folder, "model.pt"))
                ckpt = tune.Checkpoint.from_directory(folder)
            tune.report(metrics, checkpoint=ckpt)
