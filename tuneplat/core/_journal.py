"""The experiment journal: append-only JSON lines, flushed and fsynced in groups."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from typing import Any

import cloudpickle

from ._events import Event, schema_problem

__all__ = ["Journal", "JournalError", "pickle_hex", "read_journal", "to_jsonable"]


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
        return cloudpickle.dumps(obj).hex()
    except Exception:  # noqa: BLE001 - only needed to restore exotic configs
        return None


def _loads_float(text: str) -> Any:
    return float(text)


class Journal:
    """Append events; :meth:`sync` makes them durable (called by the tuner in groups)."""

    def __init__(self, path: str, sync_interval_s: float = 0.25) -> None:
        self.path = path
        self.sync_interval_s = sync_interval_s
        _cut_torn_tail(path)
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the experiment
        self._dirty = False
        self._last_sync = time.monotonic()

    def append(self, event: Event | dict[str, Any]) -> None:
        """Append one event (typed, or its JSON object); its ``time`` is now unless it has one."""
        if isinstance(event, Event):
            event = event.to_json()
        event.setdefault("time", time.time())
        try:
            line = json.dumps(event)
        except (TypeError, ValueError):
            line = json.dumps(to_jsonable(event))
        self._f.write(line + "\n")
        self._dirty = True

    def append_line(self, line: str) -> None:
        """Append an already-encoded JSON object (the hot path for results)."""
        self._f.write(line + "\n")
        self._dirty = True

    @property
    def dirty(self) -> bool:
        """Events were appended since the last sync."""
        return self._dirty

    def sync_due(self) -> bool:
        """Events wait and the sync interval has passed."""
        return self._dirty and time.monotonic() - self._last_sync >= self.sync_interval_s

    def sync(self, force: bool = False) -> None:
        if not self._dirty:
            return
        now = time.monotonic()
        if force or now - self._last_sync >= self.sync_interval_s:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._dirty = False
            self._last_sync = now

    def close(self) -> None:
        if not self._f.closed:
            self.sync(force=True)
            self._f.close()


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
