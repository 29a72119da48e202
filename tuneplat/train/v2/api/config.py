"""``ray.train.v2.api.config``: the same objects as ``tuneplat.train``."""

from __future__ import annotations

from ...._config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig

__all__ = ["CheckpointConfig", "FailureConfig", "RunConfig", "ScalingConfig"]
