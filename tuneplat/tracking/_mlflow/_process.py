"""The uploader process: its frames, its child main, the tuner's handle and session, and the pool that keeps it."""

from __future__ import annotations

import atexit
import json
import logging
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass
from ._format import BATCH_WINDOW_S, STUCK_GRACE_S
from ._sqlite import _tune_sqlite
from ._uploader import _Uploader

__all__ = ["_LEN", "_POOL", "_Pool", "_Session", "_UploaderProcess", "_child_main", "_preimport_plots", "_read_frame", "_uploader_env", "_write_frame"]

logger = logging.getLogger("tuneplat")


_LEN = struct.Struct("!I")


def _write_frame(f: Any, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(_LEN.pack(len(data)) + data)
    f.flush()


def _read_frame(f: Any) -> Any:
    head = f.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError
    (n,) = _LEN.unpack(head)
    data = f.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)


def _child_main() -> None:
    """Entry point of the uploader process: frames of events on stdin, replies on (the original) stdout.

    The process outlives one ``fit()``: it imports MLflow at once (while the tuner
    starts its cluster), then serves one session after another — a
    ``("session", init)`` item, that session's events, its ``("close",)`` — until
    stdin ends. At the end of stdin it flushes what it has and leaves.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the tuner decides when logging ends (it closes our stdin)
    try:
        os.nice(10)  # the tuner's loop and the trials come first; logging catches up in idle time
    except OSError:
        pass
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # MLflow's own prints must not corrupt the reply frames
    sys.stdout = sys.stderr
    inp = os.fdopen(os.dup(0), "rb")
    lock = threading.Lock()

    def send(msg: tuple[Any, ...]) -> None:
        with lock:
            try:
                _write_frame(out, msg)
            except (BrokenPipeError, OSError):
                pass

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    inbox: queue.Queue[tuple[Any, ...]] = queue.Queue()

    def pump() -> None:
        try:
            while True:
                for item in _read_frame(inp):
                    inbox.put(item)
        except (EOFError, OSError, pickle.UnpicklingError):
            inbox.put(("exit",))  # the tuner is gone or done: flush what we have and leave

    threading.Thread(target=pump, name="tuneplat-mlflow-in", daemon=True).start()
    # the imports that the first session would otherwise wait for (~2-3 s)
    import mlflow
    import mlflow.entities
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    event.listen(Engine, "connect", _tune_sqlite)
    send(("ready",))
    # what drawing the plots at the end needs (~1-2 s of imports), loaded while the experiment runs
    threading.Thread(target=_preimport_plots, name="tuneplat-plots-import", daemon=True).start()
    while True:
        item = inbox.get()
        if item[0] == "exit":
            return
        if item[0] != "session":
            continue  # a stray item of a session the tuner gave up on
        init = item[1]
        up = _Uploader(init["tracking_uri"], init["experiment_name"], init["artifact_location"],
                       init.get("experiment_tags") or {}, send,
                       inbox=inbox, flush_timeout=init["flush_timeout"])
        up.run()
        if up.exiting:
            return


def _preimport_plots() -> None:
    try:
        import matplotlib.backends.backend_agg  # noqa: F401
        import optuna.importance  # noqa: F401
        import sklearn.ensemble  # noqa: F401

        from ...plot import _plots  # noqa: F401
    except Exception:  # noqa: BLE001 - only a head start: drawing imports them again and reports errors
        pass


def _uploader_env() -> dict[str, str]:
    """The environment the uploader process runs with: this process's, plus MLflow settings of its own.

    An uploader is reused only by a ``fit()`` that would give it the same
    environment (credentials, proxies and ``MLFLOW_*`` settings are read from it).
    """
    env = dict(os.environ)
    # MLflow's defaults retry one request for ~4 minutes; the uploader retries the whole
    # backlog itself, so keep each attempt short (in the uploader process only).
    env.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    env.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    env.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    # set_terminated would print two links and fetch the run again for every trial
    env.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    env.setdefault("MLFLOW_CONFIGURE_LOGGING", "false")  # no INFO chatter (DB migrations) on the terminal
    return env


class _UploaderProcess:
    """The tuner's handle on one uploader process; it serves one :class:`_Session` at a time."""

    def __init__(self, env: dict[str, str]) -> None:
        root = os.path.abspath(__file__)
        for _ in range(__name__.count(".") + 1):  # up to the folder holding the tuneplat package
            root = os.path.dirname(root)
        full = dict(env, PYTHONPATH=os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p))
        self.env = env
        self.owner = os.getpid()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from tuneplat.tracking._mlflow import _child_main; _child_main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=full,
            # its own session: a Ctrl-C (or a notebook kernel's interrupt/shutdown signal to the process group)
            # reaches the tuner only; the uploader flushes and leaves when the tuner closes its stdin or dies
            start_new_session=True)
        self.outq: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
        self.ready = threading.Event()
        self.session: _Session | None = None
        self.broken: str | None = None
        self.last_heard = time.monotonic()
        threading.Thread(target=self._writer, name="tuneplat-mlflow-out", daemon=True).start()
        threading.Thread(target=self._reader, name="tuneplat-mlflow-in", daemon=True).start()

    def usable(self) -> bool:
        """Alive, not in use by a session that went wrong, and started by this process (not a fork's parent)."""
        return self.broken is None and self.proc.poll() is None and self.owner == os.getpid()

    def start(self, init: dict[str, Any], ids_file: str | None) -> _Session:
        session = _Session(self, ids_file)
        self.session = session
        self.put(("session", init))
        return session

    def put(self, item: tuple[Any, ...] | None) -> None:
        self.outq.put(item)

    def _writer(self) -> None:
        stop = False
        while not stop:
            items = [self.outq.get()]
            window_end = time.monotonic() + BATCH_WINDOW_S / 2  # fewer, bigger frames: less GIL churn
            while items[-1] is not None and items[-1][0] != "close":  # a close is sent at once
                try:
                    items.append(self.outq.get(timeout=max(0.0, window_end - time.monotonic())))
                except queue.Empty:
                    break
            if None in items:
                stop = True
                items = [i for i in items if i is not None]
            try:
                if items:
                    _write_frame(self.proc.stdin, items)
            except (BrokenPipeError, OSError) as exc:
                self.broken = self.broken or f"the MLflow uploader process ended early ({exc})"
                return
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass

    def _reader(self) -> None:
        try:
            while True:
                msg = _read_frame(self.proc.stdout)
                self.last_heard = time.monotonic()
                session = self.session
                if msg[0] == "ready":
                    self.ready.set()
                elif session is None:
                    continue
                elif msg[0] == "created":
                    with session.created_lock:
                        session.created.append(msg[1:])
                    session.record(msg[1], msg[2])
                elif msg[0] == "done":
                    session.report = msg[1]
                    self.session = None
                    session.done.set()
        except (EOFError, OSError, pickle.UnpicklingError):
            self.broken = self.broken or f"the MLflow uploader process exited with code {self.proc.poll()}"
            session = self.session
            if session is not None:
                session.done.set()

    def kill(self) -> None:
        self.broken = self.broken or "stopped"
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop(self) -> bool:
        """Ask the uploader to end (without waiting); True if it is idle, so that waiting for it is cheap.

        The writer closes the uploader's stdin: an idle uploader leaves at once;
        a busy one finishes its backlog first (bounded by its flush timeout).
        """
        if self.owner != os.getpid() or self.proc.poll() is not None:
            return False
        self.put(None)
        if self.session is not None:
            return False
        if not self.ready.is_set():
            self.proc.terminate()  # still importing MLflow: nothing to lose
        return True

    def wait_end(self, deadline: float) -> None:
        try:
            self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class _Session:
    """One ``fit()``'s use of an uploader process: non-blocking ``put``, bounded ``close``."""

    def __init__(self, proc: _UploaderProcess, ids_file: str | None) -> None:
        self.proc = proc
        self.pid = proc.proc.pid
        self.created: list[tuple[str, str, str]] = []
        self.created_lock = threading.Lock()
        self.report: dict[str, Any] | None = None
        self.done = threading.Event()
        self.ids_file = ids_file

    @property
    def broken(self) -> str | None:
        return self.proc.broken

    def put(self, item: tuple[Any, ...]) -> None:
        self.proc.put(item)

    def record(self, key: str, run_id: str) -> None:
        """Run ids reach the journal on the loop thread, at its next hook; this file has them at once."""
        if self.ids_file is None:
            return
        try:
            with open(self.ids_file, "a", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "run_id": run_id}) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            logger.warning("tuneplat: cannot record MLflow run ids in %s: %s", self.ids_file, exc)

    def take_created(self) -> list[tuple[str, str, str]]:
        if not self.created:
            return []
        with self.created_lock:
            created, self.created = self.created, []
        return created

    def close(self, idle_timeout: float) -> None:
        """Ask for the final flush and wait for the uploader's report; then give the process back to the pool.

        The uploader itself gives up after ``idle_timeout`` seconds without
        progress and reports what is left. This side only guards against an
        uploader stuck inside one MLflow call (bounded by the HTTP timeouts it
        runs with) or still starting up: ``idle_timeout + STUCK_GRACE_S``
        without hearing from it. Such an uploader is killed, not reused.
        """
        proc = self.proc
        self.put(("close",))
        closed_at = time.monotonic()
        finished = False
        try:
            while not self.done.wait(timeout=0.5):
                if time.monotonic() - max(proc.last_heard, closed_at) > idle_timeout + STUCK_GRACE_S:
                    proc.broken = (f"the MLflow uploader sent nothing for {idle_timeout + STUCK_GRACE_S:.0f}s "
                                   "(stuck in a request to the tracking server?)")
                    proc.kill()
                    return
            finished = self.report is not None
        finally:
            if finished and proc.usable():
                _POOL.release(proc)
            elif proc.session is self:
                proc.put(None)  # interrupted while flushing: let it finish on its own, never reuse it
                proc.broken = proc.broken or "left while flushing"


