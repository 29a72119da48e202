"""``ray.train.v2.api.callback``: the same objects as ``tuneplat.train``."""

from __future__ import annotations

from ..._callback import RayTrainCallback, TrainRunContext, UserCallback

__all__ = ["RayTrainCallback", "TrainRunContext", "UserCallback"]
