"""What runs inside a rank: the session behind ``report()``, ``get_checkpoint()`` and ``get_context()``."""

from __future__ import annotations

import enum
import logging
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from schedulers import Decision

from .._settings import env_seconds
from ..execution import _protocol as proto
from ..execution._wire import max_report_bytes
from ..storage._checkpoint import Checkpoint
from ..storage._storage import (
    checkpoint_name,
    is_remote,
    remote_stage_checkpoint,
    reported_checkpoints,
    stage_checkpoint,
    write_checkpoint_metrics,
)
from ._lock_wait import held_locks, release_held
from ._telemetry import RankMonitor

__all__ = [
    "CheckpointUploadMode",
    "PreemptionInfo",
    "RankSpec",
    "Session",
    "TrainContext",
    "current_session",
    "get_checkpoint",
    "get_context",
    "get_preemption_info",
    "report",
    "should_checkpoint",
]


class StopTrial(BaseException):
    """Raised from ``report()`` when the tuner decided STOP or PAUSE: unwinds the trainable.

    A BaseException so that ``except Exception`` in user code does not swallow it.
    """


class TrialAborted(BaseException):
    """Raised from ``report()`` when the group is being torn down (another rank failed, the tuner ended)."""


class TrialRequeued(BaseException):
    """Raised in a trial whose nested ``TorchTrainer.fit()`` the tuner sends back to the queue.

    Every worker slot is held by trials waiting to place their own groups: the
    tuner ends the newest of them (its driver function runs again later, not
    counted as a failure) so that the others can run.
    """


@dataclass
class RankSpec:
    """Everything one rank needs; built by the tuner, shipped with the Dask task."""

    trial_id: str
    trial_name: str
    experiment_name: str
    trial_dir: str
    attempt: int
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    tuner_addr: tuple[str, int]
    token: bytes
    config: dict[str, Any]
    start_iteration: int = 0
    time_offset: float = 0.0
    checkpoint_path: str | None = None
    backend: str = "gloo"
    gpu_ids: list[int] = field(default_factory=list)
    pg_timeout_s: float = 60.0
    host: str = "127.0.0.1"
    metric: str | list[str] | None = None
    heartbeat_s: float = 2.0  # how often the rank tells the tuner it is alive
    abort_grace_s: float = 15.0  # after the tuner aborted the group, how long user code may take to unwind
    storage_fs: Any = None  # the fsspec filesystem of remote storage (checkpoints are uploaded there)
    remote_trial_dir: str | None = None  # the trial's folder on that filesystem (a URL)
    system_metrics_s: float = 5.0  # how often the rank samples CPU/memory/GPU (0: never); see train/_telemetry.py
    stale_lock_s: float = 60.0  # a wait for a build lock nobody holds is reported after this long (train/_lock_wait.py)
    channel_tls: bool = False  # the tuner's port speaks TLS (the cluster's certificates): see execution._channel
    tuner_local: str | None = None  # the tuner's local socket (same host): see execution._channel.Listener
    elastic: bool = False  # an elastic group: the rank tells the tuner when its Dask worker is asked to leave
    trial_io: Any = None  # execution._trial_io.TrialIO: the trial's working directory and captured output
    rank_hosts: list[str] = field(default_factory=list)  # the host of every rank of the group (data locality)
    cpus: float = 1.0  # the CPU slots the rank holds on its host (2 or more: its thread pools use that many)
    #: what the rank asks for (``{"CPU": 2.0, ...}``: the trial's resources per rank; get_trial_resources())
    resources: dict[str, float] = field(default_factory=dict)
    #: how long the rank tries to authenticate with the tuner: 3/4 of its start timeout (the tuner gives up then,
    #: so the rank's own failure, with its cause, comes first)
    connect_within_s: float = field(default_factory=lambda: 0.75 * env_seconds("TUNEPLAT_START_TIMEOUT_S", 90))
    #: the largest message the tuner takes from a rank (its ``TUNEPLAT_MAX_REPORT_BYTES``, read where it runs)
    max_report_bytes: int = field(default_factory=max_report_bytes)


