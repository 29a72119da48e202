"""``ray.train.v2.torch.torch_trainer``: the same objects as ``tuneplat.train``."""

from __future__ import annotations

from ...torch import TorchTrainer

__all__ = ["TorchTrainer"]
