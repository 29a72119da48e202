"""What a trainable running in virtual time talks to: the fault sentinels, :func:`sleep`, :func:`now`,
:func:`use_gpu_memory` and :class:`OutOfMemoryError`, and the rank session the virtual executor runs it in
(see :mod:`tuneplat.testing._virtual`)."""

from __future__ import annotations

import threading
import time as _time
from typing import TYPE_CHECKING, Any, cast

from ..execution import _protocol as proto
from ..execution._executor import (
    Saved,
    TrialSpec,
)
from ..train._session import RankSpec, Session, TrialAborted, _current_session

if TYPE_CHECKING:
    from ._vstate import _VState

__all__ = ["HANG", "LOSE_HOST", "LOSE_WORKER", "OutOfMemoryError", "PREEMPT", "now", "sleep", "use_gpu_memory"]


class _Hang:
    def __repr__(self) -> str:
        return "tuneplat.testing.HANG"

    def __reduce__(self) -> str:  # (copies and pickles of a config holding it are the same sentinel)
        return "HANG"


#: yield this from a curve to make the trial stop reporting (until the tuner aborts it)
HANG = _Hang()


class _Fault:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"tuneplat.testing.{self.name}"

    def __reduce__(self) -> str:  # (copies and pickles of a config holding it are the same sentinel)
        return self.name


#: yield this from a curve: the trial's worker process dies now (the attempt fails as lost, as a killed process)
LOSE_WORKER = _Fault("LOSE_WORKER")
#: yield this from a curve: the trial's host leaves the cluster now, its slots with it (nothing replaces them)
LOSE_HOST = _Fault("LOSE_HOST")
#: yield this from a curve: the trial's host announces it is leaving (a preemption notice); the group ends after
#: its next report (checkpointed) and starts again from that checkpoint, as an elastic group does on a cluster
PREEMPT = _Fault("PREEMPT")

_real_sleep = _time.sleep  # (what sleep() calls outside virtual trials, even where time.sleep was replaced by it)


def sleep(seconds: float) -> None:
    """Let ``seconds`` pass: virtual seconds in a trial of the :class:`VirtualTimeExecutor`, real ones elsewhere.

    A trainable that calls it runs unchanged on both executors; on the
    virtual-time one, other trials run (in virtual time) meanwhile, and the
    iteration's ``time_this_iter_s`` counts the time slept. Tests may put it in
    place of ``time.sleep`` (``monkeypatch.setattr(time, "sleep", sleep)``) to
    run code that sleeps, such as Ray's examples, in virtual time.

    Args:
        seconds: how long, >= 0.

    Raises:
        ValueError: ``seconds`` is negative.
    """
    if seconds < 0:
        raise ValueError(f"sleep(seconds={seconds!r}): must be >= 0")
    session = _current_session()
    if isinstance(session, _VirtualSession):
        session.sleep(float(seconds))
    else:
        _real_sleep(seconds)


class OutOfMemoryError(RuntimeError):
    """A virtual device ran out of memory (named as torch's ``torch.cuda.OutOfMemoryError``, and recorded alike)."""


def use_gpu_memory(nbytes: float | str) -> None:
    """The trial now holds ``nbytes`` of GPU memory on its device (each rank): virtual trials only, else a no-op.

    A trainable that calls it runs unchanged on the Dask executor (where real
    allocations are measured). In a trial of a :class:`VirtualTimeExecutor` with
    ``gpus=``, the figure counts against the trial's virtual device, its peak is
    reported as ``gpu_memory_peak_bytes``, and going past what the device has
    left raises :class:`OutOfMemoryError`.

    Args:
        nbytes: bytes, or an amount such as ``"12GiB"``.

    Raises:
        OutOfMemoryError: the device's trials would hold more than its memory.
        RuntimeError: the trial holds no virtual GPU (its request has no ``GPU``/``GPU_memory``).
    """
    session = _current_session()
    if isinstance(session, _VirtualSession):
        from ..execution._gpu_memory import parse_memory

        amount = 0.0 if nbytes == 0 else parse_memory(nbytes, "use_gpu_memory(nbytes)")
        session.executor._use_memory(session.spec.trial_id, amount)


