"""The seam between the tuner's loop and whatever runs trials.

The loop (``tuneplat/core``) speaks to a :class:`TrialExecutor` in trial ids and
plain messages: reserve room, start a trial from its :class:`TrialSpec`, answer a
report with a decision, abort; and it reads a stream of events back
(:class:`Started`, :class:`Reported`, :class:`RankFailed`, :class:`Preempted`,
:class:`Ended`, :class:`Starved`). It never sees a socket, a Dask future or a process.

Two executors ship: the Dask one (``execution/_dask_executor.py``: real worker
processes, the rank channel, gang placement, chaining) and the virtual-time one
(``tuneplat.testing.VirtualTimeExecutor``: learning curves replayed in
simulated time, for tests and for ``tuneplat simulate``).

This module imports only the standard library and ``schedulers``.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schedulers import Decision

from ._failure import Failure

if TYPE_CHECKING:
    from ..core._scaling import ScalingPolicy

__all__ = [
    "Ended",
    "Event",
    "ExecutorContext",
    "Outcome",
    "Preempted",
    "RankFailed",
    "RankStats",
    "Reported",
    "Saved",
    "StacksCaptured",
    "Started",
    "Starved",
    "TrialExecutor",
    "TrialSpec",
]


class Outcome(enum.Enum):
    """How a trial's attempt (its worker group) ended."""

    #: every rank returned: by itself, or after a STOP/PAUSE decision
    FINISHED = "finished"
    #: a rank raised, died, hung or could not start: counts against ``max_failures``
    FAILED = "failed"
    #: lost before any user code ran (a worker left): placed again, not an attempt
    NOT_STARTED = "not_started"
    #: the loop aborted it (time budget, Ctrl-C, fail-fast) and it went
    ABORTED = "aborted"
    #: an elastic group ended to start again at another size from its latest checkpoint (a host was
    #: preempted, or workers became free to grow it): placed again at once, not a failure
    RESIZED = "resized"

    def counts_as_attempt(self) -> bool:
        return self is not Outcome.NOT_STARTED


@dataclass(frozen=True)
class TrialSpec:
    """What an executor needs to start one attempt of a trial."""

    trial_id: str
    name: str
    path: str
    attempt: int
    config: Mapping[str, Any]
    start_iteration: int = 0
    time_offset: float = 0.0
    checkpoint_path: str | None = None
    remote_trial_dir: str | None = None
    #: what each rank of this trial needs and how many ranks (None: the experiment's, from the ExecutorContext);
    #: the same values the loop passed to :meth:`TrialExecutor.reserve` for the reservation it starts on
    request: Mapping[str, float] | None = None
    world_size: int | None = None


@dataclass
class ExecutorContext:
    """What stays the same for every trial of an experiment (given once, to :meth:`TrialExecutor.setup`)."""

    trainable: Any
    experiment_name: str
    experiment_dir: str
    request: Mapping[str, float]
    world_size: int
    placement_strategy: str = "PACK"
    backend: str | None = None
    metric: Any = None
    storage_fs: Any = None
    #: the user's trainable before tuneplat wrapped it (the virtual-time executor runs this one)
    raw_trainable: Any = None
    say: Any = None  # callable(str): a line for the user's terminal (the progress reporter)
    #: an elastic group (``ScalingConfig(num_workers=(min, max))``): its fewest ranks (``world_size`` is the most);
    #: None for a fixed-size group
    min_world_size: int | None = None
    #: elastic groups grow no sooner than this many seconds after they started (None: at any checkpoint)
    grow_interval_s: float | None = None
    #: how big a group is (``core._scaling.ScalingPolicy``: start bounds, ``Noop | Resize(n)`` at a checkpoint),
    #: the loop's, built from the fields above; None: the executor builds the same one from them
    scaling: ScalingPolicy | None = None
    #: the trials' working directory and captured output (``execution._trial_io.TrialIO``; None: as they are)
    trial_io: Any = None


@dataclass(frozen=True)
class Started:
    """Every rank of the trial's group is up and runs user code."""

    trial_id: str


@dataclass(frozen=True)
class Reported:
    """Every rank reported ``iteration``; the loop must :meth:`~TrialExecutor.answer` it."""

    trial_id: str
    iteration: int
    result: dict[str, Any]
    staged: bool = False  # the ranks staged a checkpoint of this iteration: commit it
    #: every rank's reported metrics by rank (rank 0's is ``result``); None where an executor does not send them
    rank_metrics: list[dict[str, Any] | None] | None = None


@dataclass(frozen=True)
class Saved:
    """Every rank staged a checkpoint of ``iteration`` after its report was answered with ``save=True``.

    (A class trainable whose result a callback marked ``should_checkpoint``.) The loop commits it.
    """

    trial_id: str
    iteration: int


@dataclass(frozen=True)
class RankFailed:
    """A rank failed; the group is being torn down (an :class:`Ended` follows)."""

    trial_id: str
    attempt: int
    message: str


@dataclass(frozen=True)
class Preempted:
    """A worker holding a rank of an elastic group was asked to leave (``retire_workers``, a scale-down, SIGTERM).

    The executor answers the group's next report with "checkpoint now"
    (``tuneplat.train.should_checkpoint()``), and ends the group (``Ended`` with
    :attr:`Outcome.RESIZED`) once a checkpoint of a later step is committed.
    """

    trial_id: str
    host: str
    message: str


