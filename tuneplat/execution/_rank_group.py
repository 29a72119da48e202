"""A rank's process group and the per-process state of frameworks: torch.distributed's rendezvous, join and
teardown (``TorchBackend``), GPU pinning and release, and what libraries keep between trials in a worker process
(used by the rank's task, :mod:`tuneplat.execution._runner`)."""

from __future__ import annotations

import gc
import logging
import os
import socket
import sys
import weakref
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from .._settings import env_str
from ..train._backend import Backend, RankGroup
from ..train._session import RankSpec, TrialAborted
from . import _protocol as proto

__all__ = ["TorchBackend", "backend_of", "reuses_worker_process", "master_store", "open_rank_group", "reset_framework_state", "set_framework_ranks"]

logger = logging.getLogger("tuneplat")


def _torch_settings(torch_config: Any, spec: RankSpec) -> tuple[str, float]:
    """Backend and process-group timeout: ``TorchTrainer(torch_config=...)`` overrides the spec's."""
    backend = getattr(torch_config, "backend", None) or spec.backend
    timeout_s = getattr(torch_config, "timeout_s", None) or spec.pg_timeout_s
    return backend, float(timeout_s)


def backend_of(trainable: Callable[..., Any]) -> tuple[Backend, Any]:
    """The trainer's backend (``_tuneplat_backend_config``: a BackendConfig) and its config; torch's by default."""
    config = getattr(trainable, "_tuneplat_backend_config", None)
    cls = getattr(config, "backend_cls", None) if config is not None else None
    return (cls or TorchBackend)(), config


def reuses_worker_process(trainable: Any, after_failure: bool = False) -> bool:
    """Whether the trainer's backend lets a worker process that ran one of its ranks run the next trial's
    (``Backend.reuses_worker_process``; torch's and a plain trainable's do). ``TUNEPLAT_REUSE_WORKERS=1`` keeps the
    worker processes whatever the backend says. ``after_failure``: after a group of several ranks that failed
    (``Backend.reuses_worker_process_after_failure``: JAX's processes are ended by its coordination service)."""
    if env_str("TUNEPLAT_REUSE_WORKERS") == "1":
        return True
    config = getattr(trainable, "_tuneplat_backend_config", None)
    cls = getattr(config, "backend_cls", None) if config is not None else None
    if not getattr(cls, "reuses_worker_process", True):
        return False
    return not after_failure or bool(getattr(cls, "reuses_worker_process_after_failure", True))


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


def open_rank_group(session: Any, timeout_s: float, backend: Backend | None = None) -> RankGroup:
    """The rendezvous of ``session``'s group.

    torch's backend (``backend`` a :class:`TorchBackend`, or None): rank 0
    opens a TCPStore on its host and the tuner tells the others where (torch's
    TCPStore is the store: a key-value server with a timeout on every read; the
    backend makes the process group on it). Every other backend: no store; the
    group's exchanges go through the tuner on each rank's authenticated
    connection (:meth:`~tuneplat.train._session.Session.gather`), so a
    non-torch rank never imports torch. A single-rank group has neither.
    """
    spec = session.spec
    if spec.world_size <= 1:
        return RankGroup(spec, timeout_s=timeout_s)
    if backend is not None and not isinstance(backend, TorchBackend):
        return RankGroup(spec, timeout_s=timeout_s, relay=session.gather)
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
        _tell_accelerate(spec)
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


