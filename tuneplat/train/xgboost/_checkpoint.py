"""``XGBoostCheckpoint`` (deprecated in Ray 2.60 in favour of ``Checkpoint`` + ``RayTrainReportCallback``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import xgboost

from ...storage._checkpoint import Checkpoint

__all__ = ["XGBoostCheckpoint"]


class XGBoostCheckpoint(Checkpoint):
    """A :class:`~tuneplat.Checkpoint` holding an XGBoost booster (``ray.train.xgboost.XGBoostCheckpoint``).

    Example:
        >>> ckpt = XGBoostCheckpoint.from_model(booster)  # doctest: +SKIP
        >>> ckpt.get_model().num_boosted_rounds()  # doctest: +SKIP
    """

    MODEL_FILENAME = "model.json"

    @classmethod
    def from_model(cls, booster: xgboost.Booster, *, preprocessor: Any = None,
                   path: str | None = None) -> XGBoostCheckpoint:
        """A checkpoint of ``booster`` in ``path`` (an empty folder; a new temporary one by default).

        Raises:
            ValueError: ``path`` is not a folder.
            NotImplementedError: ``preprocessor`` (Ray Data preprocessors are not ported).
        """
        if preprocessor is not None:
            raise NotImplementedError("XGBoostCheckpoint.from_model(preprocessor=...): Ray Data preprocessors are not "
                                      "ported; save what you need beside the model in the checkpoint folder.")
        folder = Path(path or tempfile.mkdtemp(prefix="tuneplat-xgboost-"))
        if not folder.is_dir():
            raise ValueError(f"`path` must be a directory, but got: {folder}")
        booster.save_model(folder.joinpath(cls.MODEL_FILENAME).as_posix())
        return cls(os.path.abspath(folder))

    def get_model(self) -> xgboost.Booster:
        """The booster stored in this checkpoint."""
        with self.as_directory() as folder:
            booster = xgboost.Booster()
            booster.load_model(Path(folder, self.MODEL_FILENAME).as_posix())
            return booster
