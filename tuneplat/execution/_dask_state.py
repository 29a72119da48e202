"""The Dask executor's state: its ranks, groups, reservations and the fields the mixins share."""

from __future__ import annotations

import collections
import enum
import logging
import selectors
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._settings import env_seconds, env_str
from ..train._lock_wait import warn_after as stale_lock_after
from ..train._telemetry import system_metrics_period
from . import _protocol as proto
from ._channel import Conn, Listener, parse_port_range
from ._cluster import Cluster
from ._executor import Event, ExecutorContext, Outcome, TrialExecutor
from ._failure import ERROR, LOST, Failure
from ._observe import WorkerBoard
from ._placement import Assignment, Ledger

if TYPE_CHECKING:
    from ..core._scaling import ScalingDecision, ScalingPolicy

__all__ = ["RankEnd", "_DaskState", "_Group", "_LeaseAsk", "_Rank", "_Reservation", "outcome"]

logger = logging.getLogger("tuneplat")


class RankEnd(str, enum.Enum):
    """How a rank finished (a ``str`` enum: it reads and prints as its value)."""

    DONE = "done"  # its code returned (or it never had to run: its group was aborted before "go")
    ERROR = "error"  # its code raised
    DEAD = "dead"  # its process, worker or connection died, or it hung and was ended
    LOST = "lost"  # its worker went away before its code ran (the trial is placed again)
    ABORTED = "aborted"  # the tuner ended it (another rank failed, a stop, an interrupt); its process lives on

    def __str__(self) -> str:
        return self.value


@dataclass
class _Rank:
    index: int
    assignment: Assignment
    future: Any = None
    conn: socket.socket | None = None
    finished: RankEnd | None = None
    task_done: bool = False
    released: bool = False
    last_seen: float = 0.0
    ever_connected: bool = False
    pid: int | None = None
    hostname: str | None = None
    channel: Conn | None = None  # the connection's reader state (``conn`` is its socket)
    offers_next: bool = False  # its runner said "done"/"error" and waits for ("next", spec) or ("bye",)
    parked: bool = False  # an idle runner holding its slot until the loop gives it a trial or "bye"
    chained: bool = False  # started by ("next", spec) on a runner that ran an earlier trial
    started_ack: bool = True  # a chained rank acknowledged "next" (user code runs): False until then
    conn_shut: bool = False  # we shut its connection down (group aborted): its runner cannot take more
    task_lost_at: float | None = None  # elastic: Dask declared its task lost while the rank was still connected
    request: Mapping[str, float] | None = None  # what the rank was placed with (None: the experiment's request)
    stats: dict[str, Any] | None = None  # what its last heartbeat said (train/_telemetry.py)
    system_seen: float = 0.0  # the sample time of the last system metrics passed to the loop
    oom_baseline: dict[str, Any] | None = None  # its memory cgroup's OOM-kill count when it started (_host_oom.py)
    stale_lock_warned: str | None = None  # the unheld build lock its wait was reported for (train/_lock_wait.py)


@dataclass
class _Group:
    trial_id: str
    attempt: int
    token: bytes
    ranks: list[_Rank]
    started: float = field(default_factory=time.monotonic)
    reports: dict[int, dict[int, tuple[Any, bool]]] = field(default_factory=dict)
    saves: dict[int, set[int]] = field(default_factory=dict)  # iteration -> ranks that staged its late checkpoint
    rendezvous: proto.Rendezvous | None = None  # rank 0's store, for ranks that connect later
    gathers: dict[int, dict[int, str]] = field(default_factory=dict)  # exchange -> rank -> JSON (the relay)
    failure: tuple[str, str | None] | None = None
    failure_info: Failure | None = None  # the first failure, typed
    aborted: bool = False
    abort_reason: str | None = None
    ended: bool = False
    lost_before_start: bool = False
    go_sent: bool = False  # "go" went to a rank: user code runs
    started_ok: bool = False  # every rank connected once
    waiting_answer: int | None = None  # the iteration whose report the loop has not answered yet
    first_report: dict[int, float] = field(default_factory=dict)  # iteration -> when its first rank reported
    path: str = ""  # the trial's folder
    elastic: bool = False  # ScalingConfig(num_workers=(min, max)): it may end to start again at another size
    answer_staged: bool = False  # the report waiting for its answer carried a checkpoint
    preempted: str | None = None  # why (a rank's worker is leaving): resize once a checkpoint is committed
    preempted_ranks: list[int] = field(default_factory=list)
    resize_reason: str | None = None  # it ends to start again at another size (Outcome.RESIZED)
    leases: list[Assignment] = field(default_factory=list)  # slots of groups this trial started (nested fits)
    requeued: str | None = None  # the trial went back to the queue (every slot waited for a nested group): why

    @property
    def connected(self) -> bool:
        self.started_ok = self.started_ok or all(r.conn is not None or r.finished for r in self.ranks)
        return self.started_ok


