"""``LightGBMCheckpoint`` (deprecated in Ray 2.60 in favour of ``Checkpoint`` + ``RayTrainReportCallback``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import lightgbm

from ...storage._checkpoint import Checkpoint

__all__ = ["LightGBMCheckpoint"]


class LightGBMCheckpoint(Checkpoint):
    """A :class:`~tuneplat.Checkpoint` holding a LightGBM booster (``ray.train.lightgbm.LightGBMCheckpoint``)."""

    MODEL_FILENAME = "model.txt"

    @classmethod
    def from_model(cls, booster: lightgbm.Booster, *, preprocessor: Any = None,
                   path: str | None = None) -> LightGBMCheckpoint:
        """A checkpoint of ``booster`` in ``path`` (an empty folder; a new temporary one by default).

        Raises:
            ValueError: ``path`` is not a folder.
            NotImplementedError: ``preprocessor`` (Ray Data preprocessors are not ported).
        """
        if preprocessor is not None:
            raise NotImplementedError("LightGBMCheckpoint.from_model(preprocessor=...): Ray Data preprocessors are "
                                      "not ported; save what you need beside the model in the checkpoint folder.")
        folder = Path(path or tempfile.mkdtemp(prefix="tuneplat-lightgbm-"))
        if not folder.is_dir():
            raise ValueError(f"`path` must be a directory, but got: {folder}")
        booster.save_model(folder.joinpath(cls.MODEL_FILENAME).as_posix())
        return cls(os.path.abspath(folder))

    def get_model(self) -> lightgbm.Booster:
        """The booster stored in this checkpoint."""
        with self.as_directory() as folder:
            return lightgbm.Booster(model_file=Path(folder, self.MODEL_FILENAME).as_posix())
