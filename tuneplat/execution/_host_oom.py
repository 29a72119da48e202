"""A rank killed by the host's out-of-memory killer: the kernel's evidence, read on the rank's host.

A rank whose process the kernel's OOM killer ends dies with SIGKILL and says
nothing: to the tuner it is a lost connection. Two things on the rank's host can
tell it was the OOM killer (Linux only):

* the **memory cgroup's count of OOM kills**: cgroup v2 ``memory.events``
  (``oom_kill N``, counted in the victim's cgroup and its ancestors), cgroup v1
  ``memory.oom_control`` (``oom_kill N``, kernel >= 4.13). The rank reads its
  cgroup (``/proc/self/cgroup`` and the cgroup mounts) and the count when it
  starts (:func:`oom_baseline`, sent to the tuner with its hello); after the
  rank's process died, the count is read again (:func:`oom_evidence`). A count
  that rose while the rank ran, in the cgroup the rank's process was in, and a
  rank that died without a word: the OOM killer ended it.
* the **kernel log** (``/dev/kmsg``, when readable): a line ``Killed process
  <pid> (...)`` for the rank's pid, logged after the rank started.

Nothing is guessed: with neither readable (another OS, no cgroup mount, no
permission), the death stays "the process died". This module imports only the
standard library.
"""

from __future__ import annotations

import errno
import os
import re
import sys
import time
from typing import Any

__all__ = ["OOM_KILLED", "oom_baseline", "oom_evidence"]

#: the words every host-OOM message carries (``core/_oom.py`` recognises them as an out-of-memory failure)
OOM_KILLED = "killed by the kernel's OOM killer"

_UNLIMITED = 2**60  # cgroup v1 reports "no limit" as a huge number (PAGE_COUNTER_MAX pages)
_KMSG_SLACK_S = 5.0  # kernel log timestamps and CLOCK_MONOTONIC may differ a little


def _memory_cgroup(pid: int | str = "self") -> tuple[str, str] | None:
    """``(directory, "v1" | "v2")`` of the memory cgroup of process ``pid``, or None when it cannot be found."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
            lines = f.read().splitlines()
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            mounts = f.read().splitlines()
    except OSError:
        return None
    v1_path = v2_path = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2_path = parts[2]
        elif "memory" in parts[1].split(","):
            v1_path = parts[2]
    for line in mounts:
        # mountinfo: id parent major:minor root mount-point options [optional...] - fstype source super-options
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or not tail:
            continue
        root, point, fstype = fields[3], _unescape(fields[4]), tail[0]
        if fstype == "cgroup" and v1_path is not None and "memory" in (tail[2] if len(tail) > 2 else "").split(","):
            found = _under(point, root, v1_path)
            if found and os.path.exists(os.path.join(found, "memory.oom_control")):
                return found, "v1"
        if fstype == "cgroup2" and v2_path is not None:
            found = _under(point, root, v2_path)
            if found and os.path.exists(os.path.join(found, "memory.events")):
                return found, "v2"
    return None


def _unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def _under(point: str, root: str, path: str) -> str | None:
    """The directory of cgroup ``path`` under a mount of cgroup ``root`` at ``point`` (None: not under it)."""
    root = root.rstrip("/")
    if root and not (path == root or path.startswith(root + "/")):
        return None
    rest = path[len(root):].lstrip("/")
    return os.path.join(point, rest) if rest else point


def _oom_kills(directory: str, version: str) -> int | None:
    name = "memory.events" if version == "v2" else "memory.oom_control"
    try:
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        return None
    return None


def _limit(directory: str, version: str, top: str | None = None) -> int | None:
    """The memory limit that holds for the cgroup: its own, or the smallest of its ancestors' (None: no limit)."""
    name = "memory.max" if version == "v2" else "memory.limit_in_bytes"
    best: int | None = None
    here = directory
    for _ in range(64):
        try:
            with open(os.path.join(here, name), encoding="utf-8") as f:
                text = f.read().strip()
            value = None if text == "max" else int(text)
        except (OSError, ValueError):
            break  # (the cgroup root has no limit file)
        if value is not None and value < _UNLIMITED:
            best = value if best is None else min(best, value)
        parent = os.path.dirname(here)
        if parent == here or (top is not None and here == top):
            break
        here = parent
    return best


def oom_baseline(pid: int | str = "self") -> dict[str, Any] | None:
    """What a rank records when it starts: its memory cgroup, that cgroup's OOM-kill count and limit, the time.

    Returns None off Linux or where no memory cgroup with an OOM-kill count is readable.

    Example:
        >>> base = oom_baseline()
        >>> base is None or sorted(base) == ["at", "cgroup", "limit", "oom_kills", "version"]
        True
    """
    if not sys.platform.startswith("linux"):
        return None
    found = _memory_cgroup(pid)
    if found is None:
        return None
    directory, version = found
    count = _oom_kills(directory, version)
    if count is None:
        return None
    return {"cgroup": directory, "version": version, "oom_kills": count, "limit": _limit(directory, version),
            "at": time.clock_gettime(time.CLOCK_MONOTONIC)}


def _kmsg_kill(pid: int, since: float) -> str | None:
    """The kernel log's ``Killed process <pid> ...`` line logged after ``since`` (CLOCK_MONOTONIC seconds)."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    pattern = re.compile(rf"Killed process {pid} \(")
    found = None
    try:
        for _ in range(100_000):  # (the ring buffer holds a few thousand records)
            try:
                record = os.read(fd, 8192).decode("utf-8", "replace")
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records were overwritten while reading: go on with the next
                    continue
                break  # EAGAIN: the end
            if not record:
                break
            head, _, text = record.partition(";")
            if not pattern.search(text):
                continue
            try:
                stamp = int(head.split(",")[2]) / 1e6
            except (IndexError, ValueError):
                continue
            if stamp >= since - _KMSG_SLACK_S:
                found = text.strip().splitlines()[0]
    finally:
        os.close(fd)
    return found


def _size(n: float) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= factor:
            return f"{n / factor:.3g} {unit}"
    return f"{n:.0f} bytes"


def oom_evidence(baseline: dict[str, Any] | None, pid: int | None) -> str | None:
    """After a rank's process died without a word: why the kernel's OOM killer ended it, or None (no evidence).

    Read on the rank's host (the tuner's own, or through a Dask worker on that host).

    Args:
        baseline: what :func:`oom_baseline` recorded when the rank started (None: only the kernel log is read).
        pid: the rank's process id on its host.

    Returns:
        ``"killed by the kernel's OOM killer (...evidence...)"``, or None.
    """
    if not sys.platform.startswith("linux"):
        return None
    notes: list[str] = []
    limit = None
    if baseline:
        count = _oom_kills(str(baseline.get("cgroup")), str(baseline.get("version")))
        before = baseline.get("oom_kills")
        if count is not None and isinstance(before, int) and count > before:
            notes.append(f"memory cgroup {baseline['cgroup']}: oom_kill {before} -> {count}")
        limit = baseline.get("limit")
    line = None
    if pid:
        since = float(baseline["at"]) if baseline and isinstance(baseline.get("at"), (int, float)) else 0.0
        line = _kmsg_kill(int(pid), since)
        if line:
            notes.append(f"kernel log: {line[:200]!r}")
    if not notes:
        return None
    where = f"; memory limit {_size(limit)}" if isinstance(limit, (int, float)) else ""
    return f"{OOM_KILLED}{where} ({'; '.join(notes)})"
