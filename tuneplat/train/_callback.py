"""Ray Train V2's ``UserCallback``: ``after_report`` / ``after_exception``, run in the driver.

A :class:`UserCallback` in ``RunConfig(callbacks=[...])`` of a Trainer (or a
Tuner) is adapted onto the controller's hooks: ``after_report`` once per
report of the group (after its checkpoint, if any, was committed),
``after_exception`` when ranks failed (each time, retries included).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core._callbacks import ControllerCallback
from ._errors import worker_failures

if TYPE_CHECKING:
    from ..core._view import TunerView

__all__ = ["RayTrainCallback", "TrainRunContext", "UserCallback", "UserCallbackAdapter"]


class RayTrainCallback:
    """The base of Ray Train's callbacks (``ray.train.v2.api.callback.RayTrainCallback``)."""


class UserCallback(RayTrainCallback):
    """Hooks on a training run, called in the driver process (``ray.train.UserCallback``).

    Example:
        >>> class PrintLoss(UserCallback):
        ...     def after_report(self, run_context, metrics, checkpoint):
        ...         print(metrics[0]["loss"], checkpoint)
        >>> run_config = RunConfig(callbacks=[PrintLoss()])  # doctest: +SKIP
    """

    def after_report(self, run_context: TrainRunContext, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
        """The group reported.

        Args:
            run_context: the run (its ``run_config``, ``train_loop_config``, ``scaling_config``).
            metrics: the reported metrics, one dict per rank: ``metrics[i]`` is what rank ``i`` passed to
                ``report()`` (rank 0's with the keys tuneplat adds: ``training_iteration``, ...).
            checkpoint: the :class:`tuneplat.Checkpoint` committed with this report, or None.
        """

    def after_exception(self, run_context: TrainRunContext, worker_exceptions: dict[int, Exception]) -> None:
        """Ranks failed: each failed world rank to its exception (a :class:`tuneplat.TrialError`)."""


@dataclass(frozen=True)
class TrainRunContext:
    """The run a :class:`UserCallback` hook is about (Ray Train V2's ``TrainRunContext``)."""

    run_config: Any
    train_loop_config: dict[str, Any] | None
    scaling_config: Any
    backend_config: Any = None
    dataset_config: Any = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def get_run_config(self) -> Any:
        """The run's ``RunConfig``."""
        return self.run_config


class UserCallbackAdapter(ControllerCallback):
    """Calls one :class:`UserCallback` from the controller's hooks."""

    def __init__(self, callback: UserCallback) -> None:
        self.callback = callback
        self._checkpoints: dict[str, tuple[int, Any]] = {}  # trial -> (iteration, checkpoint) just committed
        self._contexts: dict[str, TrainRunContext] = {}

    def _context(self, ctrl: TunerView, trial: Any) -> TrainRunContext:
        ctx = self._contexts.get(trial.trial_id)
        if ctx is None:
            config = trial.config if isinstance(trial.config, dict) else {}
            ctx = self._contexts[trial.trial_id] = TrainRunContext(
                run_config=ctrl.rc, train_loop_config=config.get("train_loop_config", config),
                scaling_config=ctrl.scaling_config)
        return ctx

    def on_checkpoint(self, ctrl: TunerView, trial: Any, checkpoint: Any, metrics: dict[str, Any]) -> None:
        self._checkpoints[trial.trial_id] = (int(metrics.get("training_iteration", -1)), checkpoint)

    def on_group_report(self, ctrl: TunerView, trial: Any, result: dict[str, Any],
                        rank_metrics: list[dict[str, Any]]) -> None:
        iteration, checkpoint = self._checkpoints.pop(trial.trial_id, (None, None))
        if iteration != result.get("training_iteration"):
            checkpoint = None
        self.callback.after_report(self._context(ctrl, trial), rank_metrics, checkpoint)

    def on_trial_failure(self, ctrl: TunerView, trial: Any, message: str, will_retry: bool) -> None:
        from ..results._result import TrialError

        error = TrialError(message, getattr(trial, "error_traceback", None), trial.trial_id)
        self.callback.after_exception(self._context(ctrl, trial), worker_failures(error) or {0: error})
