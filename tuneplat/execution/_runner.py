"""The Dask task that runs one rank of a trial on a worker."""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from .._settings import env_seconds
from ..train._backend import Backend, RankGroup
from ..train._session import Heartbeat, RankSpec, Session, StopTrial, TrialAborted, TrialRequeued, _set_session
from . import _protocol as proto
from . import _stacks
from ._channel import TokenRefused, connect_retrying
from ._failure import exception_types
from ._host_oom import oom_baseline
from ._rank_group import TorchBackend, backend_of, open_rank_group, reset_framework_state, set_framework_ranks
from ._shipping import Shipped
from ._trial_io import apply_trial_io

__all__ = ["run_rank"]

logger = logging.getLogger("tuneplat")

_ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
             "ACCELERATE_TORCH_DEVICE", "ACCELERATE_USE_CPU")  # (Hugging Face Accelerate's: TorchBackend sets them)
#: the thread pools of numeric libraries, sized to the CPUs a rank holds (Ray sets them from the actor's num_cpus)
_THREAD_KEYS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _call(trainable: Callable[..., Any], config: dict[str, Any]) -> Any:
    try:
        params = inspect.signature(trainable).parameters
    except (TypeError, ValueError):
        return trainable(config)
    if len(params) == 0:
        return trainable()
    return trainable(config)


def _idle_wait_s() -> float:
    """How long an idle runner waits for the tuner's next trial before it returns (a safety net: the tuner answers
    "next" or "bye" in the same pass of its loop that handled "done")."""
    return env_seconds("TUNEPLAT_RUNNER_IDLE_S", 60)


def run_rank(trainable: Callable[..., Any], spec: RankSpec, *deps: Any) -> str:
    """Run ``trainable(config)`` as rank ``spec.rank``; outcome goes to the tuner over TCP.

    ``deps`` are the trainable's objects already on the cluster (``tune.with_parameters``),
    passed as Dask futures so that Dask fetches them to this worker.

    A single-rank trial that ends healthily (it returned, was stopped, or raised an
    ``Exception``) offers this task to the tuner for the next trial of the same
    experiment (Ray's ``reuse_actors``): the runner waits on the same connection for
    ``("next", RankSpec)``, which it runs at once, or ``("bye",)``, and returns.
    Multi-rank trials never chain: torch's process-wide state stays one trial's.
    """
    from tuneplat.execution._frames_guard import install as guard_frames

    guard_frames()  # CPython 3.11: Dask's profiler's sys._current_frames() could deadlock the process (gh-106883)
    make = _Maker(trainable, deps, chain=spec.world_size == 1)
    try:
        sock = connect_tuner(spec.tuner_addr, spec.token, spec.channel_tls, f" from rank {spec.rank} of trial "
                             f"{spec.trial_id} on {socket.gethostname()} ({spec.host})", local=spec.tuner_local,
                             within_s=spec.connect_within_s)
    except TokenRefused:  # the tuner ended this trial before the rank connected: it runs nothing
        return "not started"
    # (its memory cgroup's OOM-kill count now: if the kernel's OOM killer ends this process, the tuner can tell)
    proto.send(sock, proto.Hello(spec.rank, os.getpid(), socket.gethostname(), oom_baseline()))
    try:  # the tuner says "go" (or refuses a rank it no longer wants) before any user code runs
        go: proto.Message = proto.recv_from_tuner(sock)
    except (ConnectionError, OSError):
        go = proto.Abort("the tuner dropped this rank")
    except proto.ProtocolError as exc:  # never acted on: this rank runs nothing
        logger.warning("tuneplat: rank %s of trial %s: %s", spec.rank, spec.trial_id, exc)
        go = proto.Abort(str(exc))
    if not isinstance(go, proto.Go):
        sock.close()
        return "not started"
    heartbeat = Heartbeat(sock)
    try:
        outcome, idle = _run_trial(make, spec, sock, heartbeat, may_chain=make.chainable)
        while idle:
            nxt = _wait_next(sock)
            if nxt is None:
                break
            spec = nxt
            try:
                with heartbeat.send_lock:
                    # the tuner learns that user code runs (not lost before start), and the OOM-kill count now
                    proto.send(sock, proto.Running(oom_baseline()))
            except OSError:
                break
            outcome, idle = _run_trial(make, spec, sock, heartbeat, may_chain=True)
    finally:
        heartbeat.close()
        try:
            sock.close()
        except OSError:
            pass
    return outcome


