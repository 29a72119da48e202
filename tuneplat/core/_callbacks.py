"""Controller callbacks: how tracking (MLflow) follows an experiment from inside the tuner.

This is the internal interface. Users subclass :class:`tuneplat.Callback`, which
has Ray Tune's hook signatures and is adapted onto this one
(``tuneplat/tracking/_user_callbacks.py``).

Every hook receives the controller first (``ctrl.trials``, ``ctrl.experiment_dir``,
``ctrl.metric``, ...), to read. Hooks run on the tuner's loop: keep them fast and never
block on the network (queue work for a background thread instead). A callback never
writes the journal or the trials: ``on_experiment_start``, ``on_experiment_end``,
``on_trial_add``, ``on_trial_start``, ``on_trial_result`` and ``on_trial_complete`` may
return the MLflow runs made meanwhile (:class:`~tuneplat.core._events.MlflowRun`,
:class:`~tuneplat.core._events.MlflowParentRun`), and the loop records them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ._events import Event
from ._view import copy_result

if TYPE_CHECKING:
    from ._view import TunerView

__all__ = ["Callback", "Callbacks", "ControllerCallback"]

logger = logging.getLogger("tuneplat")


class ControllerCallback:
    """Base class with do-nothing hooks; override the ones you need."""

    def on_experiment_start(self, ctrl: TunerView) -> Sequence[Event] | None: ...

    def on_trial_add(self, ctrl: TunerView, trial: Any) -> Sequence[Event] | None: ...

    def on_trial_start(self, ctrl: TunerView, trial: Any) -> Sequence[Event] | None: ...

    def on_trial_result(self, ctrl: TunerView, trial: Any, result: dict[str, Any]) -> Sequence[Event] | None: ...

    def on_checkpoint(self, ctrl: TunerView, trial: Any, checkpoint: Any, metrics: dict[str, Any]) -> None: ...

    def on_group_report(self, ctrl: TunerView, trial: Any, result: dict[str, Any],
                        rank_metrics: list[dict[str, Any]]) -> None:
        """Every rank of the trial's group reported: ``rank_metrics[i]`` is rank ``i``'s metrics (rank 0's is
        ``result``, with the keys tuneplat adds). Called after :meth:`on_trial_result`."""

    def on_trial_superseded(self, ctrl: TunerView, trial: Any, after_iteration: int) -> None: ...

    def on_trial_failure(self, ctrl: TunerView, trial: Any, message: str, will_retry: bool) -> None: ...

    def on_trial_resize(self, ctrl: TunerView, trial: Any, old: int, new: int, reason: str) -> None:
        """An elastic trial's group started again with ``new`` ranks instead of ``old`` (``reason``: why)."""

    def on_trial_exploit(self, ctrl: TunerView, trial: Any, event: dict[str, Any]) -> None: ...

    def on_trial_complete(self, ctrl: TunerView, trial: Any) -> Sequence[Event] | None: ...

    def on_experiment_end(self, ctrl: TunerView, status: str) -> Sequence[Event] | None: ...

    def on_system_metrics(self, ctrl: TunerView, trial: Any, ranks: dict[int, dict[str, float]], timestamp: float) -> None:
        """CPU %, memory and GPU samples of a running trial's ranks (``train/_telemetry.py``)."""

    def on_stacks(self, ctrl: TunerView, trial: Any, path: str | None, summary: str, reason: str) -> None:
        """The Python stacks of a trial's ranks were captured into ``path`` (a hang, or ``tuneplat stacks``)."""


#: The name ``tuneplat.tracking`` imports; the public ``tuneplat.Callback`` is the Ray-style one.
Callback = ControllerCallback


