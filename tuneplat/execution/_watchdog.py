"""The Dask executor's deadlines: ranks that never start, hang, fall behind their group, or lose their worker."""

from __future__ import annotations

import logging
import time

from ._dask_state import RankEnd, _DaskState, _Group, _Rank
from ._executor import (
    Starved,
)
from ._failure import HUNG, LOST, Failure

__all__ = ["_Watchdog"]

logger = logging.getLogger("tuneplat")


class _Watchdog(_DaskState):
    """The Dask executor's deadlines (a part of :class:`~tuneplat.execution._dask_executor.DaskTrialExecutor`)."""

    def _next_deadline(self) -> float | None:
        deadlines = []
        for g in self.groups.values():
            if not g.started_ok and not g.connected:
                deadlines.append(g.started + self.start_timeout_s)
            for r in g.ranks:
                if r.conn is not None and not r.finished:
                    deadlines.append(r.last_seen + self.hang_timeout_s + 0.01)
                    if r.task_lost_at is not None and g.preempted is None:
                        deadlines.append(r.task_lost_at + self.task_lost_grace_s + 0.01)
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
                        self.ledger.quarantine(r.assignment.address, uid=r.assignment.uid)  # until it leaves or restarts
                text = (f"rank(s) {missing} did not start within {self.start_timeout_s:.0f}s of being "
                        "placed. Look at the Dask workers' logs: a worker that cannot import the "
                        "trainable's module logs 'Failed to deserialize' (install your code where the "
                        "workers run, or set PYTHONPATH for them); a dead worker is replaced by its "
                        "nanny. TUNEPLAT_START_TIMEOUT_S sets this limit")
                self._fail_group(g, text, None, Failure(LOST, (), missing[0] if missing else None, None, text))
                for r in g.ranks:
                    if r.conn is None and not r.finished:
                        r.finished = RankEnd.DEAD
                        self._forget_rank(r)
                self._maybe_end_group(g)

    def _check_hangs(self, now: float) -> None:
        for g in list(self.groups.values()):
            for r in g.ranks:  # elastic: a rank whose Dask worker left without a preemption notice is lost
                if (r.task_lost_at is not None and not r.finished and g.preempted is None
                        and now - r.task_lost_at > self.task_lost_grace_s):
                    r.finished = RankEnd.DEAD
                    text = (f"rank {r.index} on {r.assignment.address}: its Dask worker left the cluster "
                            f"(KilledWorker) and no preemption notice came within {self.task_lost_grace_s:g}s")
                    self._fail_group(g, text, None, Failure(LOST, (), r.index, r.hostname, text))
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
                    r.finished = RankEnd.DEAD
                    text = (f"rank {r.index} on {r.assignment.address} sent nothing for {silent:.0f}s "
                            f"(hung or stopped, e.g. SIGSTOP; TUNEPLAT_HEARTBEAT_TIMEOUT_S="
                            f"{self.hang_timeout_s:g}); its worker process is restarted{stacks}")
                    self._fail_group(g, text, None, Failure(HUNG, (), r.index, r.hostname, text))
                else:  # a chained rank whose runner never took it (stuck after its previous trial)
                    r.finished = RankEnd.LOST
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
                self.ledger.quarantine(r.assignment.address, uid=r.assignment.uid)
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
            text = (f"rank(s) {names} did not reach report() of iteration {iteration} within "
                    f"{self.report_timeout_s:g}s of rank(s) {sorted(arrived)} (a deadlock, or a rank far "
                    f"slower than the others; TUNEPLAT_REPORT_TIMEOUT_S sets this limit); their worker "
                    f"processes are restarted{stacks}")
            self._fail_group(g, text, None, Failure(HUNG, (), missing[0].index, missing[0].hostname, text))
            for r in missing:
                r.finished = RankEnd.DEAD
                if r.channel is not None:
                    self._drop_conn(r.channel)
                r.conn = None
                r.channel = None
                self.ledger.quarantine(r.assignment.address, uid=r.assignment.uid)
                self._restart_worker(r)
                self._forget_rank(r)
            self._maybe_end_group(g)

    def _lost_before_start(self, group: _Group, rank: _Rank) -> None:
        """``rank``'s worker or runner went away before any of its user code ran: the trial is placed again."""
        rank.finished = RankEnd.LOST
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
                r.finished = RankEnd.LOST
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
