"""The Dask :class:`~tuneplat.execution._executor.TrialExecutor`: real worker processes.

Each trial's worker group is one Dask task per rank, pinned to the workers a
gang placement chose (:class:`~tuneplat.execution._cluster.Ledger`). Ranks
connect back to the tuner's result port (:class:`~tuneplat.execution._channel.Listener`:
on 127.0.0.1 unless the cluster spans hosts, TLS when the cluster has TLS) and
authenticate with a per-attempt token before anything they send is unpickled. Every ``report()`` is a small frame that the loop
answers at once. Dask futures say when a rank's task ended (through a
socketpair that wakes the selector). Nothing sleeps or polls.

Single-rank trials chain: a runner whose trial ended healthily offers to take
the next one on its open connection, in the same Dask task (Ray's
``reuse_actors``). Such a runner is *parked* until the loop's next launch pass
gives it a trial (:meth:`DaskTrialExecutor.reserve`); runners no trial was given
to are dismissed at the next :meth:`~DaskTrialExecutor.poll`.
"""

from __future__ import annotations

import collections
import logging
import os
import pickle
import selectors
import signal
import socket
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from schedulers import Decision

from .._settings import env_seconds, env_str
from ..train._session import RankSpec
from ..train._telemetry import system_metrics_period
from . import _protocol as proto
from ._channel import Conn, Listener, new_token, parse_port_range, token_id
from ._cluster import HEAVY_IMPORTS, Assignment, Cluster, Ledger, trainable_imports
from ._errors import PlacementError
from ._executor import (
    Ended,
    Event,
    ExecutorContext,
    Outcome,
    Preempted,
    RankFailed,
    RankStats,
    Reported,
    Saved,
    StacksCaptured,
    Started,
    Starved,
    TrialExecutor,
    TrialSpec,
)
from ._gpu_memory import GPU_MEMORY, as_gpu_share, device_memory_bytes
from ._host_oom import oom_evidence
from ._observe import WorkerBoard, rank_row
from ._runner import run_rank
from ._stacks import RankRef
from ._stacks import capture as capture_stacks

__all__ = ["DaskTrialExecutor"]

logger = logging.getLogger("tuneplat")


@dataclass
class _Rank:
    index: int
    assignment: Assignment
    future: Any = None
    conn: socket.socket | None = None
    finished: str | None = None  # "done" | "error" | "dead" | "lost" | "aborted"
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
    failure: tuple[str, str | None] | None = None
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


class _LeasedLedger(Ledger):
    """The ledger of an experiment that runs inside a trial (Ray Train V2's ``TorchTrainer.fit()`` in a Tune trial).

    Its slots come from the tuner that runs the enclosing trial, through that
    trial's connection (:meth:`~tuneplat.train._session.Session.lease`): that
    tuner places the group beside the trial (never on the trial's own worker,
    which its driver function holds) and counts the slots as taken until they
    are given back: that tuner also decides whether the group can ever fit (its
    ledger knows the GPUs of an embedded cluster, and which slots its trials hold).
    """

    def __init__(self, session: Any) -> None:
        super().__init__()
        self._session = session

    def allocate(self, request: Any, n: int, strategy: str = "PACK") -> list[Assignment] | None:
        return self._session.lease(dict(request), n, strategy)  # type: ignore[no-any-return]

    def release(self, assignment: Assignment) -> None:
        self._session.unlease(assignment.address)

    def check_fits_empty(self, request: Any, n: int, strategy: str = "PACK", starting: Any = ()) -> None:
        """Nothing to check here: the enclosing trial's tuner refuses a group that can never fit beside the trial."""


