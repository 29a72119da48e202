"""XGBoost callbacks that report each boosting round (``ray.train.xgboost.RayTrainReportCallback``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from xgboost.callback import TrainingCallback
from xgboost.core import Booster

from ...storage._checkpoint import Checkpoint
from .._boosting import ReportCallbackCore, rank0_model_checkpoint

__all__ = ["RayReportCallback", "RayTrainReportCallback"]


class RayReportCallback(ReportCallbackCore, TrainingCallback):
    """What Train's and Tune's XGBoost callbacks share (Ray's ``RayReportCallback``)."""

    CHECKPOINT_NAME = "model.ubj"

    def __init__(self, metrics: str | list[str] | dict[str, str] | None = None, filename: str = CHECKPOINT_NAME,
                 frequency: int = 0, checkpoint_at_end: bool = True,
                 results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        TrainingCallback.__init__(self)
        self._setup(metrics, filename, frequency, checkpoint_at_end, results_postprocessing_fn)
        self._evals_log: Any = None
        self._last_checkpoint_iteration: int | None = None
        self._last_round: int | None = None

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = CHECKPOINT_NAME) -> Booster:
        """The booster saved in ``checkpoint`` by this callback.

        Args:
            checkpoint: a checkpoint reported by this callback (``result.checkpoint``).
            filename: the callback's ``filename``.

        Example:
            >>> booster = RayTrainReportCallback.get_model(result.checkpoint)  # doctest: +SKIP
        """
        with checkpoint.as_directory() as folder:
            booster = Booster()
            booster.load_model(Path(folder, filename).as_posix())
            return booster

    def after_iteration(self, model: Booster, epoch: int, evals_log: Any) -> bool:
        """Report this round (with the model every ``frequency`` rounds); a STOP decision ends the training.

        Rounds count from the model's first (``num_boosted_rounds()``), so a run
        resumed from a checkpoint (``xgb_model=``) keeps its cadence, and the
        final checkpoint is not reported twice when the last round was saved.
        """
        self._evals_log = evals_log
        round_ = model.num_boosted_rounds() - 1 if hasattr(model, "num_boosted_rounds") else epoch
        self._last_round = round_
        report_dict = self._get_report_dict(evals_log)
        if self._frequency and (round_ + 1) % self._frequency == 0:
            self._last_checkpoint_iteration = round_
            self._save_and_report_checkpoint(report_dict, model)
        else:
            self._report_metrics(report_dict)
        return False

    def after_training(self, model: Booster) -> Booster:
        """Report the final model (``checkpoint_at_end``) unless the last round was saved already."""
        if not self._checkpoint_at_end:
            return model
        if self._last_checkpoint_iteration is not None and self._last_checkpoint_iteration == self._last_round:
            return model
        report_dict = self._get_report_dict(self._evals_log) if self._evals_log else {}
        self._save_and_report_checkpoint(report_dict, model)
        return model


class RayTrainReportCallback(RayReportCallback):
    """Reports each boosting round's metrics to Train/Tune and saves the booster (``model.ubj``) as checkpoints.

    Args:
        metrics: what to report: a metric name (``"eval-logloss"``), a list of
            them, or a dict ``{reported name: xgboost metric}``; None reports
            every metric xgboost evaluated (``<eval set>-<metric>``).
        filename: the model file in the checkpoint (``"model.ubj"``; ``.json`` works too).
        frequency: checkpoint every ``frequency`` rounds (0: only at the end).
        checkpoint_at_end: report the final model as a checkpoint.
        results_postprocessing_fn: turns the reported dict into another (e.g.
            averages ``xgboost.cv``'s folds).

    In a multi-rank :class:`~tuneplat.train.xgboost.XGBoostTrainer` every rank
    reports each round (``report`` is a collective); rank 0 saves the model
    (every rank holds the same one).

    Example:
        >>> bst = xgboost.train(params, dtrain, evals=[(deval, "eval")],  # doctest: +SKIP
        ...                     callbacks=[RayTrainReportCallback(metrics={"loss": "eval-logloss"}, frequency=1)])
    """

    @contextlib.contextmanager
    def _get_checkpoint(self, model: Booster) -> Iterator[Checkpoint | None]:
        with rank0_model_checkpoint(model.save_model, self._filename) as checkpoint:
            yield checkpoint
