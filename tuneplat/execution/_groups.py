"""A Dask worker group's life: failing, aborting and ending it; parking and chaining single-rank runners."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Mapping

from ..train._session import RankSpec
from . import _protocol as proto
from ._channel import token_id
from ._dask_state import RankEnd, _DaskState, _Group, _Rank, outcome
from ._executor import (
    Ended,
    Outcome,
    RankFailed,
    Started,
)
from ._failure import ERROR, Failure
from ._observe import rank_row

__all__ = ["_GroupLifecycle"]

logger = logging.getLogger("tuneplat")


class _GroupLifecycle(_DaskState):
    """A Dask worker group's life (a part of :class:`~tuneplat.execution._dask_executor.DaskTrialExecutor`)."""

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

    def _recycle_worker(self, rank: _Rank, wait: bool = True) -> None:
        """Have the nanny of ``rank``'s worker start a new worker process; nothing is placed on the old one.

        For a backend that leaves state in the process that it cannot take back
        (``Backend.reuses_worker_process``: TensorFlow's collective server). The
        rank's Dask task is given ``abort_grace_s`` to return first (its backend's
        ``on_shutdown`` runs in it), unless not ``wait`` (a failed group of a backend
        whose processes must not outlive it: JAX's). A worker without a nanny is never restarted
        (the scheduler would only end it): it stays in use, with what it holds.
        """
        address = rank.assignment.address
        if address in self._recycling or (self._tearing_down and self.cluster is not None
                                          and self.cluster.local_cluster is not None):
            return  # (the embedded cluster closes with the experiment: its processes end anyway)
        slot = self.ledger.slots.get(address)
        if slot is None:
            return  # it left the cluster already: its replacement is a new process
        if not slot.nanny:
            if not self._no_nanny_said:
                self._no_nanny_said = True
                logger.warning("tuneplat: worker %s has no nanny: it is not restarted after this trial's group, and "
                               "keeps what the trial's framework left in the process (threads, a port, memory); "
                               "start workers with a nanny (the default of `dask worker`)", address)
            return
        self.ledger.quarantine(address, slot.pid)
        future, client, grace = (rank.future if wait else None), self.client, self.abort_grace_s

        def restart() -> None:
            why = None
            try:
                if future is not None:
                    try:  # the rank's task returns once its backend shut down: let it, so Dask sees it end
                        future.result(timeout=grace)
                    except Exception:  # noqa: BLE001, S110 - an error or a timeout: it is restarted either way
                        pass
                status = client.restart_workers([address], timeout=120, raise_for_error=False)
                if status.get(address) not in ("OK", "removed", None):
                    why = str(status.get(address))
            except Exception as exc:  # noqa: BLE001 - reported on the loop's thread
                why = f"{type(exc).__name__}: {exc}"
            self._wake(("recycled", (address, why)))

        thread = threading.Thread(target=restart, name="tuneplat-recycle-worker", daemon=True)
        self._recycling[address] = thread
        thread.start()

    def _recycled(self, address: str, why: str | None) -> None:
        """The restart of a worker (:meth:`_recycle_worker`) ended: look at the cluster again."""
        self._recycling.pop(address, None)
        if why is not None:
            logger.warning("tuneplat: could not restart worker %s after its trial (%s); it is used again as it is",
                           address, why)
        # restarted: whatever answers at this address now is a new process (most clusters give it a new address)
        self.ledger.end_quarantine(address)
        self._refresh_ledger()

    def _wait_for_recycling(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) for the workers being restarted: the next experiment on this cluster must
        find new processes, not one that is about to be ended under its rank."""
        deadline = time.monotonic() + timeout
        for thread in list(self._recycling.values()):
            thread.join(max(0.0, deadline - time.monotonic()))
        self._recycling.clear()

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

    def _fail_group(self, group: _Group, message: str, tb: str | None = None,
                    failure: Failure | None = None) -> None:
        """The group failed (its first failure counts): ``failure`` says how, typed (default: an error)."""
        if group.failure is None:
            group.failure = (message, tb)
            group.failure_info = failure if failure is not None else Failure(ERROR, message=message)
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
        # a failed group whose backend's processes must not outlive it (JAX's) has them restarted at once: what
        # its tasks still do is moot; a backend that always wants new processes gives its tasks the grace first
        restart_now = (group.failure is not None and len(group.ranks) > 1 and self.fresh_after_failure
                       and not self.fresh_workers)
        recycle = (self.fresh_workers or restart_now) and not self._nested  # (a leased worker is the outer tuner's)
        for r in group.ranks:
            if (r.offers_next and not r.conn_shut and r.conn is not None and r.channel is not None
                    and r.future is not None and len(group.ranks) == 1):
                if not recycle:
                    self._park(r)
                    parked = True
                    continue
                self._unpark(r, bye=True)  # its process is restarted: the runner leaves now, not after its idle wait
                r.released = True
                self._recycle_worker(r)
            elif r.finished in (RankEnd.DONE, RankEnd.ERROR, RankEnd.ABORTED):
                self._release(r)
                if recycle and r.ever_connected:
                    self._recycle_worker(r, wait=not restart_now)
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
        how, message, tb, failure = outcome(group)
        self._events.append(Ended(group.trial_id, how, message, tb, world_size=len(group.ranks),
                                  preempted=how is Outcome.RESIZED and group.preempted is not None,
                                  failure=failure))
        self._serve_leases()  # slots were freed: waiting nested groups first
