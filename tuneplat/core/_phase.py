"""The explicit state machines of the core: the experiment's phase, and the moves a trial's status may make.

A move that is not in its table raises :class:`InvalidTransition` (Ray Tune's
``_set_trial_status`` and Optuna's ``check_trial_is_updatable`` do the same):
a bug in the loop shows as an error where it happens, not as a trial in a state
nothing expects. A journal written by an older tuneplat is replayed leniently
(see :func:`tuneplat.core._state.apply`).

Example:
    >>> ExperimentPhase.RUNNING.to(ExperimentPhase.STOPPING)
    <ExperimentPhase.STOPPING: 'stopping'>
    >>> ExperimentPhase.ERRORED.to(ExperimentPhase.RUNNING)
    Traceback (most recent call last):
    ...
    tuneplat.core._phase.InvalidTransition: the experiment cannot go from errored to running
    >>> check_move("a_00000", TrialStatus.TERMINATED, TrialStatus.RUNNING)
    Traceback (most recent call last):
    ...
    tuneplat.core._phase.InvalidTransition: trial a_00000 cannot go from TERMINATED to RUNNING
"""

from __future__ import annotations

import enum

from ._trial import TrialStatus

__all__ = ["TRIAL_MOVES", "ExperimentPhase", "InvalidTransition", "check_move"]


class InvalidTransition(RuntimeError):
    """A state machine was asked for a move its table does not have (a bug in tuneplat)."""


_S = TrialStatus
#: the statuses a trial may go to from each status (a final status goes nowhere; a restore reopens trials itself)
TRIAL_MOVES: dict[TrialStatus, frozenset[TrialStatus]] = {
    _S.PENDING: frozenset({_S.PENDING, _S.RUNNING, _S.TERMINATED, _S.ERROR}),
    _S.RUNNING: frozenset({_S.PENDING, _S.PAUSED, _S.TERMINATED, _S.ERROR}),
    _S.PAUSED: frozenset({_S.PAUSED, _S.PENDING, _S.TERMINATED, _S.ERROR}),
    _S.TERMINATED: frozenset(),
    _S.ERROR: frozenset(),
}


def check_move(trial_id: str, old: TrialStatus, new: TrialStatus) -> None:
    """Raise :class:`InvalidTransition` unless a trial may go from ``old`` to ``new``."""
    if new not in TRIAL_MOVES[old]:
        raise InvalidTransition(f"trial {trial_id} cannot go from {old.value} to {new.value}")


class ExperimentPhase(enum.Enum):
    """Where the experiment is; the loop holds one phase instead of flags resolved by if/elif order.

    ``RUNNING``: trials start and run. ``STOPPING``: the time budget or a stopper's
    ``stop_all()`` ended it; running trials stop at their next report, nothing new
    starts. ``FAILING``: one trial's failure ends it (``fail_fast``, a misspelt
    metric, no worker can take a trial); the others stay restorable.
    ``INTERRUPTED``: Ctrl-C, SIGTERM, or the trial that runs this (nested) experiment
    ended. ``ERRORED``: the tuner itself failed.
    """

    RUNNING = "running"
    STOPPING = "stopping"
    FAILING = "failing"
    INTERRUPTED = "interrupted"
    ERRORED = "errored"

    @property
    def starts_trials(self) -> bool:
        """Whether new trials start (and failed ones are retried)."""
        return self is ExperimentPhase.RUNNING

    @property
    def leaves_restorable(self) -> bool:
        """Whether trials that did not finish go back to the queue for a restore (not ended, not retried)."""
        return self in (ExperimentPhase.FAILING, ExperimentPhase.INTERRUPTED, ExperimentPhase.ERRORED)

    @property
    def status(self) -> str:
        """The experiment's end status as the journal's ``experiment_end`` records it."""
        return _STATUS[self]

    def to(self, new: ExperimentPhase) -> ExperimentPhase:
        """``new``, when the experiment may go there from this phase (staying is always allowed)."""
        if new is not self and new not in _PHASE_MOVES[self]:
            raise InvalidTransition(f"the experiment cannot go from {self.value} to {new.value}")
        return new


_P = ExperimentPhase
_PHASE_MOVES: dict[ExperimentPhase, frozenset[ExperimentPhase]] = {
    _P.RUNNING: frozenset({_P.STOPPING, _P.FAILING, _P.INTERRUPTED, _P.ERRORED}),
    _P.STOPPING: frozenset({_P.FAILING, _P.INTERRUPTED, _P.ERRORED}),
    _P.FAILING: frozenset({_P.INTERRUPTED, _P.ERRORED}),
    _P.INTERRUPTED: frozenset({_P.ERRORED}),
    _P.ERRORED: frozenset(),
}
_STATUS = {_P.RUNNING: "finished", _P.STOPPING: "finished", _P.FAILING: "failed", _P.INTERRUPTED: "interrupted",
           _P.ERRORED: "error"}
