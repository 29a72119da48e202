"""Ray's logger callbacks (``ray.tune.logger``): :class:`LoggerCallback` and the built-in file loggers.

Every trial writes Ray's files without being asked: ``params.json``,
``result.json``, ``progress.csv``, and TensorBoard event files when
``tensorboardX`` (or ``torch.utils.tensorboard``) is installed. Passing
:class:`CSVLoggerCallback`, :class:`JsonLoggerCallback` or
:class:`TBXLoggerCallback` in ``RunConfig(callbacks=...)`` is accepted and
changes nothing (they are the built-in ones). With
``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1`` (Ray's variable) only the ones passed
are written. MLflow: :mod:`tuneplat.logger.mlflow`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..tracking._files import FileLoggers
from ..tracking._user_callbacks import Callback

__all__ = ["CSVLoggerCallback", "JsonLoggerCallback", "LoggerCallback", "TBXLoggerCallback", "default_file_loggers"]


class LoggerCallback(Callback):
    """A callback that logs trial events (``ray.tune.logger.LoggerCallback``): override the ``log_*`` methods.

    Example:
        >>> from tuneplat.logger import LoggerCallback
        >>> class PrintLogger(LoggerCallback):
        ...     def log_trial_result(self, iteration, trial, result):
        ...         print(trial.trial_id, result["training_iteration"])
        ...     def log_trial_end(self, trial, failed=False):
        ...         print(trial.trial_id, "failed" if failed else "ended")
    """

    def log_trial_start(self, trial: Any) -> None:
        """A trial starts (its first attempt, a retry or a resume)."""

    def log_trial_restore(self, trial: Any) -> None:
        """A trial starts again from a checkpoint."""

    def log_trial_save(self, trial: Any) -> None:
        """A trial's checkpoint was committed."""

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        """A trial reported ``result``."""

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        """A trial ended (``failed``: it ended in ERROR)."""

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_start(trial)

    def on_trial_restore(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_restore(trial)

    def on_trial_save(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_save(trial)

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        self.log_trial_result(iteration, trial, result)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_end(trial, failed=False)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self.log_trial_end(trial, failed=True)


class CSVLoggerCallback(LoggerCallback):
    """``progress.csv`` per trial: written by tuneplat in any case (see the module docstring)."""


class JsonLoggerCallback(LoggerCallback):
    """``result.json`` and ``params.json`` per trial: written by tuneplat in any case."""


class TBXLoggerCallback(LoggerCallback):
    """TensorBoard event files per trial: written by tuneplat whenever tensorboardX is installed."""


def default_file_loggers(callbacks: Sequence[Any] | None) -> list[FileLoggers]:
    """The built-in file loggers for ``RunConfig.callbacks`` (Ray's automatic CSV/JSON/TensorBoard loggers)."""
    given = list(callbacks or [])
    if os.environ.get("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "0").strip() not in ("", "0"):
        want_csv = any(isinstance(c, CSVLoggerCallback) for c in given)
        want_tb = any(isinstance(c, TBXLoggerCallback) for c in given)
    else:
        want_csv = want_tb = True
    if not (want_csv or want_tb):
        return []
    return [FileLoggers(csv=want_csv, tensorboard=want_tb)]