def _tell_accelerate(spec: RankSpec) -> None:
    """Hugging Face Accelerate's view of this rank, set before the training function builds an ``Accelerator()``.

    ``ACCELERATE_TORCH_DEVICE`` is the rank's device (its first GPU, or the CPU), as Ray sets it. A CPU rank of a
    group also gets ``ACCELERATE_USE_CPU=true`` (unless the environment sets it): without it, ``Accelerator()`` on a
    host without GPUs finds no accelerator backend and runs as a lone process (``DistributedType.NO``: no DDP, no
    sharded loaders, every rank training alone on all the data) although the group is there, and on a host with
    GPUs it takes one the rank was not given. Both are environment keys the rank restores after the trial.
    """
    os.environ["ACCELERATE_TORCH_DEVICE"] = f"cuda:{spec.gpu_ids[0]}" if spec.gpu_ids else "cpu"
    if not spec.gpu_ids and spec.world_size > 1:
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")


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
    _collect_groups_left_behind()
    if failed and group_ref is not None and group_ref() is not None:
        # Something (DDP does, in torch 2.x, even after the model is gone) still holds the
        # group, so gloo keeps its connections open and peers blocked in a collective would
        # wait for the timeout. (No gc.collect() on the way: it costs ~0.3 s with torch loaded,
        # and it does not free a DDP-held group anyway.)
        n = _shutdown_sockets(group_sockets)
        logger.debug("tuneplat: trial %s rank %d: shut down %d process-group connection(s)", spec.trial_id, spec.rank, n)
    if backend == "nccl" or spec.gpu_ids:
        _release_gpu_memory()


def _collect_groups_left_behind() -> None:
    """After a trial in a process that imported FSDP, collect garbage, so that the group's resources are freed now.

    A destroyed group is freed when nothing refers to it; FSDP's module state
    and hooks refer to it from reference cycles, which only a full collection
    frees, and a worker process with torch loaded makes one rarely: each FSDP2
    trial left its process groups, rendezvous store, listening sockets and gloo
    threads behind (measured: +4 threads and +2 listening sockets on rank 0 per
    trial; none with the collection). ~0.2 s with torch loaded, so only where
    FSDP is in use (DDP leaves no cycle: its last group is freed when the next
    trial's replaces it).
    """
    if "torch.distributed.fsdp" in sys.modules:
        gc.collect()


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


def set_framework_ranks(spec: RankSpec) -> None:
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


def reset_framework_state() -> None:
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
    _destroy_deepspeed_engines()
    _reset_deepspeed()


def _destroy_deepspeed_engines() -> int:
    """``destroy()`` the DeepSpeed engines the trial made, so that their memory and process groups are freed.

    A ZeRO optimizer's gradient hooks live in torch's autograd graph (C++) and
    refer back to the optimizer: a cycle Python's collector cannot see, so an
    engine nobody refers to any more stays alive with its model, optimizer
    state, process groups, gloo threads and rendezvous store. Ray's workers
    are new processes for each run; a Dask worker runs the next trial, so
    every DeepSpeed trial would leak all of that (measured: +1 store listener,
    +1 gloo loop and +2 gloo threads per trial on each worker, the engines
    still alive). ``DeepSpeedEngine.destroy()`` removes the hooks; a collection
    then frees the rest at once. Only after a trial that used DeepSpeed
    (its communication backend is set: :func:`_reset_deepspeed` clears it at
    each trial's end), as finding the engines walks every object (~0.1 s).
    Returns how many engines were destroyed.
    """
    comm = sys.modules.get("deepspeed.comm.comm")
    engine_module = sys.modules.get("deepspeed.runtime.engine")
    if comm is None or engine_module is None or getattr(comm, "cdb", None) is None:
        return 0
    engine_class = getattr(engine_module, "DeepSpeedEngine", None)
    if not isinstance(engine_class, type):
        return 0
    engines = [o for o in gc.get_objects() if isinstance(o, engine_class)]
    count = len(engines)
    while engines:  # (popped: no name here keeps an engine alive through the collection below)
        _destroy_engine(engines.pop())
    if count:
        gc.collect()
    return count


def _destroy_engine(engine: Any) -> None:
    try:
        engine.destroy()
    except Exception:  # noqa: BLE001 - another DeepSpeed version, or a half-built engine: the trial is over
        logger.debug("tuneplat: could not destroy a DeepSpeed engine", exc_info=True)


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

