"""Keras callbacks that report to tuneplat (``ray.train.tensorflow.keras``).

:class:`ReportCheckpointCallback` reports Keras' logs (all, or the ``metrics``
named) at the chosen Keras events, with a checkpoint of the model
(``model.keras``, see :class:`~tuneplat.train.tensorflow.TensorflowCheckpoint`)
at the ``checkpoint_on`` events. Every rank of a ``MultiWorkerMirroredStrategy``
group reports (a collective, as Keras' own hooks are), and its model file lands
in the same checkpoint.

The Keras ``Callback`` class it derives from is chosen when the callback is
built, inside the training function (after the rank's ``TF_USE_LEGACY_KERAS``
is set): Keras 3's when the calling code imported ``keras`` (and not
``tf_keras``), else ``tf.keras``'s (tf-keras when ``TF_USE_LEGACY_KERAS=1``,
as Ray's examples choose).

Example (Ray's ``tensorflow_mnist_example.py``, imports changed):
    >>> from tuneplat.air.integrations.keras import ReportCheckpointCallback  # doctest: +SKIP
    >>> model.fit(dataset, epochs=3, callbacks=[ReportCheckpointCallback()])  # doctest: +SKIP
"""

from __future__ import annotations

import shutil
import sys
import types
from typing import Any

from .. import _session as _sessions
from ._checkpoint import TensorflowCheckpoint

__all__ = ["RayReportCallback", "ReportCheckpointCallback"]

_ALLOWED = ("epoch_begin", "epoch_end", "train_batch_begin", "train_batch_end", "test_batch_begin", "test_batch_end",
            "predict_batch_begin", "predict_batch_end", "train_begin", "train_end", "test_begin", "test_end",
            "predict_begin", "predict_end")


def _keras_base(frame: types.FrameType | None) -> type:
    """The Keras ``Callback`` class of the Keras the calling code uses."""
    names: set[str] = set()
    if frame is not None:
        for space in (frame.f_locals, frame.f_globals):
            for value in list(space.values()):
                if isinstance(value, types.ModuleType):
                    names.add(value.__name__.split(".")[0])
    if "keras" in names and "tf_keras" not in names:  # Keras 3 (``import keras``, or tf.keras when it is Keras 3)
        import keras

        return keras.callbacks.Callback  # type: ignore[no-any-return]
    import tensorflow as tf

    return tf.keras.callbacks.Callback  # type: ignore[no-any-return]


_CONCRETE: dict[tuple[type, type], type] = {}


def _as_list(value: str | list[str], name: str) -> list[str]:
    items = [value] if isinstance(value, str) else list(value)
    bad = [w for w in items if w not in _ALLOWED]
    if bad:
        raise ValueError(f"Invalid trigger time selected for `{name}`: {bad}. Must be one of {list(_ALLOWED)}.")
    return items


