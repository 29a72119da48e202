"""``ray.train.v2.torch``: the same objects as ``tuneplat.train.torch``."""

from __future__ import annotations

from ...torch import TorchTrainer

__all__ = ["TorchTrainer"]
