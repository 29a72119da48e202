"""The experiment journal: append-only JSON lines, flushed and fsynced in groups."""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import time
from typing import Any

import cloudpickle

from .._settings import env_seconds
from .._signing import sign_field
from ._events import Event, schema_problem

__all__ = ["Journal", "JournalDiskFull", "JournalError", "pickle_hex", "read_journal", "to_jsonable"]

logger = logging.getLogger("tuneplat")


class JournalError(RuntimeError):
    """The journal is damaged somewhere other than its last line."""


def to_jsonable(value: Any) -> Any:
    """JSON-safe copy: numpy/torch scalars → numbers, non-finite floats → strings, others → repr."""
    if isinstance(value, float):
        if type(value).__name__ == "AutoGpuMemory":  # GPU_memory="auto" / "auto:10GiB" (execution/_gpu_memory.py)
            return repr(value).strip("'")
        return value if math.isfinite(value) else str(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return to_jsonable(item())
        except (ValueError, RuntimeError, TypeError):
            pass
    return repr(value)


def pickle_hex(obj: Any) -> str | None:
    """A pickled copy of a config that JSON cannot hold exactly (the journal's JSON copy serves the rest)."""
    if to_jsonable(obj) == obj:
        return None
    try:
        return sign_field(cloudpickle.dumps(obj))  # signed: restore unpickles only this user's own
    except Exception:  # noqa: BLE001 - only needed to restore exotic configs
        return None


def _loads_float(text: str) -> Any:
    return float(text)


class JournalDiskFull(OSError):
    """The journal's disk stayed full (``ENOSPC``) past ``TUNEPLAT_JOURNAL_FULL_S``: the experiment ends, resumable."""


#: errors that mean "no room now": retried with backoff, as space may come back (a filler removed, a quota raised)
_FULL = (errno.ENOSPC, errno.EDQUOT)


class Journal:
    """Append events; :meth:`sync` makes them durable (called by the tuner in groups).

    Lines wait in memory until a sync writes them (``os.write`` on an
    append-only descriptor, partial writes continued) and fsyncs. A full disk
    (``ENOSPC``/``EDQUOT``) is ridden out: what could not be written stays
    waiting, the user is told once, and the next syncs try again with backoff
    (0.25 s doubling to 8 s) while the experiment goes on. When no space came
    back within ``full_limit_s`` (``TUNEPLAT_JOURNAL_FULL_S``, 60 s by default)
    :meth:`sync` raises :class:`JournalDiskFull`, naming ``ENOSPC`` and the
    path; the file is cut back to its last whole line first, so it stays
    readable and ``Tuner.restore`` continues from it. The journal writes
    nothing more after that.
    """

    def __init__(self, path: str, sync_interval_s: float = 0.25, full_limit_s: float | None = None) -> None:
        self.path = path
        self.sync_interval_s = sync_interval_s
        self.full_limit_s = env_seconds("TUNEPLAT_JOURNAL_FULL_S", 60) if full_limit_s is None else full_limit_s
        _cut_torn_tail(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._whole = os.fstat(self._fd).st_size  # the file's size up to its last whole line
        self._lines: list[str] = []
        self._unwritten = b""  # encoded, not yet (fully) written: a full disk left it here
        self._dirty = False
        self._last_sync = time.monotonic()
        self._full_since: float | None = None  # the disk has been full since then (monotonic)
        self._retry_at = 0.0
        self._backoff = 0.25
        self._told = False
        self._gave_up: JournalDiskFull | None = None
        self.closed = False

    def append(self, event: Event | dict[str, Any]) -> None:
        """Append one event (typed, or its JSON object); its ``time`` is now unless it has one."""
        if isinstance(event, Event):
            event = event.to_json()
        event.setdefault("time", time.time())
        try:
            line = json.dumps(event)
        except (TypeError, ValueError):
            line = json.dumps(to_jsonable(event))
        self.append_line(line)

    def append_line(self, line: str) -> None:
        """Append an already-encoded JSON object (the hot path for results)."""
        if self._gave_up is None:
            self._lines.append(line)
            self._dirty = True

    @property
    def dirty(self) -> bool:
        """Events were appended since the last sync."""
        return self._dirty

    def sync_due(self) -> bool:
        """Events wait and the sync interval (or, while the disk is full, the backoff) has passed."""
        now = time.monotonic()
        if self._full_since is not None:
            return self._dirty and now >= self._retry_at
        return self._dirty and now - self._last_sync >= self.sync_interval_s

    def sync(self, force: bool = False) -> bool:
        """Write and fsync what waits (when due, or ``force``); True when everything appended is durable.

        Raises:
            JournalDiskFull: the disk has been full for longer than ``full_limit_s``.
        """
        if self._gave_up is not None:
            raise self._gave_up
        if not self._dirty:
            return True
        now = time.monotonic()
        if not force and now - self._last_sync < self.sync_interval_s:
            return False
        if not force and self._full_since is not None and now < self._retry_at:
            return False
        if self._lines:
            self._unwritten += ("\n".join(self._lines) + "\n").encode("utf-8")
            self._lines.clear()
        try:
            while self._unwritten:
                n = os.write(self._fd, self._unwritten)
                self._unwritten = self._unwritten[n:]
            os.fsync(self._fd)
        except OSError as exc:
            if exc.errno not in _FULL:
                raise
            self._disk_full(exc, now)
            return False
        self._whole = os.fstat(self._fd).st_size
        if self._full_since is not None:
            logger.warning("tuneplat: space came back for the journal %s after %.1fs; it is complete again",
                           self.path, now - self._full_since)
        self._full_since = None
        self._backoff = 0.25
        self._dirty = False
        self._last_sync = now
        return True

    def _disk_full(self, exc: OSError, now: float) -> None:
        name = errno.errorcode.get(exc.errno or 0, "ENOSPC")
        if self._full_since is None:
            self._full_since = now
        waited = now - self._full_since
        if waited >= self.full_limit_s:
            self._give_up(name, waited)
        if not self._told:
            self._told = True
            logger.warning("tuneplat: no space left on the device of the journal %s (%s); the experiment goes on "
                           "and writing is tried again with backoff for up to %.0fs (TUNEPLAT_JOURNAL_FULL_S), "
                           "then the experiment ends, resumable with Tuner.restore", self.path, name,
                           self.full_limit_s)
        self._retry_at = now + self._backoff
        self._backoff = min(self._backoff * 2, 8.0)

    def _give_up(self, name: str, waited: float) -> None:
        try:  # a line cut short by the full disk: the file ends with whole lines only (readable, restorable)
            if os.fstat(self._fd).st_size > self._whole:
                os.ftruncate(self._fd, self._whole)
        except OSError:
            pass
        self._lines.clear()
        self._unwritten = b""
        self._dirty = False
        self._gave_up = JournalDiskFull(
            errno.ENOSPC,
            f"{name}: no space left on the device of the experiment journal {self.path} for {waited:.0f}s "
            "(TUNEPLAT_JOURNAL_FULL_S sets this limit). The journal holds every event up to the disk filling; "
            "free space there, then continue with Tuner.restore(<experiment folder>, trainable) or "
            "`tuneplat resume <experiment folder>`", self.path)
        raise self._gave_up

    def close(self) -> None:
        """Write what waits and close; a full disk is waited for (with backoff) up to ``full_limit_s``.

        Raises:
            JournalDiskFull: the disk stayed full past ``full_limit_s`` (the file ends with whole lines).
        """
        if self.closed:
            return
        try:
            while self._gave_up is None and not self.sync(force=True):
                time.sleep(max(0.0, self._retry_at - time.monotonic()))  # backoff on a full disk: nothing else to do
        finally:
            self.closed = True
            os.close(self._fd)


def _cut_torn_tail(path: str) -> None:
    """Drop a last line torn by a crash, so that appending after it keeps every line whole."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return
    if size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(max(0, size - (1 << 20)))
        tail = f.read()
        if tail.endswith(b"\n"):
            return
        cut = tail.rfind(b"\n")
        keep = size - len(tail) + cut + 1 if cut >= 0 else 0
        logging.getLogger("tuneplat").warning(
            "tuneplat: %s ended with a torn line (%d bytes, written when the tuner died); it is dropped",
            path, size - keep)
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())


def read_journal(path: str) -> list[dict[str, Any]]:
    """All events; a torn (unparseable) last line is dropped, damage elsewhere raises.

    Raises:
        JournalError: naming the file and line of a damaged line that is not the last, or of a line that
            parses but is not an event of the expected shape (wherever it is).
    """
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    events = []
    # The file normally ends with "\n", so the final element is "".
    last = len(lines) - 1
    while last >= 0 and lines[last] == "":
        last -= 1
    for i, line in enumerate(lines[: last + 1]):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == last:
                break  # torn by a crash in the middle of a write: the event never happened
            raise JournalError(
                f"{path}:{i + 1}: damaged journal line ({exc.msg}); only the last line may be torn. "
                "Restore the file from a backup or cut it before this line to restore up to here."
            ) from None
        problem = schema_problem(event)
        if problem is not None:
            raise JournalError(
                f"{path}:{i + 1}: damaged journal line: {problem}. Restore the file from a backup, or cut it "
                "before this line to restore up to here.")
        events.append(event)
    return events