def connect_timeout_s() -> float:
    """How long a rank tries to open its connection to the tuner (then it fails naming the address)."""
    return env_seconds("TUNEPLAT_CONNECT_TIMEOUT_S", 10)


#: the TLS context made from a worker's Security (one per worker process: making one costs milliseconds)
_CONTEXTS: dict[int, tuple[Any, Any]] = {}


def channel_client_context(tls: bool, worker: Any = None) -> Any:
    """The TLS context a rank connects with: its Dask worker's own certificates (None for plain TCP)."""
    if not tls:
        return None
    try:
        from distributed import get_worker

        security = (worker or get_worker()).security
    except ValueError:
        security = None
    cached = _CONTEXTS.get(id(security))
    if cached is not None and cached[0] is security:
        return cached[1]
    ctx = security.get_connection_args("worker").get("ssl_context") if security is not None else None
    if ctx is not None:
        _CONTEXTS.clear()
        _CONTEXTS[id(security)] = (security, ctx)
    if ctx is None:
        raise RuntimeError("the tuner's result port uses TLS (the cluster's scheduler is tls://) but this Dask "
                           "worker has no TLS certificate: start it with the cluster's --tls-ca-file, --tls-cert "
                           "and --tls-key")
    return ctx


def connect_tuner(addr: tuple[str, int], token: bytes, tls: bool, where: str = "",
                  local: str | None = None, within_s: float = 90.0) -> socket.socket:
    """An authenticated connection to the tuner: its local socket when this rank is on the tuner's host
    (``local``), else TCP (TLS with this worker's certificates when ``tls``); a connection lost before it
    authenticated is tried again with backoff for ``within_s`` (:func:`~._channel.connect_retrying`)."""
    return connect_retrying(tuple(addr), token, channel_client_context(tls), where=where,  # type: ignore[arg-type]
                            local=local, within_s=within_s, timeout=connect_timeout_s())


class _Maker:
    """Makes the rank's trainable from what Dask delivered: unpickled here, after the rank's environment is set.

    Each call is a fresh copy, as a new Dask task would get: state that a trial
    leaves in a trainable pickled by value (a function defined in a notebook or
    ``__main__``, with the globals it uses) never reaches the next trial chained
    in this task. Functions pickled by reference (importable modules) come back as
    the same object, as they would in a new task.
    """

    def __init__(self, trainable: Any, deps: tuple[Any, ...], chain: bool) -> None:
        self._trainable = trainable
        self._deps = deps
        self._blob: bytes | None = None
        self._used = False
        self.chainable = False
        if isinstance(trainable, Shipped):
            self._blob = trainable.blob
            self.chainable = chain
        elif chain:  # sent as it is (see _shipping.ship): copies for chained trials, if cloudpickle can
            try:
                import cloudpickle

                self._blob = cloudpickle.dumps(trainable)
                self.chainable = True
            except Exception:  # noqa: BLE001 - e.g. an object only Dask's own serializers handle: no chaining
                logger.debug("tuneplat: cannot copy the trainable for chained trials", exc_info=True)

    def __call__(self) -> Callable[..., Any]:
        if self._blob is not None and (self._used or isinstance(self._trainable, Shipped)):
            import cloudpickle

            fresh = cloudpickle.loads(self._blob)
        else:
            fresh = self._trainable
        self._used = True
        return fresh._tuneplat_resolve(*self._deps) if self._deps else fresh  # type: ignore[no-any-return]


def _others_wait() -> bool:
    """Whether other Dask tasks wait for this worker (another Tuner's ranks, the user's own work).

    Then the runner returns after its trial instead of taking the next one, so a
    chain never holds a worker longer than a trial of its own task would.
    """
    try:
        from distributed import get_worker

        state = get_worker().state
        return bool(len(state.ready) or len(state.constrained))
    except Exception:  # noqa: BLE001 - not in a Dask worker, or its internals changed: chain as usual
        return False


def _wait_next(sock: socket.socket) -> RankSpec | None:
    """An idle runner: the tuner's next trial for this task, or None ("bye", the tuner gone, or no answer)."""
    try:
        sock.settimeout(_idle_wait_s())
        msg = proto.recv_from_tuner(sock)
        sock.settimeout(None)
    except (ConnectionError, OSError):  # socket.timeout is an OSError
        return None
    except proto.ProtocolError as exc:  # never acted on: this runner leaves
        logger.warning("tuneplat: an idle runner: %s", exc)
        return None
    if not isinstance(msg, proto.Next):
        return None
    return msg.spec  # type: ignore[no-any-return]