class TrainContext:
    """Where this rank stands: ranks, sizes, trial and experiment names, the trial folder.

    Outside a trial (the driver script, a TorchTrainer's ``fit()`` caller), as
    in Ray, the trial's id, name, folder and experiment are None and the
    process is rank 0 of 1.
    """

    def __init__(self, spec: RankSpec | None) -> None:
        self._spec = spec

    def get_world_rank(self) -> int:
        return self._spec.rank if self._spec else 0

    def get_world_size(self) -> int:
        return self._spec.world_size if self._spec else 1

    def get_local_rank(self) -> int:
        return self._spec.local_rank if self._spec else 0

    def get_local_world_size(self) -> int:
        return self._spec.local_world_size if self._spec else 1

    def get_node_rank(self) -> int:
        return self._spec.node_rank if self._spec else 0

    def get_trial_id(self) -> str | None:
        return self._spec.trial_id if self._spec else None

    def get_trial_name(self) -> str | None:
        return self._spec.trial_name if self._spec else None

    def get_experiment_name(self) -> str | None:
        return self._spec.experiment_name if self._spec else None

    def get_trial_dir(self) -> str | None:
        return self._spec.trial_dir if self._spec else None

    def get_trial_resources(self) -> Any:
        """The resources of this rank as Ray's ``PlacementGroupFactory`` (one bundle: what the rank holds).

        A trial resized by a ``ResourceChangingScheduler`` sees its new resources here
        (``head_cpus``: the CPUs its threads may use). ``["gpu_ids"]`` gives the GPUs it was given.
        """
        from ..execution.placement_groups import PlacementGroupFactory

        spec = self._spec
        if spec is None:
            return PlacementGroupFactory([{"CPU": 1}])
        asked = {k: v for k, v in (spec.resources or {"CPU": spec.cpus}).items() if not k.startswith("GPU_")}
        pgf = PlacementGroupFactory([asked if any(asked.values()) else {"CPU": spec.cpus}])
        pgf.gpu_ids = list(spec.gpu_ids)  # type: ignore[attr-defined]
        return pgf

    def get_attempt(self) -> int:
        """0 for the first run of the trial, then 1, 2, ... for retries and resumes."""
        return self._spec.attempt if self._spec else 0


def gpu_memory() -> dict[str, int]:
    """This process's GPU memory, when it uses CUDA through torch: ``{}`` otherwise (nothing is imported).

    ``gpu_memory_peak_bytes``: ``torch.cuda.max_memory_allocated()`` of the current device (the peak of torch's
    allocator since the process started or the peak was reset); ``gpu_memory_process_bytes``: what the driver
    says this process holds on its devices (NVML, when ``pynvml``/``nvidia-ml-py`` is installed), which includes
    the CUDA context and cuBLAS/cuDNN workspaces.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    try:
        if not torch.cuda.is_initialized():
            return {}
        out = {"gpu_memory_peak_bytes": int(torch.cuda.max_memory_allocated())}
    except Exception:  # noqa: BLE001 - memory figures must never fail a report
        return {}
    held = _nvml_process_bytes()
    if held is not None:
        out["gpu_memory_process_bytes"] = held
    return out


def _nvml_process_bytes() -> int | None:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        pid, total = os.getpid(), 0
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid == pid and proc.usedGpuMemory:
                    total += int(proc.usedGpuMemory)
        return total
    except Exception:  # noqa: BLE001 - no driver access (a container): leave it out
        return None


def _plain(value: Any) -> Any:
    """Metric values as plain Python (numpy scalars and 0-d tensors → float/int)."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return item()
        except (ValueError, RuntimeError):
            return value
    return value


