"""Per-trial files that Ray writes and tools read: ``progress.csv`` and TensorBoard event files.

``result.json`` (one JSON line per result) and ``params.json`` are written by
the tuner's loop itself. This callback adds Ray's other two, written by a small
process of its own (the loop only sends each result down a pipe):

- ``progress.csv``: one row per result, nested keys flattened with ``/``; the
  header is the first result's keys (as in Ray, keys that appear later are not
  added as columns); continued after ``Tuner.restore``.
- TensorBoard event files (``events.out.tfevents.*``) in the trial folder, when
  ``tensorboardX`` (or ``torch.utils.tensorboard`` with ``tensorboard``) is
  installed, as Ray does (written by :mod:`._tbevents`, without those packages): every numeric value as a scalar under Ray's tag ``ray/tune/<key>``,
  step ``training_iteration``; so ``tensorboard --logdir <experiment folder>``
  works as it does on Ray results.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import subprocess
import sys
import threading
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


class FileLoggers(ControllerCallback):
    """Writes ``progress.csv`` and TensorBoard files per trial, in a small process of its own.

    The tuner's loop only appends each result, as one JSON line, to a list
    (a few microseconds); a thread hands the lines to the writer process
    (:mod:`._writer_proc`, standard library only) several times a second, so
    that neither a slow disk nor the writer's CPU ever holds up a report. At
    the end of the experiment every line is written and the files are closed
    before ``fit()`` returns.

    Args:
        csv: write ``progress.csv``.
        tensorboard: write TensorBoard event files (when tensorboardX or tensorboard is installed, as Ray does).
    """

    def __init__(self, csv: bool = True, tensorboard: bool = True) -> None:
        self.want_csv = csv
        self.want_tb = tensorboard and tensorboard_available()
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines: collections.deque[bytes] = collections.deque()
        self._wake = threading.Event()
        self._ending = False
        self._thread: threading.Thread | None = None

    def on_experiment_start(self, ctrl: TunerView) -> None:
        if not (self.want_csv or self.want_tb):
            return
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_writer_proc.py")
        try:
            self._proc = subprocess.Popen([sys.executable, script, str(int(self.want_csv)), str(int(self.want_tb))],
                                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                          # a terminal's Ctrl-C is the tuner's to handle (it ends the run and closes
                                          # this process's input); this process ends when its input does
                                          start_new_session=True)
        except OSError as exc:
            logger.warning("tuneplat: cannot start the writer of progress.csv / TensorBoard files: %s", exc)
            return
        self._thread = threading.Thread(target=self._hand_over, name="tuneplat-file-loggers", daemon=True)
        self._thread.start()

    def _hand_over(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        while True:
            self._wake.wait(0.25)
            self._wake.clear()
            ending = self._ending
            batch = []
            while self._lines:
                batch.append(self._lines.popleft())
            if batch:
                try:
                    proc.stdin.write(b"".join(batch))
                    proc.stdin.flush()
                except (OSError, ValueError) as exc:
                    logger.warning("tuneplat: the writer of progress.csv / TensorBoard files stopped (%s); they "
                                   "end here", exc)
                    return
            if ending and not self._lines:
                return

    def _send(self, msg: list[Any]) -> None:
        if self._thread is not None:
            self._lines.append(json.dumps(msg, default=str).encode("utf-8") + b"\n")

    def on_trial_result(self, ctrl: TunerView, trial: Any, result: dict[str, Any]) -> None:
        self._send(["result", trial.trial_id, trial.path, result])

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
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            logger.warning("tuneplat: the writer of progress.csv / TensorBoard files did not finish; stopping it")
            proc.kill()
            proc.wait()
