"""What the loop writes into trial folders: checkpoint commits and retention; params, results, errors.

:class:`CheckpointCommits` is the loop's checkpoint pipeline. A rank stages a
checkpoint and reports; the loop commits it (renames the staged folder into
``checkpoint_NNNNNN``), records it on the trial, tells callbacks, and keeps
``CheckpointConfig.num_to_keep`` of them, deleting the rest. On a local store
all of this is inline. On a slow (remote) store commits and deletions run on
I/O threads so that one slow request never delays another trial's decision:
the trial's later events are held and handed back, in order, after its commit.

Only the loop writes the journal: these objects record events through the
writer the loop gives them.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .._config import CheckpointConfig
from ..execution._executor import Event, Reported
from ..storage._checkpoint import Checkpoint
from ..storage._storage import CheckpointStore, checkpoint_name, retain
from . import _events as ev
from ._journal import to_jsonable
from ._trial import Trial

logger = logging.getLogger("tuneplat")

__all__ = ["COMMIT_POLL_S", "CheckpointCommits", "TrialFiles"]

COMMIT_POLL_S = 0.005  # how often the loop looks at remote commits in flight


class CheckpointCommits:
    """Commits staged checkpoints, records them on their trial, and applies retention.

    Args:
        store: the experiment's checkpoint store.
        checkpoint_config: ``num_to_keep`` and the score to keep by.
        record: the loop's journal writer (``checkpoint_saved``, ``checkpoint_deleted``).
        on_checkpoint: called with ``(trial, checkpoint, metrics)`` for each recorded checkpoint (callbacks).
    """

    def __init__(self, store: CheckpointStore, checkpoint_config: CheckpointConfig | None,
                 record: Callable[[ev.Event], None],
                 on_checkpoint: Callable[[Trial, Checkpoint, dict[str, Any]], None]) -> None:
        self.store = store
        self._config = checkpoint_config
        self._record = record
        self._on_checkpoint = on_checkpoint
        self._io_pool: ThreadPoolExecutor | None = None
        self._in_flight: dict[str, tuple[Future[str | None], Reported]] = {}  # trial id -> (commit, its step)
        self._held: dict[str, list[Event]] = {}  # trial id -> its events that arrived during the commit

    @property
    def in_flight(self) -> bool:
        """Whether a remote commit is running (the loop polls for it every :data:`COMMIT_POLL_S`)."""
        return bool(self._in_flight)

    def hold(self, event: Event) -> bool:
        """Keep ``event`` for later if its trial's checkpoint is being committed; True when it was held."""
        held = self._held.get(getattr(event, "trial_id", ""))
        if held is None:
            return False
        held.append(event)
        return True

    def submit(self, trial: Trial, event: Reported) -> bool:
        """Commit ``event``'s staged checkpoint off the loop thread on a slow store; False: commit it inline."""
        if not (event.staged and self.store.slow):
            return False
        self._in_flight[trial.trial_id] = (
            self._pool().submit(self.store.commit, trial.path, checkpoint_name(event.iteration)), event)
        self._held[trial.trial_id] = []
        return True

    def commit(self, trial: Trial, iteration: int) -> str | None:
        """Commit the checkpoint staged for ``iteration`` now; its path, or None when the tuner cannot see it."""
        return self.store.commit(trial.path, checkpoint_name(iteration))

    def finished(self) -> Iterator[tuple[Reported, str | None, str | None, list[Event]]]:
        """The steps whose remote commit is done: ``(step, path, failure message or None, events held meanwhile)``."""
        for tid, (future, event) in list(self._in_flight.items()):
            if not future.done():
                continue
            del self._in_flight[tid]
            later = self._held.pop(tid)
            try:
                path = future.result()
            except Exception as exc:  # noqa: BLE001 - the trial fails (and is retried); the loop goes on
                yield event, None, (f"committing checkpoint {checkpoint_name(event.iteration)} failed: "
                                    f"{type(exc).__name__}: {exc}"), later
            else:
                yield event, path, None, later

    def record(self, trial: Trial, iteration: int, result: dict[str, Any], path: str) -> None:
        """A committed checkpoint: on the trial, in the journal, to the callbacks; then retention."""
        # (it replaces one of the same iteration that a retry reached again)
        self._record(ev.CheckpointSaved(trial_id=trial.trial_id, iteration=iteration, path=path,
                                        metrics=to_jsonable(result)))
        self._on_checkpoint(trial, trial.checkpoints[-1][0], result)
        self.apply_retention(trial)

    def saved(self, trial: Trial, iteration: int) -> None:
        """A checkpoint asked for by ``answer(save=True)`` (a result marked ``should_checkpoint``) was staged."""
        result = next((r for r in reversed(trial.results) if r.get("training_iteration") == iteration),
                      trial.last_result)
        path = self.commit(trial, iteration)  # (rare: inline on every store)
        if path is not None:
            self.record(trial, iteration, result, path)

    def apply_retention(self, trial: Trial) -> None:
        """Delete the trial's checkpoints beyond ``CheckpointConfig.num_to_keep`` (by score, or the oldest)."""
        cc = self._config
        assert cc is not None
        for pair in retain(trial.checkpoints, cc.num_to_keep, cc.checkpoint_score_attribute, cc.checkpoint_score_order):
            if self.store.slow:
                self._pool().submit(self._delete, pair[0].path)
            else:
                self._delete(pair[0].path)
            self._record(ev.CheckpointDeleted(trial_id=trial.trial_id, path=pair[0].path))

    def close(self) -> None:
        """Wait for deletions (and commits of an ended loop) to finish."""
        if self._io_pool is not None:
            self._io_pool.shutdown(True)

    def _pool(self) -> ThreadPoolExecutor:
        if self._io_pool is None:
            self._io_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tuneplat-io")
        return self._io_pool

    def _delete(self, path: str) -> None:
        try:
            self.store.delete(path)
        except Exception as exc:  # noqa: BLE001 - a leftover folder costs space, not correctness
            logger.warning("tuneplat: could not delete checkpoint %s: %s", path, exc)


