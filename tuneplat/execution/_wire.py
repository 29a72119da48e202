"""Length-prefixed pickle frames between ranks and the tuner.

Frames are pickled only after both sides authenticated (see
:mod:`tuneplat.execution._channel`): neither side unpickles bytes from a peer
that has not proved it holds the trial's token.
"""

from __future__ import annotations

import pickle
import select
import socket
import ssl
import struct
import time
from typing import Any

__all__ = ["FrameReader", "ReportTooLarge", "max_report_bytes", "recv_msg", "send_msg", "sendall"]

_LEN = struct.Struct("!I")
#: the largest message (pickled) between a rank and the tuner, unless ``TUNEPLAT_MAX_REPORT_BYTES`` says otherwise
MAX_FRAME = 1 << 30
#: what a 4-byte length can say
_FRAME_CEILING = (1 << 32) - 1


class ReportTooLarge(ValueError):
    """A message to the tuner is over the frame limit; the message names its size, the limit and the setting."""


def max_report_bytes() -> int:
    """``TUNEPLAT_MAX_REPORT_BYTES``: the largest message a rank may send the tuner (1 GiB by default)."""
    import os

    raw = os.environ.get("TUNEPLAT_MAX_REPORT_BYTES", "").strip()
    if not raw:
        return MAX_FRAME
    try:
        value = int(float(raw))
    except ValueError:
        value = -1
    if not 0 < value <= _FRAME_CEILING:
        raise ValueError(f"TUNEPLAT_MAX_REPORT_BYTES={raw!r} must be a number of bytes from 1 to {_FRAME_CEILING} "
                         f"(default {MAX_FRAME}); unset it for the default")
    return value


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} GiB"
#: how long the tuner waits for a peer that does not read before giving up on a send
SEND_TIMEOUT_S = 30.0


def sendall(sock: socket.socket, data: bytes) -> None:
    """``sock.sendall(data)``, also on a non-blocking (the tuner's, possibly TLS) socket."""
    if sock.gettimeout() != 0.0:
        sock.sendall(data)
        return
    view = memoryview(data)
    deadline: float | None = None
    while view:
        try:
            view = view[sock.send(view):]
            continue
        except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            pass
        now = time.monotonic()
        deadline = deadline or now + SEND_TIMEOUT_S
        if now >= deadline:
            raise TimeoutError(f"the peer read nothing for {SEND_TIMEOUT_S:g}s")
        select.select([], [sock], [], deadline - now)


def _dumps(msg: Any) -> bytes:
    """Pickle ``msg``; anything from ``__main__`` goes by value (cloudpickle), as Dask does.

    The worker processes of tuneplat's embedded cluster do not run the user's
    script (see ``tuneplat/_mainguard.py``), so a class or function of
    ``__main__`` in a config or a result cannot be found there by name.
    """
    try:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError):
        data = b""
    if not data or b"__main__" in data:
        import cloudpickle

        data = cloudpickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    return data


def send_msg(sock: socket.socket, msg: Any, limit: int = MAX_FRAME) -> None:
    """Send one message; :class:`ReportTooLarge` (nothing sent) when it pickles to more than ``limit`` bytes."""
    data = _dumps(msg)
    if len(data) > limit:
        what = f"a {msg[0]!r} message" if isinstance(msg, tuple) and msg and isinstance(msg[0], str) else "a message"
        raise ReportTooLarge(
            f"{what} to the tuner is {_size(len(data))} ({len(data)} bytes) pickled, over the limit of "
            f"{_size(limit)} ({limit} bytes): report smaller metrics (save large objects in a checkpoint), or raise "
            "the limit with TUNEPLAT_MAX_REPORT_BYTES in the tuner's environment")
    sendall(sock, _LEN.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv_msg(sock: socket.socket) -> Any:
    """Blocking receive of one message; raises ConnectionError on EOF."""
    head = _recv_exact(sock, _LEN.size)
    if head is None:
        raise ConnectionError("the tuner closed the connection")
    (n,) = _LEN.unpack(head)
    body = _recv_exact(sock, n)
    if body is None:
        raise ConnectionError("the tuner closed the connection")
    return pickle.loads(body)


class FrameReader:
    """Incremental frame parser for the tuner's non-blocking reads."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.authenticated = False

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        frames = []
        while len(self._buf) >= _LEN.size:
            (n,) = _LEN.unpack_from(self._buf)
            if n > MAX_FRAME:
                raise ValueError(f"frame of {n} bytes is too large")
            if len(self._buf) < _LEN.size + n:
                break
            frames.append(bytes(self._buf[_LEN.size:_LEN.size + n]))
            del self._buf[:_LEN.size + n]
        return frames
