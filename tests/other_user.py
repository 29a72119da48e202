"""Run a function as another local user (uid 65534, ``nobody``) in a forked child, for the local-attacker tests.

The child is a fork of the test process that drops its groups, gid and uid before
it runs anything, so it can neither read the tuner's memory nor its files; it talks
back to the test through a pipe only. Needs root; :func:`why_not` says why not.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import struct
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

NOBODY = 65534


def why_not() -> str | None:
    """None when this process can become another user, else the reason (for ``pytest.skip``)."""
    if not hasattr(os, "fork") or not hasattr(os, "setuid"):
        return "needs os.fork and os.setuid (POSIX)"
    if os.geteuid() != 0:
        return "needs root to run a child as another user (uid 65534)"
    return None


class Child:
    """A forked child running as uid 65534; :meth:`finish` stops it and returns what it wrote (JSON)."""

    def __init__(self, pid: int, stop_w: int, out_r: int) -> None:
        self.pid, self._stop_w, self._out_r = pid, stop_w, out_r

    def finish(self, timeout: float = 120.0) -> Any:
        os.close(self._stop_w)  # the child's stop signal: its end of this pipe reads EOF
        data = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self._out_r], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            chunk = os.read(self._out_r, 1 << 16)
            if not chunk:
                break
            data += chunk
        os.close(self._out_r)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        return json.loads(data) if data else None


def start_as_nobody(fn: Callable[..., Any], *args: Any) -> Child:
    """Fork; the child becomes uid/gid 65534 and runs ``fn(stop_fd, *args)``, then writes its JSON return value.

    ``stop_fd`` turns readable (EOF) when the test calls :meth:`Child.finish`.
    """
    stop_r, stop_w = os.pipe()
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing but the function, then _exit (no atexit handlers, no pytest teardown)
        code = 0
        try:
            os.close(stop_w)
            os.close(out_r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            result = fn(stop_r, *args)
        except BaseException:  # noqa: BLE001 - reported to the test
            result = {"error": traceback.format_exc()}
            code = 1
        try:
            data = json.dumps(result).encode()
            while data:
                data = data[os.write(out_w, data):]
        finally:
            os._exit(code)
    os.close(stop_r)
    os.close(out_w)
    return Child(pid, stop_w, out_r)


@contextlib.contextmanager
def as_nobody(fn: Callable[..., Any], *args: Any) -> Iterator[Child]:
    child = start_as_nobody(fn, *args)
    try:
        yield child
    finally:
        if child._stop_w >= 0:
            with contextlib.suppress(OSError):
                os.kill(child.pid, 9)
            with contextlib.suppress(OSError):
                child.finish(timeout=5)


def _stopped(stop_fd: int, wait: float = 0.0) -> bool:
    return bool(select.select([stop_fd], [], [], wait)[0])


def tuneplat_local_sockets() -> list[str]:
    """The abstract socket names of tuners, as any local user reads them in ``/proc/net/unix``."""
    names = set()
    with open("/proc/net/unix") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 8 else ""
            if path.startswith("@tuneplat-"):
                names.add(path[1:])
    return sorted(names)


#: what the tuner's local socket sends another uid before closing (nothing of theirs is read)
OTHER_USER_NOTICE = struct.pack("!I", 4) + b"USER"
HALF_HANDSHAKE = struct.pack("!I", 36) + b"TPL1" + bytes(16)  # a token frame cut off after 20 of its 36 bytes


def hold_half_handshakes(stop_fd: int, tcp_port: int | None, n: int = 300, max_s: float = 180.0,
                         max_connections: int = 250000) -> dict[str, Any]:
    """Keep ``n`` connections to every tuner found (local sockets in /proc/net/unix, and ``tcp_port`` on
    127.0.0.1), each with a half-sent handshake, reopening those the tuner closes; until stopped, ``max_s``
    or ``max_connections`` opened. Returns counts."""
    socks: dict[socket.socket, str] = {}
    opened = answered = closed_by_tuner = 0
    start = time.monotonic()
    names: list[str] = []
    next_scan = 0.0
    while not _stopped(stop_fd) and time.monotonic() - start < max_s and opened < max_connections:
        now = time.monotonic()
        if now >= next_scan:
            names = tuneplat_local_sockets()
            next_scan = now + 0.5
        targets: list[tuple[str, Any]] = [("unix", name) for name in names]
        if tcp_port:
            targets.append(("tcp", tcp_port))
        if not targets:
            time.sleep(0.05)
            continue
        # most of the flood at the local sockets (where the tuner's own ranks connect), some at the TCP port
        per_local = max(1, (n - n // 5) // max(1, len(names))) if names else 0
        per_tcp = n - per_local * len(names)
        counts: dict[str, int] = {}
        for kind in socks.values():
            counts[kind] = counts.get(kind, 0) + 1
        for kind, where in targets:
            key = f"{kind}:{where}"
            per = per_local if kind == "unix" else per_tcp
            while counts.get(key, 0) < per and opened < max_connections:
                s: socket.socket | None = None
                try:
                    if kind == "unix":
                        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        s.settimeout(0.2)
                        s.connect("\0" + where)
                    else:
                        s = socket.create_connection(("127.0.0.1", where), timeout=0.2)
                    s.sendall(HALF_HANDSHAKE)
                    s.setblocking(False)
                except OSError:
                    if s is not None:
                        s.close()
                    break
                opened += 1
                socks[s] = key
                counts[key] = counts.get(key, 0) + 1
        ready = select.select(list(socks) + [stop_fd], [], [], 0.005)[0]
        for s in ready:
            if s == stop_fd:
                continue
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if data and data != OTHER_USER_NOTICE:
                answered += 1  # the tuner said something to an unauthenticated stranger (beyond "not your user")
            closed_by_tuner += 1
            socks.pop(s)
            s.close()
    for s in socks:
        s.close()
    return {"opened": opened, "answered": answered, "closed_by_tuner": closed_by_tuner,
            "seconds": time.monotonic() - start}
