"""Per-trial files that Ray writes and tools read: ``progress.csv`` and TensorBoard event files.

``result.json`` (one JSON line per result) and ``params.json`` are written by
the tuner's loop itself. This callback adds Ray's other two, written by one
background thread so that the loop only puts each result on a queue:

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
import csv
import logging
import os
import threading
from numbers import Number
from typing import Any

from .._callbacks import ControllerCallback
from ..search._space import flatten_dict
from ._tbevents import EventFile

__all__ = ["FileLoggers", "tensorboard_available"]

logger = logging.getLogger("tuneplat")

#: how often the writer thread takes what the loop queued (the files are complete when the experiment ends)
FLUSH_S = 0.5


def tensorboard_available() -> bool:
    """Whether ``tensorboardX`` or TensorBoard (for ``torch.utils.tensorboard``) is installed (Ray's condition).

    The files are written by tuneplat's own small writer (:mod:`._tbevents`): no
    writer thread per trial and no import of those packages on the tuner's path.
    """
    import importlib.util

    return any(importlib.util.find_spec(m) is not None for m in ("tensorboardX", "tensorboard"))


class _TrialFiles:
    def __init__(self, path: str, want_csv: bool, want_tb: bool) -> None:
        self.path = path
        self.csv_file: Any = None
        self.csv: csv.DictWriter[str] | None = None
        self.want_csv = want_csv
        self.want_tb = want_tb
        self.tb: EventFile | None = None

    def write(self, result: dict[str, Any]) -> None:
        flat = flatten_dict(result)
        if self.want_csv:
            self._write_csv(flat)
        if self.want_tb:
            self._write_tb(flat)

    def _write_csv(self, flat: dict[str, Any]) -> None:
        if self.csv is None:
            name = os.path.join(self.path, "progress.csv")
            header: list[str] | None = None
            if os.path.isfile(name) and os.path.getsize(name) > 0:  # a restored trial goes on with its columns
                with open(name, newline="", encoding="utf-8") as f:
                    header = next(csv.reader(f), None)
            self.csv_file = open(name, "a", newline="", encoding="utf-8")  # noqa: SIM115 - closed at trial end
            self.csv = csv.DictWriter(self.csv_file, fieldnames=header or list(flat), extrasaction="ignore")
            if not header:
                self.csv.writeheader()
        self.csv.writerow(flat)

    def _write_tb(self, flat: dict[str, Any]) -> None:
        if self.tb is None:
            self.tb = EventFile(self.path)
        raw = flat.get("training_iteration")
        step = int(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None
        stamp = flat.get("timestamp")
        self.tb.scalars(((f"ray/tune/{k}", float(v)) for k, v in flat.items()
                         if isinstance(v, Number) and not isinstance(v, bool) and k != "pid"), step,
                        float(stamp) if isinstance(stamp, (int, float)) else None)

    def flush(self) -> None:
        if self.csv_file is not None:
            self.csv_file.flush()
        if self.tb is not None:
            self.tb.flush()

    def close(self) -> None:
        if self.csv_file is not None:
            self.csv_file.close()
            self.csv_file, self.csv = None, None
        if self.tb is not None:
            self.tb.close()
            self.tb = None


class FileLoggers(ControllerCallback):
    """Writes ``progress.csv`` and TensorBoard files per trial from a background thread.

    Args:
        csv: write ``progress.csv``.
        tensorboard: write TensorBoard event files (when a writer library is installed).
    """

    def __init__(self, csv: bool = True, tensorboard: bool = True) -> None:
        self.want_csv = csv
        self.want_tb = tensorboard and tensorboard_available()
        # the loop appends (no lock, no wake-up per result); the thread drains every FLUSH_S and at the end
        self._queue: collections.deque[tuple[Any, ...]] = collections.deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed = False

    def on_experiment_start(self, ctrl: Any) -> None:
        if self.want_csv or self.want_tb:
            self._thread = threading.Thread(target=self._run, name="tuneplat-file-loggers", daemon=True)
            self._thread.start()

    def on_trial_result(self, ctrl: Any, trial: Any, result: dict[str, Any]) -> None:
        if self._thread is not None:
            self._queue.append(("result", trial.trial_id, trial.path, dict(result)))

    def on_trial_complete(self, ctrl: Any, trial: Any) -> None:
        if self._thread is not None:
            self._queue.append(("end", trial.trial_id))

    def on_experiment_end(self, ctrl: Any, status: str) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=60)
            self._thread = None

    def _run(self) -> None:
        files: dict[str, _TrialFiles] = {}
        while True:
            stopping = self._stop.wait(FLUSH_S)
            while self._queue:
                item = self._queue.popleft()
                try:
                    if item[0] == "result":
                        _, trial_id, path, result = item
                        tf = files.get(trial_id)
                        if tf is None:
                            tf = files[trial_id] = _TrialFiles(path, self.want_csv, self.want_tb)
                        tf.write(result)
                    elif item[0] == "end" and item[1] in files:
                        files.pop(item[1]).close()
                except Exception as exc:  # noqa: BLE001 - these files are a convenience: never end the experiment
                    if not self._failed:
                        self._failed = True
                        logger.warning("tuneplat: could not write progress.csv / TensorBoard files: %s", exc)
            for tf in files.values():
                try:
                    tf.flush()
                except Exception:  # noqa: BLE001
                    logger.debug("tuneplat: flushing a trial's log files failed", exc_info=True)
            if stopping:
                break
        for tf in files.values():
            try:
                tf.close()
            except Exception:  # noqa: BLE001
                logger.debug("tuneplat: closing a trial's log files failed", exc_info=True)
