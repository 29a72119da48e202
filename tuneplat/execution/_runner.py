"""The Dask task that runs one rank of a trial on a worker."""

from __future__ import annotations

import contextlib
import gc
import inspect
import logging
import os
import socket
import sys
import threading
import traceback
import weakref
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from .._settings import env_seconds
from ..train._backend import Backend, RankGroup
from ..train._session import Heartbeat, RankSpec, Session, StopTrial, TrialAborted, TrialRequeued, _set_session
from . import _protocol as proto
from . import _stacks
from ._channel import TokenRefused, connect_retrying
from ._failure import exception_types
from ._host_oom import oom_baseline
from ._shipping import Shipped
from ._trial_io import apply_trial_io

__all__ = ["run_rank"]

logger = logging.getLogger("tuneplat")

_ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")
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


def _torch_settings(torch_config: Any, spec: RankSpec) -> tuple[str, float]:
    """Backend and process-group timeout: ``TorchTrainer(torch_config=...)`` overrides the spec's."""
    backend = getattr(torch_config, "backend", None) or spec.backend
    timeout_s = getattr(torch_config, "timeout_s", None) or spec.pg_timeout_s
    return backend, float(timeout_s)


def _backend_of(trainable: Callable[..., Any]) -> tuple[Backend, Any]:
    """The trainer's backend (``_tuneplat_backend_config``: a BackendConfig) and its config; torch's by default."""
    config = getattr(trainable, "_tuneplat_backend_config", None)
    cls = getattr(config, "backend_cls", None) if config is not None else None
    return (cls or TorchBackend)(), config


def _listening_socket(host: str) -> socket.socket:
    """A socket listening on ``host`` only (port chosen by the OS), for the TCPStore.

    ``TCPStore(host, 0, is_master=True)`` binds every interface whatever
    ``host`` says (pytorch issue 173909); handing it a socket we bound
    ourselves (``master_listen_fd``) keeps the store on the worker's address.
    """
    family, kind, proto, _, addr = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.bind(addr)
        sock.listen(512)
    except OSError:
        sock.close()
        raise
    return sock


def master_store(host: str, world_size: int, timeout: timedelta) -> Any:
    import torch.distributed as dist

    try:
        listener = _listening_socket(host)
    except OSError as exc:
        logger.warning("tuneplat: cannot listen on %s for the rendezvous store (%s); letting torch bind it", host, exc)
        return dist.TCPStore(host, 0, world_size, is_master=True, timeout=timeout, wait_for_workers=False)
    port = listener.getsockname()[1]
    try:
        store = dist.TCPStore(host, port, world_size, is_master=True, timeout=timeout, wait_for_workers=False,
                              master_listen_fd=listener.fileno())
    except Exception:
        listener.close()
        raise
    listener.detach()  # the store owns (and closes) the descriptor now
    return store


def _open_rank_group(session: Any, timeout_s: float) -> RankGroup:
    """The rendezvous of ``session``'s group: rank 0 opens a TCPStore on its host and the tuner tells the others.

    A single-rank group has no store. (torch's TCPStore is the store: a
    key-value server with a timeout on every read; no process group is made.)
    """
    spec = session.spec
    if spec.world_size <= 1:
        return RankGroup(spec, timeout_s=timeout_s)
    timeout = timedelta(seconds=timeout_s)
    if spec.rank == 0:
        store = master_store(spec.host, spec.world_size, timeout)
        session.send(proto.Rendezvous(spec.host, store.port))
        return RankGroup(spec, store, (spec.host, int(store.port)), timeout_s)
    msg = proto.recv_from_tuner(session.sock)
    while isinstance(msg, proto.Go):  # pragma: no cover - defensive
        msg = proto.recv_from_tuner(session.sock)
    if not isinstance(msg, proto.Rendezvous):
        raise TrialAborted(f"expected the rendezvous address, got {msg!r}")
    import torch.distributed as dist

    store = dist.TCPStore(msg.host, msg.port, spec.world_size, is_master=False, timeout=timeout)
    return RankGroup(spec, store, (msg.host, int(msg.port)), timeout_s)


