"""``LightGBMCheckpoint`` (deprecated in Ray 2.60 in favour of ``Checkpoint`` + ``RayTrainReportCallback``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightgbm

from .._boosting import BoosterCheckpoint

__all__ = ["LightGBMCheckpoint"]


class LightGBMCheckpoint(BoosterCheckpoint):
    """A :class:`~tuneplat.Checkpoint` holding a LightGBM booster (``ray.train.lightgbm.LightGBMCheckpoint``)."""

    _prefix = "tuneplat-lightgbm-"
    MODEL_FILENAME = "model.txt"

    @classmethod
    def from_model(cls, booster: lightgbm.Booster, *, preprocessor: Any = None,
                   path: str | None = None) -> LightGBMCheckpoint:
        """A checkpoint of ``booster`` in ``path`` (an empty folder; a new temporary one by default).

        Raises:
            ValueError: ``path`` is not a folder.
            NotImplementedError: ``preprocessor`` (Ray Data preprocessors are not ported).
        """
        return cls._from_model(booster, preprocessor, path)  # type: ignore[no-any-return]

    def get_model(self) -> lightgbm.Booster:
        """The booster stored in this checkpoint."""
        with self.as_directory() as folder:
            return lightgbm.Booster(model_file=Path(folder, self.MODEL_FILENAME).as_posix())
