"""``ray.air``, Ray 2.0–2.6's names for the same things: ``from tuneplat import air``.

``air.RunConfig``, ``air.CheckpointConfig``, ``air.ScalingConfig``,
``air.FailureConfig``, ``air.Checkpoint``, ``air.Result`` are tuneplat's
classes; ``air.session.report(...)``, ``air.session.get_checkpoint()`` and the
other ``session`` getters run inside a trial. MLflow:
:mod:`tuneplat.air.integrations.mlflow`.

Example:
    >>> from tuneplat import air
    >>> from tuneplat.air import session
    >>> def train_fn(config):  # doctest: +SKIP
    ...     session.report({"loss": 1.0})
    >>> run_config = air.RunConfig(name="exp", checkpoint_config=air.CheckpointConfig(num_to_keep=2))
"""

from __future__ import annotations

from .._compat import SyncConfig
from .._config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ..results._result import Result
from ..storage._checkpoint import Checkpoint
from . import session

__all__ = ["Checkpoint", "CheckpointConfig", "FailureConfig", "Result", "RunConfig", "ScalingConfig", "SyncConfig",
           "session"]