class Session:
    """One rank's connection to the tuner."""

    def __init__(self, spec: RankSpec, sock: socket.socket, send_lock: threading.Lock | None = None) -> None:
        self.spec = spec
        self.sock = sock
        self.iteration = spec.start_iteration
        self.iterations_since_restore = 0
        self.start_time = time.time()
        self.last_report_time = self.start_time
        self.hostname = socket.gethostname()
        self.pid = os.getpid()
        self.context = TrainContext(spec)
        self.checkpoint = None
        if spec.checkpoint_path:
            fs = spec.storage_fs if is_remote(spec.checkpoint_path) else None
            self.checkpoint = Checkpoint(spec.checkpoint_path, fs)
        self.stopped = False
        self.send_lock = send_lock or threading.Lock()  # shared by every sender on this connection
        self.finished = threading.Event()
        self.save_requested = False  # the last report's answer asked for a checkpoint of that step
        self.checkpoint_requested = False  # the last report's answer said "checkpoint now" (should_checkpoint())
        self.cleanups: list[Any] = []  # run by the runner when the trial's user code has ended (setup_mlflow's)
        #: run (once) by the heartbeat thread when the tuner hung up while user code runs: they release user code
        #: blocked where the tuner cannot reach it (a collective waiting for a peer that is gone)
        self.on_tuner_lost: list[Any] = []
        self.backend_group: Any = None  # the rank's train._backend.RankGroup while its trial runs
        self.preemption: PreemptionInfo | None = None  # set when this rank's worker is announced to go away
        self.monitor = RankMonitor(spec.rank, list(spec.gpu_ids), spec.system_metrics_s,
                                   stale_lock_s=spec.stale_lock_s)  # what pings carry

    def send(self, msg: proto.Message) -> None:
        with self.send_lock:
            proto.send(self.sock, msg, self.spec.max_report_bytes)

    def ask(self, msg: proto.Message) -> proto.Message:
        """Send ``msg`` to the tuner and wait for its reply (a report's decision)."""
        self.send(msg)
        return proto.recv_from_tuner(self.sock)

    def _stage(self, folder: str) -> None:
        name = checkpoint_name(self.iteration)
        if self.spec.remote_trial_dir is not None:
            remote_stage_checkpoint(self.spec.storage_fs, folder, self.spec.remote_trial_dir, name)
        else:
            stage_checkpoint(folder, self.spec.trial_dir, name)

    def _keep_metrics(self, result: dict[str, Any]) -> None:
        name = checkpoint_name(self.iteration)
        if self.spec.remote_trial_dir is not None:
            write_checkpoint_metrics(self.spec.remote_trial_dir, name, result, self.spec.storage_fs)
        else:
            write_checkpoint_metrics(self.spec.trial_dir, name, result)

    def reported_checkpoints(self) -> list[tuple[Checkpoint, dict[str, Any]]]:
        """The trial's committed checkpoints (every attempt's, as retention left them), oldest first."""
        if self.spec.remote_trial_dir is not None:
            fs = self.spec.storage_fs
            return [(Checkpoint(p, fs), m) for p, m in reported_checkpoints(self.spec.remote_trial_dir, fs)]
        return [(Checkpoint(p), m) for p, m in reported_checkpoints(self.spec.trial_dir)]

    def report(self, metrics: dict[str, Any], checkpoint: Checkpoint | None = None) -> None:
        if self.stopped:
            raise StopTrial()
        if not isinstance(metrics, dict):
            raise TypeError(f"report() takes a dict of metrics, got {type(metrics).__name__}: {metrics!r}")
        self.iteration += 1
        self.iterations_since_restore += 1
        now = time.time()
        staged = False
        if checkpoint is not None:
            if not isinstance(checkpoint, Checkpoint):
                raise TypeError(f"report(checkpoint=...) takes a tuneplat Checkpoint, got {type(checkpoint).__name__}")
            if checkpoint.filesystem is not None:
                with checkpoint.as_directory() as local:  # a remote checkpoint reported again (rare)
                    self._stage(local)
            else:
                self._stage(checkpoint.path)
            staged = True
        result: dict[str, Any] | None = None
        if self.spec.rank != 0:  # its own metrics, for Ray V2's UserCallback.after_report (metrics[rank])
            result = {str(k): _plain(v) for k, v in metrics.items()}
        if self.spec.rank == 0:
            result = {str(k): _plain(v) for k, v in metrics.items()}
            result.update(
                training_iteration=self.iteration,
                time_this_iter_s=now - self.last_report_time,
                time_total_s=self.spec.time_offset + (now - self.start_time),
                timestamp=now,
                iterations_since_restore=self.iterations_since_restore,
                trial_id=self.spec.trial_id,
                pid=self.pid,
                hostname=self.hostname,
                # Ray's other auto-filled keys, so scripts that read them port unchanged
                date=time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(now)),
                node_ip=self.spec.host,
                time_since_restore=now - self.start_time,
            )
            result.setdefault("done", False)
            result.update(gpu_memory())
            if staged:  # kept beside the checkpoint for get_all_reported_checkpoints()
                self._keep_metrics(result)
        self.last_report_time = now
        self.monitor.on_report(metrics)
        self.monitor.state = "reporting"  # waiting for the tuner's decision (every rank of the group reports)
        try:
            reply = self.ask(proto.Report(self.iteration, result, staged))
        except (ConnectionError, OSError) as exc:
            raise TrialAborted(f"lost the connection to the tuner: {exc}") from None
        self.monitor.state = "training"
        if isinstance(reply, proto.Answer):
            # the tuner asks for a checkpoint of this step (a callback set result["should_checkpoint"])
            self.save_requested = reply.save
            notice = reply.notice  # a worker of the group is leaving: checkpoint now
            self.checkpoint_requested = bool(notice)
            if notice is not None:
                self.preemption = preemption_from_notice(notice)
            if reply.decision is not Decision.CONTINUE:
                self.stopped = True
                raise StopTrial()
            return
        if isinstance(reply, proto.Abort):
            raise TrialAborted(reply.reason)
        raise proto.ProtocolError(f"the tuner answered a report with a {reply.KIND!r} message: {reply!r}")


    def lease(self, request: dict[str, float], n: int, strategy: str) -> list[Any]:
        """Worker slots for a group that this trial starts (a nested ``TorchTrainer.fit()``), from the tuner.

        Blocks until the tuner that runs this trial places ``n`` ranks of
        ``request`` beside it (on workers other than its own), and returns their
        :class:`~tuneplat.execution._cluster.Assignment` s.

        Raises:
            PlacementError: the group can never fit beside this trial.
            TrialRequeued: the tuner sends this trial back to its queue (every slot waits for a group).
            TrialAborted: this trial is being ended.
        """
        try:
            self.send(proto.Lease(dict(request), int(n), str(strategy)))
        except OSError as exc:
            raise TrialAborted(f"lost the connection to the tuner: {exc}") from None
        while True:
            try:
                reply = proto.recv_from_tuner(self.sock)
            except (ConnectionError, OSError) as exc:
                raise TrialAborted(f"lost the connection to the tuner: {exc}") from None
            if isinstance(reply, proto.Leased):
                return list(reply.assignments)
            if isinstance(reply, proto.Refused):
                from ..execution._errors import PlacementError

                raise PlacementError(reply.message)
            if isinstance(reply, proto.Requeue):
                raise TrialRequeued(reply.message)
            if isinstance(reply, proto.Abort):
                raise TrialAborted(reply.reason)
            raise proto.ProtocolError(f"the tuner answered a group's placement with a {reply.KIND!r} message: "
                                      f"{reply!r}")

    def gather(self, seq: int, payload: str, timeout_s: float) -> list[str]:
        """Every rank's ``payload`` (JSON text) of exchange ``seq``, in rank order, relayed by the tuner.

        The group's rendezvous when it has no store (any backend but torch's:
        :class:`~tuneplat.train._backend.RankGroup`): the values travel on this
        rank's authenticated connection to the tuner, which answers every rank
        once all sent ``seq``.

        Raises:
            TimeoutError: not every rank sent ``seq`` within ``timeout_s``.
            TrialAborted: the tuner ended the group (another rank failed) or the connection was lost.
        """
        try:
            self.send(proto.Gather(int(seq), payload))
        except OSError as exc:
            raise TrialAborted(f"lost the connection to the tuner: {exc}") from None
        before = self.sock.gettimeout()
        self.sock.settimeout(timeout_s)
        try:
            reply = proto.recv_from_tuner(self.sock)
        except TimeoutError:  # (socket.timeout) the connection is not reused: multi-rank runners never chain
            raise TimeoutError(f"trial {self.spec.trial_id} rank {self.spec.rank}: not every rank of the group "
                               f"reached exchange {seq} (all_gather/broadcast/barrier) within {timeout_s:g} s; "
                               "every rank must call them in the same order (a BackendConfig's timeout_s sets the "
                               "wait)") from None
        except (ConnectionError, OSError) as exc:
            raise TrialAborted(f"lost the connection to the tuner: {exc}") from None
        finally:
            try:
                self.sock.settimeout(before)
            except OSError:
                pass
        if isinstance(reply, proto.Gathered) and reply.seq == seq:
            return list(reply.payloads)
        if isinstance(reply, proto.Abort):
            raise TrialAborted(reply.reason)
        raise proto.ProtocolError(f"the tuner answered exchange {seq} of the group with a {reply.KIND!r} message: "
                                  f"{reply!r}")

    def unlease(self, address: str) -> None:
        """Give back one slot :meth:`lease` gave (the group's rank there ended)."""
        try:
            self.send(proto.Unlease(address))
        except OSError:
            pass  # the tuner frees a trial's slots when the trial ends anyway

    def save_late(self, folder: str) -> None:
        """Stage ``folder`` as the checkpoint of the step just reported (the tuner asked for it in its answer).

        Every rank of the group calls it; the tuner commits the checkpoint once all have.
        """
        self.save_requested = False
        self._stage(folder)
        try:
            self.send(proto.Saved(self.iteration))
        except OSError as exc:
            raise TrialAborted(f"lost the connection to the tuner: {exc}") from None