class TrialFiles:
    """The files the loop keeps in each trial's folder, as Ray: ``params.json``, ``result.json``, ``error.txt``.

    ``result.json`` (one JSON line per result) follows the journal's supersede
    rule: when a retry continues from a checkpoint, :meth:`supersede` cuts it
    back to the results up to the checkpoint's iteration, so each iteration is
    in it once. Lines wait in memory until :meth:`flush` appends them; a full
    disk (``ENOSPC``) keeps them waiting for the next flush (said once).
    """

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}
        self._paths: dict[str, str] = {}
        self._waiting: dict[str, bytes] = {}
        self._configs: dict[str, tuple[Any, str]] = {}
        self._told_full = False

    @staticmethod
    def write_params(trial_path: str, config: Any) -> None:
        """The trial's config in ``params.json`` of its folder."""
        with open(os.path.join(trial_path, "params.json"), "w", encoding="utf-8") as f:
            json.dump(to_jsonable(config), f, indent=2, sort_keys=True)

    @staticmethod
    def write_error(trial: Trial) -> str | None:
        """The trial's error and traceback in ``error.txt``; its path, or None when it could not be written."""
        path = os.path.join(trial.path, "error.txt")
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write((trial.error_traceback or trial.error or "error").rstrip() + "\n")
        except OSError:
            logger.debug("tuneplat: could not write %s", path, exc_info=True)
            return None
        return path

    def write_result(self, trial: Trial, line: str) -> None:
        """Append one result (a JSON line) to the trial's ``result.json`` (written at the next :meth:`flush`)."""
        tid = trial.trial_id
        self._paths[tid] = os.path.join(trial.path, "result.json")
        line = self._with_config(trial, line)
        self._waiting[tid] = self._waiting.get(tid, b"") + line.encode("utf-8") + b"\n"

    def _with_config(self, trial: Trial, line: str) -> str:
        """The line with the trial's ``"config"`` appended, as Ray's result.json lines carry it (encoded once per
        config: PBT's exploit gives a trial a new config object)."""
        if not line.endswith("}") or '"config":' in line:
            return line
        cached = self._configs.get(trial.trial_id)
        if cached is None or cached[0] is not trial.config:
            cached = self._configs[trial.trial_id] = (trial.config, json.dumps(to_jsonable(trial.config)))
        return f'{line[:-1]}{", " if len(line) > 2 else ""}"config": {cached[1]}}}'

    def flush(self) -> None:
        for tid in [t for t, data in self._waiting.items() if data]:
            self._flush_one(tid)

    def _flush_one(self, tid: str) -> bool:
        data = self._waiting.get(tid, b"")
        try:
            fd = self._fds.get(tid)
            if fd is None:
                fd = self._fds[tid] = os.open(self._paths[tid], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            while data:
                data = data[os.write(fd, data):]
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            if not self._told_full:
                self._told_full = True
                logger.warning("tuneplat: no space left writing %s; its results wait and are written when space "
                               "comes back", self._paths[tid])
            return False
        finally:
            self._waiting[tid] = data
        return True

    def supersede(self, trial: Trial, after_iteration: int) -> None:
        """Keep in ``result.json`` only the results up to ``after_iteration`` (the journal's rule for a retry)."""
        tid = trial.trial_id
        path = self._paths.get(tid) or os.path.join(trial.path, "result.json")
        self._paths[tid] = path
        waiting = self._waiting.pop(tid, b"")
        self.close(tid)
        try:
            with open(path, "rb") as f:
                old = f.read()
        except FileNotFoundError:
            old = b""
        lines = (old + waiting).splitlines(keepends=True)
        kept = [ln for ln in lines if _iteration(ln) <= after_iteration]
        if len(kept) == len(lines):
            self._waiting[tid] = waiting
            return
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.writelines(kept)
        os.replace(tmp, path)

    def close(self, trial_id: str) -> None:
        """The trial's attempt ended: write what waits and close its file (a later attempt appends)."""
        if self._waiting.get(trial_id):
            self._flush_one(trial_id)
        fd = self._fds.pop(trial_id, None)
        if fd is not None:
            os.close(fd)

    def close_all(self, guard: Callable[..., None]) -> None:
        """Close every file, each through ``guard`` (the loop's clean-up wrapper)."""
        for tid in list(set(self._fds) | set(self._waiting)):
            guard(self.close, tid)
        self._fds.clear()


def _iteration(line: bytes) -> float:
    """A ``result.json`` line's ``training_iteration`` (0 for a line without one; a torn line counts as after)."""
    try:
        value = json.loads(line).get("training_iteration", 0)
    except (ValueError, AttributeError):
        return float("inf")
    return value if isinstance(value, (int, float)) else 0