def _run_trial(make: Callable[[], Callable[..., Any]], spec: RankSpec, sock: socket.socket,
               heartbeat: Heartbeat, may_chain: bool) -> tuple[str, bool]:
    """One trial on this rank: user code between "go" (or "next") and "done"/"error".

    The trainable is unpickled (``make()``) once the rank's ``RANK``, ``LOCAL_RANK``,
    ``NODE_RANK`` and ``WORLD_SIZE`` are set: modules its globals import see them.

    Returns the outcome and whether this runner now waits for the tuner's next trial
    (it told the tuner so in its "done"/"error" message).
    """
    saved_env = {k: os.environ.get(k) for k in _ENV_KEYS + _THREAD_KEYS}
    os.environ.update(
        RANK=str(spec.rank), WORLD_SIZE=str(spec.world_size), LOCAL_RANK=str(spec.local_rank),
        LOCAL_WORLD_SIZE=str(spec.local_world_size), NODE_RANK=str(spec.node_rank),
    )
    torch_threads = _use_cpus(spec.cpus)
    session = Session(spec, sock, heartbeat.send_lock)
    _set_session(session)
    heartbeat.attach(session)
    if spec.elastic:
        _watch_retirement(session)
    group: RankGroup | None = None
    outcome = "done"
    chainable = may_chain and spec.world_size == 1
    idle = False
    backend: Backend = TorchBackend()
    backend_config: Any = None
    _stacks.register(spec.trial_id, spec.rank)
    _stacks.arm(spec.trial_id, spec.rank, spec.trial_dir)
    try:
        set_framework_ranks(spec)
        trainable = make()
        backend, backend_config = backend_of(trainable)
        if spec.world_size > 1:
            session.monitor.state = "rendezvous"
        group = open_rank_group(session, float(getattr(backend_config, "timeout_s", None) or spec.pg_timeout_s),
                                backend)
        session.backend_group = group
        backend.on_start(group, backend_config)
        on_abort = getattr(backend, "on_abort", None)
        if callable(on_abort):  # (the heartbeat runs it if the tuner hangs up while user code runs)
            session.on_tuner_lost.append(lambda: on_abort(group, backend_config))
        backend.on_training_start(group, backend_config)
        session.monitor.state = "training"
        with apply_trial_io(spec.trial_io, spec.trial_dir), _children_fork(), _train_func_context(backend_config):
            _call(trainable, spec.config)
        chainable = chainable and not _others_wait()
        idle = _send(session, proto.Done(chainable)) and chainable
    except StopTrial:
        chainable = chainable and not _others_wait()
        idle = _send(session, proto.Done(chainable)) and chainable
    except TrialAborted:
        outcome = "aborted"
    except TrialRequeued as exc:  # the tuner sends this trial back to its queue (see Session.lease)
        outcome = "aborted"
        _send(session, proto.Requeue(str(exc)))
    except BaseException as exc:  # noqa: BLE001 - every failure goes to the tuner
        outcome = "error"
        # a Python exception leaves the process healthy; SystemExit, KeyboardInterrupt & co. end the task
        chainable = chainable and isinstance(exc, Exception) and not _others_wait()
        idle = _send(session, proto.Error(f"{type(exc).__name__}: {exc}", traceback.format_exc(), chainable,
                                               exception_types(exc))) and chainable
    finally:
        for cleanup in session.cleanups:
            try:
                cleanup()
            except Exception:  # noqa: BLE001 - the trial's outcome is decided; keep the worker healthy
                logger.warning("tuneplat: a trial's cleanup failed", exc_info=True)
        heartbeat.detach(session)
        _stacks.unregister(spec.trial_id, spec.rank)
        _stacks.disarm(spec.trial_id, spec.rank)
        reset_framework_state()
        if group is not None:
            group.failed = outcome != "done"
            try:
                backend.on_shutdown(group, backend_config)
            except Exception:  # noqa: BLE001 - the trial's outcome is decided; keep the worker healthy
                logger.warning("tuneplat: trial %s rank %d: the %s backend's shutdown failed", spec.trial_id,
                               spec.rank, type(backend).__name__, exc_info=True)
            group.close()
            group = None
        session.backend_group = None
        _set_session(None)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if torch_threads is not None:
            _torch_threads(torch_threads)
    return outcome, idle


