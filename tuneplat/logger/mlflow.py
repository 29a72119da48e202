"""``ray.tune.logger.mlflow``: :class:`MLflowLoggerCallback` (the same class as :mod:`tuneplat.air.integrations.mlflow`'s)."""

from __future__ import annotations

from ..air.integrations.mlflow import MLflowLoggerCallback

__all__ = ["MLflowLoggerCallback"]
