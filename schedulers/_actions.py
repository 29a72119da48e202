"""What a scheduler's action means for a trial in each phase: one table for the tuner and the simulator.

A scheduler queues :class:`Resume`, :class:`Launch` and :class:`Stop` actions;
whoever runs trials carries them out. Both the tuner (``tuneplat``'s loop) and
:func:`schedulers.testing.simulate` ask :func:`plan_action` what to do, so
both follow the same semantics.
"""

from __future__ import annotations

import enum

from ._base import Launch, Resume, Stop

__all__ = ["ActionPlan", "TrialPhase", "plan_action"]


class TrialPhase(enum.Enum):
    """Where a trial stands when an action for it is carried out."""

    RUNNING = "running"  # its worker group runs and reports
    PAUSING = "pausing"  # PAUSE was answered; its group is still leaving its workers
    PAUSED = "paused"
    PENDING = "pending"  # queued to (re)start
    FINISHED = "finished"  # TERMINATED or ERROR


class ActionPlan(enum.Enum):
    """What to do with the action."""

    REQUEUE = "requeue"  # Resume: queue the paused trial to go on from its own latest checkpoint
    CLONE_AND_REQUEUE = "clone_and_requeue"  # Launch: take the config and the source's checkpoint, then queue it
    CLONE_THEN_DEFER_REQUEUE = "clone_then_defer"  # Launch while pausing: clone now (the judged state), queue once paused
    DEFER = "defer"  # carry it out once the trial is paused
    END = "end"  # Stop: end the (paused or queued) trial for good
    STOP_AT_NEXT_REPORT = "stop_at_next_report"  # Stop: answer the running trial's next report with STOP
    IGNORE = "ignore"  # the action does not apply to the trial any more (say so)

    def carries_out(self) -> bool:
        return self is not ActionPlan.IGNORE


def plan_action(action: Resume | Launch | Stop, phase: TrialPhase) -> ActionPlan:
    """What carrying out ``action`` means for a trial in ``phase``.

    Example:
        >>> plan_action(Resume("t1"), TrialPhase.PAUSED)
        <ActionPlan.REQUEUE: 'requeue'>
        >>> plan_action(Stop("t1"), TrialPhase.RUNNING)
        <ActionPlan.STOP_AT_NEXT_REPORT: 'stop_at_next_report'>
    """
    if phase is TrialPhase.PAUSING:
        return ActionPlan.CLONE_THEN_DEFER_REQUEUE if isinstance(action, Launch) else ActionPlan.DEFER
    if isinstance(action, Stop):
        if phase in (TrialPhase.PAUSED, TrialPhase.PENDING):
            return ActionPlan.END
        return ActionPlan.STOP_AT_NEXT_REPORT if phase is TrialPhase.RUNNING else ActionPlan.IGNORE
    if isinstance(action, Resume):
        return ActionPlan.REQUEUE if phase is TrialPhase.PAUSED else ActionPlan.IGNORE
    if isinstance(action, Launch):
        return ActionPlan.CLONE_AND_REQUEUE if phase is TrialPhase.PAUSED else ActionPlan.IGNORE
    raise TypeError(f"unknown scheduler action {action!r}")