def _use_cpus(cpus: float) -> int | None:
    """A rank holding ``cpus`` CPUs (2 or more) sizes its numeric libraries' thread pools to them, as Ray does.

    The Dask nanny starts worker processes with ``OMP_NUM_THREADS=1`` (and MKL's,
    OpenBLAS's): a rank holding k CPU slots of its host (its worker process runs it,
    the others are kept free for it) gets k threads instead, in the environment (for
    libraries imported from now on) and in torch (if already imported). Returns
    torch's thread count before, to restore after the trial (None: nothing to restore).
    """
    k = int(cpus + 1e-9)
    if k < 2:
        return None
    os.environ.update({key: str(k) for key in _THREAD_KEYS})
    if "torch" not in sys.modules:
        return 0  # torch imported during the trial reads OMP_NUM_THREADS: reset it after (see _torch_threads)
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(k)
    return before


def _torch_threads(before: int) -> None:
    """Torch's thread count back to what it was before the trial (0: as the restored environment says)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        n = before or int(os.environ.get("OMP_NUM_THREADS") or 0)
        if n > 0:
            torch.set_num_threads(n)
    except (ValueError, RuntimeError, AttributeError):  # a half-imported torch, or a value it refuses
        logger.debug("tuneplat: torch's thread count not restored", exc_info=True)


def _train_func_context(backend_config: Any) -> Any:
    """The backend config's ``train_func_context()`` (Ray's hook), or nothing."""
    make = getattr(backend_config, "train_func_context", None)
    return make() if callable(make) else contextlib.nullcontext()




def _watch_retirement(session: Session) -> None:
    """Tell the tuner once when this rank's Dask worker starts to close (an elastic group's preemption notice).

    ``client.retire_workers``, a cluster scaling down and SIGTERM to ``dask worker``
    all set the worker's status to ``closing``; the worker then waits for its
    running tasks (up to its close timeout) before the process ends, which is
    the grace in which the group checkpoints (``docs/elastic.md``).
    """
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):  # not in a Dask worker (a test calling run_rank directly)
        return

    def watch() -> None:
        # how often the rank looks whether its Dask worker is closing (a local attribute read)
        poll_s = env_seconds("TUNEPLAT_RETIRE_POLL_S", 0.1)
        while not session.finished.wait(poll_s):
            status = getattr(getattr(worker, "status", None), "name", "")
            if status in ("closing", "closing_gracefully", "closed"):
                logger.info("tuneplat: trial %s rank %d: Dask worker %s is %s; telling the tuner",
                            session.spec.trial_id, session.spec.rank, worker.address, status)
                try:
                    session.send(proto.Preempting(f"Dask worker {worker.address} is {status}"))
                except OSError:
                    pass
                return

    threading.Thread(target=watch, daemon=True,
                     name=f"tuneplat-retire-watch-{session.spec.trial_id}-r{session.spec.rank}").start()


@contextlib.contextmanager
def _children_fork() -> Iterator[None]:
    """Processes the trial starts (``DataLoader(num_workers=...)``'s workers) start with ``fork``, as in Ray's ranks.

    Dask starts its worker processes with ``spawn``, and a spawned process keeps
    ``spawn`` as its default: a loader worker would then import torch again (seconds
    per epoch) and could not unpickle a ``Dataset`` class defined in the user's
    script. Ray's worker processes have the platform's default, ``fork`` on Linux.
    Other platforms keep theirs (``fork`` is unsafe on macOS). On Pythons with CPython's
    fork bug gh-112275 each fork first waits for the thread-state lock (:mod:`._fork_guard`).
    """
    import multiprocessing

    from tuneplat.execution._fork_guard import install as guard_forks

    guard_forks()  # forks wait out a held thread-state lock (CPython gh-112275: the child would hang)
    before = multiprocessing.get_start_method(allow_none=True)
    if not sys.platform.startswith("linux") or before == "fork":
        yield
        return
    multiprocessing.set_start_method("fork", force=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(before, force=True)


def _send(session: Session, msg: proto.Message) -> bool:
    try:
        session.send(msg)
    except OSError:
        return False
    return True