@dataclass
class _LeaseAsk:
    """A trial asks for slots for a group it starts itself (a ``TorchTrainer.fit()`` inside the trial)."""

    group: _Group
    rank: _Rank
    request: dict[str, float]
    n: int
    strategy: str


@dataclass
class _Reservation:
    runner: _Rank | None = None  # an idle single-rank runner: the trial chains onto its Dask task
    placement: list[Assignment] | None = None
    request: Mapping[str, float] | None = None  # what each rank was reserved with
    leased: int = 0  # this many ranks are placed at start() by the enclosing trial's tuner (see _LeasedLedger)





def outcome(group: _Group) -> tuple[Outcome, str | None, str | None, Failure | None]:
    """How ``group`` ended, once every rank finished: ``(outcome, message, traceback, failure)``. Pure: it reads
    the group only (its flags, its ranks' ends), so each branch is tested without a cluster."""
    if group.resize_reason is not None and group.failure is None:
        return Outcome.RESIZED, group.resize_reason, None, None
    if group.failure is not None and group.preempted is not None and any(
            r.finished in (RankEnd.DEAD, RankEnd.LOST) for r in group.ranks):
        # its worker left before the group committed a checkpoint: start again from the latest one (what was
        # trained since is lost); not a failure of the trial
        return (Outcome.RESIZED, f"{group.preempted}; it left before a checkpoint was committed "
                                 f"({group.failure[0]})", None, None)
    if group.failure is not None:
        message, tb = group.failure
        return Outcome.FAILED, message, tb, group.failure_info or Failure(ERROR, message=message)
    if group.lost_before_start:
        return Outcome.NOT_STARTED, group.requeued or "a worker was lost before the trial started", None, None
    if group.aborted:
        return Outcome.ABORTED, group.abort_reason, None, None
    never = [r.index for r in group.ranks if not r.ever_connected]
    if never:  # never "finished" without every rank having run
        message = (f"rank(s) {never} never connected to the tuner (their tasks ended before authenticating; the "
                   "Dask workers' logs say why)")
        return Outcome.FAILED, message, None, Failure(LOST, (), never[0], None, message)
    return Outcome.FINISHED, None, None, None

