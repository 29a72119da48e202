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

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._events import Event

if TYPE_CHECKING:
    from ._view import TunerView

__all__ = ["Callback", "ControllerCallback"]


class ControllerCallback:
    """Base class with do-nothing hooks; override the ones you need."""

    def on_experiment_start(self, ctrl: TunerView) -> Sequence[Event] | None: ...

    def on_trial_add(self, ctrl: TunerView, trial: Any) -> Sequence[Event] | None: ...

    def on_trial_start(self, ctrl: TunerView, trial: Any) -> Sequence[Event] | None: ...

    def on_trial_result(self, ctrl: TunerView, trial: Any, result: dict[str, Any]) -> Sequence[Event] | None: ...

    def on_checkpoint(self, ctrl: TunerView, trial: Any, checkpoint: Any, metrics: dict[str, Any]) -> None: ...

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
