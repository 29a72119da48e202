"""The Dask :class:`~tuneplat.execution._executor.TrialExecutor`: real worker processes.

Each trial's worker group is one Dask task per rank, pinned to the workers a
gang placement chose (:class:`~tuneplat.execution._placement.Ledger`). Ranks
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

import logging
import selectors
import socket
import time
from collections.abc import Mapping

from schedulers import Decision

from .._settings import env_str
from ..core._scaling import GroupSize, Resize, ScalingDecision, ScalingPolicy
from ..train._session import RankSpec
from . import _protocol as proto
from ._channel import Conn, Listener, new_token, token_id
from ._cluster import HEAVY_IMPORTS, Cluster, trainable_imports
from ._dask_state import _DaskState, _Group, _Rank, _Reservation
from ._errors import PlacementError
from ._executor import (
    Ended,
    Event,
    ExecutorContext,
    Outcome,
    Preempted,
    Starved,
    TrialSpec,
)
from ._failure import INVALID, Failure
from ._forensics import _Forensics, _why
from ._gpu_memory import GPU_MEMORY, as_gpu_share, device_memory_bytes
from ._groups import _GroupLifecycle
from ._io_loop import _IOLoop
from ._leases import _Leases
from ._observe import WorkerBoard
from ._placement import Assignment, _LeasedLedger
from ._rank_group import reuses_worker_process
from ._runner import run_rank
from ._shipping import ship
from ._watchdog import _Watchdog

__all__ = ["DaskTrialExecutor"]

logger = logging.getLogger("tuneplat")

#: how often the cluster's workers are read again while a placed rank has not connected (a scheduler call): a rank
#: placed on a worker that left just before its task was submitted is then placed again (see _refresh_ledger)
UNSTARTED_REFRESH_S = 1.0


class DaskTrialExecutor(_IOLoop, _Leases, _Watchdog, _Forensics, _GroupLifecycle, _DaskState):
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

    # ------------------------------------------------------------------ setup
    def setup(self, ctx: ExecutorContext) -> None:
        ctx.request = self._gpu_share(ctx.request)  # {"GPU_memory": bytes} -> the share of a device it is
        self.ctx = ctx
        #: how big elastic groups are (the loop's policy; the same one built from the context otherwise)
        self.scaling = ctx.scaling or ScalingPolicy.of(ctx.world_size, ctx.min_world_size, ctx.grow_interval_s)
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
        # the bound trainable holds what bind persisted (a trainer's datasets: Dask futures): kept until
        # _release_futures, or the futures are dropped with it and the ranks' reads fail with "lost dependencies"
        self._bound = self.trainable
        self.fresh_workers = not reuses_worker_process(self.trainable)
        self.fresh_after_failure = not reuses_worker_process(self.trainable, after_failure=True)
        # as bytes: each rank unpickles it once its RANK & co. are set (_shipping.py), keeping its file names
        self.trainable = ship(self.trainable)
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

    @property
    def dashboard_link(self) -> str | None:
        return self.cluster.dashboard_link if self.cluster is not None else None

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

    def capacity(self) -> dict[str, float]:
        """Every worker's CPUs and GPUs; the embedded cluster's as planned (workers starting or restarting count)."""
        pools: dict[str, float] = {}
        for s in self.ledger.slots.values():
            if s.gpu_pool:
                pools[s.gpu_pool] = float(len(s.gpus))
        have = {"CPU": float(sum(s.cpu for s in self.ledger.slots.values())), "GPU": float(sum(pools.values()))}
        planned = self.cluster.planned_capacity() if self.cluster is not None else {}
        return {k: max(v, planned.get(k, 0.0)) for k, v in have.items()}

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
        lo, hi = self.scaling.start_bounds(self.waiting)
        return self.ledger.allocate_between(request, lo, hi, ctx.placement_strategy)

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
                system_metrics_s=self.system_metrics_s, stale_lock_s=self.stale_lock_s,
                rank_hosts=[x.host for x in placement],
                cpus=float((reservation.request or ctx.request).get("CPU", 1.0)),
                resources=dict(reservation.request or ctx.request),
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
        if runner is None and self._refresh_at is None:
            # look at the cluster again while the ranks start: a worker that left between the last look and the
            # submit (a process just killed, its removal not yet seen) would hold its rank's task forever
            self._refresh_at = time.monotonic() + UNSTARTED_REFRESH_S
        return [a.address for a in placement]

    def _placed_unstarted(self) -> bool:
        """A rank's task is submitted and has not connected yet (it may sit on a worker that left)."""
        return any(r.future is not None and r.conn is None and not r.finished and not r.ever_connected
                   and not r.task_done for g in self.groups.values() for r in g.ranks)

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
            scaled = self._scale(group, staged)
            if isinstance(scaled, Resize):  # its checkpoint of this step is committed: start again from it
                self._resize(group, scaled.reason)
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
    def _scale(self, group: _Group, staged: bool) -> ScalingDecision:
        """The scaling policy's decision for ``group`` at the report being answered (``Noop`` or ``Resize``)."""
        ctx = self.ctx

        def free(limit: int) -> int:  # (asked only when the group could grow)
            self._refresh_ledger()  # the workers there are now (one scheduler round trip per such checkpoint)
            return self.ledger.free_count(ctx.request, limit, ctx.placement_strategy)

        return self.scaling.at_checkpoint(
            GroupSize(size=len(group.ranks), checkpointed=staged, preempted=group.preempted,
                      preempted_ranks=len(group.preempted_ranks), age_s=time.monotonic() - group.started),
            self.waiting, free)

    def _resize(self, group: _Group, reason: str) -> None:
        """End ``group`` to start it again at another size from the checkpoint just committed."""
        group.resize_reason = reason
        self._abort_group(group, f"the elastic group is resized ({reason})")

    def _on_preempt(self, group: _Group, rank: _Rank, message: str) -> None:
        """A rank's worker is leaving: nothing more goes there; the group checkpoints, then resizes."""
        self.ledger.quarantine(rank.assignment.address, uid=rank.assignment.uid)  # (until it leaves the cluster)
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
            self._fail_group(group, message, None, Failure(INVALID, message=message))
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

    def teardown(self, reason: str, timeout: float = 30.0) -> list[Event]:
        self._tearing_down = True
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
        if self._recycling and self.cluster is not None and self.cluster.local_cluster is None:
            # a cluster that lives on: the next experiment must not place a rank on a worker being restarted
            self._wait_for_recycling(130.0)
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
        release_bound = getattr(getattr(self, "_bound", None), "_tuneplat_release", None)
        if release_bound is not None:  # what the trainable's bind persisted (TorchTrainer's datasets)
            try:
                release_bound()
            except Exception:  # noqa: BLE001 - closing anyway
                logger.debug("tuneplat: releasing the trainable's data failed", exc_info=True)
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
    # ------------------------------------------------------------------ I/O
    # ------------------------------------------------------------------ groups started by trials (nested fits)
    # ------------------------------------------------------------------ failures and hangs
    # ------------------------------------------------------------------ per-rank view
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
        if again:
            self._refresh_at = time.monotonic() + 0.25
        elif self._placed_unstarted():
            self._refresh_at = time.monotonic() + UNSTARTED_REFRESH_S
        else:
            self._refresh_at = None
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
