"""The rank <-> tuner channel: the tuner's result port, TLS, mutual authentication and pre-authentication limits.

Every trial attempt has a 32-byte random token: a 16-byte *id* (it names the
trial's group) and a 16-byte *secret*. Neither half crosses the channel in the
clear as a password would: a rank proves that it knows the secret, and the tuner
proves it too, by challenge and response (HMAC-SHA256 over both sides' nonces)::

    rank  -> tuner   MAGIC + id + nonce_r                       (36 bytes)
    tuner -> rank    nonce_t + HMAC(secret, "tuner" nonce_r nonce_t)  (48 bytes)
    rank  -> tuner   HMAC(secret, "rank" nonce_t nonce_r)        (32 bytes)

Only after that exchange does either side unpickle a frame from the other (a
sniffed exchange gives nothing to replay, and a rank never unpickles bytes from
a process that merely listens at the tuner's address). When the Dask cluster
uses TLS, the channel does too, with the cluster's own certificates: the tuner
serves with the client's certificate, ranks connect with their worker's, and
each side verifies the other against the cluster's CA.

Before a peer has authenticated, the listener bounds what it can cost: frames
of at most :data:`PREAUTH_MAX_FRAME` bytes, :func:`auth_timeout_s` to finish
(TLS handshake included), at most :data:`MAX_PENDING` such connections *per
source* (the local socket is one source, each TCP peer address another: a new
connection sheds the oldest pending one of its own source, never another
source's, and never an authenticated connection), at most
:data:`ACCEPT_BATCH` accepts per turn of the loop (a flood of connections never
holds up the frames of authenticated ones), and running out of descriptors
(``EMFILE``) sheds the oldest pending connection or pauses accepting briefly
instead of failing the experiment.

The local socket admits only the tuner's own user: the kernel tells the peer's
uid (``SO_PEERCRED``) at ``accept``, and a connection of another uid is closed
before a byte of it is read. Its name is visible to every local user (in
``/proc/net/unix``) but connecting to it gains them nothing.

A token the tuner does not know (the trial ended) is answered with
:data:`REFUSED` before closing, so a rank tells "the tuner does not want me"
(it runs nothing) from "the connection was lost before authenticating" (it
tries again with backoff, within its start deadline: :func:`connect_retrying`).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import logging
import os
import selectors
import socket
import ssl
import struct
import time
from collections.abc import Callable
from typing import Any

from .._settings import env_seconds, env_str
from ._wire import max_report_bytes, sendall

__all__ = [
    "ACCEPT_BATCH",
    "MAX_PENDING",
    "OTHER_USER",
    "PREAUTH_MAX_FRAME",
    "REFUSED",
    "AuthError",
    "Conn",
    "HandshakeFailed",
    "Listener",
    "TokenRefused",
    "TunerUnreachable",
    "connect",
    "connect_local",
    "connect_retrying",
    "new_token",
    "parse_port_range",
    "token_id",
]

logger = logging.getLogger("tuneplat")

MAGIC = b"TPL1"
ID_BYTES = 16
SECRET_BYTES = 16
NONCE_BYTES = 16
#: the largest frame a peer may send before it has authenticated (the three handshake frames are 32-48 bytes)
PREAUTH_MAX_FRAME = 256
def auth_timeout_s() -> float:
    """Seconds a peer has to complete the TLS handshake and the token exchange (``TUNEPLAT_AUTH_TIMEOUT_S``)."""
    return env_seconds("TUNEPLAT_AUTH_TIMEOUT_S", 10)

#: connections from one source (the local socket, or one TCP peer address) that have not authenticated yet, at
#: most (the source's oldest is dropped for a new one)
MAX_PENDING = 64
#: connections that have not authenticated yet, from all sources together (the largest source sheds its oldest)
MAX_PENDING_TOTAL = 256
#: connections accepted per listening socket in one turn of the loop (then the loop serves the others)
ACCEPT_BATCH = 64
#: the tuner's answer to a token it does not know (the trial has ended or never was)
REFUSED = b"GONE"
#: the local socket's answer to a process of another user (sent without reading anything from it)
OTHER_USER = b"USER"
#: how long the listener stops accepting when the process is out of descriptors and nothing can be shed
_EMFILE_PAUSE_S = 0.5

_LEN = struct.Struct("!I")
#: one TLS read returns at most one record (16 KiB of data): a larger buffer is only a larger allocation
_TLS_READ = 1 << 16


class AuthError(ConnectionError):
    """The peer did not prove it holds the trial's token (or is not the tuner)."""


