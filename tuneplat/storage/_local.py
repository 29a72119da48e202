"""Crash-safe file operations for checkpoints, and where experiments are stored.

A checkpoint is copied into ``<trial_dir>/.staging_<name>/`` by each rank
(every file written under a temporary name, fsynced, then renamed into
place), then committed by the tuner with one atomic ``rename`` of the folder
to ``<trial_dir>/<name>/``. A crash at any moment therefore leaves either the
previous checkpoints only, or the new one whole; never a partial folder under
a final ``checkpoint_*`` name. Staging folders left by a crash are removed by
:func:`clean_staging` (called when a trial starts) and :func:`list_checkpoints`.

Replacing an existing checkpoint of the same name (a retry that reaches the
same iteration again) moves the old one aside to ``.trash_<name>`` first; if a
crash strikes between the two renames, :func:`clean_staging` puts the old one
back.
"""

from __future__ import annotations

import math
import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

__all__ = [
    "PREFIX",
    "STAGING",
    "TRASH",
    "checkpoint_name",
    "clean_staging",
    "commit_checkpoint",
    "fsync_dir",
    "list_checkpoints",
    "retain",
    "stage_checkpoint",
    "staging_dir",
]

PREFIX = "checkpoint_"
STAGING = ".staging_"
TRASH = ".trash_"
_TMP_MARK = ".tmp-"

P = TypeVar("P")


def checkpoint_name(iteration: int) -> str:
    return f"{PREFIX}{iteration:06d}"


def staging_dir(trial_dir: str, name: str) -> str:
    return os.path.join(trial_dir, f"{STAGING}{name}")


def fsync_dir(path: str) -> None:
    """Make a directory's entries (renames, new files) durable; a no-op where unsupported."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _copy_fsync(src: str, dst: str) -> None:
    """Copy ``src`` to ``dst`` whole or not at all: temp name, fsync, rename.

    Two ranks writing the same file name never interleave their bytes: the
    last rename wins with one whole copy.
    """
    tmp = f"{dst}{_TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        with open(src, "rb") as fi, open(tmp, "wb") as fo:
            shutil.copyfileobj(fi, fo, 1 << 20)
            fo.flush()
            os.fsync(fo.fileno())
        shutil.copymode(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def stage_checkpoint(src: str, trial_dir: str, name: str) -> str:
    """Copy ``src``'s files (fsynced) into the staging folder of checkpoint ``name``.

    Every rank of a group stages into the same folder, so the committed
    checkpoint holds the union of the ranks' files (their shards).

    Raises:
        FileNotFoundError: ``src`` is not a directory.
    """
    if not os.path.isdir(src):
        raise FileNotFoundError(f"checkpoint folder {src!r} does not exist (was it deleted before report()?)")
    dest = staging_dir(trial_dir, name)
    os.makedirs(dest, exist_ok=True)
    for root, _dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        target = os.path.join(dest, rel) if rel != "." else dest
        os.makedirs(target, exist_ok=True)
        for f in files:
            _copy_fsync(os.path.join(root, f), os.path.join(target, f))
        fsync_dir(target)
    fsync_dir(trial_dir)
    return dest


def _drop_temp_files(folder: str) -> None:
    """Remove ``*.tmp-*`` files a killed rank left behind while staging."""
    for root, _dirs, files in os.walk(folder):
        for f in files:
            if _TMP_MARK in f:
                try:
                    os.unlink(os.path.join(root, f))
                except OSError:
                    pass


def commit_checkpoint(trial_dir: str, name: str) -> str | None:
    """Atomically publish staged checkpoint ``name``; None when nothing was staged."""
    src = staging_dir(trial_dir, name)
    if not os.path.isdir(src):
        return None
    _drop_temp_files(src)
    final = os.path.join(trial_dir, name)
    trash = os.path.join(trial_dir, f"{TRASH}{name}")
    if os.path.exists(final):  # a retry re-reporting the same iteration: replace it
        if os.path.exists(trash):
            shutil.rmtree(trash)
        os.rename(final, trash)
    os.rename(src, final)
    fsync_dir(trial_dir)
    if os.path.exists(trash):
        shutil.rmtree(trash, ignore_errors=True)
    return final


def clean_staging(trial_dir: str) -> None:
    """Undo what a crash left in ``trial_dir``: drop staging folders, restore half-replaced checkpoints.

    Call it only while no rank of the trial is running.
    """
    if not os.path.isdir(trial_dir):
        return
    changed = False
    for entry in os.listdir(trial_dir):
        path = os.path.join(trial_dir, entry)
        if entry.startswith(STAGING):
            shutil.rmtree(path, ignore_errors=True)
            changed = True
        elif entry.startswith(TRASH):
            final = os.path.join(trial_dir, entry[len(TRASH):])
            if os.path.exists(final):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.rename(path, final)  # the crash struck between the two renames of a replace
            changed = True
    if changed:  # (nothing to make durable otherwise: an fsync costs ~1-2 ms, at every trial start)
        fsync_dir(trial_dir)


def list_checkpoints(trial_dir: str) -> list[str]:
    """Committed (whole) checkpoint folders, oldest first, after :func:`clean_staging`."""
    if not os.path.isdir(trial_dir):
        return []
    clean_staging(trial_dir)
    return [os.path.join(trial_dir, e) for e in sorted(os.listdir(trial_dir))
            if e.startswith(PREFIX) and os.path.isdir(os.path.join(trial_dir, e))]


def _score_key(metrics: Mapping[str, Any], attribute: str, order: str) -> float:
    """Lower is better; a missing or non-finite value counts as the worst."""
    v = metrics.get(attribute)
    if isinstance(v, bool):
        return math.inf
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.inf
    if not math.isfinite(f):
        return math.inf
    return -f if order == "max" else f


def retain(checkpoints: Sequence[P], num_to_keep: int | None, score_attribute: str | None,
           order: str = "max") -> list[P]:
    """Which ``(checkpoint, metrics)`` pairs (oldest first) ``CheckpointConfig`` lets go.

    Ray Tune's rule: keep the best ``num_to_keep`` by ``score_attribute``
    (``order`` "max" or "min"; ties favour the newer one; a missing or
    non-finite score ranks worst), or the latest ``num_to_keep`` when no
    attribute is given, and never delete the latest checkpoint, which a
    restart resumes from (so ``num_to_keep + 1`` may stay on disk).

    Returns:
        The pairs to delete, oldest first.

    Example:
        >>> pairs = [("a", {"acc": 0.9}), ("b", {"acc": 0.5}), ("c", {"acc": 0.7}), ("d", {"acc": 0.1})]
        >>> retain(pairs, 2, "acc", "max")
        [('b', {'acc': 0.5})]
    """
    if num_to_keep is None or len(checkpoints) <= num_to_keep:
        return []
    indexed = list(enumerate(checkpoints))
    if score_attribute is None:
        keep = {i for i, _ in indexed[-num_to_keep:]}
    else:
        ranked = sorted(indexed, key=lambda ip: (_score_key(ip[1][1], score_attribute, order), -ip[0]))  # type: ignore[index]
        keep = {i for i, _ in ranked[:num_to_keep]}
    keep.add(len(checkpoints) - 1)
    return [p for i, p in indexed if i not in keep]