@dataclass(frozen=True)
class Ended:
    """The trial's group is gone: every rank finished, failed or was lost."""

    trial_id: str
    outcome: Outcome
    message: str | None = None
    traceback: str | None = None
    #: the ranks the group had (elastic groups: the loop records the resize at the next start)
    world_size: int | None = None
    #: RESIZED because a worker of the group was preempted (counts against ``FailureConfig.max_preemption_failures``)
    preempted: bool = False
    #: FAILED: why, typed (its kind from the exception's types or the host's evidence)
    failure: Failure | None = None


@dataclass(frozen=True)
class Starved:
    """Nothing runs and no trial could be placed for the executor's wait limit."""

    message: str


@dataclass(frozen=True)
class RankStats:
    """Fresh system metrics of a running trial's ranks (CPU %, memory, GPU; see ``train/_telemetry.py``).

    ``system`` maps a rank to its metrics (MLflow's names without the ``system/`` prefix).
    """

    trial_id: str
    system: dict[int, dict[str, float]]
    timestamp: float


@dataclass(frozen=True)
class StacksCaptured:
    """The Python stacks of a trial's ranks were written to ``path`` (a hang, or a user's request)."""

    trial_id: str
    path: str | None
    summary: str
    reason: str


Event = Started | Reported | Saved | RankFailed | Preempted | Ended | Starved | RankStats | StacksCaptured


class TrialExecutor(abc.ABC):
    """Runs trials for the loop. One loop thread calls every method."""

    @abc.abstractmethod
    def setup(self, ctx: ExecutorContext) -> None:
        """Connect (or start) what runs trials; raise if a trial can never fit."""

    @abc.abstractmethod
    def reserve(self, request: Mapping[str, float] | None = None, world_size: int | None = None) -> Any | None:
        """Room for one more trial, held until :meth:`start` or :meth:`unreserve`; None if there is none now.

        Args:
            request: what each rank of the trial needs (e.g. ``{"CPU": 1, "GPU": 0.5}``); None: the
                experiment's (``ExecutorContext.request``).
            world_size: ranks of the trial; None: the experiment's (``ExecutorContext.world_size``).

        An elastic group (``ExecutorContext.min_world_size``; the experiment's request and world size) gets
        as many ranks as fit between the bounds of ``ExecutorContext.scaling.start_bounds(waiting)`` (only its
        minimum while :meth:`set_waiting` said that other trials wait for room).
        """

    def check_fits(self, request: Mapping[str, float], world_size: int) -> None:
        """Raise ``PlacementError`` (a ``ValueError``) when a trial of this shape could never be placed.

        The loop calls it once per trial whose resources differ from the
        experiment's (``with_resources(fn)``, a ``ScalingConfig`` with search
        domains); such a trial fails at once, with the numbers, instead of
        waiting forever. The default accepts everything.
        """
        return None

    def capacity(self) -> dict[str, float]:
        """The cluster's resources in total, busy or free (``{"CPU": 8.0, "GPU": 0.0}``); empty when unknown.

        What Ray's ``TuneController._resource_updater.get_num_cpus()`` says: a resource-changing
        scheduler's allocation function divides it among trials.
        """
        return {}

    def gpu_memory_bytes(self) -> float | None:
        """The memory of the executor's (smallest) GPU in bytes, None when unknown or without GPUs.

        ``GPU_memory="auto"`` (``core/_gpu_auto.py``) uses it to say when a figure is a whole device.
        """
        return None

    def set_waiting(self, count: int) -> None:
        """How many trials besides the one being placed wait for room now (the loop says it before each
        :meth:`reserve`): the ``waiting`` of the scaling policy's decisions (elastic groups start at their
        minimum and do not grow while it is above 0)."""
        return None

    @abc.abstractmethod
    def unreserve(self, reservation: Any) -> None:
        """Give back a reservation that no trial took."""

    @abc.abstractmethod
    def start(self, spec: TrialSpec, reservation: Any) -> list[str]:
        """Start one attempt of a trial on ``reservation``; returns where its ranks run (for the record)."""

    @abc.abstractmethod
    def answer(self, trial_id: str, decision: Decision, *, save: bool = False) -> None:
        """Answer the trial's pending report (``save``: checkpoint now, for class trainables)."""

    @abc.abstractmethod
    def abort(self, trial_id: str, reason: str) -> None:
        """End the trial's group now (its ranks see ``reason``); an :class:`Ended` follows."""

    @abc.abstractmethod
    def fail(self, trial_id: str, message: str) -> None:
        """End the trial's group as a failure (the loop found its result invalid); an :class:`Ended` follows."""

    @abc.abstractmethod
    def poll(self, timeout: float | None) -> list[Event]:
        """Wait up to ``timeout`` seconds (None: until something happens) and return what happened."""

    @abc.abstractmethod
    def running(self) -> int:
        """How many trials have a live group."""

    @abc.abstractmethod
    def teardown(self, reason: str, timeout: float = 30.0) -> list[Event]:
        """Abort every group and wait (up to ``timeout``) until they are gone; returns the events meanwhile."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release everything (idempotent; must not raise)."""

    def checkpoint_store(self, default: Any = None) -> Any | None:
        """The :class:`~tuneplat.storage._storage.CheckpointStore` this executor's trials need (None: ``default``).

        ``default`` is the store the tuner uses for its storage path (local or remote).
        """
        return None

    def now(self) -> float:
        """The executor's clock (monotonic seconds): wall time, or virtual time."""
        import time

        return time.monotonic()

    @property
    def dashboard_link(self) -> str | None:
        return None

    def describe(self) -> str:
        return type(self).__name__
