"""The one table of what scheduler actions mean, shared by the tuner's loop and the simulator."""

from __future__ import annotations

import pytest

from schedulers import ActionPlan, Launch, Resume, Stop, TrialPhase, plan_action

P = TrialPhase


@pytest.mark.parametrize("action, phase, plan", [
    (Resume("t"), P.PAUSED, ActionPlan.REQUEUE),
    (Resume("t"), P.RUNNING, ActionPlan.IGNORE),
    (Resume("t"), P.FINISHED, ActionPlan.IGNORE),
    (Resume("t"), P.PAUSING, ActionPlan.DEFER),
    (Launch("t", {"a": 1}, "s"), P.PAUSED, ActionPlan.CLONE_AND_REQUEUE),
    (Launch("t", {"a": 1}, "s"), P.PAUSING, ActionPlan.CLONE_THEN_DEFER_REQUEUE),
    (Launch("t", {"a": 1}, "s"), P.PENDING, ActionPlan.IGNORE),
    (Stop("t"), P.PAUSED, ActionPlan.END),
    (Stop("t"), P.PENDING, ActionPlan.END),
    (Stop("t"), P.RUNNING, ActionPlan.STOP_AT_NEXT_REPORT),
    (Stop("t"), P.PAUSING, ActionPlan.DEFER),
    (Stop("t"), P.FINISHED, ActionPlan.IGNORE),
])
def test_plan_of_each_action_in_each_phase(action, phase, plan):
    assert plan_action(action, phase) is plan
    assert plan.carries_out() is (plan is not ActionPlan.IGNORE)


def test_an_unknown_action_is_refused():
    with pytest.raises(TypeError, match="unknown scheduler action"):
        plan_action("resume", P.PAUSED)  # type: ignore[arg-type]
