"""What trainables call while they run (``tuneplat.train``, like ``ray.train``)."""

from __future__ import annotations

from .._compat import SyncConfig
from .._config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ..results._result import Result
from ..storage._checkpoint import Checkpoint
from ._backend import BackendConfig
from ._session import (
    CheckpointUploadMode,
    PreemptionInfo,
    TrainContext,
    get_checkpoint,
    get_context,
    get_preemption_info,
    report,
    should_checkpoint,
)
from ._trainer import DataParallelTrainer, TorchTrainer, TrainingFailedError
from .data import DataConfig, DataIterator, get_dataset_shard


def __getattr__(name: str) -> object:
    """``train.torch`` (``train.xgboost``, ``train.lightgbm``) without ``import tuneplat.train.torch`` first (as ``ray.train.torch`` after ``from ray import train``)."""
    if name in ("torch", "xgboost", "lightgbm"):
        import importlib

        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "BackendConfig",
    "Checkpoint",
    "CheckpointConfig",
    "CheckpointUploadMode",
    "DataConfig",
    "DataIterator",
    "DataParallelTrainer",
    "FailureConfig",
    "PreemptionInfo",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "SyncConfig",
    "TorchTrainer",
    "TrainContext",
    "TrainingFailedError",
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "get_preemption_info",
    "report",
    "should_checkpoint",
]