class RayReportCallback:
    """Reports metrics, and checkpoints at the chosen events (the base of :class:`ReportCheckpointCallback`).

    Args:
        checkpoint_on: Keras event(s) (``"epoch_end"``, ``"train_batch_end"``, ... the
            hook's name less ``on_``) at which a checkpoint is saved and reported.
        report_metrics_on: event(s) at which metrics are reported (always with a
            checkpoint at ``checkpoint_on`` events).
        metrics: which Keras logs to report: None (all), a name, a list of names,
            or a dict ``{reported name: Keras log name}``.
    """

    def __new__(cls, checkpoint_on: str | list[str] = "epoch_end", report_metrics_on: str | list[str] = "epoch_end",
                metrics: str | list[str] | dict[str, str] | None = None) -> Any:
        base = _keras_base(sys._getframe(1))
        concrete = _CONCRETE.get((cls, base))
        if concrete is None:
            concrete = type(cls.__name__, (cls, base), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
            _CONCRETE[(cls, base)] = concrete
        return object.__new__(concrete)

    def __init__(self, checkpoint_on: str | list[str] = "epoch_end", report_metrics_on: str | list[str] = "epoch_end",
                 metrics: str | list[str] | dict[str, str] | None = None) -> None:
        super().__init__()
        self._checkpoint_on = _as_list(checkpoint_on, "checkpoint_on")
        self._report_metrics_on = _as_list(report_metrics_on, "report_metrics_on")
        if metrics is not None and not isinstance(metrics, (str, list, dict)):
            raise TypeError(f"metrics must be None, a name, a list of names or a dict, got {type(metrics).__name__}")
        self._metrics = metrics
        self._on = set(self._checkpoint_on) | set(self._report_metrics_on)
        keras_base = next((c for c in type(self).__mro__ if c.__name__ == "Callback"
                           and c.__module__.split(".")[0] in ("keras", "tf_keras", "tensorflow")), None)
        for event in _ALLOWED:  # Keras skips per-batch work for hooks left at its defaults: leave unused ones so
            if "batch" in event and event not in self._on and keras_base is not None:
                setattr(self, f"on_{event}", types.MethodType(getattr(keras_base, f"on_{event}"), self))

    def _reported(self, logs: dict[str, Any] | None) -> dict[str, Any]:
        logs = dict(logs or {})
        try:
            if self._metrics is None:
                chosen = logs
            elif isinstance(self._metrics, str):
                chosen = {self._metrics: logs[self._metrics]}
            elif isinstance(self._metrics, list):
                chosen = {m: logs[m] for m in self._metrics}
            else:
                chosen = {k: logs[m] for k, m in self._metrics.items()}
        except KeyError as exc:
            raise KeyError(f"ReportCheckpointCallback(metrics=...) names {exc}, which Keras did not log; it logged "
                           f"{sorted(logs)}") from None
        return {k: _sessions._plain(v) for k, v in chosen.items()}

    def _handle(self, logs: dict[str, Any] | None, when: str) -> None:
        metrics = self._reported(logs)
        if when in self._checkpoint_on:
            ckpt = TensorflowCheckpoint.from_model(self.model)  # type: ignore[attr-defined]
            try:
                self._save_and_report_checkpoint(metrics, ckpt)
            finally:
                shutil.rmtree(ckpt.path, ignore_errors=True)
        else:
            self._report_metrics(metrics)

    def _save_and_report_checkpoint(self, metrics: dict[str, Any], checkpoint: TensorflowCheckpoint) -> None:
        _sessions.report(metrics, checkpoint=checkpoint)

    def _report_metrics(self, metrics: dict[str, Any]) -> None:
        _sessions.report(metrics)

    def _fire(self, when: str, logs: dict[str, Any] | None) -> None:
        if when in self._on:
            self._handle(logs, when)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._fire("epoch_begin", logs)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._fire("epoch_end", logs)

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._fire("train_batch_begin", logs)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._fire("train_batch_end", logs)

    def on_test_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._fire("test_batch_begin", logs)

    def on_test_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._fire("test_batch_end", logs)

    def on_predict_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._fire("predict_batch_begin", logs)

    def on_predict_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._fire("predict_batch_end", logs)

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._fire("train_begin", logs)

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self._fire("train_end", logs)

    def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._fire("test_begin", logs)

    def on_test_end(self, logs: dict[str, Any] | None = None) -> None:
        self._fire("test_end", logs)

    def on_predict_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._fire("predict_begin", logs)

    def on_predict_end(self, logs: dict[str, Any] | None = None) -> None:
        self._fire("predict_end", logs)


class ReportCheckpointCallback(RayReportCallback):
    """Keras callback for tuneplat reporting and checkpointing (``ray.train.tensorflow.keras.ReportCheckpointCallback``).

    Metrics are always reported with checkpoints, even at an event not in
    ``report_metrics_on``.

    Args:
        checkpoint_on: when to save checkpoints: Keras event hook names less ``on_``
            (``"epoch_end"``, the default; ``"train_batch_end"``...).
        report_metrics_on: when to report metrics (default ``"epoch_end"``).
        metrics: the Keras logs to report (None: all; a name; a list; a dict
            ``{reported name: Keras log name}``).

    Example:
        >>> model.fit(ds, epochs=2, callbacks=[ReportCheckpointCallback(metrics={"loss": "loss"})])  # doctest: +SKIP
    """
