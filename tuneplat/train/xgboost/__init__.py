"""Distributed XGBoost on the Dask cluster (``tuneplat.train.xgboost``, like ``ray.train.xgboost``).

:class:`XGBoostTrainer` runs your function on every rank inside xgboost's own
collective (:class:`XGBoostConfig`: rank 0's ``RabitTracker``, each rank's
``xgboost.collective.CommunicatorContext``); :class:`RayTrainReportCallback`
reports each boosting round and saves the booster. See ``docs/boosting.md``.

Needs the ``xgboost`` extra: ``pip install 'tuneplat[xgboost]'``.
"""

from __future__ import annotations

from .._extras import require

require("xgboost", "xgboost", "tuneplat.train.xgboost")

from ._callback import RayTrainReportCallback  # noqa: E402
from ._checkpoint import XGBoostCheckpoint  # noqa: E402
from ._config import XGBoostConfig  # noqa: E402
from ._trainer import XGBoostTrainer  # noqa: E402

__all__ = ["RayTrainReportCallback", "XGBoostCheckpoint", "XGBoostConfig", "XGBoostTrainer"]
