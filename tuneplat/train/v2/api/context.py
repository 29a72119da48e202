"""``ray.train.v2.api.context``: the same objects as ``tuneplat.train``."""

from __future__ import annotations

from ..._session import TrainContext

__all__ = ["TrainContext"]