class TorchBackend(Backend):
    """torch's backend: with several ranks, join one torch.distributed process group on the rendezvous store.

    The default of every multi-rank trial (and of ``TorchTrainer``'s
    ``TorchConfig``); a single CPU rank imports nothing.
    """

    def __init__(self) -> None:
        self._backend = "gloo"
        self._sockets: dict[int, str] = {}

    def on_start(self, worker_group: RankGroup, backend_config: Any) -> None:
        spec = worker_group.spec
        self._backend, timeout_s = _torch_settings(backend_config, spec)
        if spec.world_size > 1:
            self._sockets = _join_process_group(worker_group, self._backend, timeout_s)
            return
        if "MASTER_ADDR" not in os.environ:  # libraries that make their own 1-rank group read these (DeepSpeed)
            os.environ.update(MASTER_ADDR=worker_group.host, MASTER_PORT=str(worker_group.free_port()))
        if spec.gpu_ids:
            _pin_gpu(spec)

    def on_abort(self, worker_group: RankGroup, backend_config: Any) -> None:
        """The tuner aborted the group while user code runs: make every collective of this rank fail now.

        A rank blocked in ``all_reduce`` waiting for a peer whose host's link was cut
        (no FIN) would otherwise wait for gloo's timeout; shutting the group's
        connections down wakes it with an error (and its peers too).
        """
        if self._sockets:
            n = _shutdown_sockets(self._sockets)
            logger.info("tuneplat: trial %s rank %d: the tuner ended the group; shut down %d process-group "
                        "connection(s)", worker_group.spec.trial_id, worker_group.spec.rank, n)

    def on_shutdown(self, worker_group: RankGroup, backend_config: Any) -> None:
        spec = worker_group.spec
        if spec.world_size > 1:  # never import torch for single-rank CPU trials
            _teardown_process_group(worker_group.store, spec, self._backend, worker_group.failed, self._sockets)
            return
        _destroy_own_group()
        if spec.gpu_ids:
            _release_gpu_memory()


def _destroy_own_group() -> None:
    """A single rank's library made its own process group (DeepSpeed, Accelerate, FSDP on 1 rank): end it, or the
    next trial of this worker process could not join its group ("initialize the default process group twice")."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the trial's outcome is decided; the next group reports its own error
        logger.warning("tuneplat: could not end the process group a single rank made", exc_info=True)


def _join_process_group(group: RankGroup, backend: str, timeout_s: float) -> dict[int, str]:
    """Join one torch.distributed process group on the group's rendezvous store.

    Returns the sockets the group opened (see :func:`_shutdown_sockets`).
    """
    import torch.distributed as dist

    spec = group.spec
    timeout = timedelta(seconds=timeout_s)
    assert group.store_address is not None
    master = group.store_address
    os.environ.update(MASTER_ADDR=master[0], MASTER_PORT=str(master[1]))
    if spec.gpu_ids:
        _pin_gpu(spec)
    before = _socket_fds()
    ifname = _interface_of(spec.host) if backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ else None
    if ifname:  # gloo listens on the address its hostname resolves to, unless told an interface
        os.environ["GLOO_SOCKET_IFNAME"] = ifname
    try:
        # torch names the default group after a per-process counter of groups created so far, and the store
        # barrier keys carry that name: a rank in a fresh worker (its predecessor was killed) would wait on other
        # keys than a rank in a reused worker. Each trial has its own store, so every rank starts the count at 0.
        from torch.distributed import distributed_c10d

        distributed_c10d._world.group_count = 0
        dist.init_process_group(backend, store=group.store, rank=spec.rank, world_size=spec.world_size,
                                timeout=timeout)
    finally:
        if ifname:
            os.environ.pop("GLOO_SOCKET_IFNAME", None)
    return {fd: ino for fd, ino in _socket_fds().items() if before.get(fd) != ino}


def _interface_of(host: str) -> str | None:
    """The network interface carrying ``host`` (the worker's address), so gloo binds there too."""
    try:
        import psutil  # a dependency of distributed

        addresses = {socket.getaddrinfo(host, None)[0][4][0]}
        for name, addrs in psutil.net_if_addrs().items():
            if any(a.address.split("%")[0] in addresses for a in addrs):
                return name
    except Exception:
        logger.debug("tuneplat: no interface found for %s", host, exc_info=True)
    return None


def _socket_fds() -> dict[int, str]:
    """This process's socket descriptors and their inodes (Linux; empty elsewhere)."""
    found: dict[int, str] = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:"):
            found[int(name)] = target
    return found


def _shutdown_sockets(group_sockets: dict[int, str]) -> int:
    """Shut down the connections the process group opened, so that every peer's collective fails now.

    Only descriptors that still point at the same socket are touched, through
    a duplicate (the group keeps owning the original descriptor).
    """
    now = _socket_fds()
    count = 0
    for fd, inode in group_sockets.items():
        if now.get(fd) != inode:
            continue
        try:
            dup = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            # connected TCP streams only: shutting gloo's listener down makes its accept loop abort the process
            if (dup.family in (socket.AF_INET, socket.AF_INET6) and dup.type == socket.SOCK_STREAM
                    and not dup.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)):
                dup.shutdown(socket.SHUT_RDWR)
                count += 1
        except OSError:
            pass
        finally:
            dup.close()
    return count


