"""The experiment's state and its one writer: :func:`apply` of a journal event.

Every change to a trial goes through :func:`apply`, live and on restore, as
Optuna's ``JournalStorage`` applies its log: the loop appends an event to the
journal and applies it to its :class:`ExperimentState`; :func:`~tuneplat.core._replay.replay`
applies the same events read back from the file. So ``fit()``'s trials,
``tuneplat status``, ``Result.from_path`` and ``Tuner.restore`` cannot disagree:
they are the same function of the same events.

Example:
    >>> from tuneplat.core import _events as ev
    >>> state = ExperimentState(trials=[], experiment_dir="/tmp/exp")
    >>> _ = apply(state, ev.TrialAdd(trial_id="a_00000", path="/tmp/exp/t0", config={"x": 1}))
    >>> _ = apply(state, ev.TrialStart(trial_id="a_00000", attempt=0, workers=["w1"]))
    >>> state.trials[0].status.value, state.trials[0].attempts
    ('RUNNING', 1)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..storage._checkpoint import Checkpoint
from ..storage._storage import fs_for_url, is_remote
from . import _events as ev
from ._phase import check_move
from ._trial import Trial, TrialStatus, state_writer

__all__ = ["DecisionMade", "ExperimentState", "ExploitMade", "FailureSeen", "Moment", "ResultsSuperseded", "Span",
           "TrialEnded", "TrialHistory", "apply"]


@dataclass(frozen=True, kw_only=True)
class Moment:
    """Something that happened to a trial, and where it was then on its learning curve.

    Attributes:
        seq: the position of its line in the journal (orders moments of different kinds).
        time: the event's wall-clock time (seconds since the epoch), if recorded.
        iteration: the trial's ``training_iteration`` then (the event's own where it names one).
        results: how many results the trial had then (its last one is ``results[results - 1]``).
    """

    seq: int
    time: float | None
    iteration: int
    results: int


@dataclass(frozen=True, kw_only=True)
class DecisionMade(Moment):
    """A ``STOP`` or ``PAUSE`` answered to a result (``pruned``: cut short by the scheduler; None in old journals)."""

    decision: str
    reason: str = ""
    pruned: bool | None = None


@dataclass(frozen=True, kw_only=True)
class FailureSeen(Moment):
    """An attempt failed (``retry``: the trial was put back in the queue)."""

    message: str
    retry: bool


@dataclass(frozen=True, kw_only=True)
class ExploitMade(Moment):
    """PBT's exploit: the trial took ``from_trial``'s checkpoint (of ``from_iteration``) and ``new_config``."""

    from_trial: str | None
    from_iteration: int | None
    old_config: dict[str, Any]
    new_config: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class TrialEnded(Moment):
    """The trial reached a final state (``paused_iteration``: it ended while paused there, e.g. HyperBand's drop)."""

    status: str
    stop_reason: str | None = None
    paused_iteration: int | None = None


@dataclass(frozen=True, kw_only=True)
class ResultsSuperseded(Moment):
    """Results after ``iteration`` were superseded (a retry from an earlier checkpoint); ``results`` were kept."""


@dataclass(frozen=True)
class Span:
    """When an attempt of a trial ran: ``end`` None while it still runs; ``how`` it ended (``"failed"``,
    ``"paused"``, ``"terminated"``, ``"error"``, ``"interrupted"``, ``"running"``)."""

    start: float
    end: float | None
    how: str


@dataclass
class TrialHistory:
    """What happened to one trial, in journal order (what plots mark on its curve and simulations compare).

    Moments that concerned results later superseded are kept: compare their ``seq`` and ``results`` with
    :attr:`superseded` to leave them out.
    """

    first_config: dict[str, Any]
    spans: list[Span] = field(default_factory=list)
    decisions: list[DecisionMade] = field(default_factory=list)
    failures: list[FailureSeen] = field(default_factory=list)
    exploits: list[ExploitMade] = field(default_factory=list)
    ends: list[TrialEnded] = field(default_factory=list)
    superseded: list[ResultsSuperseded] = field(default_factory=list)


@dataclass
class ExperimentState:
    """An experiment as its journal tells it: what :func:`apply` builds, event by event.

    Attributes:
        trials: every trial, in creation order, with its status, results, checkpoints and lineage as last recorded.
        meta: the experiment's settings (``name``, ``metric``, ``mode``, ``num_samples``, ``scaling``) and the
            elastic trials' ``resizes``.
        status: how the last run of the loop ended (``experiment_end``): None while it runs, or after a crash.
        mlflow_parent_run_id: the experiment's MLflow parent run, if MLflow mirrored it.
        scheduler: the scheduler's name as the experiment recorded it (``"asha"``...), if known.
        start_time, end_time: wall-clock times of the first ``experiment`` and the last ``experiment_end`` event.
        peak_running: the most trials that ran at once.
        history: each trial's decisions, failures, exploits, ends and attempt spans, by trial id.
        by_id: the trials by id.
        experiment_dir: where the trial folders are (a folder recorded elsewhere is looked for there).
        storage_fs: the filesystem of checkpoints recorded as URLs (default: fsspec's for the URL).
        trusted: configs may be unpickled from the journal (a restore of the user's own experiment).
        seq: how many events were applied (the next event's position in the journal).
    """

    trials: list[Trial]
    meta: dict[str, Any] = field(default_factory=dict)
    status: str | None = None
    mlflow_parent_run_id: str | None = None
    scheduler: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    peak_running: int = 1
    history: dict[str, TrialHistory] = field(default_factory=dict)
    by_id: dict[str, Trial] = field(default_factory=dict, repr=False)
    experiment_dir: str = field(default="", repr=False)
    storage_fs: Any = field(default=None, repr=False, compare=False)
    trusted: bool = field(default=False, repr=False)
    seq: int = field(default=0, repr=False)
    #: an invalid status move raises (the live loop); a replay applies it anyway (a journal an older version wrote)
    strict: bool = field(default=False, repr=False)
    #: trial id -> start time of its attempt that runs (None: its start was not timed)
    running_since: dict[str, float | None] = field(default_factory=dict, repr=False)
    #: trial id -> the iteration where it sits paused
    paused_at: dict[str, int] = field(default_factory=dict, repr=False)
    #: trial id -> the folders of its checkpoints (a checkpoint event costs O(1), not a scan of the trial's list)
    checkpoint_index: dict[str, _CheckpointIndex] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for t in self.trials:
            self.by_id.setdefault(t.trial_id, t)
            self.history.setdefault(t.trial_id, TrialHistory(first_config=dict(t.config)))
            t.seal()


def apply(state: ExperimentState, event: ev.Event) -> ExperimentState:
    """Apply one journal event to ``state`` (in place) and return it: the only writer of experiment state.

    Events of a trial that was never added, and kinds that change no state
    (warnings, system metrics, stacks, a kind a newer version wrote), change
    nothing but the position :attr:`ExperimentState.seq`.
    """
    handler = _HANDLERS.get(type(event))
    if handler is not None:
        with state_writer():
            if isinstance(event, ev.TrialEvent) and not isinstance(event, ev.TrialAdd):
                trial = state.by_id.get(event.trial_id)
                if trial is not None:
                    handler(state, trial, event)
            else:
                handler(state, None, event)
    state.seq += 1
    return state


# ---------------------------------------------------------------------------- experiment events
def _experiment(state: ExperimentState, _t: Any, e: ev.Experiment) -> None:
    if e.resume:  # a restored run: what did not finish goes back to the queue (see reopen_trials)
        reopen_trials(state, resume_errored=bool(e.resume_errored), restart_errored=bool(e.restart_errored))
    resizes = state.meta.get("resizes")
    state.meta = {"name": e.name, "metric": e.metric, "mode": e.mode, "num_samples": e.num_samples,
                  "scaling": e.scaling}
    if resizes:
        state.meta["resizes"] = resizes
    sched = e.scheduler
    state.scheduler = str(sched["scheduler"]) if isinstance(sched, dict) and sched.get("scheduler") else None
    if state.start_time is None:
        state.start_time = e.time


def _experiment_end(state: ExperimentState, _t: Any, e: ev.ExperimentEnd) -> None:
    state.status = e.status
    state.end_time = e.time
    for tid in list(state.running_since):
        _close_span(state, tid, e.time, "interrupted")


def _mlflow_parent(state: ExperimentState, _t: Any, e: ev.MlflowParentRun) -> None:
    state.mlflow_parent_run_id = e.run_id


def _trial_add(state: ExperimentState, _t: Any, e: ev.TrialAdd) -> None:
    path = e.path
    if state.experiment_dir and not os.path.isdir(path):  # the folder moved: trial folders sit beside the journal
        path = os.path.join(state.experiment_dir, os.path.basename(path))
    config = e.config_object if e.config_object is not None else _config(e.config, e.config_pickle, state.trusted)
    trial = Trial(trial_id=e.trial_id, config=config, path=path, name=str(e.name or e.trial_id),
                  trainable_name=e.trainable_name or "", base_resources=_per_rank(state.meta.get("scaling")),
                  recorded_tag=e.experiment_tag)
    scaling = state.meta.get("scaling")
    scaling = scaling if isinstance(scaling, dict) else {}
    trial.configured_ranks = _ranks(scaling) or 1
    trial.bundle_per_rank = bool(scaling.get("trainer")) or trial.configured_ranks > 1
    if scaling.get("placement_strategy") in ("SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
        trial.placement_strategy = str(scaling["placement_strategy"])
    if e.trial_id in state.by_id:  # (a journal that adds a trial twice: the later one counts)
        state.trials[:] = [t for t in state.trials if t.trial_id != e.trial_id]
    trial.seal()
    state.trials.append(trial)
    state.by_id[e.trial_id] = trial
    state.history[e.trial_id] = TrialHistory(first_config=dict(e.config or {}))


# ---------------------------------------------------------------------------- trial events
def _trial_start(state: ExperimentState, t: Trial, e: ev.TrialStart) -> None:
    t.attempts = max(t.attempts, int(e.attempt or 0) + 1)
    _move(state, t, TrialStatus.RUNNING)
    t.pending_decision = None
    t.restart_iteration = None
    t.world_size = len(e.workers or ()) or t.world_size
    if e.resources and t.resources is None:  # its own resources (with_resources(fn), a ScalingConfig with domains)
        t.base_resources = _per_rank(e.resources) or t.base_resources
        t.configured_ranks = _ranks(e.resources) or t.configured_ranks
        t.bundle_per_rank = t.bundle_per_rank or t.configured_ranks > 1
    if not t.world_sizes and t.world_size:
        t.world_sizes.append((int(e.start_iteration or 0), t.world_size))
    state.running_since[t.trial_id] = e.time
    state.peak_running = max(state.peak_running, len(state.running_since))
    state.paused_at.pop(t.trial_id, None)


def _resize(state: ExperimentState, t: Trial, e: ev.Resize) -> None:
    t.world_sizes.append((int(e.iteration or 0), int(e.to_world_size or 0)))
    state.meta.setdefault("resizes", {}).setdefault(t.trial_id, []).append(
        {"iteration": e.iteration, "from_world_size": e.from_world_size, "to_world_size": e.to_world_size,
         "reason": e.reason, "message": e.message})


def _trial_resources(state: ExperimentState, t: Trial, e: ev.TrialResources) -> None:
    t.resources = {"bundles": [dict(b) for b in e.bundles], "strategy": e.strategy or "PACK"}
    t.resource_changes.append((int(e.iteration or 0), dict(e.request or {}), e.num_workers))


def _ranks(scaling: Any) -> int | None:
    """The ranks of a journaled ``scaling``/``resources`` object (``num_workers``), or None."""
    n = scaling.get("num_workers") if isinstance(scaling, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None


def _per_rank(scaling: Any) -> dict[str, float] | None:
    """The resources per rank of a journaled ``scaling``/``resources`` object (``resources_per_worker``)."""
    per = scaling.get("resources_per_worker") if isinstance(scaling, dict) else None
    return {str(k): float(v) for k, v in per.items() if isinstance(v, (int, float))} if isinstance(per, dict) else None


def _result(state: ExperimentState, t: Trial, e: ev.Result) -> None:
    if t.recovered_result and t.results and t.results[-1] == e.result:
        t.recovered_result = False  # restore found it in its checkpoint; this run journals it again
        return
    t.results.append(e.result)
    total = e.result.get("time_total_s", 0.0)
    t.time_total_s = float(total) if isinstance(total, (int, float)) else 0.0


def _superseded(state: ExperimentState, t: Trial, e: ev.Superseded) -> None:
    t.supersede_after(int(e.after_iteration))
    state.history[t.trial_id].superseded.append(ResultsSuperseded(
        seq=state.seq, time=e.time, iteration=int(e.after_iteration), results=len(t.results)))


def _checkpoint(state: ExperimentState, t: Trial, e: ev.CheckpointSaved) -> None:
    path = e.path
    if is_remote(path):
        ckpt = Checkpoint(path, state.storage_fs if state.storage_fs is not None else fs_for_url(path)[0])
    else:
        if not os.path.isdir(path):
            path = os.path.join(t.path, os.path.basename(path))
        ckpt = Checkpoint(path)
    # a retry reaching the same iteration, or a PBT clone, replaces the checkpoint of that folder (the trial's
    # checkpoints all sit in its folder, as rewritten above: comparing whole paths is comparing folder names).
    # The index answers "is it there?" without a scan of the list (a long run saves thousands of checkpoints)
    index = _checkpoint_index(state, t)
    pair = (ckpt, dict(e.metrics or {}))
    if index is None:  # (a list with a folder twice, set outside this reducer: the plain way)
        if any(p[0].path == ckpt.path for p in t.checkpoints):
            t.checkpoints = [p for p in t.checkpoints if p[0].path != ckpt.path]
        t.checkpoints.append(pair)
    else:
        if ckpt.path in index.paths:  # (rare) found from the end, where the one replaced usually is
            kept = t.checkpoints
            for i in range(len(kept) - 1, -1, -1):
                if kept[i][0].path == ckpt.path:
                    del kept[i]
                    break
        else:
            index.add(ckpt.path)
        t.checkpoints.append(pair)
        index.size = len(t.checkpoints)
    if e.cloned_from is not None:
        t.restart_iteration = e.cloned_iteration if e.cloned_iteration is not None else e.iteration


def _checkpoint_deleted(state: ExperimentState, t: Trial, e: ev.CheckpointDeleted) -> None:
    name = os.path.basename(e.path)
    index = _checkpoint_index(state, t)
    if index is not None and not index.names.get(name):
        return  # none of its checkpoints has that folder name
    # (retention's deletions: under CheckpointConfig(num_to_keep=k) the list stays at about k + 1, a short filter)
    kept: list[tuple[Checkpoint, dict[str, Any]]] = []
    for p in t.checkpoints:
        if os.path.basename(p[0].path) == name:
            if index is not None:
                index.discard(p[0].path)
        else:
            kept.append(p)
    t.checkpoints = kept
    if index is not None:
        index.of, index.size = kept, len(kept)


def _decision(state: ExperimentState, t: Trial, e: ev.Decision) -> None:
    t.pending_decision = e.decision
    if e.decision == "STOP":
        t.stop_reason = t.stop_reason or e.reason
        if e.pruned is not None:
            t.stopped_by_scheduler = e.pruned
    state.history[t.trial_id].decisions.append(DecisionMade(
        seq=state.seq, time=e.time, iteration=int(e.iteration or t.iteration), results=len(t.results),
        decision=str(e.decision), reason=str(e.reason or ""), pruned=e.pruned))


def _paused(state: ExperimentState, t: Trial, e: ev.TrialPaused) -> None:
    _move(state, t, TrialStatus.PAUSED)
    state.paused_at[t.trial_id] = int(e.iteration or t.iteration)
    _close_span(state, t.trial_id, e.time, "paused")


def _resume(state: ExperimentState, t: Trial, e: ev.TrialResume) -> None:
    _move(state, t, TrialStatus.PENDING)


def _requeued(state: ExperimentState, t: Trial, e: ev.TrialRequeued) -> None:
    _move(state, t, TrialStatus.PENDING)
    if e.not_started:  # its attempt never ran user code: it does not count
        t.attempts = max(0, t.attempts - 1)
    state.running_since.pop(t.trial_id, None)


def _failure(state: ExperimentState, t: Trial, e: ev.TrialFailure) -> None:
    t.num_failures += 1
    if e.failure_kind is not None:
        t.error_kind = e.failure_kind
    if e.retry:
        _move(state, t, TrialStatus.PENDING)
    _close_span(state, t.trial_id, e.time, "failed")
    state.history[t.trial_id].failures.append(FailureSeen(
        seq=state.seq, time=e.time, iteration=t.iteration, results=len(t.results), message=str(e.message or ""),
        retry=bool(e.retry)))


def _oom_retry(state: ExperimentState, t: Trial, e: ev.OomRetry) -> None:
    t.config = e.config_object if e.config_object is not None else _config(e.new_config, e.config_pickle,
                                                                           state.trusted)
    t.oom_retries += 1
    t.num_failures -= 1  # (its trial_failure line counted it; OOM retries have their own budget)


def _preempted(state: ExperimentState, t: Trial, e: ev.TrialPreempted) -> None:
    t.num_preemptions += 1


def _exploit(state: ExperimentState, t: Trial, e: ev.Exploit) -> None:
    state.history[t.trial_id].exploits.append(ExploitMade(
        seq=state.seq, time=e.time, iteration=int(e.iteration or t.iteration), results=len(t.results),
        from_trial=e.from_trial, from_iteration=e.from_iteration, old_config=dict(e.old_config or {}),
        new_config=dict(e.new_config or {})))
    t.config = e.config_object if e.config_object is not None else _config(e.new_config, e.config_pickle,
                                                                           state.trusted)
    t.lineage.append({k: v for k, v in e.to_json().items()
                      if k not in ("event", "config_pickle", "time", "experiment_tag")})
    if e.experiment_tag is not None:
        t.recorded_tag = e.experiment_tag
    if t.status is TrialStatus.PAUSED:  # a paused trial that exploits goes back to the queue
        _move(state, t, TrialStatus.PENDING)
        state.paused_at.pop(t.trial_id, None)


def _mlflow_run(state: ExperimentState, t: Trial, e: ev.MlflowRun) -> None:
    t.mlflow_run_id = e.run_id


def _trial_end(state: ExperimentState, t: Trial, e: ev.TrialEnd) -> None:
    _move(state, t, TrialStatus(e.status))
    t.error = e.error
    t.error_traceback = e.traceback
    if e.error_kind is not None or t.status is TrialStatus.ERROR:
        t.error_kind = e.error_kind
    t.stop_reason = e.stop_reason
    t.resumable = bool(e.resumable)
    if e.pruned is not None:
        t.stopped_by_scheduler = e.pruned
    t.pending_decision = None
    state.history[t.trial_id].ends.append(TrialEnded(
        seq=state.seq, time=e.time, iteration=t.iteration, results=len(t.results), status=t.status.value,
        stop_reason=t.stop_reason, paused_iteration=state.paused_at.pop(t.trial_id, None)))
    _close_span(state, t.trial_id, e.time, t.status.value.lower())


_HANDLERS: dict[type[ev.Event], Callable[[ExperimentState, Any, Any], None]] = {
    ev.Experiment: _experiment, ev.ExperimentEnd: _experiment_end, ev.MlflowParentRun: _mlflow_parent,
    ev.TrialAdd: _trial_add, ev.TrialStart: _trial_start, ev.Resize: _resize, ev.TrialResources: _trial_resources,
    ev.Result: _result,
    ev.Superseded: _superseded, ev.CheckpointSaved: _checkpoint, ev.CheckpointDeleted: _checkpoint_deleted,
    ev.Decision: _decision, ev.TrialPaused: _paused, ev.TrialResume: _resume, ev.TrialRequeued: _requeued,
    ev.TrialFailure: _failure, ev.OomRetry: _oom_retry, ev.TrialPreempted: _preempted, ev.Exploit: _exploit,
    ev.MlflowRun: _mlflow_run, ev.TrialEnd: _trial_end,
}


# ---------------------------------------------------------------------------- helpers
class _CheckpointIndex:
    """The folders of one trial's ``checkpoints`` list, so that a checkpoint event does not scan the list.

    ``of`` and ``size`` say which list (and how long) it describes: a list set or
    changed outside :func:`apply` (a restore dropping missing checkpoints, a restart
    of errored trials) is indexed again at its next event.
    """

    __slots__ = ("names", "of", "paths", "size")

    def __init__(self, of: list[Any]) -> None:
        self.of = of
        self.size = len(of)
        self.paths: set[str] = set()
        #: folder name -> how many of the trial's checkpoints carry it
        self.names: dict[str, int] = {}
        for ckpt, _metrics in of:
            self.add(ckpt.path)

    def add(self, path: str) -> None:
        self.paths.add(path)
        name = os.path.basename(path)
        self.names[name] = self.names.get(name, 0) + 1

    def discard(self, path: str) -> None:
        if path in self.paths:
            self.paths.discard(path)
            name = os.path.basename(path)
            left = self.names.get(name, 0) - 1
            if left > 0:
                self.names[name] = left
            else:
                self.names.pop(name, None)


def _checkpoint_index(state: ExperimentState, t: Trial) -> _CheckpointIndex | None:
    """``t``'s checkpoint index (built on first use, or again when its list changed outside :func:`apply`);
    None when the list holds a folder twice (never written so by :func:`apply`: such a list is left to a scan)."""
    index = state.checkpoint_index.get(t.trial_id)
    if index is not None and index.of is t.checkpoints and index.size == len(t.checkpoints):
        return index
    index = _CheckpointIndex(t.checkpoints)
    if len(index.paths) != index.size:
        state.checkpoint_index.pop(t.trial_id, None)
        return None
    state.checkpoint_index[t.trial_id] = index
    return index


def _move(state: ExperimentState, t: Trial, new: TrialStatus) -> None:
    """The trial's status becomes ``new`` (checked against the transition table when ``state.strict``)."""
    if state.strict:
        check_move(t.trial_id, t.status, new)
    t.status = new


def reopen_trials(state: ExperimentState, *, resume_errored: bool = False, restart_errored: bool = False) -> None:
    """A restore: trials that did not finish (and, if asked, those that errored) are PENDING again.

    Unfinished ones resume from their checkpoint; ``resume_errored`` resumes errored
    ones too (their failures forgotten), ``restart_errored`` restarts them from scratch
    (their checkpoints forgotten). The one move out of a final status, and only here.
    """
    with state_writer():
        _reopen(state, resume_errored, restart_errored)


def _reopen(state: ExperimentState, resume_errored: bool, restart_errored: bool) -> None:
    for t in state.trials:
        if t.status in (TrialStatus.RUNNING, TrialStatus.PAUSED, TrialStatus.PENDING) or t.resumable:
            t.status = TrialStatus.PENDING
            t.resumable = False
            t.stop_reason = None
        elif t.status == TrialStatus.ERROR and (resume_errored or restart_errored):
            t.status = TrialStatus.PENDING
            t.num_failures = 0
            t.error = t.error_traceback = None
            if restart_errored:
                t.checkpoints = []
    state.running_since.clear()
    state.paused_at.clear()


def _close_span(state: ExperimentState, tid: str, when: float | None, how: str) -> None:
    if tid in state.running_since:
        start = state.running_since.pop(tid)
        if start is not None:
            state.history[tid].spans.append(Span(start, when if when is not None else start, how))


def _config(json_copy: dict[str, Any] | None, blob: str | None, trusted: bool) -> dict[str, Any]:
    """A trial's config from a journal event: the JSON copy, or (``trusted`` only) the exact pickled one.

    Configs that JSON cannot hold exactly (objects, tuples) are also journaled
    pickled; only a restore, which runs the user's own code anyway, unpickles them.
    """
    if blob and trusted:
        from .._signing import check_field

        data = check_field(blob)
        if data is None:  # not signed with this user's key: never unpickled
            _warn_unsigned()
        else:
            try:
                import cloudpickle

                return cloudpickle.loads(data)  # type: ignore[no-any-return]
            except Exception:  # noqa: BLE001 - fall back to the JSON copy
                pass
    return dict(json_copy or {})


def _warn_unsigned() -> None:
    from .._signing import key_path

    logging.getLogger("tuneplat").warning(
        "tuneplat: a pickled config in the journal is not signed with your key (%s): it was changed, or written "
        "by someone else or an older tuneplat; it is not unpickled, the journal's JSON copy of that config is "
        "used", key_path())
