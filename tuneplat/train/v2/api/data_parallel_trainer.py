"""``ray.train.v2.api.data_parallel_trainer``: the same objects as ``tuneplat.train``."""

from __future__ import annotations

from ..._trainer import DataParallelTrainer

__all__ = ["DataParallelTrainer"]
