"""The experiment journal's events, typed: one frozen dataclass per kind, with its JSON form and schema.

Each line of ``journal.jsonl`` is one event: ``{"event": KIND, "time": ..., field: value, ...}``.
:func:`from_json` turns a line's object into its dataclass after checking it against the kind's
schema (:func:`schema_problem`: the fields without a default must be there, and every field present must
have the declared type); :meth:`Event.to_json` is the inverse. Keys a kind does not declare (written by a
newer tuneplat) are kept in ``extra``, so a round trip loses nothing; a kind this version does not know is
read as :class:`UnknownEvent`.

Example:
    >>> ev = TrialPaused(trial_id="a_00000", iteration=3, time=1.0)
    >>> ev.to_json()
    {'event': 'trial_paused', 'time': 1.0, 'trial_id': 'a_00000', 'iteration': 3}
    >>> from_json(ev.to_json()) == ev
    True
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .._annotations import isinstance_types

__all__ = [
    "EVENT_TYPES", "STATUSES", "CheckpointDeleted", "CheckpointSaved", "Decision", "Event", "Experiment", "ExperimentEnd", "Exploit",
    "MlflowParentRun", "MlflowRun", "OomRetry", "PreemptNotice", "RankFailure", "Resize", "Result", "Stacks",
    "Starved", "StopAll", "Superseded", "SystemMetrics", "TimeBudgetReached", "TrialAdd", "TrialEnd", "TrialFailure",
    "TrialEvent", "TrialPreempted", "TrialPaused", "TrialRequeued", "TrialResources", "TrialResume", "TrialStart", "TrialWarning", "UnknownEvent", "from_json",
    "schema_problem",
]

def _when_set() -> Any:
    """A field left out of the JSON while it is None (the loop writes it only in some cases)."""
    return field(default=None, metadata={"omit_none": True})


def _local() -> Any:
    """A field the live loop gives the reducer and the journal never holds (the exact objects of a config)."""
    return field(default=None, compare=False, repr=False, metadata={"local": True})


#: the statuses a ``trial_end`` may carry (:class:`tuneplat.TrialStatus` values)
STATUSES = ("PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR")


@dataclass(frozen=True, kw_only=True)
class Event:
    """One journal event. ``time`` is when it was written (seconds since the epoch; set by the journal)."""

    kind: ClassVar[str] = ""
    time: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The event as the JSON object of its journal line (``extra`` kept; ``time`` and the fields
        written only in some cases are left out while they are None)."""
        out: dict[str, Any] = {"event": self.kind}
        for name, (key, _, _) in _TYPES[type(self)].items():
            value = getattr(self, name)
            if value is not None or name not in _OMIT_NONE[type(self)]:
                out[key] = value
        out.update(self.extra)
        return out


@dataclass(frozen=True, kw_only=True)
class TrialEvent(Event):
    """An event about one trial."""

    trial_id: str


@dataclass(frozen=True, kw_only=True)
class Experiment(Event):
    """The experiment started (or resumed): its settings as the loop saw them."""

    kind: ClassVar[str] = "experiment"
    name: str | None = None
    metric: Any = None
    mode: Any = None
    num_samples: int | None = None
    scheduler: Any = None
    searcher: str | None = None
    resume: bool | None = None
    scaling: dict[str, Any] | None = None
    #: a restore that resumes (or restarts) the trials that errored too (Tuner.restore's arguments)
    resume_errored: bool | None = _when_set()
    restart_errored: bool | None = _when_set()


@dataclass(frozen=True, kw_only=True)
class ExperimentEnd(Event):
    """The loop ended: ``status`` (finished, interrupted, error...) and the error that ended it, if any."""

    kind: ClassVar[str] = "experiment_end"
    status: str
    error: str | None = _when_set()
    traceback: str | None = _when_set()


@dataclass(frozen=True, kw_only=True)
class TrialAdd(TrialEvent):
    """A trial was created with ``config`` (JSON copy; ``config_pickle``: the exact objects, hex)."""

    kind: ClassVar[str] = "trial_add"
    path: str
    config: dict[str, Any] | None = None
    name: str | None = None
    config_pickle: str | None = None
    trainable_name: str | None = _when_set()
    #: Ray's ``experiment_tag`` of the trial (``"0_lr=0.0100"``)
    experiment_tag: str | None = _when_set()
    #: the exact config objects (live only; a replay unpickles ``config_pickle`` when trusted, else the JSON copy)
    config_object: dict[str, Any] | None = _local()


