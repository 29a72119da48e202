"""``XGBoostCheckpoint`` (deprecated in Ray 2.60 in favour of ``Checkpoint`` + ``RayTrainReportCallback``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import xgboost

from .._boosting import BoosterCheckpoint

__all__ = ["XGBoostCheckpoint"]


class XGBoostCheckpoint(BoosterCheckpoint):
    """A :class:`~tuneplat.Checkpoint` holding an XGBoost booster (``ray.train.xgboost.XGBoostCheckpoint``).

    Example:
        >>> ckpt = XGBoostCheckpoint.from_model(booster)  # doctest: +SKIP
        >>> ckpt.get_model().num_boosted_rounds()  # doctest: +SKIP
    """

    _prefix = "tuneplat-xgboost-"
    MODEL_FILENAME = "model.json"

    @classmethod
    def from_model(cls, booster: xgboost.Booster, *, preprocessor: Any = None,
                   path: str | None = None) -> XGBoostCheckpoint:
        """A checkpoint of ``booster`` in ``path`` (an empty folder; a new temporary one by default).

        Raises:
            ValueError: ``path`` is not a folder.
            NotImplementedError: ``preprocessor`` (Ray Data preprocessors are not ported).
        """
        return cls._from_model(booster, preprocessor, path)  # type: ignore[no-any-return]

    def get_model(self) -> xgboost.Booster:
        """The booster stored in this checkpoint."""
        with self.as_directory() as folder:
            booster = xgboost.Booster()
            booster.load_model(Path(folder, self.MODEL_FILENAME).as_posix())
            return booster