def now() -> float:
    """The clock trials see: virtual seconds in a trial of the :class:`VirtualTimeExecutor`, else ``time.time()``."""
    session = _current_session()
    if isinstance(session, _VirtualSession):
        return session.executor.now()
    return _time.time()


def _locked() -> threading.Lock:
    lock = threading.Lock()
    lock.acquire()
    return lock


class _Runner:
    """A thread that runs real trainables' trials, one after another (kept for the next trial, as Dask tasks chain).

    Control goes back and forth through two locks held by default: the loop
    releases ``to_trial`` and waits on ``to_loop``; the trial's thread does the
    opposite, so exactly one of the two runs at any moment.
    """

    def __init__(self) -> None:
        self.to_trial = _locked()
        self.to_loop = _locked()
        self.trial: _TTrial | None = None  # None when it is resumed: leave
        self.thread: threading.Thread | None = None


class _TTrial:
    """A real trainable's trial: its runner and the hand-over of control between it and the loop."""

    def __init__(self, spec: TrialSpec, slots: int, started_at: float) -> None:
        self.spec = spec
        self.slots = slots
        self.seq = 0
        self.started_at = started_at
        self.last_report_at = started_at
        self.slept = False  # the trial slept (virtually) since it was last resumed after a report
        self.waiting = False  # its report waits for answer()
        self.pending: tuple[Any, ...] | None = None  # a report to deliver when its iteration's time is up
        self.inbox: tuple[Any, ...] | None = None  # what the trial finds when it resumes
        self.outbox: tuple[Any, ...] | None = None  # why it handed control back
        self.runner: _Runner | None = None  # given when it first runs
        self.rank_spec: RankSpec | None = None
        self.done = False


class _VirtualSession(Session):
    """A rank's session whose tuner is the :class:`VirtualTimeExecutor` in the same process."""

    def __init__(self, spec: RankSpec, executor: _VState, trial: _TTrial) -> None:
        super().__init__(spec, cast(Any, None))
        self.executor = executor
        self.trial = trial
        self.aborted: str | None = None
        self.time_hint: float | None = None  # the reported metrics' own time_this_iter_s

    def send(self, msg: proto.Message) -> None:
        if isinstance(msg, proto.Saved):  # a checkpoint asked for by answer(save=True): committed by the loop
            self.executor._ready.append(Saved(self.spec.trial_id, msg.iteration))

    def ask(self, msg: proto.Message) -> proto.Message:
        """The rank's side of the protocol, typed as on Dask; the hand-over to the loop carries its wire tuple."""
        wire = msg.to_wire()
        if isinstance(msg, proto.Report) and msg.result is not None:
            peak = self.executor._mem_peak.get(self.spec.trial_id)
            if peak:  # (as a rank that uses CUDA reports its peak)
                msg.result.setdefault("gpu_memory_peak_bytes", int(peak))
            wire = (*wire, self.time_hint)
        return proto.from_tuner(self._yield(wire))

    def report(self, metrics: dict[str, Any], checkpoint: Any = None) -> None:
        dt = metrics.get("time_this_iter_s") if isinstance(metrics, dict) else None
        self.time_hint = float(dt) if isinstance(dt, (int, float)) and not isinstance(dt, bool) else None
        super().report(metrics, checkpoint)

    def lease(self, request: dict[str, float], n: int, strategy: str) -> list[Any]:
        raise RuntimeError("A Trainer's fit() inside a trial (Train-in-Tune) places its ranks on the tuner's Dask "
                           "cluster; VirtualTimeExecutor has none: run this experiment on the Dask executor.")

    def sleep(self, seconds: float) -> None:
        reply = self._yield(("sleep", seconds))
        if reply[0] == "abort":
            raise TrialAborted(reply[1])

    def _yield(self, msg: tuple[Any, ...]) -> tuple[Any, ...]:
        """Hand control to the loop with ``msg``; returns what the loop resumes this trial with."""
        if self.aborted is not None:
            raise TrialAborted(self.aborted)
        vt = self.trial
        runner = vt.runner
        assert runner is not None
        vt.outbox = msg
        runner.to_loop.release()
        runner.to_trial.acquire()
        reply = vt.inbox
        assert reply is not None
        vt.inbox = None
        if reply[0] == "abort":
            self.aborted = reply[1]
        return reply