def _teardown_process_group(store: Any, spec: RankSpec, backend: str, failed: bool,
                            group_sockets: dict[int, str]) -> None:
    """Destroy the group; after a failure, make peers blocked in a collective error out now.

    gloo closes its connections only when the process group object is freed,
    and after DDP was used something inside torch keeps it alive, so a failed
    rank shuts the group's connections down itself (:func:`_shutdown_sockets`).
    """
    group_ref = None
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            group_ref = weakref.ref(dist.group.WORLD)
            dist.destroy_process_group()
    except Exception:
        logger.debug("tuneplat: destroy_process_group failed", exc_info=True)
    if failed and group_ref is not None and group_ref() is not None:
        # Something (DDP does, in torch 2.x, even after the model is gone) still holds the
        # group, so gloo keeps its connections open and peers blocked in a collective would
        # wait for the timeout. (No gc.collect() on the way: it costs ~0.3 s with torch loaded,
        # and it does not free a DDP-held group anyway.)
        n = _shutdown_sockets(group_sockets)
        logger.debug("tuneplat: trial %s rank %d: shut down %d process-group connection(s)", spec.trial_id, spec.rank, n)
    if backend == "nccl" or spec.gpu_ids:
        _release_gpu_memory()


def _pin_gpu(spec: RankSpec) -> None:
    """Make the rank's first GPU the current CUDA device (what ``torch.device("cuda")`` means)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.set_device(spec.gpu_ids[0])


def _release_gpu_memory() -> None:
    """Hand cached CUDA memory back, so the next trial on this GPU (or one sharing it) can use it."""
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001, S110 - best effort at the end of a trial
        pass


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
        _set_framework_ranks(spec)
        trainable = make()
        backend, backend_config = _backend_of(trainable)
        if spec.world_size > 1:
            session.monitor.state = "rendezvous"
        group = _open_rank_group(session, float(getattr(backend_config, "timeout_s", None) or spec.pg_timeout_s))
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
        _reset_framework_state()
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
    Other platforms keep theirs (``fork`` is unsafe on macOS).
    """
    import multiprocessing

    before = multiprocessing.get_start_method(allow_none=True)
    if not sys.platform.startswith("linux") or before == "fork":
        yield
        return
    multiprocessing.set_start_method("fork", force=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(before, force=True)


def _set_framework_ranks(spec: RankSpec) -> None:
    """Tell libraries this process imported in an earlier trial which rank it is now.

    Lightning reads the rank from ``RANK``/``LOCAL_RANK`` once, when it is first
    imported (``rank_zero_only.rank``), and only its distributed strategies set it
    again: a plain ``pl.Trainer`` in a rank (Ray's experiment-tracking examples)
    keeps what the import saw. A worker process that ran another rank before
    would log as that rank (two ``MLFlowLogger`` runs where Ray makes one).
    """
    rank_zero = sys.modules.get("lightning_utilities.core.rank_zero")
    only = getattr(rank_zero, "rank_zero_only", None)
    if only is not None and hasattr(only, "rank"):
        only.rank = spec.rank


def _reset_framework_state() -> None:
    """Forget process-wide state that frameworks keep about the process group of the trial that just ended.

    ``accelerate`` (under ``transformers.Trainer``) keeps its distributed state
    (ranks, world size, device) in class-level singletons, and DeepSpeed keeps
    its communication backend and the process groups it derived from the
    trial's group in module globals: a later trial in this worker process would
    otherwise train with the previous trial's (destroyed) group ("Group ... is
    not registered").
    """
    state = sys.modules.get("accelerate.state")
    if state is not None:
        try:
            state.AcceleratorState._reset_state(True)
            state.GradientState._reset_state()
        except Exception:  # noqa: BLE001 - another accelerate version: the next trial builds its own state anyway
            logger.debug("tuneplat: could not reset accelerate's state", exc_info=True)
    _reset_deepspeed()


def _reset_deepspeed() -> None:
    """Forget DeepSpeed's communication backend and every process group (or mesh) it keeps in a module global."""
    comm = sys.modules.get("deepspeed.comm.comm")
    if comm is not None:
        comm.cdb = None  # type: ignore[attr-defined]  # the next deepspeed.initialize() wraps the next trial's group
    groups = sys.modules.get("deepspeed.utils.groups")
    if groups is None:
        return
    try:
        import torch.distributed as dist

        kinds: tuple[type, ...] = (dist.ProcessGroup,)
        try:
            from torch.distributed.device_mesh import DeviceMesh

            kinds += (DeviceMesh,)
        except ImportError:
            pass
        for name, value in list(vars(groups).items()):
            if name.startswith("__"):
                continue
            if isinstance(value, kinds) or name in ("mpu", "mesh_device"):
                setattr(groups, name, None)
            elif isinstance(value, dict) and any(isinstance(v, kinds) or isinstance(v, (list, range))
                                                 for v in value.values()):
                value.clear()
    except Exception:  # noqa: BLE001 - another DeepSpeed version: its next initialize() may still work
        logger.debug("tuneplat: could not reset DeepSpeed's process groups", exc_info=True)


def _send(session: Session, msg: proto.Message) -> bool:
    try:
        session.send(msg)
    except OSError:
        return False
    return True
