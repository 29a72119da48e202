"""What trainables call while they run (``tuneplat.train``, like ``ray.train``)."""

from __future__ import annotations

from .._checkpoint import Checkpoint
from .._compat import SyncConfig
from .._config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from .._result import Result
from ._session import TrainContext, get_checkpoint, get_context, report
from ._trainer import TorchTrainer, TrainingFailedError

__all__ = [
    "Checkpoint",
    "CheckpointConfig",
    "FailureConfig",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "SyncConfig",
    "TorchTrainer",
    "TrainContext",
    "TrainingFailedError",
    "get_checkpoint",
    "get_context",
    "report",
]
