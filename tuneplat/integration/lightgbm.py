"""``ray.tune.integration.lightgbm``: report each boosting round of a Tune trial (``tuneplat.tune.integration.lightgbm``).

Example (Ray's ``lightgbm_example.py``, imports changed):
    >>> lgb.train(config, train_set, valid_sets=[test_set], valid_names=["eval"],  # doctest: +SKIP
    ...           callbacks=[TuneReportCheckpointCallback({"binary_error": "eval-binary_error",
    ...                                                    "binary_logloss": "eval-binary_logloss"})])

Needs the ``lightgbm`` extra: ``pip install 'tuneplat[lightgbm]'``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ..train._extras import require

require("lightgbm", "lightgbm", "tuneplat.tune.integration.lightgbm")

from lightgbm.basic import Booster  # noqa: E402

from ..storage._checkpoint import Checkpoint  # noqa: E402
from ..train._boosting import model_checkpoint  # noqa: E402
from ..train.lightgbm._callback import RayReportCallback  # noqa: E402

__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]


class TuneReportCheckpointCallback(RayReportCallback):
    """Reports each LightGBM round to Tune and saves the booster as the trial's checkpoint (``model.txt``).

    Args:
        metrics: a metric name (``"eval-binary_logloss"``), a list, or a dict
            ``{reported name: lightgbm metric}``; None reports every metric.
        filename: the model file in the checkpoint.
        frequency: checkpoint every ``frequency`` rounds (0: only at the end).
        checkpoint_at_end: report the model of the last round as a checkpoint.
        results_postprocessing_fn: turns the reported dict into another (``lightgbm.cv``).

    Example:
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
                                 "Use `tuneplat.tune.integration.lightgbm.TuneReportCheckpointCallback` instead.")