class Heartbeat:
    """Pings the tuner while a trial runs on a connection: one thread per connection (per Dask task).

    A rank that is stopped (SIGSTOP) or wedged stops pinging, which is how the
    tuner detects a hang. A rank whose group was aborted but whose user code
    does not unwind (stuck outside ``report()``) is ended with ``os._exit`` once
    ``abort_grace_s`` has passed; the Dask nanny starts a fresh worker process in
    its place. A runner that runs several single-rank trials in sequence (chained
    trials) keeps the one thread: each trial is :meth:`attach`-ed and
    :meth:`detach`-ed, and no ping is sent between trials. Pings share the
    sessions' send lock, so a ping never interleaves with another frame.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._session: Session | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self._waiting = False  # the thread waits for a trial to be attached (none runs)

    def attach(self, session: Session) -> None:
        with self._cond:
            self._session = session
            if self._waiting:  # (otherwise it notices the new trial at the end of its current wait: no wake-up)
                self._cond.notify()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"tuneplat-heartbeat-{session.spec.trial_id}-r{session.spec.rank}")
            self._thread.start()

    def detach(self, session: Session) -> None:
        session.finished.set()
        with self._cond:
            if self._session is session:
                self._session = None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._session = None
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._session is None and not self._closed:
                    self._waiting = True
                    self._cond.wait()
                    self._waiting = False
                if self._closed:
                    return
                session = self._session
                assert session is not None
                # a trial chained after this one is noticed when this wait ends: its first ping comes within
                # two intervals of its start, well inside the tuner's limit of ten
                self._cond.wait(session.spec.heartbeat_s)
                if self._closed:
                    return
                if self._session is not session or session.finished.is_set():
                    continue
            try:
                try:
                    stats = session.monitor.snapshot()
                except Exception:  # noqa: BLE001 - a ping without stats still says the rank is alive
                    stats = None
                session.send(proto.Ping(stats))
            except OSError:
                _tuner_lost(session)
                if not session.finished.wait(session.spec.abort_grace_s):
                    # a torch build lock this process holds (killed inside deepspeed.initialize's op load) would
                    # make every later load on this host wait forever: removed with it (train/_lock_wait.py)
                    release_held(None, held_locks(), f"rank {session.spec.rank} of trial {session.spec.trial_id} "
                                 f"did not unwind within {session.spec.abort_grace_s:g}s of its abort")
                    os._exit(70)


def _tuner_lost(session: Session) -> None:
    """The tuner hung up on a running trial (it aborted the group): release what user code may be blocked in.

    A rank blocked in a collective whose peer vanished (its host's link cut: no
    FIN ever comes) would wait for the collective's own timeout, and the worker
    process would then be ended after ``abort_grace_s``; the hooks (the torch
    backend's: shut the process group's connections) make the collective fail
    now, so user code unwinds and the worker stays usable for the next attempt.
    """
    hooks, session.on_tuner_lost = session.on_tuner_lost, []
    for hook in hooks:
        try:
            hook()
        except Exception:  # noqa: BLE001 - best effort: the abort grace still bounds the wait
            logging.getLogger("tuneplat").debug("tuneplat: a tuner-lost hook failed", exc_info=True)


_local = threading.local()
_process_session: Session | None = None


def _set_session(session: Session | None, *, process_wide: bool = True) -> None:
    """Make ``session`` the calling thread's (and, ``process_wide``, every other thread's without one)."""
    global _process_session
    _local.session = session
    if process_wide:
        _process_session = session


def _current_session() -> Session | None:
    """The calling thread's session, else the process's, else None."""
    return getattr(_local, "session", None) or _process_session


def _get_session(fn: str) -> Session:
    session = _current_session()
    if session is None:
        raise RuntimeError(
            f"tuneplat.{fn}() was called outside a trial. Call it from the function you pass to "
            "tune.Tuner(...) or TorchTrainer(...), which tuneplat runs on a Dask worker."
        )
    return session


_warned_keywords = False


def _keyword_report(metrics: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Ray's older ``tune.report(loss=..., iterations=...)`` (and ``tune.report(number)``): the metrics dict.

    Accepted with a ``DeprecationWarning`` naming the new form, shown once per process.
    """
    global _warned_keywords
    import warnings

    if metrics is not None and not isinstance(metrics, dict):
        from ..result import DEFAULT_METRIC

        if isinstance(metrics, bool) or not isinstance(metrics, (int, float)):
            raise TypeError(f"report() takes a dict of metrics, got {type(metrics).__name__}: {metrics!r}")
        kwargs = {DEFAULT_METRIC: metrics, **kwargs}
    elif isinstance(metrics, dict):
        kwargs = {**metrics, **kwargs}
    if not _warned_keywords:
        _warned_keywords = True
        shown = ", ".join(f"{k!r}: ..." for k in list(kwargs)[:3])
        with warnings.catch_warnings():
            warnings.simplefilter("always", DeprecationWarning)  # (ignored by default outside __main__)
            warnings.warn(f"tune.report(key=value, ...) is Ray's deprecated keyword style; report a dict instead: "
                          f"tune.report({{{shown}}}) (train.report takes the same).", DeprecationWarning, stacklevel=3)
    return kwargs