class DaskTrialExecutor(TrialExecutor):
    """Runs worker groups as Dask tasks (see the module docstring).

    Args:
        client: a ``distributed.Client`` (default: the active client, else
            ``address``, else an embedded LocalCluster on 127.0.0.1).
        address: a Dask scheduler address.
        security: a ``distributed.security.Security`` (or a dict of its
            arguments) for a TLS cluster at ``address``.
        tuner_host: the address ranks use to reach the tuner (default:
            ``TUNEPLAT_TUNER_HOST``, else found from the cluster).
        tuner_port: the tuner's result port, or a range ``"8790-8799"``
            (default ``TUNEPLAT_TUNER_PORT``, else any free port).

    Limits (environment): ``TUNEPLAT_START_TIMEOUT_S`` (every rank connects
    within it, 90), ``TUNEPLAT_HEARTBEAT_TIMEOUT_S`` (a silent rank is hung, 30),
    ``TUNEPLAT_ABORT_GRACE_S`` (an aborted rank's user code may unwind this long,
    15), ``TUNEPLAT_WORKER_WAIT_S`` (nothing can be placed this long: starved, 60).
    """

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
        self.system_metrics_s = system_metrics_period()
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

    # ------------------------------------------------------------------ setup
    def setup(self, ctx: ExecutorContext) -> None:
        ctx.request = self._gpu_share(ctx.request)  # {"GPU_memory": bytes} -> the share of a device it is
        self.ctx = ctx
        self.trainable = ctx.trainable
        self.board = WorkerBoard(ctx.experiment_dir) if ctx.experiment_dir else None
        imports = trainable_imports(ctx.raw_trainable, ctx.trainable)
        #: slow imports the first trials pay for (the progress line names them until the first report)
        self.heavy_imports = sorted({m.split(".")[0] for m in imports} & HEAVY_IMPORTS)
        self.cluster = Cluster(self._client_arg, self._address, cpus_per_rank=ctx.request.get("CPU", 1.0),
                               security=self._security, say=ctx.say, wait=False,
                               # opt-in: measured slower on 2 cores, and a background `import torch` racing a
                               # task's unpickling of torch objects broke torch's own import (benchmarks/README)
                               imports=imports if env_str("TUNEPLAT_PRELOAD_IMPORTS") == "1" else ())
        # a worker joining (the embedded cluster's start up) or its start ending: look again at once
        self.cluster.on_change = lambda: self._wake(("cluster_changed", None))
        from ..train._session import current_session

        outer = current_session()
        if outer is not None and self._client_arg is None and self._address is None:
            # a TorchTrainer.fit() (or a Tuner) inside a trial, on the trial's own cluster: the tuner of that trial
            # places its groups beside the trial (a plain ledger here would place them on busy workers)
            self.ledger = _LeasedLedger(outer)
            self._nested = True
        bind = getattr(self.trainable, "_tuneplat_bind", None)
        if bind is not None:  # tune.with_parameters: its objects go to the cluster once, not with every task
            self.trainable, self._deps = bind(self.cluster.client)
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self.cluster.wait_for_workers()
        fewest = ctx.min_world_size or ctx.world_size  # (an elastic group starts with its minimum)
        self._refresh_ledger()
        start_error = self.cluster.start_error()
        if start_error is not None and not self.ledger.slots:
            raise RuntimeError(f"the embedded cluster's worker processes did not start: {_why(start_error)}") \
                from start_error
        try:
            # the embedded cluster's workers still starting count as the slots they will be: a group that needs
            # them waits for them (refused, with the numbers, only if it would not fit once they are all up)
            self.ledger.check_fits_empty(ctx.request, fewest, ctx.placement_strategy, self.cluster.pending_slots())
        except PlacementError:
            if not self.cluster.may_grow:
                raise  # the embedded cluster, or a fixed-size one whose workers are all there
            # workers may still be joining (queued jobs, an adaptive cluster at zero): wait, asking for them

            def fits() -> bool:
                self._refresh_ledger()
                try:
                    self.ledger.check_fits_empty(ctx.request, fewest, ctx.placement_strategy)
                except PlacementError:
                    return False
                return True

            self.cluster.wait_to_fit(fits, ctx.request, fewest, ctx.say, self.starve_timeout_s)
            self.ledger.check_fits_empty(ctx.request, fewest, ctx.placement_strategy)
        host = self.cluster.tuner_host(self._tuner_host)
        self.channel_tls = self.cluster.tls
        self._listener = Listener(self._selector, host, self._tuner_ports, self.cluster.channel_server_context(),
                                  self._lookup_token)
        self.tuner_addr = self._listener.address
        self.cluster.check_reachable(self.tuner_addr, self.ledger, self._serving)

    def _serving(self, fn: Any) -> Any:
        """``fn()`` in a thread while this thread answers the tuner's port (the workers' reachability probe)."""
        box: dict[str, Any] = {}

        def call() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                box["error"] = exc
            self._wake(("served", None))

        thread = threading.Thread(target=call, name="tuneplat-probe", daemon=True)
        thread.start()
        while thread.is_alive():
            self._select(0.5)  # (the thread wakes the selector when it ends)
            self._wake_events = collections.deque(e for e in self._wake_events if e[0] != "served")
            if self._listener is not None:
                self._listener.tick(time.monotonic())
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _lookup_token(self, tid: bytes) -> tuple[bytes, Any] | None:
        group = self.tokens.get(tid)
        if group is None or group.ended:
            return None
        return group.token[len(tid):], group

    @property
    def dashboard_link(self) -> str | None:
        return self.cluster.dashboard_link if self.cluster is not None else None

    @property
    def client(self) -> Any:
        assert self.cluster is not None
        return self.cluster.client

    def describe(self) -> str:
        text = f"the cluster has {self.ledger.describe()}, {len(self.ledger.quarantined)} quarantined"
        starting = self.workers_ready
        if starting is not None:
            text += f", {starting[1] - starting[0]} more still starting"
        return text

    @property
    def workers_ready(self) -> tuple[int, int] | None:
        """``(workers up, workers asked for)`` while the embedded cluster's workers are still starting, else None
        (the progress line shows it)."""
        return self.cluster.workers_ready if self.cluster is not None else None

    def running(self) -> int:
        return len(self.groups)

    # ------------------------------------------------------------------ starting trials
    def reserve(self, request: Mapping[str, float] | None = None,
                world_size: int | None = None) -> _Reservation | None:
        ctx = self.ctx
        request = dict(ctx.request) if request is None else self._gpu_share(request)
        world_size = ctx.world_size if world_size is None else world_size
        if self._nested:  # one group at a time, placed (blocking) at start() by the enclosing trial's tuner
            return None if self.groups or self.idle else _Reservation(request=request, leased=world_size)
        if self._lease_queue:  # trials wait to place their own groups: they go first
            return None
        elastic = self._is_elastic(request, world_size)
        if world_size == 1 and not elastic:
            # an idle runner first: the trial starts in the Dask task already there (when it was placed for as much)
            runner = self._take_idle(request)
            if runner is not None:
                self._starved_since = None
                return _Reservation(runner=runner, request=request)
        placement = self._allocate(request, world_size, elastic)
        if placement is None and self.idle:  # idle runners of another shape hold slots: let them go
            self._dismiss_idle()
            placement = self._allocate(request, world_size, elastic)
        if placement is None and not self.groups:  # nothing running will free a slot: the cluster changed
            self._refresh_ledger()  # (and keep looking while a replacement worker is awaited)
            placement = self._allocate(request, world_size, elastic)
        if placement is None:
            if not self.groups and self._starved_since is None:
                self._starved_since = time.monotonic()
            return None
        self._starved_since = None
        return _Reservation(placement=placement, request=request)

    def check_fits(self, request: Mapping[str, float], world_size: int) -> None:
        assert self.cluster is not None
        self.ledger.check_fits_empty(self._gpu_share(request), world_size, self.ctx.placement_strategy,
                                     self.cluster.pending_slots())

    def gpu_memory_bytes(self) -> float | None:
        if self._device_bytes is None:
            self._device_bytes = device_memory_bytes() or 0.0
        return self._device_bytes or None

    def _gpu_share(self, request: Mapping[str, float]) -> dict[str, float]:
        """``GPU_memory`` (bytes) as the share of one of the cluster's devices (see ``_gpu_memory.py``)."""
        if GPU_MEMORY not in request:
            return dict(request)
        if self._device_bytes is None:
            self._device_bytes = device_memory_bytes() or 0.0
        try:
            return as_gpu_share(request, self._device_bytes)
        except ValueError as exc:
            raise PlacementError(str(exc)) from None

    def _is_elastic(self, request: Mapping[str, float], world_size: int) -> bool:
        """An elastic group: the experiment's ``ScalingConfig(num_workers=(min, max))`` (a trial with resources of
        its own, ``with_resources``/search domains in ``ScalingConfig``, has a fixed size)."""
        ctx = self.ctx
        return ctx.min_world_size is not None and world_size == ctx.world_size and dict(request) == dict(ctx.request)

    def _allocate(self, request: Mapping[str, float], world_size: int, elastic: bool) -> list[Assignment] | None:
        ctx = self.ctx
        if not elastic or ctx.min_world_size is None:
            return self.ledger.allocate(request, world_size, ctx.placement_strategy)
        # an elastic group: as many ranks as fit, up to its maximum; only its minimum while other trials wait
        # (they start first; spare workers grow running groups at their checkpoints once nobody waits)
        hi = ctx.min_world_size if self.waiting > 0 else world_size
        return self.ledger.allocate_between(request, ctx.min_world_size, hi, ctx.placement_strategy)

    def set_waiting(self, count: int) -> None:
        self.waiting = count

    def unreserve(self, reservation: _Reservation) -> None:
        if reservation.leased:
            return
        if reservation.runner is not None:
            self.idle.append(reservation.runner)  # dismissed at the next poll unless a trial comes
        for a in reservation.placement or ():
            self.ledger.release(a)

    def start(self, spec: TrialSpec, reservation: _Reservation) -> list[str]:
        runner = reservation.runner
        if reservation.leased:  # waits until the enclosing trial's tuner has room beside the trial
            reservation.placement = self.ledger.allocate(reservation.request or self.ctx.request, reservation.leased,
                                                         self.ctx.placement_strategy)
        placement = [runner.assignment] if runner is not None else list(reservation.placement or ())
        token = new_token()
        hosts: list[str] = []
        for a in placement:
            if a.host not in hosts:
                hosts.append(a.host)
        ranks = [_Rank(i, a, request=reservation.request) for i, a in enumerate(placement)]
        elastic = runner is None and self._is_elastic(reservation.request or self.ctx.request, self.ctx.world_size)
        group = _Group(spec.trial_id, spec.attempt, token, ranks, elastic=elastic, path=spec.path)
        self.groups[spec.trial_id] = group
        self.tokens[token_id(token)] = group
        ctx = self.ctx
        backend = ctx.backend or "gloo"
        if reservation.request is not None and dict(reservation.request) != dict(ctx.request):
            backend = "nccl" if reservation.request.get("GPU", 0) > 0 else "gloo"  # this trial's own resources
        for r in ranks:
            a = r.assignment
            same_host = [x for x in placement if x.host == a.host]
            rank_spec = RankSpec(
                trial_id=spec.trial_id, trial_name=spec.name, experiment_name=ctx.experiment_name,
                trial_dir=spec.path, attempt=spec.attempt, rank=r.index, world_size=len(placement),
                local_rank=same_host.index(a), local_world_size=len(same_host), node_rank=hosts.index(a.host),
                tuner_addr=self.tuner_addr, token=token, config=dict(spec.config),
                start_iteration=spec.start_iteration, time_offset=spec.time_offset,
                checkpoint_path=spec.checkpoint_path, backend=backend, gpu_ids=list(a.gpu_ids),
                host=a.host, metric=ctx.metric, heartbeat_s=max(0.1, min(5.0, self.hang_timeout_s / 10)),
                abort_grace_s=self.abort_grace_s, storage_fs=ctx.storage_fs, remote_trial_dir=spec.remote_trial_dir,
                channel_tls=self.channel_tls, trial_io=ctx.trial_io, elastic=group.elastic,
                system_metrics_s=self.system_metrics_s,
                rank_hosts=[x.host for x in placement],
                tuner_local=self._listener.local_name if self._listener is not None else None,
            )
            if runner is not None:
                self._chain(runner, group, r, rank_spec)
                continue
            key = f"tuneplat-{spec.trial_id}-a{spec.attempt}-r{r.index}-{token_id(token).hex()[:6]}"
            r.future = self.client.submit(run_rank, self.trainable, rank_spec, *self._deps, key=key,
                                          workers=[a.address], allow_other_workers=False, pure=False, retries=0)
            self.task_owner[r.future.key] = (group, r)
            r.future.add_done_callback(lambda fut: self._wake(("task_done", fut)))
        return [a.address for a in placement]

    # ------------------------------------------------------------------ the loop's commands
    def answer(self, trial_id: str, decision: Decision, *, save: bool = False) -> None:
        group = self.groups.get(trial_id)
        if group is None:
            return
        group.waiting_answer = None
        if group.failure or group.aborted:
            for r in group.ranks:
                self._send(r, proto.Abort(group.abort_reason or "the trial's group is being torn down"))
            return
        staged, group.answer_staged = group.answer_staged, False
        if group.elastic and decision is Decision.CONTINUE:
            why = self._resize_reason(group, staged)
            if why is not None:  # its checkpoint of this step is committed: start again from it at another size
                self._resize(group, why)
                return
        reply = proto.Answer(decision, save=save)
        if group.preempted is not None:
            # "checkpoint now": class trainables save at once (save=True); function trainables see
            # should_checkpoint() / get_preemption_info() and pass a checkpoint to their next report
            nodes: dict[str, list[int]] = {}
            for r in group.ranks:  # (get_preemption_info().preempted_node_to_ranks: a node is a Dask worker)
                if r.index in group.preempted_ranks:
                    nodes.setdefault(r.assignment.address, []).append(r.index)
            reply = proto.Answer(decision, True, {"ranks": list(group.preempted_ranks), "reason": group.preempted,
                                                  "nodes": nodes})
        for r in group.ranks:
            self._send(r, reply)

    # ------------------------------------------------------------------ elastic groups
    def _resize_reason(self, group: _Group, staged: bool) -> str | None:
        """Why ``group`` should start again at another size now (None: it goes on). Called at a checkpoint."""
        if not staged:
            return None
        if group.preempted is not None:
            return group.preempted
        ctx = self.ctx
        size = len(group.ranks)
        if size >= ctx.world_size or self.waiting > 0:
            return None
        if ctx.grow_interval_s is not None and time.monotonic() - group.started < ctx.grow_interval_s:
            return None
        self._refresh_ledger()  # the workers there are now (one scheduler round trip per checkpoint of such a group)
        free = self.ledger.free_count(ctx.request, ctx.world_size - size, ctx.placement_strategy)
        if free <= 0:
            return None
        return f"{free} more worker(s) free"

    def _resize(self, group: _Group, reason: str) -> None:
        """End ``group`` to start it again at another size from the checkpoint just committed."""
        group.resize_reason = reason
        self._abort_group(group, f"the elastic group is resized ({reason})")

    def _on_preempt(self, group: _Group, rank: _Rank, message: str) -> None:
        """A rank's worker is leaving: nothing more goes there; the group checkpoints, then resizes."""
        self.ledger.quarantine(rank.assignment.address)  # (until it leaves the cluster)
        if rank.index not in group.preempted_ranks:
            group.preempted_ranks.append(rank.index)
        if group.preempted is not None or group.aborted:
            return
        host = rank.hostname or rank.assignment.host
        group.preempted = f"host {host} preempted ({message})"
        self._events.append(Preempted(group.trial_id, host, message))
        if group.waiting_answer is not None and group.answer_staged:
            return  # (the report being answered carries a checkpoint: the answer resizes)

    def abort(self, trial_id: str, reason: str) -> None:
        group = self.groups.get(trial_id)
        if group is not None:
            self._abort_group(group, reason)
            for r in group.ranks:  # a rank not connected yet will never run user code: end its task
                if r.conn is None and not r.task_done and r.future is not None and not r.ever_connected:
                    try:
                        r.future.cancel()
                    except Exception:  # noqa: BLE001
                        pass

    def fail(self, trial_id: str, message: str) -> None:
        """The loop found the trial's result invalid (a missing metric): end it as a failure."""
        group = self.groups.get(trial_id)
        if group is not None:
            self._fail_group(group, message)
            for r in group.ranks:
                self._send(r, proto.Abort(message))

    # ------------------------------------------------------------------ waiting
    def poll(self, timeout: float | None) -> list[Event]:
        self._dismiss_idle()  # runners the loop's last pass gave no trial leave their slots
        if self._events:
            timeout = 0.0
        deadline = self._next_deadline()
        if deadline is not None:
            wait = max(0.0, deadline - time.monotonic())
            timeout = wait if timeout is None else min(timeout, wait)
        self._select(timeout)
        self._drain_wake_events()
        self._check_deadlines()
        events, self._events = self._events, []
        return events

    def _select(self, timeout: float | None) -> None:
        assert self._selector is not None
        for key, _mask in self._selector.select(timeout):
            if key.data == "accept":
                assert self._listener is not None
                self._listener.accept()
            elif key.data == "wake":
                try:
                    assert self._wake_r is not None
                    self._wake_r.recv(4096)
                except BlockingIOError:
                    pass
            else:
                self._read(key.data)

    def _next_deadline(self) -> float | None:
        deadlines = []
        for g in self.groups.values():
            if not g.started_ok and not g.connected:
                deadlines.append(g.started + self.start_timeout_s)
            for r in g.ranks:
                if r.conn is not None and not r.finished:
                    deadlines.append(r.last_seen + self.hang_timeout_s + 0.01)
                    if r.task_lost_at is not None and g.preempted is None:
                        deadlines.append(r.task_lost_at + TASK_LOST_GRACE_S + 0.01)
            if g.first_report and self.report_timeout_s > 0 and not g.aborted:
                deadlines.append(min(g.first_report.values()) + self.report_timeout_s + 0.01)
        if self.board is not None:
            board_at = self.board.next_deadline(bool(self.groups))
            if board_at is not None:
                deadlines.append(board_at)
        if self._refresh_at is not None:
            deadlines.append(self._refresh_at)
        if self._starved_since is not None:
            deadlines.append(self._starved_since + self.starve_timeout_s + 0.01)
        retry = self.ledger.next_retry
        if retry is not None:
            deadlines.append(retry + 0.01)
        pending = self._listener.next_deadline() if self._listener is not None else None
        if pending is not None:
            deadlines.append(pending)
        return min(deadlines) if deadlines else None

    def _check_deadlines(self) -> None:
        now = time.monotonic()
        if self._listener is not None:
            self._listener.tick(now)
        self._check_hangs(now)
        self._check_report_skew(now)
        self._observe(now)
        if self._refresh_at is not None and now >= self._refresh_at:
            self._refresh_ledger()
        for addr in self.ledger.end_timed_quarantines(now):
            logger.info("tuneplat: trying worker %s again (its host could not reach the tuner)", addr)
        if self._starved_since is not None and not self.groups and now - self._starved_since > self.starve_timeout_s:
            waited = now - self._starved_since
            self._starved_since = None
            self._events.append(Starved(f"no worker could take this trial for {waited:.0f}s ({self.describe()}); "
                                        "TUNEPLAT_WORKER_WAIT_S sets this limit"))
        for g in list(self.groups.values()):
            if not g.started_ok and not g.connected and now - g.started > self.start_timeout_s:
                missing = [r.index for r in g.ranks if r.conn is None and not r.finished]
                for r in g.ranks:
                    if r.conn is None and not r.finished:
                        self.ledger.quarantine(r.assignment.address)  # until it leaves or restarts
                self._fail_group(g, f"rank(s) {missing} did not start within {self.start_timeout_s:.0f}s of being "
                                    "placed. Look at the Dask workers' logs: a worker that cannot import the "
                                    "trainable's module logs 'Failed to deserialize' (install your code where the "
                                    "workers run, or set PYTHONPATH for them); a dead worker is replaced by its "
                                    "nanny. TUNEPLAT_START_TIMEOUT_S sets this limit")
                for r in g.ranks:
                    if r.conn is None and not r.finished:
                        r.finished = "dead"
                        self._forget_rank(r)
                self._maybe_end_group(g)

    def teardown(self, reason: str, timeout: float = 30.0) -> list[Event]:
        self._dismiss_idle()
        for g in list(self.groups.values()):
            self._abort_group(g, reason)
            for r in g.ranks:
                if r.conn is None and not r.task_done and r.future is not None:
                    try:
                        r.future.cancel()
                    except Exception:  # noqa: BLE001
                        pass
        deadline = time.monotonic() + timeout
        while self.groups and time.monotonic() < deadline:
            self._select(max(0.0, deadline - time.monotonic()))
            self._drain_wake_events()
        for g in list(self.groups.values()):  # still not gone: forget them (their tasks are cancelled)
            self.groups.pop(g.trial_id, None)
            self._events.append(Ended(g.trial_id, Outcome.ABORTED, reason))
        self._dismiss_idle()
        events, self._events = self._events, []
        return events

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.board is not None and self.board.dirty:  # the last view of the ranks (a status after the end)
            self.board.next_write = 0.0
            self.board.maybe_write(self.running_rows(), time.monotonic())
        try:
            self._dismiss_idle()
        except Exception:  # noqa: BLE001 - closing anyway
            logger.debug("tuneplat: dismissing idle runners failed", exc_info=True)
        selector = self._selector
        if selector is not None:
            # ranks still connected (e.g. one that said hello while an interrupt tore the experiment down) must
            # see the tuner go now, not when this object is garbage-collected: a rank waiting for "go" would hold
            # its Dask worker until then
            for key in list(selector.get_map().values()):
                if isinstance(key.data, Conn):
                    try:
                        key.data.sock.close()
                    except OSError:
                        pass
            selector.close()
        if self._listener is not None:
            try:
                self._listener.close()
            except OSError:
                pass
        for s in (self._wake_r, self._wake_w):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
        self._release_futures()
        if self.cluster is not None:
            try:
                self.cluster.close()
            except Exception:  # noqa: BLE001 - the caller is closing after an error already
                logger.warning("tuneplat: closing the Dask cluster failed", exc_info=True)

    def _release_futures(self) -> None:
        """Nothing of this fit stays wanted on the cluster: ``with_parameters``' scattered data, rank tasks.

        On a user's long-lived cluster they would stay in workers' memory for
        as long as this object lives; on a kept embedded cluster (scikit-learn's
        searches) its scheduler would log "lose scattered data" when it closes.
        """
        futures = list(self._deps)
        self._deps = ()
        for group in list(self.groups.values()):
            futures += [r.future for r in group.ranks]
        futures += [rank.future for _group, rank in self.task_owner.values()]
        futures += [r.future for r in self.idle]
        for f in futures:
            release = getattr(f, "release", None)
            if release is None:
                continue
            try:
                release()
            except Exception:  # noqa: BLE001 - a client already closed holds nothing
                logger.debug("tuneplat: releasing %r failed", f, exc_info=True)

    # ------------------------------------------------------------------ chained trials (idle runners)
    def _park(self, rank: _Rank) -> None:
        """A single-rank trial ended on a healthy runner that waits for more: keep it, and its slot, for now."""
        rank.released = True  # the slot passes to whatever this runner does next (see _unpark)
        rank.parked = True
        self.idle.append(rank)

    def _unpark(self, rank: _Rank, bye: bool) -> None:
        """The runner leaves: "bye" (or nothing, its connection is gone) and its slot is free."""
        self.idle = [r for r in self.idle if r is not rank]
        rank.parked = False
        if bye and rank.conn is not None:
            try:
                proto.send(rank.conn, proto.Bye())
            except OSError:
                pass
        if rank.channel is not None:
            self._drop_conn(rank.channel)
        rank.conn = None
        rank.channel = None
        self.ledger.release(rank.assignment)
        if self._lease_queue:
            self._serve_leases()

    def _take_idle(self, request: Mapping[str, float]) -> _Rank | None:
        """An idle runner that can take a trial asking ``request``: its connection is open, its worker still
        placeable, and it was placed with the same request (a runner of another shape stays parked)."""
        for rank in reversed(list(self.idle)):
            addr = rank.assignment.address
            if not (rank.conn is not None and rank.future is not None and addr in self.ledger.slots
                    and addr not in self.ledger.quarantined):
                self._unpark(rank, bye=True)
                continue
            if dict(rank.request if rank.request is not None else self.ctx.request) == request:
                self.idle.remove(rank)
                return rank
        return None

    def _dismiss_idle(self) -> None:
        while self.idle:
            self._unpark(self.idle[-1], bye=True)

    def _chain(self, runner: _Rank, group: _Group, rank: _Rank, spec: RankSpec) -> None:
        """Run ``group``'s single rank in the Dask task of ``runner`` (an idle runner of an ended trial).

        The rank takes over the runner's task, connection and slot; ("next", spec)
        counts as "hello" + "go" of a submitted rank, and the runner acknowledges it
        with ("started",) before user code runs (until then a lost worker is not the
        trial's failure: see ``_lost_before_start``).
        """
        runner.parked = False
        rank.future, runner.future = runner.future, None
        rank.conn, runner.conn = runner.conn, None
        rank.channel, runner.channel = runner.channel, None
        rank.pid, rank.hostname = runner.pid, runner.hostname
        rank.ever_connected = True
        rank.chained = True
        rank.started_ack = False
        rank.last_seen = time.monotonic()
        assert rank.channel is not None and rank.future is not None
        rank.channel.group, rank.channel.rank = group, rank
        self.task_owner[rank.future.key] = (group, rank)
        group.go_sent = True
        self._send(rank, proto.Next(spec))
        self._events.append(Started(group.trial_id))

    # ------------------------------------------------------------------ I/O
    def _wake(self, event: tuple[str, Any]) -> None:
        self._wake_events.append(event)
        try:
            if self._wake_w is not None:
                self._wake_w.send(b"x")
        except OSError:
            pass

    def _drop_conn(self, conn: Conn) -> None:
        assert self._listener is not None
        self._listener.close_conn(conn)

    def _read(self, conn: Conn) -> None:
        assert self._listener is not None
        frames = self._listener.read(conn)
        if frames is None:  # closed (EOF, a broken frame, a failed authentication): the listener closed it
            if conn.rank is not None and conn.rank.parked:  # an idle runner left (its worker died, it timed out)
                self._unpark(conn.rank, bye=False)
                return
            if conn.rank is not None and conn.group is not None:
                conn.rank.conn = None
                conn.rank.channel = None
                if conn.rank.finished is None and conn.group.aborted and (
                        conn.group.failure is None or (conn.rank.conn_shut and not _process_gone(conn.rank))):
                    # we ended it (another rank failed, a lost peer before start, an interrupt): its process
                    # lives on, so its worker stays usable (a dead one is quarantined below)
                    conn.rank.finished = "aborted"
                elif conn.rank.finished is None and not conn.rank.started_ack:
                    # a chained rank's runner went away before it acknowledged "next": no user code ran
                    self._lost_before_start(conn.group, conn.rank)
                    return
                elif conn.rank.finished is None:
                    conn.rank.finished = "dead"
                    # its process died (os._exit, a segfault, the OOM killer): the scheduler may still list the
                    # worker for a moment; a retry placed there would wait for a process that is gone
                    self.ledger.quarantine(conn.rank.assignment.address, pid=conn.rank.pid)
                    oom = self._oom_killed(conn.rank)
                    where = f"rank {conn.rank.index} on {conn.rank.assignment.address}"
                    self._fail_group(conn.group, f"{where} (host {conn.rank.hostname}) was {oom}" if oom else
                                     f"{where} lost its connection (its process or Dask worker died)")
                    self._forget_rank(conn.rank)
                self._maybe_end_group(conn.group)
            return
        if conn.group is None:
            if not conn.authenticated:
                return  # (the handshake goes on)
            conn.group = conn.peer
        if conn.rank is not None:
            conn.rank.last_seen = time.monotonic()
        for frame in frames:
            try:
                msg = proto.from_rank(pickle.loads(frame))  # (an authenticated peer: see the listener)
            except proto.ProtocolError as exc:
                self._refuse_message(conn, str(exc))
                return
            self._on_message(conn, msg)

    def _refuse_message(self, conn: Conn, problem: str) -> None:
        """A malformed message: never acted on; the trial of the rank that sent it fails, saying what was wrong."""
        group = conn.group
        who = f"rank {conn.rank.index}" if conn.rank is not None else "a rank"
        logger.warning("tuneplat: %s of trial %s sent a message the tuner refuses: %s", who,
                       group.trial_id if group is not None else "?", problem)
        if group is None or conn.rank is None:
            self._drop_conn(conn)
            return
        self._fail_group(group, f"{who}: {problem}")
        self._maybe_end_group(group)

    def _send(self, rank: _Rank, msg: proto.Message) -> None:
        if rank.conn is None:
            return
        try:
            proto.send(rank.conn, msg)
        except OSError:
            pass

    def _on_message(self, conn: Conn, msg: proto.Message) -> None:
        if isinstance(msg, proto.Ping):  # (a chained runner's last ping of its previous trial may come after "done")
            if msg.stats is not None and conn.rank is not None and not conn.rank.finished:
                self._on_stats(conn, conn.rank, msg.stats)
            return
        group = conn.group
        assert group is not None
        if isinstance(msg, proto.Hello):
            if not 0 <= msg.rank < len(group.ranks):
                self._refuse_message(conn, f"a 'hello' from rank {msg.rank} of a group of {len(group.ranks)}")
                return
            rank = group.ranks[msg.rank]
            rank.conn = conn.sock
            rank.channel = conn
            rank.pid, rank.hostname = msg.pid, msg.hostname
            rank.oom_baseline = msg.oom_baseline
            self._unreachable.pop(rank.assignment.address, None)  # its host reaches the tuner (again)
            rank.ever_connected = True
            rank.last_seen = time.monotonic()
            conn.rank = rank
            if group.aborted:
                self._send(rank, proto.Abort(group.abort_reason or "the trial's group is being torn down"))
                if not group.go_sent:
                    rank.finished = "done"  # it runs no user code; its closing connection is expected
                return
            first = not group.go_sent
            group.go_sent = True
            self._send(rank, proto.Go())
            if rank.index > 0 and group.rendezvous is not None:
                self._send(rank, group.rendezvous)
            if first:
                self._events.append(Started(group.trial_id))
            return
        rank = conn.rank
        if rank is None:  # every other message comes after the rank's hello
            self._refuse_message(conn, f"a {msg.KIND!r} message before the rank's 'hello'")
            return
        if isinstance(msg, proto.Rendezvous):
            group.rendezvous = msg
            for r in group.ranks[1:]:
                self._send(r, msg)
        elif isinstance(msg, proto.Report):
            iteration = msg.iteration
            group.reports.setdefault(iteration, {})[rank.index] = (msg.result, msg.staged)
            group.first_report.setdefault(iteration, time.monotonic())
            if self.board is not None:
                self.board.dirty = True
            if len(group.reports[iteration]) == len(group.ranks):
                reports = group.reports.pop(iteration)
                group.first_report.pop(iteration, None)
                if group.failure or group.aborted:
                    for r in group.ranks:
                        self._send(r, proto.Abort(group.abort_reason or "the trial's group is being torn down"))
                    return
                group.waiting_answer = iteration
                group.answer_staged = any(s for _, s in reports.values())
                self._events.append(Reported(group.trial_id, iteration, reports[0][0],
                                             any(s for _, s in reports.values())))
        elif isinstance(msg, proto.Saved):  # a checkpoint asked for by answer(save=True), staged after the report
            got = group.saves.setdefault(msg.iteration, set())
            got.add(rank.index)
            if len(got) == len(group.ranks):
                del group.saves[msg.iteration]
                self._events.append(Saved(group.trial_id, msg.iteration))
                if group.preempted is not None and not group.aborted:
                    # (the loop commits it before it sees the Ended that follows: events keep their order)
                    self._resize(group, group.preempted)
        elif isinstance(msg, proto.Preempting):  # the rank's Dask worker is closing (retire_workers, scale down...)
            self._on_preempt(group, rank, msg.message)
        elif isinstance(msg, proto.Running):
            rank.started_ack = True
            rank.oom_baseline = msg.oom_baseline
        elif isinstance(msg, proto.Lease):
            self._on_lease(group, rank, msg.request, msg.n, msg.strategy)
        elif isinstance(msg, proto.Unlease):
            self._on_unlease(group, msg.address)
        elif isinstance(msg, proto.Requeue):  # the trial's nested fit was sent back to the queue (_check_lease_deadlock)
            rank.finished = "done"
            group.lost_before_start = True
            group.requeued = msg.message
            self._abort_group(group, "the trial goes back to the queue")
            self._maybe_end_group(group)
        elif isinstance(msg, proto.Done):
            rank.finished = "done"
            rank.offers_next = msg.chainable
            self._maybe_end_group(group)
        elif isinstance(msg, proto.Error):
            rank.finished = "error"
            rank.offers_next = msg.chainable
            self._fail_group(group, f"rank {rank.index}: {msg.message}", msg.traceback)
            self._maybe_end_group(group)

    # ------------------------------------------------------------------ groups started by trials (nested fits)
    def _on_lease(self, group: _Group, rank: _Rank, request: Any, n: Any, strategy: Any) -> None:
        """A trial starts a group of its own (``TorchTrainer.fit()`` in a Tune trial): place it beside the trial.

        The trial keeps its own slot (its driver function runs there); the group
        gets ``n`` other slots, as soon as they are free, before any new trial.
        A group that can never fit beside the trial is refused at once, saying
        how to size the cluster.
        """
        req = {str(k): float(v) for k, v in dict(request).items()}
        n, strategy = int(n), str(strategy)
        own = {r.assignment.address for r in group.ranks} | {a.address for a in group.leases}
        pools = {k: list(v) for k, v in self.ledger._pool_size.items()}
        if self.ledger._allocate(req, n, strategy, own | self.ledger.quarantined, pools) is None:
            total = len(self.ledger.slots)
            need = ", ".join(f"{k}={v:g}" for k, v in req.items())
            self._send(rank, proto.Refused((
                f"the TorchTrainer started inside trial {group.trial_id} needs {n} rank(s) with {{{need}}} beside "
                f"the trial, whose function holds {len(group.ranks)} worker slot(s) of the cluster's {total} "
                f"({self.ledger.describe()}): such a trial needs {n + len(group.ranks)} slots in all. Lower "
                f"ScalingConfig(num_workers=...), or give the cluster more workers (the embedded cluster: "
                f"TUNEPLAT_NUM_CPUS={n + len(group.ranks)} or more; see docs/porting-from-ray.md)")))
            return
        self._lease_queue.append(_LeaseAsk(group, rank, req, n, strategy))
        self._serve_leases()

    def _on_unlease(self, group: _Group, address: str) -> None:
        for a in group.leases:
            if a.address == address:
                group.leases.remove(a)
                self.ledger.release(a)
                break
        self._serve_leases()

    def _serve_leases(self) -> None:
        """Place waiting nested groups, oldest first; when nothing can ever free a slot, requeue the newest trial."""
        while self._lease_queue:
            ask = self._lease_queue[0]
            if ask.group.ended or ask.group.aborted or ask.rank.finished:
                self._lease_queue.pop(0)
                continue
            got = self.ledger.allocate(ask.request, ask.n, ask.strategy)
            if got is None and self.idle:  # idle runners hold slots: let them go
                self._dismiss_idle()
                got = self.ledger.allocate(ask.request, ask.n, ask.strategy)
            if got is None:
                break
            self._lease_queue.pop(0)
            ask.group.leases.extend(got)
            self._send(ask.rank, proto.Leased(got))
        if self._lease_queue:
            self._check_lease_deadlock()

    def _check_lease_deadlock(self) -> None:
        """Every running trial waits to place a group and none can be placed: nothing will ever free a slot.

        The newest waiting trial goes back to the queue (its driver function
        ends now and runs again later; not a failure), freeing its slot; new
        trials start only once the waiting groups are placed.
        """
        waiting = {id(a.group) for a in self._lease_queue}
        if self.idle or any(g.leases or id(g) not in waiting for g in self.groups.values()):
            return  # a group or a plain trial runs (or an idle runner leaves): slots will free up
        ask = self._lease_queue.pop()
        msg = (f"every worker slot is held by a trial waiting to place its TorchTrainer's ranks ({len(waiting)} such "
               f"trial(s), {len(self.ledger.slots)} slots): trial {ask.group.trial_id} goes back to the queue and "
               "starts again when there is room. To avoid this, set TuneConfig(max_concurrent_trials=...) to the "
               "number of trials whose driver and ranks fit at once (docs/porting-from-ray.md)")
        logger.info("tuneplat: %s", msg)
        self._send(ask.rank, proto.Requeue(msg))

    def _drain_wake_events(self) -> None:
        while self._wake_events:
            kind, payload = self._wake_events.popleft()
            if kind == "cluster_changed":
                self._refresh_ledger()
                continue
            if kind != "task_done":
                continue
            owner = self.task_owner.pop(payload.key, None)
            if owner is None:
                continue
            group, rank = owner
            if rank.future is not payload:
                continue  # (the task was handed on; its owner's record says so)
            if rank.parked:  # an idle runner's task ended: it takes no trial; its slot is free
                rank.future = None
                self._unpark(rank, bye=False)
                continue
            rank.task_done = True
            fut, rank.future = rank.future, None
            if rank.finished is None and not rank.started_ack:
                # a chained rank whose task ended before it acknowledged "next": no user code ran
                self._lost_before_start(group, rank)
                continue
            if (group.elastic and fut is not None and fut.status == "error" and rank.finished is None
                    and rank.conn is not None and type(fut.exception()).__name__ == "KilledWorker"):
                # an elastic group's rank whose Dask worker left the scheduler (it is closing: SIGTERM, a retire)
                # while the rank still runs and talks to the tuner: its connection decides (a notice comes from it;
                # a process that really died drops it). Nothing more is placed there.
                self.ledger.quarantine(rank.assignment.address)
                rank.task_lost_at = time.monotonic()  # (no notice within TASK_LOST_GRACE_S: it is lost)
                continue
            self._release(rank)
            if fut is not None and fut.status == "error" and rank.finished is None:
                exc = fut.exception()
                if rank.conn is None and not rank.ever_connected and type(exc).__name__ == "KilledWorker":
                    # Its worker died before this rank ran any user code: not the trial's failure; place it again.
                    self._lost_before_start(group, rank)
                    continue
                if not rank.ever_connected and type(exc).__name__ == "TunerUnreachable":
                    # its host cannot reach the tuner's port: place nothing there for a while (a path lost for a
                    # minute comes back; a firewall does not: the wait doubles each time); try the trial elsewhere
                    addr = rank.assignment.address
                    times = self._unreachable[addr] = self._unreachable.get(addr, 0) + 1
                    wait = min(self.unreachable_retry_s * 2 ** (times - 1), 600.0)
                    self.ledger.quarantine_for(addr, wait)
                    logger.warning("tuneplat: %s; no trial is placed on %s for %.0fs (then it is tried again)",
                                   exc, addr, wait)
                    if any(a not in self.ledger.quarantined for a in self.ledger.slots):
                        self._lost_before_start(group, rank)
                        continue
                rank.finished = "error"
                tb = "".join(traceback.format_exception(exc)) if exc else None
                oom = self._oom_killed(rank) if type(exc).__name__ == "KilledWorker" and rank.ever_connected else None
                self._fail_group(group, f"rank {rank.index} on {rank.assignment.address} (host {rank.hostname}) was "
                                        f"{oom}" if oom else
                                 f"rank {rank.index} failed on its Dask worker: {type(exc).__name__}: {exc}", tb)
            elif rank.finished is None:
                rank.finished = "dead" if fut is not None and fut.status == "cancelled" else "done"
            self._maybe_end_group(group)

    # ------------------------------------------------------------------ failures and hangs
    def _lost_before_start(self, group: _Group, rank: _Rank) -> None:
        """``rank``'s worker or runner went away before any of its user code ran: the trial is placed again."""
        rank.finished = "lost"
        group.lost_before_start = True
        if rank.channel is not None:
            self._drop_conn(rank.channel)
        rank.conn = None
        rank.channel = None
        self._forget_rank(rank)
        self._abort_group(group, "a rank's worker was lost before the trial started")
        self._maybe_end_group(group)

    def _lose_unstarted_ranks_on(self, gone: set[str]) -> None:
        """Ranks placed on workers that left before they started will never start: place them again."""
        for g in list(self.groups.values()):
            hit = [r for r in g.ranks if r.assignment.address in gone and r.conn is None and not r.finished
                   and not r.ever_connected]
            if not hit:
                continue
            for r in hit:
                r.finished = "lost"
                if r.future is not None:
                    try:
                        r.future.cancel()
                    except Exception:  # noqa: BLE001
                        pass
                    r.future = None
                r.task_done = True
                self._release(r)
            g.lost_before_start = True
            self._abort_group(g, "a rank's worker left the cluster before the trial started")
            self._maybe_end_group(g)

    def _check_hangs(self, now: float) -> None:
        for g in list(self.groups.values()):
            for r in g.ranks:  # elastic: a rank whose Dask worker left without a preemption notice is lost
                if (r.task_lost_at is not None and not r.finished and g.preempted is None
                        and now - r.task_lost_at > TASK_LOST_GRACE_S):
                    r.finished = "dead"
                    self._fail_group(g, f"rank {r.index} on {r.assignment.address}: its Dask worker left the "
                                        f"cluster (KilledWorker) and no preemption notice came within "
                                        f"{TASK_LOST_GRACE_S:g}s")
                    if r.channel is not None:
                        self._drop_conn(r.channel)
                    r.conn = None
                    r.channel = None
                    self._forget_rank(r)
                    self._maybe_end_group(g)
            for r in g.ranks:
                if r.conn is None or r.finished or now - r.last_seen <= self.hang_timeout_s:
                    continue
                silent = now - r.last_seen
                if r.started_ack:
                    stacks = self._capture(g, f"rank {r.index} hung", silent=[r])
                    r.finished = "dead"
                    self._fail_group(g, f"rank {r.index} on {r.assignment.address} sent nothing for {silent:.0f}s "
                                        f"(hung or stopped, e.g. SIGSTOP; TUNEPLAT_HEARTBEAT_TIMEOUT_S="
                                        f"{self.hang_timeout_s:g}); its worker process is restarted{stacks}")
                else:  # a chained rank whose runner never took it (stuck after its previous trial)
                    r.finished = "lost"
                    g.lost_before_start = True
                    self._abort_group(g, "the rank's runner did not take the trial")
                conn_sock = r.conn
                r.conn = None
                r.channel = None
                try:
                    assert self._selector is not None
                    self._selector.unregister(conn_sock)
                    conn_sock.close()
                except (KeyError, ValueError, OSError):
                    pass
                self.ledger.quarantine(r.assignment.address)
                self._restart_worker(r)
                self._forget_rank(r)
                self._maybe_end_group(g)

    def _check_report_skew(self, now: float) -> None:
        """A rank that has not reached ``report()`` long after another rank of its group did is hung (deadlocked).

        Its heartbeats still arrive (its heartbeat thread runs), so only this tells it:
        the stacks of every rank are captured, the trial fails naming where each rank
        was, and the hung ranks' worker processes are restarted.
        """
        if self.report_timeout_s <= 0:
            return
        for g in list(self.groups.values()):
            if g.aborted or not g.first_report:
                continue
            iteration, since = min(g.first_report.items(), key=lambda kv: kv[1])
            if now - since <= self.report_timeout_s:
                continue
            arrived = set(g.reports.get(iteration, {}))
            missing = [r for r in g.ranks if r.index not in arrived and not r.finished]
            g.first_report.clear()
            if not missing:
                continue
            stacks = self._capture(g, "report timeout")
            names = ", ".join(str(r.index) for r in missing)
            self._fail_group(g, f"rank(s) {names} did not reach report() of iteration {iteration} within "
                                f"{self.report_timeout_s:g}s of rank(s) {sorted(arrived)} (a deadlock, or a rank far "
                                f"slower than the others; TUNEPLAT_REPORT_TIMEOUT_S sets this limit); their worker "
                                f"processes are restarted{stacks}")
            for r in missing:
                r.finished = "dead"
                if r.channel is not None:
                    self._drop_conn(r.channel)
                r.conn = None
                r.channel = None
                self.ledger.quarantine(r.assignment.address)
                self._restart_worker(r)
                self._forget_rank(r)
            self._maybe_end_group(g)

    def _oom_killed(self, rank: _Rank) -> str | None:
        """Whether the kernel's OOM killer ended ``rank``'s process, read on its host (``_host_oom.py``).

        Returns the evidence (``"killed by the kernel's OOM killer (...)"``), or None
        when there is none to read (then the death stays "its process died"). On this
        host the tuner reads the rank's memory cgroup and the kernel log itself; on
        another host a live Dask worker of that host reads them (one round trip, at
        most ``TUNEPLAT_OOM_CHECK_S`` seconds, 5).
        """
        if not rank.pid:
            return None
        if rank.hostname == socket.gethostname():
            return _local_oom_evidence(rank.oom_baseline, rank.pid)
        addr = rank.assignment.address
        peers = [a for a, slot in self.ledger.slots.items() if slot.host == rank.assignment.host and a != addr]
        if not peers:
            return None  # no other worker on that host to ask (nothing is guessed)
        box: dict[str, Any] = {}

        def ask() -> None:
            try:
                box.update(self.client.run(_local_oom_evidence, rank.oom_baseline, rank.pid, workers=peers[:1],
                                           on_error="return"))
            except Exception as exc:  # noqa: BLE001 - a diagnostic: the death is reported either way
                logger.debug("tuneplat: asking %s about rank %s's death failed: %s", peers[0], rank.index, exc)

        thread = threading.Thread(target=ask, name="tuneplat-oom-check", daemon=True)
        thread.start()
        thread.join(env_seconds("TUNEPLAT_OOM_CHECK_S", 5))
        answer = next(iter(box.values()), None)
        return answer if isinstance(answer, str) else None

    def _capture(self, group: _Group, reason: str, silent: list[_Rank] | None = None) -> str:
        """Capture the stacks of ``group``'s ranks (``silent`` ones do not answer their worker); text for an error."""
        refs = [RankRef(r.index, r.assignment.address, r.pid, r.hostname, responsive=not silent or r not in silent)
                for r in group.ranks if r.ever_connected and r.finished is None]
        if not refs or not group.path:
            return ""
        try:
            path, summary = capture_stacks(self.client, group.trial_id, group.path, refs, reason)
        except Exception:  # noqa: BLE001 - never let a diagnostic hide the failure itself
            logger.warning("tuneplat: capturing the stacks of trial %s failed", group.trial_id, exc_info=True)
            return ""
        self._events.append(StacksCaptured(group.trial_id, path, summary, reason))
        return f". Stacks: {summary}" + (f" (all threads in {path})" if path else "")

    # ------------------------------------------------------------------ per-rank view
    def _on_stats(self, conn: Conn, rank: _Rank, stats: dict[str, Any]) -> None:
        rank.stats = stats
        group = conn.group
        if self.board is not None:
            self.board.dirty = True
        at = stats.get("system_at")
        if group is None or not isinstance(at, (int, float)) or at <= rank.system_seen or not stats.get("system"):
            return
        rank.system_seen = float(at)
        self._events.append(RankStats(group.trial_id, {rank.index: dict(stats["system"])}, float(at)))

    def running_rows(self) -> dict[str, list[dict[str, Any]]]:
        """The per-rank table of the running trials (``tuneplat status --workers``, the live view)."""
        return {tid: [rank_row(tid, r) for r in g.ranks] for tid, g in self.groups.items()}

    def _observe(self, now: float) -> None:
        board = self.board
        if board is None:
            return
        for nonce, body in board.take_requests(now):
            wanted = body.get("trial_id")
            answer: dict[str, Any] = {}
            for tid, g in list(self.groups.items()):
                if wanted and tid != wanted:
                    continue
                stacks = self._capture(g, "requested")
                path = self._events[-1].path if stacks and isinstance(self._events[-1], StacksCaptured) else None
                text = None
                if path:
                    try:
                        with open(path, encoding="utf-8") as f:
                            text = f.read()
                    except OSError:
                        pass
                answer[tid] = {"summary": stacks, "path": path, "text": text}
            board.answer(nonce, {"trials": answer, "running": sorted(self.groups)})
        board.maybe_write(self.running_rows(), now)

    def _restart_worker(self, rank: _Rank) -> None:
        """End a hung worker process so its nanny starts a fresh one.

        On this host the process is SIGKILLed directly (a SIGSTOPped process
        ignores the nanny's polite SIGTERM); elsewhere the nanny is asked to
        restart it, in the background because it can take seconds.
        """
        address = rank.assignment.address
        if rank.pid and rank.hostname == socket.gethostname():
            try:
                os.kill(rank.pid, signal.SIGKILL)
                return
            except OSError:
                pass
        client = self.client

        def restart() -> None:
            try:
                client.restart_workers([address], timeout=60, raise_for_error=False)
            except Exception as exc:  # noqa: BLE001 - best effort; the ledger drops the worker anyway
                logger.warning("tuneplat: could not restart hung worker %s: %s", address, exc)
            self._wake(("cluster_changed", address))

        threading.Thread(target=restart, name="tuneplat-restart-worker", daemon=True).start()

    def _release(self, rank: _Rank) -> None:
        if rank.released:
            return
        rank.released = True
        self.ledger.release(rank.assignment)

    def _forget_rank(self, rank: _Rank) -> None:
        """A rank whose process died: its task will never report done; free its slot now."""
        if rank.future is not None and not rank.task_done:
            try:
                rank.future.cancel()
            except Exception:  # noqa: BLE001
                pass
        rank.task_done = True
        self._release(rank)
        self._refresh_ledger()

    def _refresh_ledger(self) -> None:
        """Re-read the cluster's workers; while it has fewer than before (a nanny restarting a
        worker, a node coming back), look again shortly."""
        assert self.cluster is not None
        before = set(self.ledger.slots)
        self.ledger.refresh(self.cluster.slots())
        self._last_refresh = time.monotonic()
        gone = before - set(self.ledger.slots)
        if gone:
            self._lose_unstarted_ranks_on(gone)
        self.max_slots = max(self.max_slots, len(self.ledger.slots))
        again = len(self.ledger.slots) < self.max_slots or self.ledger.awaiting_replacement
        self._refresh_at = time.monotonic() + 0.25 if again else None
        if self._start_noted < 2:
            self._note_start()

    def _note_start(self) -> None:
        """Say how the embedded cluster's start goes: the first worker up (trials start), all of them, or a failure."""
        cluster = self.cluster
        assert cluster is not None
        expected = cluster.expected_workers
        say = getattr(getattr(self, "ctx", None), "say", None) or (lambda text: logger.info("%s", text))
        if expected == 0:
            self._start_noted = 2
            return
        error = cluster.start_error()
        starting = cluster.workers_ready
        ready = len(self.ledger.slots)
        if error is not None:
            self._start_noted = 2
            why = _why(error)
            if ready == 0:
                self._events.append(Starved(f"the embedded cluster's worker processes did not start ({why})"))
            else:
                say(f"tuneplat: only {ready} of {expected} worker processes started ({why}); going on with them")
        elif starting is None:
            self._start_noted = 2
            if expected > 1:
                say(f"tuneplat: all {expected} worker processes ready ({cluster.start_seconds:.1f}s)")
        elif self._start_noted == 0 and ready >= 1:
            self._start_noted = 1
            say(f"tuneplat: {ready} of {expected} worker processes ready ({cluster.start_seconds:.1f}s); trials "
                "start now, the others join as they come up")

    def _fail_group(self, group: _Group, message: str, tb: str | None = None) -> None:
        if group.failure is None:
            group.failure = (message, tb)
            self._events.append(RankFailed(group.trial_id, group.attempt, message))
        self._abort_group(group, "another rank of this trial failed")

    def _abort_group(self, group: _Group, reason: str) -> None:
        if group.aborted:
            return
        group.aborted = True
        group.abort_reason = reason
        for r in group.ranks:
            if r.finished is None and r.conn is not None:
                self._send(r, proto.Abort(reason))
                r.conn_shut = True
                try:
                    r.conn.shutdown(socket.SHUT_RDWR)  # a rank blocked in recv() wakes up at once
                except OSError:
                    pass

    def _maybe_end_group(self, group: _Group) -> None:
        if group.ended or not all(r.finished for r in group.ranks):
            return
        # A single-rank runner that offers to take more is parked (the loop's next launch pass hands it the
        # next trial, or the next poll sends it "bye"); other ranks that said "done"/"error" are leaving
        # run_rank: their slots are free now.
        parked = False
        for r in group.ranks:
            if (r.offers_next and not r.conn_shut and r.conn is not None and r.channel is not None
                    and r.future is not None and len(group.ranks) == 1):
                self._park(r)
                parked = True
            elif r.finished in ("done", "error", "aborted"):
                self._release(r)
        group.ended = True
        self.groups.pop(group.trial_id, None)
        if self.board is not None:
            self.board.ended(group.trial_id, [rank_row(group.trial_id, r, state=r.finished or "done")
                                              for r in group.ranks])
        for a in group.leases:  # its nested group's ranks end with it (they lose their tuner)
            self.ledger.release(a)
        group.leases.clear()
        if not parked and time.monotonic() - self._last_refresh > 1.0:
            self._refresh_ledger()  # workers may have left: look before placing more (a parked runner's is there)
        self.tokens.pop(token_id(group.token), None)
        message: str | None
        if group.resize_reason is not None and group.failure is None:
            outcome, message, tb = Outcome.RESIZED, group.resize_reason, None
        elif group.failure is not None and group.preempted is not None and any(
                r.finished in ("dead", "lost") for r in group.ranks):
            # its worker left before the group committed a checkpoint: start again from the latest one (what
            # was trained since is lost); not a failure of the trial
            outcome, tb = Outcome.RESIZED, None
            message = f"{group.preempted}; it left before a checkpoint was committed ({group.failure[0]})"
        elif group.failure is not None:
            outcome, (message, tb) = Outcome.FAILED, group.failure
        elif group.lost_before_start:
            outcome, message, tb = (Outcome.NOT_STARTED, group.requeued or "a worker was lost before the trial started",
                                    None)
        elif group.aborted:
            outcome, message, tb = Outcome.ABORTED, group.abort_reason, None
        else:
            outcome, message, tb = Outcome.FINISHED, None, None
        self._events.append(Ended(group.trial_id, outcome, message, tb, world_size=len(group.ranks),
                                  preempted=outcome is Outcome.RESIZED and group.preempted is not None))
        self._serve_leases()  # slots were freed: waiting nested groups first