class Callbacks:
    """The experiment's callbacks, as the loop calls them: each hook on every callback, in order.

    Every hook gets the loop's read-only :class:`~tuneplat.core._view.TunerView`; what a hook hands back
    (the MLflow runs it made) goes to ``record``, the loop's, after each callback, so a later callback
    already sees it on the trial. The observability hooks (system metrics, stacks) and the mirrors'
    backlog estimate never raise: their failures are logged at debug level.
    """

    def __init__(self, callbacks: Sequence[Any], view: TunerView,
                 record: Callable[[Sequence[Event] | None], None]) -> None:
        self.all = callbacks  # (the loop's list itself)
        self._view = view
        self._record = record

    def experiment_start(self) -> None:
        for cb in self.all:
            self._record(cb.on_experiment_start(self._view))

    def experiment_end(self, status: str) -> None:
        """Every callback hears the end, even after another one failed (a callback must not lose the results)."""
        for cb in self.all:
            try:
                self._record(cb.on_experiment_end(self._view, status))
            except Exception:  # noqa: BLE001
                logger.exception("tuneplat: callback %r failed at experiment end", cb)

    def trial_add(self, trial: Any) -> None:
        trial = self._view.seen(trial)
        for cb in self.all:
            self._record(cb.on_trial_add(self._view, trial))

    def trial_start(self, trial: Any) -> None:
        trial = self._view.seen(trial)
        for cb in self.all:
            self._record(cb.on_trial_start(self._view, trial))

    def trial_result(self, trial: Any, result: dict[str, Any]) -> None:
        trial = self._view.seen(trial)
        for cb in self.all:
            self._record(cb.on_trial_result(self._view, trial, result))

    @property
    def wants_group_reports(self) -> bool:
        """Whether a callback overrides :meth:`ControllerCallback.on_group_report` (else the loop skips it)."""
        return any(getattr(type(cb), "on_group_report", ControllerCallback.on_group_report)
                   is not ControllerCallback.on_group_report for cb in self.all)

    def group_report(self, trial: Any, result: dict[str, Any], rank_metrics: list[dict[str, Any]]) -> None:
        trial = self._view.seen(trial)
        for cb in self.all:
            hook = getattr(cb, "on_group_report", None)
            if hook is not None:
                hook(self._view, trial, result, rank_metrics)

    def checkpoint(self, trial: Any, checkpoint: Any, metrics: dict[str, Any]) -> None:
        if not self.all:
            return
        trial, metrics = self._view.seen(trial), copy_result(metrics)  # (the trial's own result: a copy)
        for cb in self.all:
            cb.on_checkpoint(self._view, trial, checkpoint, metrics)

    def trial_superseded(self, trial: Any, after_iteration: int) -> None:
        trial = self._view.seen(trial)
        for cb in self.all:
            cb.on_trial_superseded(self._view, trial, after_iteration)

    def trial_failure(self, trial: Any, message: str, will_retry: bool) -> None:
        trial = self._view.seen(trial)
        for cb in self.all:
            cb.on_trial_failure(self._view, trial, message, will_retry)

    def trial_resize(self, trial: Any, old: int, new: int, reason: str) -> None:
        trial = self._view.seen(trial)
        for cb in self.all:
            hook = getattr(cb, "on_trial_resize", None)
            if hook is not None:
                hook(self._view, trial, old, new, reason)

    def trial_exploit(self, trial: Any, event: dict[str, Any]) -> None:
        trial, event = self._view.seen(trial), copy_result(event)  # (the trial's lineage entry: a copy)
        for cb in self.all:
            cb.on_trial_exploit(self._view, trial, event)

    def trial_complete(self, trial: Any) -> None:
        trial = self._view.seen(trial)
        for cb in self.all:
            self._record(cb.on_trial_complete(self._view, trial))

    def system_metrics(self, trial: Any, ranks: dict[int, dict[str, float]], timestamp: float) -> None:
        if not self.all:
            return
        trial, ranks = self._view.seen(trial), {k: dict(v) for k, v in ranks.items()}  # (journaled after: a copy)
        for cb in self.all:
            hook = getattr(cb, "on_system_metrics", None)
            if hook is not None:
                try:
                    hook(self._view, trial, ranks, timestamp)
                except Exception:  # noqa: BLE001 - observability must never end an experiment
                    logger.debug("tuneplat: on_system_metrics failed", exc_info=True)

    def stacks(self, trial: Any, path: str | None, summary: str, reason: str) -> None:
        trial = self._view.seen(trial)
        for cb in self.all:
            hook = getattr(cb, "on_stacks", None)
            if hook is not None:
                try:
                    hook(self._view, trial, path, summary, reason)
                except Exception:  # noqa: BLE001
                    logger.debug("tuneplat: on_stacks failed", exc_info=True)

    def backlog_s(self) -> float:
        """How long the end of the experiment will wait for mirrors (the MLflow uploader's backlog), in seconds."""
        lags = [0.0]
        for cb in self.all:
            backlog = getattr(cb, "backlog_s", None)
            if callable(backlog):
                try:
                    lags.append(float(backlog()))
                except Exception:  # noqa: BLE001 - an estimate; never worth ending the experiment
                    logger.debug("tuneplat: backlog estimate failed", exc_info=True)
        return max(lags)
