"""Ray Train V2's smaller public names: ``LoggingConfig``, ``TRAIN_DATASET_KEY``."""

from __future__ import annotations

import logging
from dataclasses import dataclass

__all__ = ["TRAIN_DATASET_KEY", "LoggingConfig"]

#: the dataset name Ray's trainers treat as the training set (``ray.train.TRAIN_DATASET_KEY``)
TRAIN_DATASET_KEY = "train"


@dataclass
class LoggingConfig:
    """Ray Train V2's logging settings (``ray.train.LoggingConfig``).

    Args:
        log_level: the level of the ``tuneplat`` logger in the driver while the run lasts ("DEBUG", "INFO",
            "WARNING", "ERROR", "CRITICAL"); tuneplat's ranks log through their Dask workers' logging.
    """

    log_level: str = "INFO"

    def __post_init__(self) -> None:
        if not isinstance(self.log_level, str) or self.log_level.upper() not in (
                "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError(f"The value of `LoggingConfig.log_level` is {self.log_level!r}, but must be one of "
                             "'DEBUG', 'INFO', 'WARNING', 'ERROR', 'CRITICAL'.")

    def apply(self) -> None:
        """Set the ``tuneplat`` logger's level."""
        logging.getLogger("tuneplat").setLevel(self.log_level.upper())