class CheckpointUploadMode(enum.Enum):
    """How ``report(checkpoint=...)`` persists a checkpoint (Ray Train V2's ``ray.train.CheckpointUploadMode``).

    tuneplat persists every reported checkpoint into the trial folder (or
    remote storage) before ``report`` returns, whatever the mode: ``ASYNC`` is
    accepted and runs as ``SYNC``; ``NO_UPLOAD`` (Ray: the checkpoint is already
    at its storage path) is copied like the others.
    """

    SYNC = "SYNC"
    ASYNC = "ASYNC"
    NO_UPLOAD = "NO_UPLOAD"


@dataclass(frozen=True)
class PreemptionInfo:
    """A notice that workers of this group are going away (Ray Train V2's ``ray.train.PreemptionInfo``).

    Attributes:
        deadline_ms: when they go (UNIX time in milliseconds), None when unknown (Dask announces no deadline).
        preempted_node_to_ranks: each leaving node (the Dask worker's address) to the world ranks it runs.
        reason: why, in words (tuneplat's addition).
    """

    deadline_ms: int | None
    preempted_node_to_ranks: dict[str, list[int]]
    reason: str = ""

    @property
    def preempted_node_ids(self) -> list[str]:
        """The leaving nodes, sorted."""
        return sorted(self.preempted_node_to_ranks)

    @property
    def preempted_ranks(self) -> list[int]:
        """Every rank on a leaving node, ascending."""
        return sorted({r for ranks in self.preempted_node_to_ranks.values() for r in ranks})