class _DaskState(TrialExecutor):
    """What the Dask executor knows: its groups and ranks, the ledger, the sockets (the modules beside it act on it).

    The executor is one object split by job over mixins (``_io_loop``, ``_leases``,
    ``_watchdog``, ``_forensics``, ``_groups``, the facade ``_dask_executor``); the
    methods one of them calls in another are declared here.
    """

    ctx: ExecutorContext
    scaling: ScalingPolicy
    trainable: Any
    heavy_imports: list[str]
    channel_tls: bool
    tuner_addr: Any

    def __init__(self, client: Any = None, address: str | None = None, security: Any = None,
                 tuner_host: str | None = None, tuner_port: int | str | None = None) -> None:
        self._client_arg = client
        self._address = address
        self._security = security
        self._tuner_host = tuner_host
        self._tuner_ports = parse_port_range(tuner_port if tuner_port is not None
                                             else env_str("TUNEPLAT_TUNER_PORT"),
                                             "tuner_port" if tuner_port is not None else "TUNEPLAT_TUNER_PORT")
        self.start_timeout_s = env_seconds("TUNEPLAT_START_TIMEOUT_S", 90)
        self.hang_timeout_s = env_seconds("TUNEPLAT_HEARTBEAT_TIMEOUT_S", 30)
        self.abort_grace_s = env_seconds("TUNEPLAT_ABORT_GRACE_S", 15)
        # a rank that has not reached report() this long after another rank of its group did is hung (a deadlock)
        self.report_timeout_s = env_seconds("TUNEPLAT_REPORT_TIMEOUT_S", 1800)
        # an elastic rank whose Dask task was declared lost while its connection lives: how long a preemption notice
        # may take to come before the rank counts as lost (its worker is closing: the rank sees it within 0.1 s)
        self.task_lost_grace_s = env_seconds("TUNEPLAT_TASK_LOST_GRACE_S", 2)
        self.system_metrics_s = system_metrics_period()
        self.stale_lock_s = stale_lock_after()  # (train/_lock_wait.py)
        self.board: WorkerBoard | None = None
        self.starve_timeout_s = env_seconds("TUNEPLAT_WORKER_WAIT_S", 60)
        self.waiting = 0  # trials besides the one being placed that wait for room (the loop's set_waiting)
        self.groups: dict[str, _Group] = {}
        self._device_bytes: float | None = None  # memory of the cluster's (smallest) GPU, looked up when needed
        self.idle: list[_Rank] = []
        self.task_owner: dict[str, tuple[_Group, _Rank]] = {}
        self.tokens: dict[bytes, _Group] = {}
        self.cluster: Cluster | None = None
        self.ledger = Ledger()
        self.max_slots = 0
        self._last_refresh = 0.0
        self._refresh_at: float | None = None
        self._starved_since: float | None = None
        self._unreachable: dict[str, int] = {}  # worker address -> times its ranks could not reach the tuner
        # such a worker takes no trial for this long, doubled each time (up to 600 s)
        self.unreachable_retry_s = env_seconds("TUNEPLAT_UNREACHABLE_RETRY_S", 15)
        self._start_noted = 0  # the embedded cluster's start: 0 nothing said, 1 the first worker is up, 2 done
        self._events: list[Event] = []
        self._wake_events: collections.deque[tuple[str, Any]] = collections.deque()
        self._selector: selectors.BaseSelector | None = None
        self._listener: Listener | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._deps: tuple[Any, ...] = ()
        self._closed = False
        self._lease_queue: list[_LeaseAsk] = []  # trials waiting for slots for their own (nested) groups, oldest first
        self._nested = False  # this experiment runs inside a trial: its slots are leased (see _LeasedLedger)
        #: the trials' backend leaves state in a worker process that it cannot take back (TensorFlow): each worker of
        #: an ended group is restarted before it takes another rank (Backend.reuses_worker_process)
        self.fresh_workers = False
        #: the same after a group of several ranks that failed (Backend.reuses_worker_process_after_failure: JAX)
        self.fresh_after_failure = False
        self._recycling: dict[str, threading.Thread] = {}  # worker address -> the thread restarting it
        self._no_nanny_said = False
        self._tearing_down = False  # the experiment is ending: the embedded cluster's workers are not restarted

    @property
    def client(self) -> Any:
        assert self.cluster is not None
        return self.cluster.client

    # ------------------------------------------------------------------ implemented by the mixins
    def _abort_group(self, group: _Group, reason: str) -> None:
        raise NotImplementedError

    def _capture(self, group: _Group, reason: str, silent: list[_Rank] | None = None) -> str:
        raise NotImplementedError

    def _dismiss_idle(self) -> None:
        raise NotImplementedError

    def _drop_conn(self, conn: Conn) -> None:
        raise NotImplementedError

    def _fail_group(self, group: _Group, message: str, tb: str | None = None,
                    failure: Failure | None = None) -> None:
        raise NotImplementedError

    def _forget_rank(self, rank: _Rank) -> None:
        raise NotImplementedError

    def _lost_before_start(self, group: _Group, rank: _Rank) -> None:
        raise NotImplementedError

    def _maybe_end_group(self, group: _Group) -> None:
        raise NotImplementedError

    def _observe(self, now: float) -> None:
        raise NotImplementedError

    def _on_lease(self, group: _Group, rank: _Rank, request: Any, n: Any, strategy: Any) -> None:
        raise NotImplementedError

    def _on_preempt(self, group: _Group, rank: _Rank, message: str) -> None:
        raise NotImplementedError

    def _on_stats(self, conn: Conn, rank: _Rank, stats: dict[str, Any]) -> None:
        raise NotImplementedError

    def _on_unlease(self, group: _Group, address: str) -> None:
        raise NotImplementedError

    def _oom_killed(self, rank: _Rank) -> str | None:
        raise NotImplementedError

    def _refresh_ledger(self) -> None:
        raise NotImplementedError

    def _release(self, rank: _Rank) -> None:
        raise NotImplementedError

    def _resize(self, group: _Group, reason: str) -> None:
        raise NotImplementedError

    def _restart_worker(self, rank: _Rank) -> None:
        raise NotImplementedError

    def _recycle_worker(self, rank: _Rank, wait: bool = True) -> None:
        raise NotImplementedError

    def _recycled(self, address: str, why: str | None) -> None:
        raise NotImplementedError

    def _wait_for_recycling(self, timeout: float) -> None:
        raise NotImplementedError

    def _scale(self, group: _Group, staged: bool) -> ScalingDecision:
        raise NotImplementedError

    def _send(self, rank: _Rank, msg: proto.Message) -> None:
        raise NotImplementedError

    def _serve_leases(self) -> None:
        raise NotImplementedError

    def _unpark(self, rank: _Rank, bye: bool) -> None:
        raise NotImplementedError

    def _wake(self, event: tuple[str, Any]) -> None:
        raise NotImplementedError