@dataclass(frozen=True, kw_only=True)
class TrialStart(TrialEvent):
    """An attempt of a trial started (from ``checkpoint`` when it has one)."""

    kind: ClassVar[str] = "trial_start"
    attempt: int | None = None
    start_iteration: int | None = None
    workers: Any = None
    checkpoint: str | None = None
    resources: dict[str, Any] | None = _when_set()
    #: GPU_memory="auto": what this attempt asks per rank ({"bytes": n | "whole device", "why": ...})
    gpu_memory_auto: dict[str, Any] | None = _when_set()


@dataclass(frozen=True, kw_only=True)
class Result(TrialEvent):
    """A result the trial reported."""

    kind: ClassVar[str] = "result"
    result: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Decision(TrialEvent):
    """The scheduler's (or a stop rule's) decision on a result other than CONTINUE."""

    kind: ClassVar[str] = "decision"
    iteration: int | None = None
    decision: str | None = None
    reason: str | None = None
    pruned: bool | None = _when_set()


@dataclass(frozen=True, kw_only=True)
class CheckpointSaved(TrialEvent):
    """A checkpoint was committed at ``path`` (``cloned_from``: copied from another trial by PBT)."""

    kind: ClassVar[str] = "checkpoint"
    path: str
    iteration: int | None = None
    metrics: dict[str, Any] | None = None
    cloned_from: str | None = _when_set()
    cloned_iteration: int | None = _when_set()


@dataclass(frozen=True, kw_only=True)
class CheckpointDeleted(TrialEvent):
    """Retention deleted the checkpoint at ``path``."""

    kind: ClassVar[str] = "checkpoint_deleted"
    path: str


@dataclass(frozen=True, kw_only=True)
class Superseded(TrialEvent):
    """The trial's results after ``after_iteration`` no longer count (it went back to a checkpoint)."""

    kind: ClassVar[str] = "superseded"
    after_iteration: int
    count: int | None = None


@dataclass(frozen=True, kw_only=True)
class TrialRequeued(TrialEvent):
    """The trial went back to the queue without a failure being counted."""

    kind: ClassVar[str] = "trial_requeued"
    reason: str | None = None
    #: its attempt ran no user code (a worker lost before the start): it does not count as an attempt
    not_started: bool | None = _when_set()


@dataclass(frozen=True, kw_only=True)
class TrialPaused(TrialEvent):
    """The scheduler paused the trial at ``iteration``."""

    kind: ClassVar[str] = "trial_paused"
    iteration: int | None = None


@dataclass(frozen=True, kw_only=True)
class TrialResume(TrialEvent):
    """A paused trial was resumed (a HyperBand promotion)."""

    kind: ClassVar[str] = "trial_resume"


@dataclass(frozen=True, kw_only=True)
class TrialFailure(TrialEvent):
    """An attempt failed (``retry``: another attempt follows)."""

    kind: ClassVar[str] = "trial_failure"
    attempt: int | None = None
    message: str | None = None
    traceback: str | None = None
    retry: bool | None = None
    failure_kind: str | None = field(default=None, metadata={"json": "kind", "omit_none": True})  # JSON: "kind"
    #: the exception's qualified type names, most specific first (empty: no exception, e.g. a lost worker)
    types: list[str] | None = _when_set()
    oom_retry: bool | None = _when_set()


@dataclass(frozen=True, kw_only=True)
class OomRetry(TrialEvent):
    """After running out of memory the trial retries with a smaller ``new_config``."""

    kind: ClassVar[str] = "oom_retry"
    retry: int | None = None
    change: Any = None
    old_config: dict[str, Any] | None = None
    new_config: dict[str, Any] | None = None
    config_pickle: str | None = None
    config_object: dict[str, Any] | None = _local()


