"""The tuner's result port against hostile peers: real sockets, a real selector, real TLS.

Each test runs the listener's side the way the executor does (select, accept,
read, tick) in a thread of its own, and plays the peer from the test.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import selectors
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from tuneplat.execution import _channel
from tuneplat.execution._channel import AuthError, Listener, TunerUnreachable, connect, new_token, token_id
from tuneplat.execution._wire import recv_msg, send_msg


class Tuner:
    """The listener plus a loop thread that records the authenticated frames per connection."""

    def __init__(self, ssl_context=None, ports=(0, 0)) -> None:
        self.selector = selectors.DefaultSelector()
        self.tokens: dict[bytes, bytes] = {}
        self.listener = Listener(self.selector, "127.0.0.1", ports, ssl_context, self._lookup)
        self.frames: list[object] = []
        self.authenticated = 0
        self._stop = False
        self._wake_r, self._wake_w = socket.socketpair()
        self.selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _lookup(self, tid: bytes):
        secret = self.tokens.get(tid)
        return None if secret is None else (secret, "group")

    def issue(self) -> bytes:
        token = new_token()
        self.tokens[token_id(token)] = token[16:]
        return token

    def _run(self) -> None:
        while not self._stop:
            deadline = self.listener.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            for key, _ in self.selector.select(timeout):
                if key.data == "accept":
                    self.listener.accept()
                elif key.data == "wake":
                    self._wake_r.recv(64)
                else:
                    frames = self.listener.read(key.data)
                    if frames is not None and key.data.authenticated and key.data.group is None:
                        key.data.group = key.data.peer
                        self.authenticated += 1
                    for f in frames or ():
                        msg = pickle.loads(f)
                        self.frames.append(msg)
                        send_msg(key.data.sock, ("echo", msg))
            self.listener.tick(time.monotonic())

    def call(self, fn):
        """Run ``fn`` on the loop's thread state (read-only peeks are fine from here: the GIL orders them)."""
        return fn()

    @property
    def address(self):
        return self.listener.address

    def close(self) -> None:
        self._stop = True
        self._wake_w.send(b"x")
        self.thread.join(10)
        self.listener.close()
        self.selector.close()
        self._wake_r.close()
        self._wake_w.close()


@pytest.fixture
def tuner():
    t = Tuner()
    yield t
    t.close()


def _closed_by_peer(sock: socket.socket, timeout: float = 30.0) -> bool:
    """True when the other side closed the connection (EOF or reset) before ``timeout``."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def test_a_rank_with_the_token_authenticates_and_talks(tuner):
    token = tuner.issue()
    sock = connect(tuner.address, token)
    send_msg(sock, ("hello", 0))
    assert recv_msg(sock) == ("echo", ("hello", 0))
    sock.close()
    assert tuner.authenticated == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the local socket is Linux's abstract namespace")
def test_the_local_socket_needs_the_token_too_and_leaves_nothing_on_disk(tuner):
    """Ranks on the tuner's host use its local socket (no TLS, no TCP); a peer there still proves the token."""
    from tuneplat.execution._channel import connect_local

    name = tuner.listener.local_name
    assert name and name.startswith("tuneplat-")
    with pytest.raises(AuthError):
        connect_local(name, new_token())  # an id the tuner never issued
    token = tuner.issue()
    with pytest.raises(AuthError, match="not the tuner"):
        connect_local(name, token[:16] + bytes(16))
    assert tuner.authenticated == 0 and tuner.frames == []
    sock = connect(("127.0.0.1", 1), token, local=name)  # a dead TCP address: the local socket answers
    assert sock.family == socket.AF_UNIX
    send_msg(sock, ("hello", 0))
    assert recv_msg(sock) == ("echo", ("hello", 0))
    sock.close()
    assert tuner.authenticated == 1
    assert connect_local("tuneplat-no-such-socket", token) is None  # elsewhere: TCP (and TLS) as before


def test_oversize_frame_before_authentication_is_dropped_without_buffering(tuner):
    sock = socket.create_connection(tuner.address)
    # claims a 1 GiB frame, then sends 4 MiB of it: the listener drops the peer after the 4-byte length
    sock.sendall(struct.pack("!I", 1 << 30))
    try:
        sock.sendall(b"\0" * (4 << 20))
    except (ConnectionResetError, BrokenPipeError):
        pass
    assert _closed_by_peer(sock)
    assert not tuner.listener.pending
    sock.close()


