"""A trial: one config, its results, checkpoints and attempts."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from schedulers import Decision

from ..storage._checkpoint import Checkpoint

__all__ = ["ReadOnlyTrial", "RunState", "Trial", "TrialStatus", "state_writer"]

_writers = [0]  # > 0 while the experiment's reducer (or a restore's file checks) writes trials


@contextlib.contextmanager
def state_writer() -> Iterator[None]:
    """Trials of an experiment's state may be written inside this block (the reducer's, and only its)."""
    _writers[0] += 1
    try:
        yield
    finally:
        _writers[0] -= 1


class ReadOnlyTrial(AttributeError):
    """A trial of an experiment's state was assigned outside its reducer (a callback, or a bug in the loop)."""


class TrialStatus(str, enum.Enum):
    """Ray Tune's trial states."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"

    def is_finished(self) -> bool:
        return self in (TrialStatus.TERMINATED, TrialStatus.ERROR)

    def __str__(self) -> str:
        return self.value


@dataclass(eq=False)
class Trial:
    """One trial, as the tuner tracks it; what callbacks and name creators receive.

    Ray's attributes are here under Ray's names: ``trial_id``, ``config``,
    ``last_result``, ``status`` (compare with ``Trial.RUNNING`` or ``"RUNNING"``),
    ``path``/``local_path``/``logdir`` (the trial folder), ``checkpoint``,
    ``trainable_name``, ``experiment_tag``, ``num_failures``, ``error``;
    ``str(trial)`` is its name. Treat it as read-only. As in Ray, a trial is
    equal only to itself and hashable: callbacks may key dicts by trial (every
    hook receives the same object for a trial).
    """

    PENDING: ClassVar[str] = TrialStatus.PENDING.value
    RUNNING: ClassVar[str] = TrialStatus.RUNNING.value
    PAUSED: ClassVar[str] = TrialStatus.PAUSED.value
    TERMINATED: ClassVar[str] = TrialStatus.TERMINATED.value
    ERROR: ClassVar[str] = TrialStatus.ERROR.value

    trial_id: str
    config: dict[str, Any]
    path: str
    name: str
    status: TrialStatus = TrialStatus.PENDING
    results: list[dict[str, Any]] = field(default_factory=list)
    superseded: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    error_traceback: str | None = None
    num_failures: int = 0
    error_kind: str | None = None  # "oom": its last failure was out of memory (GPU or host)
    oom_retries: int = 0  # times it was shrunk (FailureConfig.oom_halve) and retried
    attempts: int = 0
    checkpoints: list[tuple[Checkpoint, dict[str, Any]]] = field(default_factory=list)
    stop_reason: str | None = None
    pending_decision: str | None = None  # "STOP"/"PAUSE" given, group not ended yet
    lineage: list[dict[str, Any]] = field(default_factory=list)
    mlflow_run_id: str | None = None
    time_total_s: float = 0.0
    stopped_by_scheduler: bool = False
    trainable_name: str = ""
    #: set by PBT's clone: the next attempt goes on from this training_iteration (the source checkpoint's)
    restart_iteration: int | None = None
    #: ranks of its current (or last) group; elastic groups change it (ScalingConfig(num_workers=(min, max)))
    world_size: int | None = None
    #: elastic groups: ``(start_iteration, ranks)`` of each attempt whose size differed from the one before
    world_sizes: list[tuple[int, int]] = field(default_factory=list)
    #: elastic groups: restarts because a worker was preempted (``FailureConfig.max_preemption_failures``)
    num_preemptions: int = 0
    #: restore took its last result from its last checkpoint's metrics (the tuner died between the two journal
    #: lines): the resumed run journals it again, or the next restore would lose it
    recovered_result: bool = False
    #: ended only because the experiment ended early (fail_fast, a misspelt metric): a restore resumes it
    resumable: bool = False
    #: what each of its ranks asks for as configured (``with_resources``, ``ScalingConfig``); None: not known
    base_resources: dict[str, float] | None = None
    #: ``{"bundles": [...], "strategy": ...}`` a resource-changing scheduler gave it (None: as configured)
    resources: dict[str, Any] | None = None
    #: ``(start_iteration, resources per rank, ranks)`` of each change of its resources (ResourceChangingScheduler;
    #: ranks is None for a trial whose one process holds the bundles' sum)
    resource_changes: list[tuple[int, dict[str, float], int | None]] = field(default_factory=list)
    #: ranks as configured (``ScalingConfig(num_workers=...)``; the most ranks of an elastic group)
    configured_ranks: int = 1
    #: its resources are one bundle per rank, as Ray Train's trainers have them (an empty head bundle, then one
    #: per worker): a Train trainer's trial or a trial of several ranks; else (a function trainable of one rank, as
    #: in Ray) its one process holds the bundles' sum
    bundle_per_rank: bool = False
    #: the ScalingConfig's placement_strategy (the strategy of its PlacementGroupFactory, as Ray's trainers have it)
    placement_strategy: str = "PACK"
    #: Ray's ``experiment_tag`` as recorded when it was created (and by PBT's exploit); None in older journals
    recorded_tag: str | None = None

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Trial({self.name!r}, status={self.status.value})"

    def __setattr__(self, name: str, value: Any) -> None:
        # a trial of an experiment's state changes only through its reducer (core/_state.apply of a journal event)
        if not _writers[0] and self.__dict__.get("_sealed"):
            raise ReadOnlyTrial(f"trial {self.trial_id} is read-only ({name} = {value!r}): an experiment's trials "
                                "change only through journal events (tuneplat/core/_state.py)")
        object.__setattr__(self, name, value)

    def seal(self) -> None:
        """From now on only the reducer writes this trial (it joined an experiment's state)."""
        object.__setattr__(self, "_sealed", True)

    @property
    def local_path(self) -> str:
        """The trial folder (Ray: ``Trial.local_path``)."""
        return self.path

    @property
    def logdir(self) -> str:
        """The trial folder (Ray's older name)."""
        return self.path

    @property
    def experiment_tag(self) -> str:
        """A short tag of the trial's index and config values, as Ray's (e.g. ``0_lr=0.0100,momentum=0.9000``):
        see ``tuneplat/search/_tags.py`` for Ray's three forms. Every result carries it (``result["experiment_tag"]``).
        """
        if self.recorded_tag is not None:
            return self.recorded_tag
        # (a trial of a journal written before tags were recorded: every value of its config)
        from ..search._space import iter_leaves
        from ..search._tags import variant_tag

        index = self.trial_id.rsplit("_", 1)[-1]
        paths = [p for p, _v in iter_leaves(self.config) if p]
        return variant_tag(int(index) if index.isdigit() else 0, self.config, paths)

    @property
    def evaluated_params(self) -> dict[str, Any]:
        """The config, flattened (``"a/b"`` keys)."""
        from ..search._space import flatten_dict

        return dict(flatten_dict(self.config))

    @property
    def placement_group_factory(self) -> Any:
        """The trial's resources as Ray's ``PlacementGroupFactory`` (Ray: ``Trial.placement_group_factory``).

        What a resource-changing scheduler gave it last, else what it was configured with, else one
        CPU. A trial of a Train trainer or of several ranks has Ray Train's form: an empty head
        bundle (the trainer itself holds nothing here) and one bundle per rank; a function
        trainable of one rank has one bundle.
        """
        from ..execution.placement_groups import PlacementGroupFactory

        if self.resources is not None:
            return PlacementGroupFactory(self.resources["bundles"], self.resources.get("strategy") or "PACK")
        base = dict(self.base_resources or {"CPU": 1.0})
        if not any(base.values()):
            base = {"CPU": 1.0}
        if self.bundle_per_rank:
            return PlacementGroupFactory([{}] + [base] * (self.world_size or self.configured_ranks),
                                         self.placement_strategy)
        return PlacementGroupFactory([base])

    @property
    def last_result(self) -> dict[str, Any]:
        return self.results[-1] if self.results else {}

    @property
    def iteration(self) -> int:
        return int(self.last_result.get("training_iteration", 0)) if self.results else 0

    @property
    def checkpoint(self) -> Checkpoint | None:
        return self.checkpoints[-1][0] if self.checkpoints else None

    def checkpoint_iteration(self) -> int:
        if not self.checkpoints:
            return 0
        return int(self.checkpoints[-1][1].get("training_iteration", 0))

    def supersede_after(self, iteration: int) -> int:
        """Move results after ``iteration`` to :attr:`superseded`; return how many."""
        keep = [r for r in self.results if r.get("training_iteration", 0) <= iteration]
        moved = [r for r in self.results if r.get("training_iteration", 0) > iteration]
        self.results = keep
        self.superseded.extend(moved)
        return len(moved)


@dataclass
class RunState:
    """The loop's view of a trial whose group is live (an attempt between ``start`` and ``Ended``)."""

    attempt: int
    started: bool = False
    decision: Decision | None = None  # STOP/PAUSE answered; the group is leaving
    stop_requested: Decision | None = None  # answer the next report with this
    abort_at: float | None = None  # not reported by then (after a stop request): abort its group
    stop_reason: str | None = None  # why a stop was requested (the experiment is stopping)
    resumed_from_clone: bool = False  # started from a PBT clone: its iterations continue the source's
