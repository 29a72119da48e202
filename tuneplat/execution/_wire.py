"""Length-prefixed pickle frames between ranks and the tuner.

The first frame on a connection is the trial's secret token (raw bytes, not
pickled); the tuner unpickles nothing from a peer that has not presented a
token it issued.
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any

__all__ = ["FrameReader", "recv_msg", "send_msg", "send_token"]

_LEN = struct.Struct("!I")
MAX_FRAME = 1 << 30


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


def send_msg(sock: socket.socket, msg: Any) -> None:
    data = _dumps(msg)
    sock.sendall(_LEN.pack(len(data)) + data)


def send_token(sock: socket.socket, token: bytes) -> None:
    sock.sendall(_LEN.pack(len(token)) + token)


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
