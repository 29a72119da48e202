"""``ray.tune.integration.xgboost``: report each boosting round of a Tune trial (``tuneplat.tune.integration.xgboost``).

Example (Ray's ``xgboost_example.py``, imports changed):
    >>> def train_breast_cancer(config):  # doctest: +SKIP
    ...     xgb.train(config, train_set, evals=[(test_set, "eval")], verbose_eval=False,
    ...               callbacks=[TuneReportCheckpointCallback(frequency=1)])

Needs the ``xgboost`` extra: ``pip install 'tuneplat[xgboost]'``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ..train._extras import require

require("xgboost", "xgboost", "tuneplat.tune.integration.xgboost")

from xgboost.core import Booster  # noqa: E402

from ..storage._checkpoint import Checkpoint  # noqa: E402
from ..train._boosting import model_checkpoint  # noqa: E402
from ..train.xgboost._callback import RayReportCallback  # noqa: E402

__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]


class TuneReportCheckpointCallback(RayReportCallback):
    """Reports each boosting round to Tune and saves the booster as the trial's checkpoint (``model.ubj``).

    Args:
        metrics: a metric name (``"eval-logloss"``), a list, or a dict
            ``{reported name: xgboost metric}``; None reports every metric.
        filename: the model file in the checkpoint.
        frequency: checkpoint every ``frequency`` rounds (0: only at the end).
            Schedulers that pause and resume trials (PBT, HyperBand) need it.
        checkpoint_at_end: report the final model as a checkpoint.
        results_postprocessing_fn: turns the reported dict into another
            (``xgboost.cv``: average the folds).

    Example:
        >>> xgb.train(config, dtrain, evals=[(dtest, "eval")],  # doctest: +SKIP
        ...           callbacks=[TuneReportCheckpointCallback(metrics={"loss": "eval-logloss"}, frequency=1)])
        >>> booster = TuneReportCheckpointCallback.get_model(result.checkpoint)  # doctest: +SKIP
    """

    def __init__(self, metrics: str | list[str] | dict[str, str] | None = None,
                 filename: str = RayReportCallback.CHECKPOINT_NAME, frequency: int = 0,
                 checkpoint_at_end: bool = True,
                 results_postprocessing_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        super().__init__(metrics=metrics, filename=filename, frequency=frequency,
                         checkpoint_at_end=checkpoint_at_end, results_postprocessing_fn=results_postprocessing_fn)

    @contextlib.contextmanager
    def _get_checkpoint(self, model: Booster) -> Iterator[Checkpoint | None]:
        with model_checkpoint(model.save_model, self._filename) as checkpoint:
            yield checkpoint


class TuneReportCallback:
    """Removed in Ray (2.11): constructing it raises, naming :class:`TuneReportCheckpointCallback`."""

    def __new__(cls, *args: Any, **kwargs: Any) -> TuneReportCallback:
        raise DeprecationWarning("`TuneReportCallback` is deprecated. "
                                 "Use `tuneplat.tune.integration.xgboost.TuneReportCheckpointCallback` instead.")