@dataclass(frozen=True, kw_only=True)
class TrialPreempted(TrialEvent):
    """An elastic trial's group ended because a worker was preempted (``FailureConfig.max_preemption_failures``)."""

    kind: ClassVar[str] = "trial_preempted"
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class TrialEnd(TrialEvent):
    """The trial ended with ``status`` (one of :data:`STATUSES`)."""

    kind: ClassVar[str] = "trial_end"
    status: str
    error: str | None = None
    traceback: str | None = None
    stop_reason: str | None = None
    iteration: int | None = None
    error_kind: str | None = _when_set()
    resumable: bool | None = _when_set()
    #: ended by the scheduler before its budget (ASHA/HyperBand's early stop; searchers hear ``pruned``)
    pruned: bool | None = _when_set()


@dataclass(frozen=True, kw_only=True)
class Exploit(TrialEvent):
    """PBT: the trial continues from ``from_trial``'s checkpoint with ``new_config``."""

    kind: ClassVar[str] = "exploit"
    from_trial: str | None = None
    iteration: int | None = None
    from_iteration: int | None = None
    old_config: dict[str, Any] | None = None
    new_config: dict[str, Any] | None = None
    config_pickle: str | None = None
    info: dict[str, Any] | None = None
    #: the trial's ``experiment_tag`` from now on (Ray's ``"3_lr=0.0100@perturbed[lr=0.0200]"``)
    experiment_tag: str | None = _when_set()
    config_object: dict[str, Any] | None = _local()


@dataclass(frozen=True, kw_only=True)
class Resize(TrialEvent):
    """An elastic trial's group restarts with ``to_world_size`` ranks."""

    kind: ClassVar[str] = "resize"
    from_world_size: int | None = None
    to_world_size: int | None = None
    iteration: int | None = None
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class TrialResources(TrialEvent):
    """A resource-changing scheduler gave the paused trial new resources: its next attempt runs with ``bundles``.

    ``bundles`` are Ray's (a leading ``{}``: the empty head bundle of a trainer's factory). ``request`` is
    what each rank asks for (a trial of one bundle per rank: one bundle; else its one rank holds the bundles'
    sum), ``previous`` what it asked before; ``num_workers``/``previous_num_workers``: its ranks now and
    before (trials of one bundle per rank only); ``reason`` names the scheduler and its allocation function.
    """

    kind: ClassVar[str] = "trial_resources"
    bundles: list[Any]
    strategy: str | None = None
    request: dict[str, Any] | None = None
    previous: dict[str, Any] | None = None
    iteration: int | None = None
    reason: str | None = None
    num_workers: int | None = _when_set()
    previous_num_workers: int | None = _when_set()


@dataclass(frozen=True, kw_only=True)
class RankFailure(TrialEvent):
    """One rank of a trial failed (the group is torn down)."""

    kind: ClassVar[str] = "rank_failure"
    attempt: int | None = None
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class PreemptNotice(TrialEvent):
    """The host of one of the trial's ranks announced that it is leaving."""

    kind: ClassVar[str] = "preempt_notice"
    host: str | None = None
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class SystemMetrics(TrialEvent):
    """CPU, memory and GPU samples of the trial's ranks (``ranks``: rank → metrics)."""

    kind: ClassVar[str] = "system_metrics"
    timestamp: float | None = None
    ranks: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class Stacks(TrialEvent):
    """The Python stacks of the trial's ranks were captured into ``path``."""

    kind: ClassVar[str] = "stacks"
    path: str | None = None
    summary: str | None = None
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class TrialWarning(TrialEvent):
    """Something the user should know about a trial (a non-finite metric...)."""

    kind: ClassVar[str] = "warning"
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class TimeBudgetReached(Event):
    """``TuneConfig.time_budget_s`` ran out."""

    kind: ClassVar[str] = "time_budget_reached"


@dataclass(frozen=True, kw_only=True)
class StopAll(Event):
    """A stopper's ``stop_all()`` ended the experiment."""

    kind: ClassVar[str] = "stop_all"
    stopper: str | None = None