class _Pool:
    """Idle uploader processes of this Python process, by their environment.

    Starting one costs ~3 s (Python and ``import mlflow``), so one is started
    when an :class:`MLflowCallback` is made (at ``fit()`` start, while the
    cluster starts) and kept for the next ``fit()``. A dead one is replaced.
    All are ended at interpreter exit.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: dict[tuple[tuple[str, str], ...], list[_UploaderProcess]] = {}
        self.every: list[_UploaderProcess] = []
        self.hooked = False

    def warm(self, env: dict[str, str]) -> None:
        """Make sure an idle uploader for ``env`` exists (start one if not)."""
        self.release(self.acquire(env))

    @staticmethod
    def _key(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
        # names starting with "_" are process-internal and change under us (importing mlflow in
        # the tuner sets _MLFLOW_TELEMETRY_SESSION_ID): they do not make another uploader necessary
        return tuple(sorted((k, v) for k, v in env.items() if not k.startswith("_")))

    def acquire(self, env: dict[str, str]) -> _UploaderProcess:
        key = self._key(env)
        with self.lock:
            idle = self.idle.get(key, [])
            while idle:
                proc = idle.pop()
                if proc.usable():
                    return proc
            # the environment changed: idle uploaders of another one are unlikely to serve again
            stale = [p for k, procs in self.idle.items() if k != key for p in procs]
            self.idle = {k: v for k, v in self.idle.items() if k == key}
            proc = _UploaderProcess(env)
            self.every = [p for p in self.every if p.proc.poll() is None] + [proc]
            if not self.hooked:
                atexit.register(self.shutdown)
                self.hooked = True
        for p in stale:
            p.stop()  # reaped by a later acquire() or at exit
        return proc

    def release(self, proc: _UploaderProcess) -> None:
        if not proc.usable():
            return
        with self.lock:
            idle = self.idle.setdefault(self._key(proc.env), [])
            if proc not in idle:
                idle.append(proc)

    def shutdown(self) -> None:
        """At interpreter exit: end the idle uploaders (waiting at most ~2 s); busy ones end on their own."""
        with self.lock:
            procs, self.every, self.idle = self.every, [], {}
        idle = [p for p in procs if p.stop()]
        deadline = time.monotonic() + 2.0
        for p in idle:
            p.wait_end(deadline)


_POOL = _Pool()