def test_garbage_is_dropped(tuner):
    sock = socket.create_connection(tuner.address)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # "GET " read as a length: far above the pre-auth limit
    assert _closed_by_peer(sock)
    sock.close()
    sock = socket.create_connection(tuner.address)
    sock.sendall(struct.pack("!I", 8) + b"\x80\x04garbag")  # token-sized but not a token frame
    assert _closed_by_peer(sock)
    sock.close()
    assert tuner.frames == []


def test_unknown_token_and_wrong_secret_are_refused(tuner):
    with pytest.raises(AuthError):
        connect(tuner.address, new_token())  # an id the tuner never issued
    token = tuner.issue()
    forged = token[:16] + bytes(16)  # the right id, a wrong secret
    with pytest.raises(AuthError, match="not the tuner"):
        connect(tuner.address, forged)
    assert tuner.authenticated == 0
    sock = connect(tuner.address, token)  # the real secret still works
    send_msg(sock, "ping")
    assert recv_msg(sock) == ("echo", "ping")
    sock.close()
    assert tuner.authenticated == 1


def test_a_peer_that_does_not_authenticate_in_time_is_dropped(monkeypatch):
    monkeypatch.setenv("TUNEPLAT_AUTH_TIMEOUT_S", "0.2")
    t = Tuner()
    try:
        sock = socket.create_connection(t.address)
        sock.sendall(struct.pack("!I", 36) + b"TPL1")  # starts a token frame and stalls
        assert _closed_by_peer(sock, timeout=30)
        sock.close()
        assert not t.listener.pending
    finally:
        t.close()