def preemption_from_notice(notice: dict[str, Any]) -> PreemptionInfo:
    """The :class:`PreemptionInfo` of a notice the tuner sent (``{"ranks", "nodes", "reason"}``)."""
    nodes = {str(k): sorted(int(r) for r in v) for k, v in dict(notice.get("nodes") or {}).items()}
    listed = {r for v in nodes.values() for r in v}
    rest = sorted(int(r) for r in notice.get("ranks", []) if int(r) not in listed)
    if rest:  # (a rank whose node is not named: keyed by its rank)
        nodes.update({f"rank-{r}": [r] for r in rest})
    return PreemptionInfo(None, nodes, str(notice.get("reason", "")))


def get_preemption_info() -> PreemptionInfo | None:
    """The pending preemption of this trial's workers, or None (Ray Train V2's ``ray.train.get_preemption_info``).

    When it returns a notice, save and report one more checkpoint: the group is
    restarted from it. A notice comes from tuneplat's preemption handling of
    elastic groups (``docs/elastic.md``); where nothing announces a preemption
    (a plain Dask worker that is simply lost), it returns None and the trial
    restarts from its latest checkpoint (``FailureConfig``).
    """
    session = current_session()
    return getattr(session, "preemption", None) if session is not None else None


def report(metrics: dict[str, Any] | None = None, checkpoint: Checkpoint | None = None,
           checkpoint_upload_mode: CheckpointUploadMode | str | None = None, **kwargs: Any) -> None:
    """Report metrics (and optionally a checkpoint) for this training step.

    Every rank of a trial calls it at the same step (it is a collective): rank
    0's metrics are the trial's; each rank may pass a checkpoint (its shard),
    persisted into the trial folder before ``report`` returns. When the tuner
    decides to stop or pause the trial, ``report`` does not return: it raises
    an exception deriving from ``BaseException`` that ends the trainable.

    Example:
        >>> def objective(config):  # doctest: +SKIP
        ...     for step in range(10):
        ...         tuneplat.report({"loss": (config["x"] - 3) ** 2})

    Ray's older keyword style, ``tune.report(loss=..., iterations=...)``, is
    accepted with a ``DeprecationWarning`` (once per process).
    ``checkpoint_upload_mode`` (Ray Train V2) is accepted: see :class:`CheckpointUploadMode`.
    """
    if checkpoint_upload_mode is not None and not isinstance(checkpoint_upload_mode, CheckpointUploadMode):
        try:
            CheckpointUploadMode(str(checkpoint_upload_mode).upper())
        except ValueError:
            raise ValueError(f"The value of `checkpoint_upload_mode` is {checkpoint_upload_mode!r}, but must be a "
                             "train.CheckpointUploadMode (SYNC, ASYNC or NO_UPLOAD).") from None
    session = _get_session("report")
    if kwargs or (metrics is not None and not isinstance(metrics, dict)):
        metrics = _keyword_report(metrics, kwargs)
    if metrics is None:
        raise TypeError("report() takes a dict of metrics: tune.report({'loss': ...}).")
    session.report(metrics, checkpoint)


