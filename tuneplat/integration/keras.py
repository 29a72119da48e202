"""``ray.tune.integration.keras``: :class:`TuneReportCheckpointCallback` for Keras in a Tune trial.

Ray deprecated the module's other names (``TuneReportCallback``,
``_TuneCheckpointCallback``) for :class:`tuneplat.train.tensorflow.keras.ReportCheckpointCallback`;
they raise the same ``DeprecationWarning`` here.
"""

from __future__ import annotations

from typing import Any

from ..train.tensorflow.keras import RayReportCallback

__all__ = ["TuneReportCallback", "TuneReportCheckpointCallback"]

_DEPRECATION_MESSAGE = ("The `tuneplat.tune.integration.keras` module is deprecated in favor of "
                        "`tuneplat.train.tensorflow.keras.ReportCheckpointCallback`.")


class TuneReportCallback:
    """Deprecated (as in Ray): use :class:`tuneplat.train.tensorflow.keras.ReportCheckpointCallback`."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        raise DeprecationWarning(_DEPRECATION_MESSAGE)


class TuneReportCheckpointCallback(RayReportCallback):
    """Keras callback for Tune reporting and checkpointing (``ray.tune.integration.keras``).

    Arguments as :class:`tuneplat.train.tensorflow.keras.ReportCheckpointCallback`:
    ``checkpoint_on``, ``report_metrics_on`` (Keras event names less ``on_``,
    default ``"epoch_end"``) and ``metrics``.

    Example:
        >>> def train_fn(config):  # doctest: +SKIP
        ...     model.fit(x, y, epochs=10, callbacks=[TuneReportCheckpointCallback(metrics={"acc": "accuracy"})])
        >>> tuneplat.Tuner(train_fn, ...).fit()  # doctest: +SKIP
    """
