"""``ray.train.v2.api.reported_checkpoint``: the same objects as ``tuneplat.train``."""

from __future__ import annotations

from ..._reported import ReportedCheckpoint, ReportedCheckpointStatus

__all__ = ["ReportedCheckpoint", "ReportedCheckpointStatus"]