#: an elastic rank whose Dask task was declared lost while its connection lives: how long a preemption notice
#: may take to come before the rank counts as lost (its worker is closing: the rank sees it within 0.1 s)
TASK_LOST_GRACE_S = env_seconds("TUNEPLAT_TASK_LOST_GRACE_S", 2)


def _local_oom_evidence(baseline: dict[str, Any] | None, pid: int) -> str | None:
    """:func:`oom_evidence` for process ``pid`` of this host, once it is gone (its connection closed first).

    The kernel's count rises before the victim exits, so a count read now is current; the cgroup count
    alone (no kernel-log line for the pid) is taken as evidence only once the process is seen gone, waiting
    at most 0.5 s for it (a process that lives on was not killed).
    """
    evidence = oom_evidence(baseline, pid)
    if evidence is None or "kernel log:" in evidence:
        return evidence
    deadline = time.monotonic() + 0.5
    while not _pid_gone(pid):
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)  # (the process closes its sockets a moment before the kernel marks it a zombie)
    return evidence


def _pid_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def _why(error: BaseException) -> str:
    """An error with what caused it (Dask's "Nanny failed to start." says why only in its cause)."""
    parts: list[str] = []
    seen: set[int] = set()
    while id(error) not in seen and len(parts) < 4:
        seen.add(id(error))
        parts.append(f"{type(error).__name__}: {error}")
        cause = error.__cause__ or error.__context__
        if cause is None:
            break
        error = cause
    return " (".join(parts) + ")" * (len(parts) - 1)


def _process_gone(rank: Any) -> bool:
    """True when ``rank``'s process is known to have died (it ran on this host and its pid is gone or a zombie).

    On another host nothing is known here: False (the scheduler's view of that worker decides)."""
    if not rank.pid or rank.hostname != socket.gethostname():
        return False
    try:
        with open(f"/proc/{rank.pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state in ("Z", "X")
    except (OSError, IndexError):
        try:
            os.kill(rank.pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False
