"""The scheduler's word, carried out: its decision on each result, and its queued actions.

:class:`SchedulerActions` asks the stop rules and the scheduler for a decision
on a result, and carries out what the scheduler queues (``Stop``, ``Resume``,
PBT's ``Launch``): ``schedulers.plan_action`` says what an action means in the
trial's phase, and this class does it: end a trial, stop it at its next
report, put it back in the queue, or clone another trial's checkpoint and
config into it (PBT's exploit), deferring what must wait for a group to leave
its workers.

Only the loop writes the journal: this class records events through the
writer the loop gives it, and ends trials through the loop.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Mapping
from typing import Any

from schedulers import ActionPlan, Decision, Launch, Resume, Stop, TrialPhase, TrialScheduler, plan_action

from ..search._tags import perturbed_tag
from ..storage._storage import CheckpointStore, checkpoint_name
from . import _events as ev
from ._journal import pickle_hex, to_jsonable
from ._shapes import rank_shape
from ._stop import StopRules
from ._trial import RunState, Trial, TrialStatus

logger = logging.getLogger("tuneplat")

__all__ = ["SchedulerActions"]

Action = Resume | Launch | Stop


class SchedulerActions:
    """Decisions on results, and the scheduler's queued actions, for the loop that owns it.

    Args:
        scheduler: the experiment's scheduler.
        stop_rules: ``RunConfig(stop=...)``.
        trials: the loop's trials by id.
        running: the loop's live trials (read; a stop request is set on one).
        queue: the loop's queue of trials waiting to start (trials are put back in it).
        store: the checkpoint store (PBT's copy of a source checkpoint).
        record: the loop's journal writer.
        end_trial: the loop's ``(trial, status, *, stop_reason=, pruned=)`` transition to a final state.
        check_stop_all: the loop's ``stop_all()`` check (it may stop every trial); True when it did.
        on_exploit: called with ``(trial, exploit event)`` after PBT's exploit (callbacks).
    """

    def __init__(self, *, scheduler: TrialScheduler, stop_rules: StopRules, trials: Mapping[str, Trial],
                 running: Mapping[str, RunState], queue: collections.deque[Trial], store: CheckpointStore,
                 record: Callable[[ev.Event], None],
                 end_trial: Callable[..., None], check_stop_all: Callable[[], bool],
                 on_exploit: Callable[[Trial, dict[str, Any]], None]) -> None:
        self.scheduler = scheduler
        self.stop_rules = stop_rules
        self._trials = trials
        self._running = running
        self._queue = queue
        self._store = store
        self._record = record
        self._end_trial = end_trial
        self._check_stop_all = check_stop_all
        self._on_exploit = on_exploit
        self._deferred: dict[str, list[Action]] = {}  # trial id -> actions that wait for its group to end
        self._ready: list[Action] = []

    # ------------------------------------------------------------------ decisions
    def decide(self, trial: Trial, run: RunState, result: Mapping[str, Any]) -> tuple[Decision, str, bool]:
        """The decision on ``result``, why, and whether a STOP prunes the trial (the scheduler cut it short, not
        its ``max_t`` nor a stop rule): a pending stop request, the stop rules, then the scheduler."""
        if run.stop_requested is not None:
            return run.stop_requested, trial.stop_reason or run.stop_reason or "stop requested", False
        reason = self.stop_rules.reason_to_stop(trial.trial_id, result)
        if reason is not None:
            if reason == "stop criteria met":
                self._check_stop_all()
            return Decision.STOP, reason, False
        if self._check_stop_all():
            return Decision.STOP, trial.stop_reason or run.stop_reason or "stop_all()", False
        decision = self.scheduler.on_trial_result(trial.trial_id, result)
        if decision is Decision.STOP:
            why = getattr(self.scheduler, "stop_reason", lambda _t: None)(trial.trial_id)
            return decision, why or f"stopped by {self.scheduler.name}", not self._reached_scheduler_budget(result)
        if decision is Decision.PAUSE:
            why = getattr(self.scheduler, "pause_reason", lambda _t: None)(trial.trial_id)
            return decision, why or f"paused by {self.scheduler.name}", False
        return decision, "", False

    def _reached_scheduler_budget(self, result: Mapping[str, Any]) -> bool:
        """Whether ``result`` reached the scheduler's ``max_t`` (a STOP there ends a trial, it does not prune it)."""
        max_t = getattr(self.scheduler, "max_t", None)
        attr = getattr(self.scheduler, "time_attr", None)
        value = result.get(attr) if isinstance(attr, str) else None
        return (isinstance(max_t, (int, float)) and isinstance(value, (int, float))
                and not isinstance(value, bool) and value >= max_t)

    # ------------------------------------------------------------------ actions
    def phase(self, trial: Trial) -> TrialPhase:
        """Where ``trial`` is, as ``schedulers.plan_action`` sees it."""
        run = self._running.get(trial.trial_id)
        if run is not None:
            return TrialPhase.PAUSING if run.decision is Decision.PAUSE else TrialPhase.RUNNING
        if trial.status is TrialStatus.PAUSED:
            return TrialPhase.PAUSED
        if trial.status in (TrialStatus.PENDING, TrialStatus.RUNNING):
            return TrialPhase.PENDING
        return TrialPhase.FINISHED

    def trial_ended(self, trial_id: str) -> None:
        """A trial's group left its workers: carry out the actions that waited for it (and any queued since)."""
        self._ready.extend(self._deferred.pop(trial_id, []))
        self.drain()

    def drain(self) -> None:
        """Carry out the scheduler's queued actions (``schedulers.plan_action`` says what each one means)."""
        actions = self.scheduler.pop_actions()
        if self._ready:
            actions, self._ready = self._ready + actions, []
        for action in actions:
            trial = self._trials.get(action.trial_id)
            if trial is None:
                logger.warning("tuneplat: scheduler asked for unknown trial %s", action.trial_id)
                continue
            phase = self.phase(trial)
            plan = plan_action(action, phase)
            if plan is ActionPlan.DEFER or plan is ActionPlan.CLONE_THEN_DEFER_REQUEUE:
                # PAUSE was answered but the group is still leaving its workers (PBT queues Launch in the same
                # call as PAUSE; HyperBand may queue Resume/Stop before the paused group ended). Its checkpoint of
                # the paused iteration is committed already, so a Launch clones the source's checkpoint now (the
                # one the scheduler judged); the requeue waits until the trial is PAUSED.
                if plan is ActionPlan.CLONE_THEN_DEFER_REQUEUE and isinstance(action, Launch):
                    self._exploit(trial, action)
                    action = Resume(trial.trial_id)
                self._deferred.setdefault(trial.trial_id, []).append(action)
            elif plan is ActionPlan.END:
                if trial in self._queue:
                    self._queue.remove(trial)
                self._end_trial(trial, TrialStatus.TERMINATED, pruned=True,
                                stop_reason=getattr(action, "reason", "") or f"stopped by {self.scheduler.name}")
            elif plan is ActionPlan.STOP_AT_NEXT_REPORT:
                self._running[trial.trial_id].stop_requested = Decision.STOP
            elif plan is ActionPlan.REQUEUE:
                if isinstance(action, Resume) and action.resources is not None:
                    self._record(_resources_event(trial, action.resources))  # (its next attempt's shape)
                self._record(ev.TrialResume(trial_id=trial.trial_id))  # (PENDING again)
                self._queue.appendleft(trial)
            elif plan is ActionPlan.CLONE_AND_REQUEUE and isinstance(action, Launch):
                self._exploit(trial, action)  # (a paused trial that exploits is PENDING again)
                self._queue.appendleft(trial)
            elif isinstance(action, Launch):
                logger.warning("tuneplat: scheduler asked to relaunch trial %s which is %s", trial.trial_id,
                               trial.status)

    def _exploit(self, trial: Trial, action: Launch) -> None:
        """PBT's exploit: ``trial`` takes ``action.config`` and a copy of the source's latest checkpoint.

        The copy becomes ``trial``'s latest checkpoint, and the trial goes on from
        the source checkpoint's ``training_iteration`` (as in Ray: the scheduler
        took over the source's clock, and the results agree with it). The event
        is recorded in the journal (and, by its reducer, in ``trial.lineage``).
        """
        old = trial.config
        new = dict(action.config)
        from_iteration = None
        if action.from_trial and action.from_trial != trial.trial_id:
            src = self._trials.get(action.from_trial)
            if src is not None and src.checkpoint is not None:
                # copy, so the source may delete its own checkpoints meanwhile
                from_iteration = src.checkpoint_iteration()
                path = self._store.copy(src.checkpoint.path, trial.path, checkpoint_name(from_iteration))
                assert path is not None
                metrics = dict(src.checkpoints[-1][1])
                # (it becomes the trial's latest checkpoint, and its next attempt starts at from_iteration)
                self._record(ev.CheckpointSaved(
                    trial_id=trial.trial_id, iteration=from_iteration, path=path, metrics=to_jsonable(metrics),
                    cloned_from=src.trial_id, cloned_iteration=from_iteration))
            else:
                logger.warning("tuneplat: trial %s exploits trial %s, which has no checkpoint; it restarts with the "
                               "new config from its own latest checkpoint (report checkpoints for PBT to clone)",
                               trial.trial_id, action.from_trial)
        # Ray's tag after an exploit: the tag at creation, then the mutated keys' new values
        mutated = getattr(self.scheduler, "hyperparam_mutations", None) or \
            [k for k in new if k not in old or old[k] != new[k]]
        tag = perturbed_tag(trial.experiment_tag.split("@perturbed[", 1)[0], new, mutated)
        event = ev.Exploit(trial_id=trial.trial_id, from_trial=action.from_trial, iteration=trial.iteration,
                           from_iteration=from_iteration, old_config=to_jsonable(old),
                           new_config=to_jsonable(new), config_pickle=pickle_hex(new),
                           info=to_jsonable(dict(action.info)), experiment_tag=tag, config_object=new)
        self._record(event)
        self._on_exploit(trial, trial.lineage[-1])


def _resources_event(trial: Trial, resources: Mapping[str, Any]) -> ev.TrialResources:
    """The journal event of a scheduler's new resources for ``trial`` (``{"bundles", "strategy", "reason"}``)."""
    from ..execution.placement_groups import PlacementGroupFactory

    pgf = PlacementGroupFactory(list(resources["bundles"]), str(resources.get("strategy") or "PACK"))
    per_rank = trial.bundle_per_rank
    before = trial.placement_group_factory
    try:
        request, ranks = rank_shape(pgf, per_rank)
    except ValueError:  # (bundles that differ: the trial's start refuses them, naming it; journal what was given)
        request, ranks = pgf.bundles[-1], len(pgf.bundles)
    try:
        previous, previous_ranks = rank_shape(before, per_rank)
    except ValueError:
        previous, previous_ranks = before.bundles[-1], len(before.bundles)
    head: list[dict[str, float]] = [{}] if pgf.head_bundle_is_empty else []  # (Ray's empty head bundle, kept)
    return ev.TrialResources(trial_id=trial.trial_id, bundles=head + pgf.bundles, strategy=pgf.strategy,
                             request=request, previous=previous, iteration=trial.iteration,
                             reason=str(resources.get("reason") or "") or None,
                             num_workers=ranks if per_rank else None,
                             previous_num_workers=previous_ranks if per_rank else None)
