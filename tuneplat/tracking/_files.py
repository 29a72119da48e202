"""Per-trial files that Ray writes and tools read: ``progress.csv`` and TensorBoard event files.

``result.json`` (one JSON line per result) and ``params.json`` are written by
the tuner's loop itself. This callback adds Ray's other two, written by a small
process of its own (the loop only sends each result down a pipe):

- ``progress.csv``: one row per result, nested keys flattened with ``/``; the
  header is the first result's keys (as in Ray, keys that appear later are not
  added as columns); continued after ``Tuner.restore``.
- Both follow the journal's supersede rule: when a retry continues from a
  checkpoint, the rows and events after the checkpoint's iteration are removed
  (the retry writes them again), so each iteration is in them once.
- TensorBoard event files (``events.out.tfevents.*``) in the trial folder, when
  ``tensorboardX`` (or ``torch.utils.tensorboard`` with ``tensorboard``) is
  installed, as Ray does (written by :mod:`._tbevents`, without those packages): every numeric value as a scalar under Ray's tag ``ray/tune/<key>``,
  step ``training_iteration``; so ``tensorboard --logdir <experiment folder>``
  works as it does on Ray results.
"""

from __future__ import annotations

import atexit
import collections
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from ..core._callbacks import ControllerCallback

if TYPE_CHECKING:
    from ..core._view import TunerView

__all__ = ["FileLoggers", "tensorboard_available"]

logger = logging.getLogger("tuneplat")


def tensorboard_available() -> bool:
    """Whether ``tensorboardX`` or TensorBoard (for ``torch.utils.tensorboard``) is installed (Ray's condition).

    The files are written by tuneplat's own small writer (:mod:`._tbevents`): no
    writer thread per trial and no import of those packages on the tuner's path.
    """
    import importlib.util

    return any(importlib.util.find_spec(m) is not None for m in ("tensorboardX", "tensorboard"))


