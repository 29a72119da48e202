"""The Dask executor's I/O: the selector, the ranks' messages, and the ends of their Dask tasks."""

from __future__ import annotations

import collections
import logging
import pickle
import threading
import time
import traceback
from typing import Any

from ..core._scaling import Resize
from . import _protocol as proto
from ._channel import Conn
from ._dask_state import RankEnd, _DaskState, _Group, _Rank
from ._executor import (
    Reported,
    Saved,
    Started,
)
from ._failure import ERROR, INVALID, LOST, OOM, Failure
from ._forensics import _process_gone

__all__ = ["_IOLoop"]

logger = logging.getLogger("tuneplat")


class _IOLoop(_DaskState):
    """The Dask executor's I/O (a part of :class:`~tuneplat.execution._dask_executor.DaskTrialExecutor`)."""

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
                    conn.rank.finished = RankEnd.ABORTED
                elif conn.rank.finished is None and not conn.rank.started_ack:
                    # a chained rank's runner went away before it acknowledged "next": no user code ran
                    self._lost_before_start(conn.group, conn.rank)
                    return
                elif conn.rank.finished is None:
                    conn.rank.finished = RankEnd.DEAD
                    # its process died (os._exit, a segfault, the OOM killer): the scheduler may still list the
                    # worker for a moment; a retry placed there would wait for a process that is gone
                    self.ledger.quarantine(conn.rank.assignment.address, pid=conn.rank.pid,
                                           uid=conn.rank.assignment.uid)
                    oom = self._oom_killed(conn.rank)
                    where = f"rank {conn.rank.index} on {conn.rank.assignment.address}"
                    text = (f"{where} (host {conn.rank.hostname}) was {oom}" if oom else
                            f"{where} lost its connection (its process or Dask worker died)")
                    self._fail_group(conn.group, text, None, Failure(
                        OOM if oom else LOST, (), conn.rank.index, conn.rank.hostname, text))
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
        self._fail_group(group, f"{who}: {problem}", None,
                         Failure(INVALID, (), conn.rank.index, conn.rank.hostname, f"{who}: {problem}"))
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
                    rank.finished = RankEnd.DONE  # it runs no user code; its closing connection is expected
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
        elif isinstance(msg, proto.Gather):  # a non-torch group's all_gather/broadcast (train/_backend.py)
            got = group.gathers.setdefault(msg.seq, {})
            got[rank.index] = msg.payload
            if len(got) < len(group.ranks):
                self._stranded_gathers(group)
            else:
                del group.gathers[msg.seq]
                if group.failure or group.aborted:
                    for r in group.ranks:
                        self._send(r, proto.Abort(group.abort_reason or "the trial's group is being torn down"))
                    return
                answer = proto.Gathered(msg.seq, [got[i] for i in range(len(group.ranks))])
                for r in group.ranks:
                    self._send(r, answer)
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
                                             any(s for _, s in reports.values()),
                                             [reports[i][0] for i in sorted(reports)]))
        elif isinstance(msg, proto.Saved):  # a checkpoint asked for by answer(save=True), staged after the report
            got = group.saves.setdefault(msg.iteration, set())
            got.add(rank.index)
            if len(got) == len(group.ranks):
                del group.saves[msg.iteration]
                self._events.append(Saved(group.trial_id, msg.iteration))
                if group.preempted is not None and not group.aborted:  # the checkpoint a notice asked for
                    # (the loop commits it before it sees the Ended that follows: events keep their order)
                    scaled = self._scale(group, staged=True)
                    if isinstance(scaled, Resize):
                        self._resize(group, scaled.reason)
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
            rank.finished = RankEnd.DONE
            group.lost_before_start = True
            group.requeued = msg.message
            self._abort_group(group, "the trial goes back to the queue")
            self._maybe_end_group(group)
        elif isinstance(msg, proto.Done):
            rank.finished = RankEnd.DONE
            rank.offers_next = msg.chainable
            self._stranded_gathers(group)
            self._maybe_end_group(group)
        elif isinstance(msg, proto.Error):
            rank.finished = RankEnd.ERROR
            rank.offers_next = msg.chainable
            text = f"rank {rank.index}: {msg.message}"
            self._fail_group(group, text, msg.traceback, Failure.of_types(
                [str(t) for t in msg.types], text, rank.index, rank.hostname))
            self._maybe_end_group(group)

    def _stranded_gathers(self, group: _Group) -> None:
        """A rank ended its function without joining an exchange (``all_gather``/``broadcast``/``barrier``) that
        others wait in: they would wait until their timeout; the group fails now, saying which."""
        for seq, got in group.gathers.items():
            gone = [r.index for r in group.ranks if r.index not in got and r.finished is RankEnd.DONE]
            if gone and not group.aborted:
                text = (f"rank {gone[0]} returned from the training function without joining the group's exchange "
                        f"{seq} (all_gather/broadcast/barrier) that rank(s) {sorted(got)} wait in: every rank must "
                        "call them, in the same order")
                self._fail_group(group, text, None, Failure(ERROR, (), gone[0], group.ranks[gone[0]].hostname, text))
                return

    def _drain_wake_events(self) -> None:
        while self._wake_events:
            kind, payload = self._wake_events.popleft()
            if kind == "cluster_changed":
                self._refresh_ledger()
                continue
            if kind == "recycled":
                self._recycled(*payload)
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
                self.ledger.quarantine(rank.assignment.address, uid=rank.assignment.uid)
                rank.task_lost_at = time.monotonic()  # (no notice within task_lost_grace_s: it is lost)
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
                rank.finished = RankEnd.ERROR
                tb = "".join(traceback.format_exception(exc)) if exc else None
                oom = self._oom_killed(rank) if type(exc).__name__ == "KilledWorker" and rank.ever_connected else None
                text = (f"rank {rank.index} on {rank.assignment.address} (host {rank.hostname}) was {oom}" if oom else
                        f"rank {rank.index} failed on its Dask worker: {type(exc).__name__}: {exc}")
                self._fail_group(group, text, tb, Failure(OOM, (), rank.index, rank.hostname, text) if oom else
                                 Failure.of_exception(exc, text, rank.index, rank.hostname))
            elif rank.finished is None:
                rank.finished = RankEnd.DEAD if fut is not None and fut.status == "cancelled" else RankEnd.DONE
            self._maybe_end_group(group)
