"""``ray.train.v2.api.exceptions``: the same objects as ``tuneplat.train``."""

from __future__ import annotations

from ..._errors import ControllerError, PreemptionError, TrainingFailedError, WorkerGroupError

__all__ = ["ControllerError", "PreemptionError", "TrainingFailedError", "WorkerGroupError"]
