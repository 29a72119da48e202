"""What trainables call while they run (``tuneplat.train``, like ``ray.train``)."""

from __future__ import annotations

from .._compat import SyncConfig
from .._config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ..results._result import Result
from ..storage._checkpoint import Checkpoint
from ._backend import BackendConfig
from ._callback import UserCallback
from ._configs_v2 import TRAIN_DATASET_KEY, LoggingConfig
from ._errors import ControllerError, NCCLHangError, PreemptionError, TrainingFailedError, WorkerGroupError
from ._reported import (
    CheckpointConsistencyMode,
    ReportedCheckpoint,
    ReportedCheckpointStatus,
    get_all_reported_checkpoints,
)
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
from ._trainer import DataParallelTrainer, TorchTrainer
from .data import DataConfig, DataIterator, get_dataset_shard


def __getattr__(name: str) -> object:
    """``train.torch`` (``train.xgboost``, ``train.lightgbm``, ``train.v2``) without importing it first (as
    ``ray.train.torch`` after ``from ray import train``)."""
    if name in ("torch", "xgboost", "lightgbm", "v2"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "BackendConfig",
    "Checkpoint",
    "CheckpointConfig",
    "CheckpointConsistencyMode",
    "CheckpointUploadMode",
    "ControllerError",
    "DataConfig",
    "DataIterator",
    "DataParallelTrainer",
    "FailureConfig",
    "LoggingConfig",
    "NCCLHangError",
    "PreemptionError",
    "PreemptionInfo",
    "ReportedCheckpoint",
    "ReportedCheckpointStatus",
    "Result",
    "RunConfig",
    "ScalingConfig",
    "SyncConfig",
    "TRAIN_DATASET_KEY",
    "TorchTrainer",
    "TrainContext",
    "TrainingFailedError",
    "UserCallback",
    "WorkerGroupError",
    "get_all_reported_checkpoints",
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "get_preemption_info",
    "report",
    "should_checkpoint",
]