def test_idle_flood_is_capped_and_a_real_rank_still_gets_in(tuner):
    n = _channel.MAX_PENDING * 3 + 50  # ~250 idle peers from another process
    flood = subprocess.Popen(
        [sys.executable, "-c",
         "import socket, sys\n"
         f"socks = [socket.create_connection(('127.0.0.1', {tuner.address[1]})) for _ in range({n})]\n"
         "print('up', flush=True)\n"
         "sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert flood.stdout.readline().strip() == "up"
        token = tuner.issue()
        sock = connect(tuner.address, token)  # accepted, sheds the oldest idle peer
        send_msg(sock, ("hello", 0))
        assert recv_msg(sock) == ("echo", ("hello", 0))
        sock.close()
        assert len(tuner.listener.pending) <= _channel.MAX_PENDING
        assert tuner.listener.shed >= n - _channel.MAX_PENDING
    finally:
        flood.stdin.close()
        flood.wait(30)


def test_out_of_descriptors_sheds_pending_peers_and_keeps_serving(tuner):
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    flood = subprocess.Popen(
        [sys.executable, "-c",
         "import socket, sys\n"
         f"socks = [socket.create_connection(('127.0.0.1', {tuner.address[1]})) for _ in range(40)]\n"
         "print('up', flush=True)\n"
         "sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert flood.stdout.readline().strip() == "up"
        used = len(os.listdir("/proc/self/fd")) - 1  # (listdir's own descriptor is closed again)
        # room for the test's own socket only: the tuner's accept() meets EMFILE and must shed an idle peer
        resource.setrlimit(resource.RLIMIT_NOFILE, (used + 1, hard))
        try:
            token = tuner.issue()
            sock = connect(tuner.address, token)
            send_msg(sock, ("hello", 1))
            assert recv_msg(sock) == ("echo", ("hello", 1))
            sock.close()
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert tuner.thread.is_alive()
        assert tuner.listener.shed > 0
    finally:
        flood.stdin.close()
        flood.wait(30)


def test_a_rank_never_unpickles_from_an_impostor(tmp_path):
    """Something listening at the tuner's address without the trial's secret gets no pickle through."""
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    server = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def impostor() -> None:
        conn, _ = server.accept()
        conn.recv(4096)
        payload = pickle.dumps(Evil())
        conn.sendall(struct.pack("!I", 48) + os.urandom(48))  # a guessed "proof"
        conn.sendall(struct.pack("!I", len(payload)) + payload)
        done.wait(10)
        conn.close()

    th = threading.Thread(target=impostor, daemon=True)
    th.start()
    try:
        with pytest.raises(AuthError, match="not the tuner"):
            connect(server.getsockname(), new_token())
    finally:
        done.set()
        th.join(10)
        server.close()
    assert not marker.exists()


def test_unreachable_tuner_fails_fast_naming_the_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    with pytest.raises(TunerUnreachable, match=rf"127\.0\.0\.1:{port}.*TUNEPLAT_TUNER_HOST"):
        connect(("127.0.0.1", port), new_token(), timeout=5, where=" from rank 0 on host-a")


def test_tls_channel_with_the_cluster_certificates():
    from distributed.security import Security

    sec = Security.temporary()
    server_ctx = sec.get_listen_args("client")["ssl_context"]
    t = Tuner(ssl_context=server_ctx)
    try:
        token = t.issue()
        ctx = sec.get_connection_args("worker")["ssl_context"]
        sock = connect(t.address, token, ctx)
        assert sock.version() in ("TLSv1.2", "TLSv1.3")
        send_msg(sock, ("hello", 2))
        assert recv_msg(sock) == ("echo", ("hello", 2))
        sock.close()
        # a peer with certificates from another CA is refused in the handshake, before any token is sent
        other = Security.temporary().get_connection_args("worker")["ssl_context"]
        with pytest.raises((AuthError, ConnectionError)):
            connect(t.address, t.issue(), other)
        # a plain-TCP peer never gets past the TLS handshake
        plain = socket.create_connection(t.address)
        plain.sendall(struct.pack("!I", 36) + b"TPL1" + token[:16] + bytes(16))
        assert _closed_by_peer(plain)
        plain.close()
        assert t.authenticated == 1
    finally:
        t.close()


def test_port_ranges():
    assert _channel.parse_port_range(None) == (0, 0)
    assert _channel.parse_port_range("8790-8799") == (8790, 8799)
    assert _channel.parse_port_range(8790) == (8790, 8790)
    for bad in ("80-70", "x", 70000, True):
        with pytest.raises(ValueError, match="tuner_port"):
            _channel.parse_port_range(bad)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        with pytest.raises(OSError, match=f"port {taken}.*tuner_port"):
            Listener(selectors.DefaultSelector(), "127.0.0.1", (taken, taken), None, lambda tid: None)


# ---------------------------------------------------------------- other local users, lost handshakes (issue 33)
def _full_handshake_as_stranger(stop_fd: int, name: str, tid_hex: str) -> dict:
    """As uid 65534: connect to the local socket and send a complete token frame with a live trial's id."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect("\0" + name)
    try:
        s.sendall(struct.pack("!I", 36) + b"TPL1" + bytes.fromhex(tid_hex) + bytes(16))
    except OSError:
        pass
    got = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    s.close()
    return {"got": got.hex()}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the local socket is Linux's abstract namespace")
def test_another_user_on_the_local_socket_is_closed_before_a_byte_is_read(tuner):
    """Another uid connecting to the tuner's local socket (its name is public in /proc/net/unix) gets nothing:
    not even the tuner's half of the handshake for a live trial's id; the tuner reads nothing from it."""
    import other_user

    reason = other_user.why_not()
    if reason:
        pytest.skip(reason)
    token = tuner.issue()
    name = tuner.listener.local_name
    assert name in other_user.tuneplat_local_sockets()  # what a local attacker sees
    child = other_user.start_as_nobody(_full_handshake_as_stranger, name, token[:16].hex())
    out = child.finish(timeout=60)
    # closed with only "not your user" (before: the tuner's nonce and proof for the live trial came back)
    assert out == {"got": other_user.OTHER_USER_NOTICE.hex()}, out
    assert tuner.listener.refused_uid >= 1
    assert tuner.authenticated == 0 and not tuner.listener.pending
    # a rank of the user's own that runs as another uid is sent to the TCP port, and gets in there
    child = other_user.start_as_nobody(_rank_as_other_uid, tuner.address[1], name, token.hex())
    out = child.finish(timeout=60)
    assert out == {"family": "AF_INET", "echo": "from another uid"}, out
    assert tuner.authenticated == 1
    sock = connect(("127.0.0.1", 1), token, local=name)  # the tuner's own user still gets in on the local socket
    send_msg(sock, "ping")
    assert recv_msg(sock) == ("echo", "ping")
    sock.close()


def _rank_as_other_uid(stop_fd: int, port: int, name: str, token_hex: str) -> dict:
    sock = connect(("127.0.0.1", port), bytes.fromhex(token_hex), local=name)
    try:
        send_msg(sock, "from another uid")
        return {"family": sock.family.name, "echo": recv_msg(sock)[1]}
    finally:
        sock.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the local socket is Linux's abstract namespace")
def test_a_flood_from_one_source_never_sheds_another_sources_handshake(tuner):
    """Unauthenticated peers have a budget per source: a TCP flood sheds its own, never a local rank's
    handshake under way (before: the oldest pending connection of any source was shed)."""
    token = tuner.issue()
    near = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    near.settimeout(30)
    near.connect("\0" + tuner.listener.local_name)
    nonce_r = os.urandom(16)
    near.sendall(struct.pack("!I", 36) + b"TPL1" + token[:16] + nonce_r)  # step 1 of 3, then a flood
    n = _channel.MAX_PENDING * 3
    flood = subprocess.Popen(
        [sys.executable, "-c",
         "import socket, struct, sys\n"
         f"socks = [socket.create_connection(('127.0.0.1', {tuner.address[1]})) for _ in range({n})]\n"
         "[s.sendall(struct.pack('!I', 36) + b'TPL1') for s in socks]\n"
         "print('up', flush=True)\n"
         "sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert flood.stdout.readline().strip() == "up"
        head = near.recv(4)
        assert len(head) == 4
        reply = b""
        while len(reply) < struct.unpack("!I", head)[0]:
            reply += near.recv(64)
        nonce_t = reply[:16]
        near.sendall(struct.pack("!I", 32) + _channel._mac(token[16:], b"rank", nonce_t, nonce_r))
        send_msg(near, "still here")
        assert recv_msg(near) == ("echo", "still here")
        assert tuner.listener.shed >= n - _channel.MAX_PENDING  # the flood shed its own
    finally:
        near.close()
        flood.stdin.close()
        flood.wait(30)


class _Flaky:
    """A tuner stand-in that closes the first ``drop`` connections before answering, then plays the tuner."""

    def __init__(self, token: bytes, drop: int, refuse: bool = False) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.token, self.drop, self.refuse = token, drop, refuse
        self.accepted = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.settimeout(10)
                first = conn.recv(40)
                if self.refuse:
                    conn.sendall(struct.pack("!I", 4) + _channel.REFUSED)
                    continue
                if self.accepted <= self.drop:
                    continue  # lost before authenticating
                nonce_r, nonce_t = first[-16:], os.urandom(16)
                proof = _channel._mac(self.token[16:], b"tuner", nonce_r, nonce_t)
                conn.sendall(struct.pack("!I", 48) + nonce_t + proof)
                conn.recv(64)
                send_msg(conn, "welcome")
                return

    def close(self) -> None:
        # (shutdown wakes the thread blocked in accept(); close alone does not, on Linux)
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        self.thread.join(10)
        assert not self.thread.is_alive(), "the stand-in tuner's thread did not end"


def test_a_rank_whose_handshake_is_lost_tries_again_and_a_refusal_is_final():
    token = new_token()
    flaky = _Flaky(token, drop=3)
    try:
        sock = _channel.connect_retrying(flaky.server.getsockname(), token, within_s=60)
        assert recv_msg(sock) == "welcome"  # (before: the first lost connection ended the rank, "not started")
        sock.close()
        assert flaky.accepted == 4
    finally:
        flaky.close()
    refusing = _Flaky(token, drop=0, refuse=True)
    try:
        with pytest.raises(_channel.TokenRefused, match="trial has ended"):
            _channel.connect_retrying(refusing.server.getsockname(), token, within_s=60)
        assert refusing.accepted == 1  # the tuner's answer is final: no second try
    finally:
        refusing.close()
    never = _Flaky(token, drop=10**6)
    try:
        with pytest.raises(_channel.HandshakeFailed, match="could not authenticate with the tuner from rank 3"):
            _channel.connect_retrying(never.server.getsockname(), token, within_s=0.5, where=" from rank 3")
    finally:
        never.close()