class TokenRefused(AuthError):
    """The tuner closed the connection instead of answering the token: the trial has ended (or never was)."""


class TunerUnreachable(ConnectionError):
    """Ranks cannot open a connection to the tuner's result port (firewall, wrong address, tunnel)."""


class HandshakeLost(ConnectionError):
    """The connection closed (or stalled) before authentication finished; trying again may succeed."""


class OtherUser(HandshakeLost):
    """The tuner's local socket serves only the tuner's own uid; a rank running as another user uses TCP."""


class HandshakeFailed(ConnectionError):
    """A rank could not authenticate with the tuner within its start deadline, trying again with backoff."""


def new_token() -> bytes:
    """A fresh token: 16 bytes of id, 16 bytes of secret."""
    import secrets

    return secrets.token_bytes(ID_BYTES + SECRET_BYTES)


def token_id(token: bytes) -> bytes:
    return token[:ID_BYTES]


def _mac(secret: bytes, label: bytes, a: bytes, b: bytes) -> bytes:
    return hmac.new(secret, label + a + b, hashlib.sha256).digest()


def parse_port_range(value: int | str | None, where: str = "tuner_port") -> tuple[int, int]:
    """``0``/None (any free port), ``8790``, or ``"8790-8799"`` -> (first, last)."""
    if value is None or value == "" or value == 0:
        return (0, 0)
    if isinstance(value, bool):
        raise ValueError(f"{where}={value!r} must be a port (8790) or a range ('8790-8799')")
    if isinstance(value, int):
        lo = hi = value
    else:
        text = str(value).strip()
        try:
            if "-" in text:
                a, b = text.split("-", 1)
                lo, hi = int(a), int(b)
            else:
                lo = hi = int(text)
        except ValueError:
            raise ValueError(f"{where}={value!r} must be a port (8790) or a range ('8790-8799')") from None
    if not (0 < lo <= hi < 65536):
        raise ValueError(f"{where}={value!r} must be a port in 1-65535 or a range 'first-last' with first <= last")
    return (lo, hi)


# ---------------------------------------------------------------------------------------------- the rank's side
def _send_raw(sock: socket.socket, data: bytes) -> None:
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the peer closed the connection during authentication")
        buf += chunk
    return bytes(buf)


