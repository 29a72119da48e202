"""``ray.air.session``: what a trial calls while it runs, under Ray 2.0–2.6's names.

``session.report(metrics, checkpoint=...)`` is :func:`tuneplat.report`;
``session.get_checkpoint()`` is :func:`tuneplat.get_checkpoint`; the getters
read :func:`tuneplat.get_context`.
"""

from __future__ import annotations

from typing import Any

from ..storage._checkpoint import Checkpoint
from ..train._session import get_checkpoint, get_context
from ..train._session import report as _report

__all__ = ["get_checkpoint", "get_experiment_name", "get_local_rank", "get_local_world_size", "get_node_rank",
           "get_trial_dir", "get_trial_id", "get_trial_name", "get_trial_resources", "get_world_rank",
           "get_world_size", "report"]


def report(metrics: dict[str, Any], *, checkpoint: Checkpoint | None = None) -> None:
    """Report this step's metrics (and a checkpoint): ``ray.air.session.report``."""
    _report(metrics, checkpoint=checkpoint)


def get_trial_id() -> str | None:
    return get_context().get_trial_id()


def get_trial_name() -> str | None:
    return get_context().get_trial_name()


def get_trial_dir() -> str | None:
    return get_context().get_trial_dir()


def get_experiment_name() -> str | None:
    return get_context().get_experiment_name()


def get_trial_resources() -> Any:
    return get_context().get_trial_resources()


def get_world_rank() -> int:
    return get_context().get_world_rank()


def get_world_size() -> int:
    return get_context().get_world_size()


def get_local_rank() -> int:
    return get_context().get_local_rank()


def get_local_world_size() -> int:
    return get_context().get_local_world_size()


def get_node_rank() -> int:
    return get_context().get_node_rank()
