"""A trial's working directory and captured output (Ray's ``RAY_CHDIR_TO_TRIAL_DIR`` and ``RunConfig(log_to_file=)``).

Applied by the rank runner around the trainable's call, on the worker:

* each trial runs in its own trial folder as working directory (Ray's default),
  so relative writes of concurrent trials do not collide; ``TUNEPLAT_CHDIR_TO_TRIAL_DIR=0``
  (or Ray's ``RAY_CHDIR_TO_TRIAL_DIR=0``) in the tuner's environment turns it off. The
  tuner's working directory is in ``TUNE_ORIG_WORKING_DIR`` (Ray's variable) meanwhile;
* with ``RunConfig(log_to_file=True)`` what the trial prints (``sys.stdout`` /
  ``sys.stderr``) is also written to ``stdout`` and ``stderr`` in the trial folder
  (a string: one file for both; a pair: the two file names), as Ray does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = ["TrialIO", "apply_trial_io", "chdir_enabled", "log_files", "make_trial_io"]

logger = logging.getLogger("tuneplat")


@dataclass(frozen=True)
class TrialIO:
    """What the runner does around a trial's user code (shipped in the rank's spec)."""

    chdir: bool = False
    stdout: str | None = None  # a file name in the trial folder
    stderr: str | None = None
    orig_cwd: str | None = None  # the tuner's working directory (TUNE_ORIG_WORKING_DIR)


def chdir_enabled() -> bool:
    """``TUNEPLAT_CHDIR_TO_TRIAL_DIR`` (else Ray's ``RAY_CHDIR_TO_TRIAL_DIR``), default on."""
    for name in ("TUNEPLAT_CHDIR_TO_TRIAL_DIR", "RAY_CHDIR_TO_TRIAL_DIR"):
        raw = os.environ.get(name, "").strip().lower()
        if not raw:
            continue
        if raw in ("0", "false", "no", "off"):
            return False
        if raw in ("1", "true", "yes", "on"):
            return True
        raise ValueError(f"{name}={raw!r}: set it to 1 (each trial runs in its trial folder, the default) or 0")
    return True


def log_files(log_to_file: Any) -> tuple[str | None, str | None]:
    """``RunConfig.log_to_file`` as (stdout file, stderr file) names: Ray's three forms."""
    if log_to_file is None or log_to_file is False:
        return None, None
    if log_to_file is True:
        return "stdout", "stderr"
    if isinstance(log_to_file, str) and log_to_file.strip():
        return log_to_file, log_to_file
    if (isinstance(log_to_file, (tuple, list)) and len(log_to_file) == 2
            and all(isinstance(x, str) and x.strip() for x in log_to_file)):
        return log_to_file[0], log_to_file[1]
    raise ValueError(f"The value of `RunConfig.log_to_file` is {log_to_file!r}, but must be True/False, a file name "
                     "(stdout and stderr together) or a pair of file names (stdout, stderr), as in Ray.")


def make_trial_io(log_to_file: Any, chdir: bool = True) -> TrialIO:
    """The experiment's :class:`TrialIO` (``chdir``: whether this kind of run changes directory at all)."""
    out, err = log_files(log_to_file)
    return TrialIO(chdir=chdir and chdir_enabled(), stdout=out, stderr=err, orig_cwd=os.getcwd())


class _Tee:
    """Writes to the worker's own stream and to the trial's file (Ray's ``log_to_file`` keeps both)."""

    def __init__(self, stream: TextIO, file: TextIO) -> None:
        self._stream = stream
        self._file = file

    def write(self, text: str) -> int:
        self._file.write(text)
        try:
            self._stream.write(text)
        except (OSError, ValueError):
            pass
        return len(text)

    def flush(self) -> None:
        self._file.flush()
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _remove(items: list[str], item: str) -> None:
    with contextlib.suppress(ValueError):
        items.remove(item)


@contextlib.contextmanager
def apply_trial_io(io: TrialIO | None, trial_dir: str) -> Iterator[None]:
    """Run the body in the trial folder and with its output captured, as ``io`` says; restore everything after."""
    if io is None or not (io.chdir or io.stdout or io.stderr):
        yield
        return
    with contextlib.ExitStack() as stack:
        if io.stdout or io.stderr:
            try:
                os.makedirs(trial_dir, exist_ok=True)
            except OSError as exc:
                logger.warning("tuneplat: cannot create the trial folder %s on this worker (%s): the trial's output "
                               "is not written to files", trial_dir, exc)
            else:
                opened: dict[str, TextIO] = {}
                for name in {io.stdout, io.stderr} - {None}:
                    assert name is not None
                    opened[name] = stack.enter_context(open(os.path.join(trial_dir, name), "a", buffering=1))
                saved = sys.stdout, sys.stderr

                def restore() -> None:
                    for f in opened.values():
                        with contextlib.suppress(OSError, ValueError):
                            f.flush()
                    sys.stdout, sys.stderr = saved

                stack.callback(restore)
                if io.stdout:
                    sys.stdout = _Tee(saved[0], opened[io.stdout])  # type: ignore[assignment]
                if io.stderr:
                    sys.stderr = _Tee(saved[1], opened[io.stderr])  # type: ignore[assignment]
        if io.chdir:
            try:
                os.makedirs(trial_dir, exist_ok=True)
                before = os.getcwd()
                os.chdir(trial_dir)
            except OSError as exc:
                logger.warning("tuneplat: cannot run the trial in its folder %s on this worker (%s); it runs in %s",
                               trial_dir, exc, os.getcwd())
            else:
                stack.callback(os.chdir, before)
                if ("" in sys.path or "." in sys.path) and before not in sys.path:  # imports from the working
                    # directory keep finding its modules
                    sys.path.append(before)
                    stack.callback(_remove, sys.path, before)
                had = os.environ.get("TUNE_ORIG_WORKING_DIR")
                os.environ["TUNE_ORIG_WORKING_DIR"] = io.orig_cwd or before

                def unset() -> None:
                    if had is None:
                        os.environ.pop("TUNE_ORIG_WORKING_DIR", None)
                    else:
                        os.environ["TUNE_ORIG_WORKING_DIR"] = had

                stack.callback(unset)
        yield
