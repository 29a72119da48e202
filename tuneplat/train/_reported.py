"""Ray Train V2's ``get_all_reported_checkpoints()`` and the types it returns."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ..storage._checkpoint import Checkpoint

__all__ = ["CheckpointConsistencyMode", "ReportedCheckpoint", "ReportedCheckpointStatus",
           "get_all_reported_checkpoints"]


class ReportedCheckpointStatus(enum.Enum):
    """A reported checkpoint's state (``ray.train.ReportedCheckpointStatus``).

    tuneplat has no checkpoint validation step: every checkpoint it lists is ``COMMITTED``.
    """

    COMMITTED = "COMMITTED"
    PENDING_VALIDATION = "PENDING_VALIDATION"
    VALIDATED = "VALIDATED"
    VALIDATION_TIMEOUT = "VALIDATION_TIMEOUT"
    VALIDATION_FAILED = "VALIDATION_FAILED"


class CheckpointConsistencyMode(enum.Enum):
    """What :func:`get_all_reported_checkpoints` waits for (``ray.train.CheckpointConsistencyMode``).

    ``report()`` returns only once its checkpoint is committed, so both modes read the same list here.
    """

    COMMITTED = "COMMITTED"
    VALIDATED = "VALIDATED"


@dataclass
class ReportedCheckpoint:
    """A checkpoint the run reported, with the metrics reported with it (``ray.train.ReportedCheckpoint``)."""

    checkpoint: Checkpoint
    metrics: dict[str, Any]
    status: ReportedCheckpointStatus


def get_all_reported_checkpoints(consistency_mode: CheckpointConsistencyMode = CheckpointConsistencyMode.VALIDATED,
                                 timeout_s: float | None = None) -> list[ReportedCheckpoint]:
    """Every checkpoint this run reported so far and still keeps, oldest first (``ray.train.get_all_reported_checkpoints``).

    Call it from the training function (every rank may). It includes the
    checkpoints of earlier attempts (a retry, a resumed run); those that
    ``CheckpointConfig(num_to_keep=...)`` deleted are gone. Each holds rank 0's
    reported metrics (with the keys tuneplat adds, ``training_iteration``, ...).
    In local mode (``ScalingConfig(num_workers=0)``) it returns ``[]``, as Ray's does.

    Args:
        consistency_mode: accepted (``report()`` has committed its checkpoint when it returns).
        timeout_s: accepted (nothing is waited for).

    Example:
        >>> def train_func(config):  # doctest: +SKIP
        ...     ...
        ...     for reported in train.get_all_reported_checkpoints():
        ...         print(reported.checkpoint.path, reported.metrics["loss"])
    """
    from ._session import _get_session

    if not isinstance(consistency_mode, CheckpointConsistencyMode):
        raise ValueError(f"The value of `consistency_mode` is {consistency_mode!r}, but must be a "
                         "train.CheckpointConsistencyMode (COMMITTED or VALIDATED).")
    session = _get_session("get_all_reported_checkpoints")
    listing = getattr(session, "reported_checkpoints", None)
    if listing is None:
        return []
    return [ReportedCheckpoint(c, m, ReportedCheckpointStatus.COMMITTED) for c, m in listing()]
