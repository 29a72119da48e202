"""``ray.air.integrations.keras``: :class:`ReportCheckpointCallback` (the same class as
:class:`tuneplat.train.tensorflow.keras.ReportCheckpointCallback`)."""

from __future__ import annotations

from ...train.tensorflow.keras import ReportCheckpointCallback

__all__ = ["ReportCheckpointCallback"]