@dataclass(frozen=True, kw_only=True)
class Starved(Event):
    """No trial could start: ``message`` says why."""

    kind: ClassVar[str] = "starved"
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class MlflowParentRun(Event):
    """The experiment's MLflow parent run."""

    kind: ClassVar[str] = "mlflow_parent_run"
    run_id: str
    experiment_id: str | None = None
    tracking_uri: str | None = None


@dataclass(frozen=True, kw_only=True)
class MlflowRun(TrialEvent):
    """The trial's MLflow run."""

    kind: ClassVar[str] = "mlflow_run"
    run_id: str


@dataclass(frozen=True, kw_only=True)
class UnknownEvent(Event):
    """An event of a kind this version does not know (kept whole in ``extra``)."""

    name: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"event": self.name}
        if self.time is not None:
            out["time"] = self.time
        out.update(self.extra)
        return out


#: kind → its dataclass
EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls for cls in (
        Experiment, ExperimentEnd, TrialAdd, TrialStart, Result, Decision, CheckpointSaved, CheckpointDeleted,
        Superseded, TrialRequeued, TrialPaused, TrialResume, TrialFailure, OomRetry, TrialPreempted, TrialEnd, Exploit,
        Resize, TrialResources,
        RankFailure, PreemptNotice, SystemMetrics, Stacks, TrialWarning, TimeBudgetReached, StopAll, Starved,
        MlflowParentRun, MlflowRun,
    )
}

_TYPES: dict[type[Event], dict[str, tuple[str, tuple[type, ...], bool]]] = {}  # field -> (json key, types, optional)
_REQUIRED: dict[type[Event], frozenset[str]] = {}
_OMIT_NONE: dict[type[Event], frozenset[str]] = {}


for _cls in EVENT_TYPES.values():
    _hints = typing.get_type_hints(_cls)
    _fields = {}
    _required = set()
    for _f in dataclasses.fields(_cls):
        if _f.name == "extra" or _f.metadata.get("local"):
            continue
        _t, _opt = isinstance_types(_hints[_f.name])
        _fields[_f.name] = (_f.metadata.get("json", _f.name), _t, _opt)
        if _f.default is dataclasses.MISSING and _f.default_factory is dataclasses.MISSING:
            _required.add(_f.name)
    _TYPES[_cls] = _fields
    _REQUIRED[_cls] = frozenset(_required)
    _OMIT_NONE[_cls] = frozenset(
        f.name for f in dataclasses.fields(_cls) if f.name == "time" or f.metadata.get("omit_none"))


def schema_problem(data: Any) -> str | None:
    """What is wrong with ``data`` as a journal event (None: nothing).

    A kind this version does not know is not a problem (a newer tuneplat wrote it).
    """
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__} where an event object was expected"
    kind = data.get("event")
    if not isinstance(kind, str):
        return "an object without its \"event\" name"
    cls = EVENT_TYPES.get(kind)
    if cls is None:
        return None
    for name, (key, types, optional) in _TYPES[cls].items():
        if key not in data:
            if name in _REQUIRED[cls]:
                return f"a {kind!r} event without its {key!r}"
            continue
        value = data[key]
        if value is None and (optional or not types):
            continue
        if types and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            want = " or ".join(t.__name__ for t in types)
            return f"a {kind!r} event whose {key!r} is {type(value).__name__}, not {want}"
    if kind == "trial_end" and data["status"] not in STATUSES:
        return f"a 'trial_end' event with status {data['status']!r} (not one of {', '.join(STATUSES)})"
    return None


def from_json(data: dict[str, Any]) -> Event:
    """The typed event of a journal line's object.

    Raises:
        ValueError: ``data`` does not fit its kind's schema (the message says how).
    """
    problem = schema_problem(data)
    if problem is not None:
        raise ValueError(problem)
    kind = data["event"]
    cls = EVENT_TYPES.get(kind)
    if cls is None:
        return UnknownEvent(name=kind, time=data.get("time"),
                            extra={k: v for k, v in data.items() if k not in ("event", "time")})
    keys = {key: name for name, (key, _, _) in _TYPES[cls].items()}
    values = {keys[k]: v for k, v in data.items() if k in keys}
    extra = {k: v for k, v in data.items() if k not in keys and k != "event"}
    return cls(**values, extra=extra)