def _recv_raw(sock: socket.socket) -> bytes:
    (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    if n > PREAUTH_MAX_FRAME:
        raise AuthError(f"the peer sent a {n}-byte frame during authentication")
    return _recv_exact(sock, n)


def connect_local(name: str | None, token: bytes, where: str = "", timeout: float = 10.0) -> socket.socket | None:
    """An authenticated connection to the tuner's local socket ``name``, or None where it cannot be reached."""
    near = _connect_local(name, timeout)
    return None if near is None else _authenticate(near, token, f"the tuner's local socket @{name}", where)


def _connect_local(name: str | None, timeout: float) -> socket.socket | None:
    """A connection to the tuner's local socket (see :class:`Listener`), or None where there is none to reach."""
    if not name or not hasattr(socket, "AF_UNIX"):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect("\0" + name)
        return sock
    except (TimeoutError, BlockingIOError) as exc:  # it is there, but its queue is full (a flood): try again
        sock.close()
        raise HandshakeLost(f"the tuner's local socket @{name} did not take the connection ({exc})") from None
    except OSError:  # another host, another network namespace, or no such socket: TCP it is
        sock.close()
        return None


def connect(address: tuple[str, int], token: bytes, ssl_context: ssl.SSLContext | None = None,
            timeout: float = 10.0, where: str = "", local: str | None = None) -> socket.socket:
    """Open an authenticated connection to the tuner (a rank's side); blocking, no timeout afterwards.

    ``local``: the name of the tuner's local socket; a rank in the tuner's
    network namespace (the same host) uses it, with no TLS and no TCP, and
    falls back to ``address`` where it cannot reach it.

    Raises:
        TunerUnreachable: no TCP (or TLS) connection within ``timeout``; the message names the address.
        AuthError: the peer is not the tuner that issued ``token``.
    """
    host, port = address
    near = _connect_local(local, timeout)
    if near is not None:
        try:
            return _authenticate(near, token, f"the tuner's local socket @{local}", where)
        except OtherUser:  # this rank runs as another user than the tuner: the TCP port (TLS) serves it
            pass
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise TunerUnreachable(
            f"cannot connect to the tuner at {host}:{port}{where}: {type(exc).__name__}: {exc}. The tuner's result "
            "port must be reachable from every Dask worker: open it in the firewall (RunConfig(tuner_port=...) or "
            "TUNEPLAT_TUNER_PORT fixes it to a port or range), or give the tuner an address the workers can reach "
            "(RunConfig(tuner_host=...) or TUNEPLAT_TUNER_HOST)") from None
    sock: socket.socket = raw
    try:
        if ssl_context is not None:
            try:
                sock = ssl_context.wrap_socket(raw, server_side=False)
            except ssl.SSLCertVerificationError as exc:
                raise AuthError(f"TLS handshake with the tuner at {host}:{port}{where} failed: {exc}") from None
            except (ssl.SSLError, OSError) as exc:  # reset, EOF, timeout: the connection was lost, not refused
                raise HandshakeLost(f"TLS handshake with the tuner at {host}:{port}{where} was cut short: "
                                    f"{type(exc).__name__}: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        sock.close()
        raise
    return _authenticate(sock, token, f"the tuner at {host}:{port}", where)


def connect_retrying(address: tuple[str, int], token: bytes, ssl_context: ssl.SSLContext | None = None,
                     where: str = "", local: str | None = None, within_s: float = 90.0,
                     timeout: float = 10.0) -> socket.socket:
    """:func:`connect`, tried again with backoff while the connection is lost before authenticating.

    A connection can be lost before it authenticated without the trial being
    over: the tuner shed it (too many unauthenticated peers from its source),
    its deadline passed on a loaded host, or the local socket's queue was
    full. The rank tries again (0.05 s, doubling to 2 s, with jitter) until
    ``within_s`` has passed (the tuner's start timeout: it gives up on the
    group then).

    Raises:
        TokenRefused: the tuner said the trial has ended: the rank runs nothing.
        AuthError: the peer is not the tuner that issued ``token``.
        TunerUnreachable: no TCP connection at all (see :func:`connect`).
        HandshakeFailed: no authenticated connection within ``within_s``; the message says what went wrong last.
    """
    import random

    deadline = time.monotonic() + within_s
    wait = 0.05
    tries = 0
    while True:
        tries += 1
        try:
            return connect(address, token, ssl_context, timeout=timeout, where=where, local=local)
        except (AuthError, TunerUnreachable):  # refused, an impostor, or no route: trying again changes nothing
            raise
        except (ConnectionError, OSError) as exc:  # HandshakeLost, a reset, a timeout, a full accept queue
            last: Exception = exc
        left = deadline - time.monotonic()
        if left <= 0:
            raise HandshakeFailed(
                f"could not authenticate with the tuner{where} in {tries} tries over {within_s:.0f}s: "
                f"{type(last).__name__}: {last}. Its connections were lost before authenticating: the tuner's "
                "host is overloaded or its port is flooded (TUNEPLAT_START_TIMEOUT_S bounds how long a rank "
                "tries)") from None
        time.sleep(min(left, wait * (0.5 + random.random())))  # noqa: S311 - jitter, not a secret
        wait = min(wait * 2, 2.0)


def _authenticate(sock: socket.socket, token: bytes, peer: str, where: str) -> socket.socket:
    """The token exchange of the module docstring, on an open connection (closed when it fails)."""
    import secrets

    try:
        nonce_r = secrets.token_bytes(NONCE_BYTES)
        tid, secret = token[:ID_BYTES], token[ID_BYTES:]
        try:
            _send_raw(sock, MAGIC + tid + nonce_r)
            sent: OSError | None = None
        except OSError as exc:  # closed already: what it said before closing (if anything) is still to be read
            sent = exc
        try:
            reply = _recv_raw(sock)
        except AuthError:
            raise
        except (ConnectionError, OSError) as exc:  # closed, reset or timed out: not an answer
            raise HandshakeLost(f"the connection to {peer} was lost before authenticating ({type(exc).__name__}: "
                                f"{exc})") from None
        if reply == REFUSED:
            raise TokenRefused(f"{peer} refused this rank's token: the trial has ended")
        if reply == OTHER_USER:
            raise OtherUser(f"{peer} takes connections from the tuner's own user only")
        if sent is not None:
            raise HandshakeLost(f"the connection to {peer} was lost before authenticating ({type(sent).__name__}: "
                                f"{sent})")
        nonce_t, proof = reply[:NONCE_BYTES], reply[NONCE_BYTES:]
        if len(nonce_t) != NONCE_BYTES or not hmac.compare_digest(proof, _mac(secret, b"tuner", nonce_r, nonce_t)):
            raise AuthError(f"the process answering as {peer} is not the tuner that started this trial "
                            "(it does not know the trial's token)")
        try:
            _send_raw(sock, _mac(secret, b"rank", nonce_t, nonce_r))
        except OSError as exc:
            raise HandshakeLost(f"the connection to {peer} was lost before authenticating ({type(exc).__name__}: "
                                f"{exc})") from None
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return sock


# ---------------------------------------------------------------------------------------------- the tuner's side
class Conn:
    """One accepted connection: its socket, its read buffer and how far authentication got."""

    __slots__ = ("sock", "buf", "tls", "handshaken", "state", "deadline", "secret", "nonce_r", "nonce_t",
                 "peer", "group", "rank", "opened", "source")

    def __init__(self, sock: socket.socket, tls: bool, source: str = "") -> None:
        self.sock = sock
        self.source = source  # "local", or the TCP peer's address: its pre-authentication budget
        self.buf = bytearray()
        self.tls = tls
        self.handshaken = not tls
        self.state = 0  # 0: expects the token id, 1: expects the rank's proof, 2: authenticated
        self.opened = time.monotonic()
        self.deadline = self.opened + auth_timeout_s()
        self.secret = b""
        self.nonce_r = b""
        self.nonce_t = b""
        self.peer: Any = None  # what ``lookup`` returned for the token id
        self.group: Any = None  # the executor's bookkeeping
        self.rank: Any = None

    @property
    def authenticated(self) -> bool:
        return self.state == 2


class _Closed(Exception):
    pass


class Listener:
    """The tuner's result port (see the module docstring).

    Args:
        selector: the executor's selector; the listener registers its socket
            (data ``"accept"``) and every accepted connection (data: its :class:`Conn`).
        host: the address to listen on.
        ports: ``(0, 0)`` for any free port, else the first and last port to try.
        ssl_context: a server-side context (TLS), or None (plain TCP).
        lookup: token id -> ``(secret, peer)`` of a live trial, or None.
    """

    def __init__(self, selector: selectors.BaseSelector, host: str, ports: tuple[int, int],
                 ssl_context: ssl.SSLContext | None, lookup: Callable[[bytes], tuple[bytes, Any] | None],
                 local: bool | None = None) -> None:
        self.selector = selector
        self.ssl_context = ssl_context
        self.lookup = lookup
        #: the largest frame an authenticated rank may send (``TUNEPLAT_MAX_REPORT_BYTES``; ranks check it first)
        self.max_frame = max_report_bytes()
        self.pending: dict[Conn, None] = {}  # unauthenticated connections, oldest first
        self._by_source: dict[str, dict[Conn, None]] = {}  # the same, per source, oldest first
        self.paused_until: float | None = None
        self.shed = 0
        #: connections to the local socket from another user, closed before reading from them
        self.refused_uid = 0
        self.uid = os.getuid() if hasattr(os, "getuid") else -1
        self.sock = _bind(host, ports)
        self.sock.setblocking(False)
        self.address: tuple[str, int] = (host, self.sock.getsockname()[1])
        selector.register(self.sock, selectors.EVENT_READ, "accept")
        #: the local socket's name (Linux abstract namespace: nothing on disk, gone with the process), or None
        self.local_name: str | None = None
        if local is None:
            local = local_socket_enabled()
        self.local_sock: socket.socket | None = _bind_local() if local else None
        if self.local_sock is not None:
            self.local_name = self.local_sock.getsockname()[1:].decode()
            self.local_sock.setblocking(False)
            selector.register(self.local_sock, selectors.EVENT_READ, "accept")

    # ---------------------------------------------------------------- accepting
    def accept(self) -> None:
        self._accept(self.sock, tcp=True)
        if self.local_sock is not None:
            self._accept(self.local_sock, tcp=False)

    def _accept(self, listening: socket.socket, tcp: bool) -> None:
        for _ in range(ACCEPT_BATCH):  # (more wait: the selector reports the socket ready again next turn)
            try:
                sock, addr = listening.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    if self.pending:  # free a descriptor held by someone who has not authenticated
                        self._shed_oldest()
                        continue
                    logger.warning("tuneplat: out of file descriptors accepting on the tuner's port %s:%d; "
                                   "pausing accepts for %.1fs", *self.address, _EMFILE_PAUSE_S)
                    self._pause()
                    return
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue
                logger.warning("tuneplat: accept() on the tuner's port failed: %s", exc)
                return
            if not tcp and not self._same_user(sock):
                self.refused_uid += 1
                try:  # not a byte of it is read; a rank of the user's running as another uid goes to TCP
                    sock.send(_LEN.pack(len(OTHER_USER)) + OTHER_USER)
                except OSError:
                    pass
                sock.close()
                continue
            tls = tcp and self.ssl_context is not None
            source = addr[0] if tcp and isinstance(addr, tuple) else "local"
            try:
                sock.setblocking(False)
                if tcp:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if tls:
                    assert self.ssl_context is not None
                    sock = self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except OSError:
                sock.close()
                continue
            mine = self._by_source.setdefault(source, {})
            if len(mine) >= MAX_PENDING:
                self._shed_oldest(mine)  # a source crowds out only itself
            elif len(self.pending) >= MAX_PENDING_TOTAL:
                self._shed_oldest(max(self._by_source.values(), key=len))
            conn = Conn(sock, tls, source)
            self.pending[conn] = None
            mine[conn] = None
            self.selector.register(sock, selectors.EVENT_READ, conn)

    def _same_user(self, sock: socket.socket) -> bool:
        """Whether the peer of a local-socket connection runs as the tuner's uid (``SO_PEERCRED``)."""
        peercred = getattr(socket, "SO_PEERCRED", None)
        if peercred is None:
            return True  # (no local socket without Linux)
        try:
            _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i")))
        except OSError:
            return False
        return uid == self.uid

    def _shed_oldest(self, among: dict[Conn, None] | None = None) -> None:
        oldest = next(iter(among if among else self.pending))
        self.shed += 1
        self.close_conn(oldest)

    def _listening(self) -> list[socket.socket]:
        return [s for s in (self.sock, self.local_sock) if s is not None]

    def _stop_listening(self) -> None:
        for listening in self._listening():
            try:
                self.selector.unregister(listening)
            except (KeyError, ValueError):
                pass

    def _pause(self) -> None:
        self._stop_listening()
        self.paused_until = time.monotonic() + _EMFILE_PAUSE_S

    # ---------------------------------------------------------------- deadlines
    def next_deadline(self) -> float | None:
        times = []
        if self.pending:
            times.append(next(iter(self.pending)).deadline)
        if self.paused_until is not None:
            times.append(self.paused_until)
        return min(times) if times else None

    def tick(self, now: float) -> None:
        """Drop peers past their authentication deadline; resume accepting after a pause."""
        while self.pending:
            oldest = next(iter(self.pending))
            if oldest.deadline > now:
                break
            self.close_conn(oldest)
        if self.paused_until is not None and now >= self.paused_until:
            self.paused_until = None
            for listening in self._listening():
                self.selector.register(listening, selectors.EVENT_READ, "accept")

    # ---------------------------------------------------------------- reading
    def read(self, conn: Conn) -> list[bytes] | None:
        """The authenticated frames that arrived on ``conn``; None when it is closed (EOF, garbage, bad token).

        A connection that returns None has been closed and unregistered here.
        """
        try:
            return self._read(conn)
        except _Closed:
            self.close_conn(conn)
            return None

    def _read(self, conn: Conn) -> list[bytes]:
        sock = conn.sock
        if not conn.handshaken:
            try:
                sock.do_handshake()  # type: ignore[attr-defined]
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return []
            except (ssl.SSLError, OSError):
                raise _Closed() from None
            conn.handshaken = True
        try:
            data = sock.recv(_TLS_READ if conn.tls else 1 << 20)
            if conn.tls:
                while sock.pending():  # type: ignore[attr-defined]  # bytes decrypted but not read yet
                    more = sock.recv(_TLS_READ)
                    if not more:
                        break
                    data += more
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return []
        except OSError:
            data = b""
        if not data:
            raise _Closed()
        buf = conn.buf
        buf += data
        frames: list[bytes] = []
        start = 0
        end = len(buf)
        while end - start >= _LEN.size:
            (n,) = _LEN.unpack_from(buf, start)
            if n > (self.max_frame if conn.state == 2 else PREAUTH_MAX_FRAME):
                raise _Closed()
            if end - start < _LEN.size + n:
                break
            frame = bytes(buf[start + _LEN.size:start + _LEN.size + n])
            start += _LEN.size + n
            if conn.state == 2:
                frames.append(frame)
            else:
                self._auth_step(conn, frame)
        if start:
            del buf[:start]
        if conn.state != 2 and len(buf) > PREAUTH_MAX_FRAME + _LEN.size:
            raise _Closed()
        return frames

    def _auth_step(self, conn: Conn, frame: bytes) -> None:
        import secrets

        if conn.state == 0:
            if len(frame) != len(MAGIC) + ID_BYTES + NONCE_BYTES or not frame.startswith(MAGIC):
                raise _Closed()
            found = self.lookup(frame[len(MAGIC):len(MAGIC) + ID_BYTES])
            if found is None:  # unknown or ended trial: say so (the rank then runs nothing), unpickle nothing
                try:
                    send_frame(conn.sock, REFUSED)
                except OSError:
                    pass
                raise _Closed()
            conn.secret, conn.peer = found
            conn.nonce_r = frame[len(MAGIC) + ID_BYTES:]
            conn.nonce_t = secrets.token_bytes(NONCE_BYTES)
            proof = _mac(conn.secret, b"tuner", conn.nonce_r, conn.nonce_t)
            try:
                send_frame(conn.sock, conn.nonce_t + proof)
            except OSError:
                raise _Closed() from None
            conn.state = 1
        elif conn.state == 1:
            if not hmac.compare_digest(frame, _mac(conn.secret, b"rank", conn.nonce_t, conn.nonce_r)):
                raise _Closed()
            conn.state = 2
            conn.secret = b""
            self._forget_pending(conn)

    # ---------------------------------------------------------------- closing
    def _forget_pending(self, conn: Conn) -> None:
        if self.pending.pop(conn, 0) is None:
            mine = self._by_source.get(conn.source)
            if mine is not None:
                mine.pop(conn, None)
                if not mine:
                    del self._by_source[conn.source]

    def close_conn(self, conn: Conn) -> None:
        self._forget_pending(conn)
        try:
            self.selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        try:
            conn.sock.close()
        except OSError:
            pass

    def close(self) -> None:
        for conn in list(self.pending):
            self.close_conn(conn)
        self._stop_listening()
        for listening in self._listening():
            listening.close()


def send_frame(sock: socket.socket, data: bytes) -> None:
    """Send one length-prefixed frame; works on blocking and non-blocking (also TLS) sockets."""

    sendall(sock, _LEN.pack(len(data)) + data)


def local_socket_enabled() -> bool:
    """``TUNEPLAT_LOCAL_SOCKET`` (1 by default): ranks on the tuner's host use its local socket."""
    raw = (env_str("TUNEPLAT_LOCAL_SOCKET") or "1").lower()
    if raw in ("0", "false", "no", "off"):
        return False
    if raw in ("", "1", "true", "yes", "on"):
        return True
    raise ValueError(f"TUNEPLAT_LOCAL_SOCKET={raw!r}: set it to 1 (the default: ranks on the tuner's host use a "
                     "local socket) or 0 (every rank connects over TCP, with TLS where the cluster has TLS)")


def _bind_local() -> socket.socket | None:
    """The tuner's local socket: a stream socket in Linux's abstract namespace under a random name.

    Ranks on the tuner's host (its network namespace) connect here instead of
    to the TCP port: no TLS records and no TCP stack per result. It is as
    private as TLS on loopback: what crosses it never leaves the kernel (no
    capture short of root), and a peer still has to prove the trial's token
    before anything is unpickled. Elsewhere (macOS, Windows) there is none.
    """
    import secrets
    import sys

    if not sys.platform.startswith("linux"):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind("\0tuneplat-" + secrets.token_hex(12))
        sock.listen(1024)  # (the kernel caps it at net.core.somaxconn)
    except OSError:
        sock.close()
        return None
    return sock


def _bind(host: str, ports: tuple[int, int]) -> socket.socket:
    lo, hi = ports
    if lo == 0:
        return socket.create_server((host, 0), backlog=128)
    last: OSError | None = None
    for port in range(lo, hi + 1):
        try:
            return socket.create_server((host, port), backlog=128)
        except OSError as exc:
            last = exc
    span = f"{lo}" if lo == hi else f"{lo}-{hi}"
    raise OSError(f"the tuner cannot listen on {host} port {span}: {last}. Free a port there, or choose another "
                  "with RunConfig(tuner_port=...) / TUNEPLAT_TUNER_PORT")
