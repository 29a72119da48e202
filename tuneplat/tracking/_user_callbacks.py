"""``tuneplat.Callback``: Ray Tune's callback interface, adapted onto the controller's.

A Ray Tune callback ported by changing its import runs unchanged: the hooks have
Ray's names and signatures (``iteration, trials, trial, ...``) and receive the
tuner's trial objects, which carry Ray's attributes (``trial_id``, ``config``,
``last_result``, ``status``, ``path``/``local_path``, ``checkpoint``, ...).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core._callbacks import ControllerCallback
from ..core._trial import TrialStatus

if TYPE_CHECKING:
    from ..core._view import TunerView

__all__ = ["Callback", "adapt_callbacks"]

logger = logging.getLogger("tuneplat")


class Callback:
    """Observe an experiment, with Ray Tune's hooks (``ray.tune.Callback``).

    Override the hooks you need and pass instances in
    ``RunConfig(callbacks=[...])``. Every hook runs on the tuner's loop, in the
    driver process: keep them fast. An exception raised in a hook ends
    ``fit()`` (as in Ray). ``iteration`` counts the tuner's events so far;
    ``trials`` is every trial of the experiment; ``info`` is empty today and
    there for forward compatibility.

    Example:
        >>> import tuneplat as tune
        >>> class PrintBest(tune.Callback):
        ...     def on_trial_result(self, iteration, trials, trial, result, **info):
        ...         print(trial.trial_id, result["loss"])
        >>> run_config = tune.RunConfig(callbacks=[PrintBest()])
    """

    def setup(self, stop: Any = None, num_samples: int | None = None, total_num_samples: int | None = None,
              **info: Any) -> None:
        """Called once before the first trial starts."""

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """A trial starts running (its first attempt, a retry, or a resume)."""

    def on_trial_restore(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """A trial starts again from a checkpoint (a retry, a resume, or after a PBT exploit)."""

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        """A trial reported ``result`` (before the scheduler decides on it)."""

    def on_trial_save(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """A trial's checkpoint was committed."""

    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any) -> None:
        """A trial's checkpoint was committed; ``checkpoint`` is the :class:`tuneplat.Checkpoint`."""

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """A trial failed and will be retried (``FailureConfig.max_failures``)."""

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """A trial failed for good; it is ERROR, its message in ``trial.error``."""

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        """A trial ended without error (finished, stopped, or pruned)."""

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        """The experiment ended (every trial finished, or it was interrupted)."""


class _Adapter(ControllerCallback):
    """Translates the controller's hooks into one user :class:`Callback`'s."""

    def __init__(self, callback: Callback) -> None:
        self.callback = callback
        self.iteration = 0

    def _tick(self) -> int:
        self.iteration += 1
        return self.iteration

    def on_experiment_start(self, ctrl: TunerView) -> None:
        total = getattr(ctrl.searcher, "total", None) or ctrl.tc.num_samples
        self.callback.setup(stop=ctrl.rc.stop, num_samples=ctrl.tc.num_samples,
                            total_num_samples=total if total and total > 0 else None)

    def on_trial_start(self, ctrl: TunerView, trial: Any) -> None:
        it = self._tick()
        self.callback.on_trial_start(it, ctrl.trials, trial)
        if trial.attempts > 1 and trial.checkpoint is not None:
            self.callback.on_trial_restore(it, ctrl.trials, trial)

    def on_trial_result(self, ctrl: TunerView, trial: Any, result: dict[str, Any]) -> None:
        self.callback.on_trial_result(self._tick(), ctrl.trials, trial, result)

    def on_checkpoint(self, ctrl: TunerView, trial: Any, checkpoint: Any, metrics: dict[str, Any]) -> None:
        it = self._tick()
        self.callback.on_trial_save(it, ctrl.trials, trial)
        self.callback.on_checkpoint(it, ctrl.trials, trial, checkpoint)

    def on_trial_failure(self, ctrl: TunerView, trial: Any, message: str, will_retry: bool) -> None:
        if will_retry:
            self.callback.on_trial_recover(self._tick(), ctrl.trials, trial)

    def on_trial_complete(self, ctrl: TunerView, trial: Any) -> None:
        if trial.status is TrialStatus.ERROR:
            self.callback.on_trial_error(self._tick(), ctrl.trials, trial)
        else:
            self.callback.on_trial_complete(self._tick(), ctrl.trials, trial)

    def on_experiment_end(self, ctrl: TunerView, status: str) -> None:
        self.callback.on_experiment_end(ctrl.trials)


def adapt_callbacks(callbacks: Sequence[Any] | None) -> list[ControllerCallback]:
    """``RunConfig.callbacks`` as controller callbacks (user callbacks wrapped, internal ones as they are).

    Raises:
        TypeError: an entry is neither a :class:`tuneplat.Callback` nor an internal controller callback.
    """
    out: list[ControllerCallback] = []
    from ..train._callback import UserCallback, UserCallbackAdapter

    for i, cb in enumerate(callbacks or []):
        if isinstance(cb, Callback):
            out.append(_Adapter(cb))
        elif isinstance(cb, UserCallback):  # Ray Train V2's (after_report / after_exception)
            out.append(UserCallbackAdapter(cb))
        elif isinstance(cb, ControllerCallback):
            out.append(cb)
        else:
            raise TypeError(
                f"RunConfig.callbacks[{i}] is {cb!r} ({type(cb).__name__}); every callback must be an instance of "
                "a tuneplat.Callback subclass (the port of ray.tune.Callback): `class MyCallback(tune.Callback)`, "
                "or of tuneplat.train.UserCallback (Ray Train V2's)."
            )
    return out
