"""What the Dask executor finds out about ranks: OOM kills, stacks, per-rank statistics, worker restarts."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from typing import Any

from .._settings import env_seconds
from ..train._lock_wait import held_locks, release_held
from ._channel import Conn
from ._dask_state import _DaskState, _Group, _Rank
from ._executor import (
    RankStats,
    StacksCaptured,
)
from ._host_oom import oom_evidence
from ._observe import rank_row
from ._stacks import RankRef
from ._stacks import capture as capture_stacks

__all__ = ["_Forensics", "_local_oom_evidence", "_process_gone", "_why"]

logger = logging.getLogger("tuneplat")


class _Forensics(_DaskState):
    """What the Dask executor finds out about ranks (a part of :class:`~tuneplat.execution._dask_executor.DaskTrialExecutor`)."""

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

    def _on_stats(self, conn: Conn, rank: _Rank, stats: dict[str, Any]) -> None:
        rank.stats = stats
        group = conn.group
        lock = stats.get("stale_lock")
        if group is not None and isinstance(lock, dict) and lock.get("path") != rank.stale_lock_warned:
            rank.stale_lock_warned = str(lock.get("path"))
            logger.warning(
                "tuneplat: rank %d of trial %s (pid %s on %s) has waited %ss for the lock file %s, which no process "
                "on that host holds: a process killed while it built or loaded that torch extension (DeepSpeed's ops "
                "are built on first use) left it behind, and every process that loads the extension waits for it "
                "forever. Delete that file on %s (the wait then ends by itself).", rank.index, group.trial_id,
                rank.pid, rank.hostname, lock.get("waited_s"), lock.get("path"), rank.hostname)
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
                # a torch build lock it holds would make every later load of that extension on this host wait
                # forever (train/_lock_wait.py): removed with the process, its build ended
                release_held(rank.pid, held_locks(rank.pid), f"its rank {rank.index} hung and its worker was ended")
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
    """Whether process ``pid`` of this host is gone or a zombie (its ``/proc`` state; else whether it answers)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False


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
    return _pid_gone(rank.pid)