class _Writer:
    """The writer process (:mod:`._writer_proc`), one per tuner process and kind, kept between experiments.

    Starting a Python process costs tens of milliseconds of CPU and its exit
    some more; a process fitting many experiments (scikit-learn searches,
    notebooks, benchmarks) pays that once. Each experiment ends with a *sync*:
    the writer closes that experiment's files and answers, so everything is on
    disk before ``fit()`` returns. The process ends when the tuner's process
    does (its input closes) or at interpreter exit.
    """

    def __init__(self, want_csv: bool, want_tb: bool) -> None:
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_writer_proc.py")
        self.proc = subprocess.Popen([sys.executable, script, str(int(want_csv)), str(int(want_tb))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     # a terminal's Ctrl-C is the tuner's to handle (it ends the run and then
                                     # the experiment's files); this process ends when its input does
                                     start_new_session=True)
        self.owner = os.getpid()
        self._write_lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._answers = b""

    def usable(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def write(self, data: bytes) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        with self._write_lock:
            stdin.write(data)
            stdin.flush()

    def sync(self, trial_ids: list[str], timeout: float) -> bool:
        """Close these trials' files in the writer; True once it says they are written and closed."""
        token = uuid.uuid4().hex.encode()
        with self._sync_lock:
            try:
                self.write(json.dumps(["sync", token.decode(), trial_ids]).encode() + b"\n")
            except (OSError, ValueError):
                return False
            out = self.proc.stdout
            assert out is not None
            deadline = time.monotonic() + timeout
            while True:
                *answers, self._answers = self._answers.split(b"\n")
                if token in answers:
                    return True
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([out], [], [], left)[0]:
                    return False
                chunk = os.read(out.fileno(), 4096)
                if not chunk:
                    return False
                self._answers += chunk

    def close(self, timeout: float = 30.0) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()


_writers: dict[tuple[bool, bool], _Writer] = {}
_writers_lock = threading.Lock()


def _writer(want_csv: bool, want_tb: bool) -> _Writer:
    with _writers_lock:
        w = _writers.get((want_csv, want_tb))
        if w is None or not w.usable():
            if w is not None and w.owner == os.getpid():
                w.close(timeout=5)  # it died: reap it
            w = _writers[(want_csv, want_tb)] = _Writer(want_csv, want_tb)
        return w


@atexit.register
def _close_writers() -> None:
    with _writers_lock:
        for w in _writers.values():
            if w.owner == os.getpid():
                w.close()
        _writers.clear()


class FileLoggers(ControllerCallback):
    """Writes ``progress.csv`` and TensorBoard files per trial, in a small process of its own.

    The tuner's loop only appends each result, as one JSON line, to a list
    (a few microseconds); a thread hands the lines to the writer process
    (:mod:`._writer_proc`, standard library only) ten times a second, or at
    once when a burst of them waits, so that neither a slow disk nor the
    writer's CPU ever holds up a report and little is left to write at the
    end. At the end of the experiment every line is written and the
    experiment's files are closed before ``fit()`` returns. The writer process
    is kept for the next experiment in the same process (see :class:`_Writer`).

    Args:
        csv: write ``progress.csv``.
        tensorboard: write TensorBoard event files (when tensorboardX or tensorboard is installed, as Ray does).
    """

    #: lines are handed to the writer every PERIOD_S seconds, or as soon as BATCH of them wait (whichever is first)
    PERIOD_S = 0.1
    BATCH = 256

    def __init__(self, csv: bool = True, tensorboard: bool = True) -> None:
        self.want_csv = csv
        self.want_tb = tensorboard and tensorboard_available()
        self._proc: _Writer | None = None
        self._lines: collections.deque[bytes] = collections.deque()
        self._wake = threading.Event()
        self._ending = False
        self._thread: threading.Thread | None = None
        self._trial_ids: set[str] = set()
        self._broken = False

    def on_experiment_start(self, ctrl: TunerView) -> None:
        if not (self.want_csv or self.want_tb):
            return
        try:
            self._proc = _writer(self.want_csv, self.want_tb)
        except OSError as exc:
            logger.warning("tuneplat: cannot start the writer of progress.csv / TensorBoard files: %s", exc)
            return
        self._ending = self._broken = False
        self._trial_ids.clear()
        self._thread = threading.Thread(target=self._hand_over, name="tuneplat-file-loggers", daemon=True)
        self._thread.start()

    def _hand_over(self) -> None:
        proc = self._proc
        assert proc is not None
        while True:
            self._wake.wait(self.PERIOD_S)
            self._wake.clear()
            ending = self._ending
            batch = []
            while self._lines:
                batch.append(self._lines.popleft())
            if batch:
                try:
                    proc.write(b"".join(batch))
                except (OSError, ValueError) as exc:
                    self._broken = True
                    logger.warning("tuneplat: the writer of progress.csv / TensorBoard files stopped (%s); they "
                                   "end here", exc)
                    return
            if ending and not self._lines:
                return

    def _send(self, msg: list[Any]) -> None:
        if self._thread is not None:
            lines = self._lines
            lines.append(json.dumps(msg, default=str).encode("utf-8") + b"\n")
            if len(lines) == self.BATCH:  # a burst: hand it over now, so the writer works while the run goes on
                self._wake.set()

    def on_trial_result(self, ctrl: TunerView, trial: Any, result: dict[str, Any]) -> None:
        if self._thread is not None:
            self._trial_ids.add(trial.trial_id)
            self._send(["result", trial.trial_id, trial.path, result])

    def on_trial_superseded(self, ctrl: TunerView, trial: Any, after_iteration: int) -> None:
        # a retry continues from a checkpoint: the files keep only the results up to it, as the journal does
        if self._thread is not None:
            self._send(["supersede", trial.trial_id, trial.path, after_iteration])

    def on_trial_complete(self, ctrl: TunerView, trial: Any) -> None:
        self._send(["end", trial.trial_id])

    def on_experiment_end(self, ctrl: TunerView, status: str) -> None:
        proc, thread = self._proc, self._thread
        self._proc = self._thread = None
        if proc is None or thread is None:
            return
        self._ending = True
        self._wake.set()
        thread.join()
        if self._broken or not proc.sync(sorted(self._trial_ids), timeout=60):
            if not self._broken:
                logger.warning("tuneplat: the writer of progress.csv / TensorBoard files did not finish; stopping it")
            with _writers_lock:
                for key, w in list(_writers.items()):
                    if w is proc:
                        del _writers[key]
            proc.proc.kill()
            proc.close(timeout=10)