def should_checkpoint() -> bool:
    """Whether the trial should pass a checkpoint to its next ``report()``: a worker of its group is leaving.

    True after a ``report()`` whose answer said "checkpoint now": a Dask worker
    holding a rank of this elastic group (``ScalingConfig(num_workers=(min, max))``)
    was asked to leave (``client.retire_workers``, a cluster scaling down, SIGTERM to
    ``dask worker``). Every rank sees the same value (it comes with the answer to
    the collective ``report()``). The group's next ``report(..., checkpoint=...)``
    is committed, then the group starts again from it without the leaving worker,
    so no step is lost. It stays False for fixed-size groups. Ray Train V2's way
    to ask the same is :func:`get_preemption_info` (not None from the same
    report on, with the leaving ranks); see ``docs/elastic.md``.

    Example:
        >>> for epoch in range(start, epochs):  # doctest: +SKIP
        ...     loss = train_one_epoch(model)
        ...     ckpt = None
        ...     if epoch % 10 == 9 or tuneplat.train.should_checkpoint():
        ...         ckpt = save(model, epoch)
        ...     tuneplat.train.report({"loss": loss}, checkpoint=ckpt)
    """
    return _get_session("should_checkpoint").checkpoint_requested


def get_checkpoint() -> Checkpoint | None:
    """The trial's latest checkpoint when it (re)starts, else None."""
    return _get_session("get_checkpoint").checkpoint


def current_session() -> Session | None:
    """The session of the trial that runs in this thread (or process), None outside a trial."""
    return getattr(_local, "session", None) or _process_session


def get_context() -> TrainContext:
    """Ranks, sizes, names and folder of the calling trial.

    Outside a trial it returns a context whose trial id is None (as Ray's
    ``tune.get_context()``), rank 0 of 1: a script can call the same driver
    function with and without a Tuner.
    """
    session = current_session()
    return session.context if session is not None else TrainContext(None)
