"""Checkpoints and experiment files on a filesystem reached through fsspec (``s3://``, ``gs://``, ``abfs://``, ...).

There the tuner keeps the experiment's small files (journal, tuner.pkl, result.json per trial, Optuna's journal) in
a local cache folder and uploads them in the background (every TUNEPLAT_SYNC_PERIOD_S, and at the end of fit());
checkpoints go straight from the ranks to the remote filesystem. The commit protocol mirrors the local one, adapted
to filesystems whose "rename" may be a copy (object stores): ranks upload into ``<trial>/.staging_<name>/``; once
every rank of the group has uploaded, the tuner moves the files to ``<trial>/<name>/`` and then writes the manifest
``<trial>/<name>/.tuneplat_manifest.json`` (one atomic object write) last. A checkpoint folder without its manifest
is not a checkpoint: it is never loaded, and it is removed when the trial starts again.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from .._settings import env_seconds
from ._local import _TMP_MARK, PREFIX, STAGING, TRASH

__all__ = [
    "MANIFEST",
    "STAGED_MARK",
    "ExperimentSync",
    "fetch_experiment",
    "fs_for_url",
    "remote_clean_staging",
    "remote_commit_checkpoint",
    "remote_copy_checkpoint",
    "remote_delete_checkpoint",
    "remote_download",
    "remote_is_committed",
    "remote_stage_checkpoint",
    "rjoin",
]

MANIFEST = ".tuneplat_manifest.json"
#: written into a remote staging folder by every rank that staged there (see :func:`remote_stage_checkpoint`)
STAGED_MARK = ".tuneplat_staged"


def fs_for_url(url: str) -> tuple[Any, str]:
    """The fsspec filesystem and the path in it for ``url``, with a clear error when the protocol is unknown."""
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        scheme = urlparse(url).scheme
        raise ValueError(f"storage_path={url!r}: fsspec cannot open {scheme}:// ({exc}). Install the fsspec "
                         f"implementation for it (s3:// → pip install s3fs, gs:// → gcsfs, abfs:// → adlfs), or "
                         "pass RunConfig(storage_filesystem=...) with a configured filesystem.") from exc
    return fs, path


def rjoin(base: str, *parts: str) -> str:
    """Join remote path parts with '/' (a URL stays a URL)."""
    out = base.rstrip("/")
    for p in parts:
        out = f"{out}/{p.strip('/')}"
    return out


def _strip(fs: Any, path: str) -> str:
    return fs._strip_protocol(path).rstrip("/")


def _rel(root: str, path: str) -> str:
    path = path.rstrip("/")
    return path[len(root):].lstrip("/")


def _refresh(fs: Any, path: str) -> None:
    """Forget cached listings: other processes (the ranks) write there."""
    try:
        fs.invalidate_cache(path)
    except Exception:  # noqa: BLE001 - a filesystem without listing caches
        pass


def remote_stage_checkpoint(fs: Any, src: str, trial_url: str, name: str) -> None:
    """Upload ``src``'s files into the staging folder of checkpoint ``name`` on the remote filesystem.

    Every rank uploads into the same folder (the union of their shards). A
    rank that dies halfway leaves files that are never committed: the tuner
    commits only after every rank of the group reported the checkpoint.
    """
    if not os.path.isdir(src):
        raise FileNotFoundError(f"checkpoint folder {src!r} does not exist (was it deleted before report()?)")
    dest = rjoin(_strip(fs, trial_url), f"{STAGING}{name}")
    # an object store has no folders: this marker says the checkpoint was staged even when it has no files (an
    # empty folder is a checkpoint on local disk too); the commit leaves it out
    fs.pipe_file(rjoin(dest, STAGED_MARK), b"")
    for root, _dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        for f in files:
            target = rjoin(dest, f) if rel == "." else rjoin(dest, rel.replace(os.sep, "/"), f)
            fs.put_file(os.path.join(root, f), target)


def remote_is_committed(fs: Any, checkpoint_url: str) -> bool:
    _refresh(fs, _strip(fs, checkpoint_url))
    return bool(fs.exists(rjoin(_strip(fs, checkpoint_url), MANIFEST)))


def remote_delete_checkpoint(fs: Any, checkpoint_url: str) -> None:
    """Un-commit (manifest first), then delete the files."""
    path = _strip(fs, checkpoint_url)
    try:
        fs.rm_file(rjoin(path, MANIFEST))
    except FileNotFoundError:
        pass
    try:
        fs.rm(path, recursive=True)
    except FileNotFoundError:
        pass
    _refresh(fs, path)


def remote_commit_checkpoint(fs: Any, trial_url: str, name: str) -> str | None:
    """Publish staged checkpoint ``name``: move its files to ``<trial>/<name>/``, then write the manifest.

    Returns the checkpoint's URL, or None when nothing was staged. Replacing
    an existing checkpoint of that name un-commits it first, so a crash in
    between leaves the trial at its previous checkpoint, never a mix.
    """
    trial = _strip(fs, trial_url)
    staging = rjoin(trial, f"{STAGING}{name}")
    final = rjoin(trial, name)
    _refresh(fs, trial)
    try:
        files = fs.find(staging, detail=True)
    except FileNotFoundError:
        files = {}
    if not files:
        return None
    if fs.exists(final):
        remote_delete_checkpoint(fs, final)
    manifest: dict[str, int] = {}
    for path, info in sorted(files.items()):
        rel = _rel(staging, path)
        if rel == STAGED_MARK:
            continue
        fs.mv(path, rjoin(final, rel))
        manifest[rel] = int(info.get("size") or 0)
    fs.pipe_file(rjoin(final, MANIFEST), json.dumps({"files": manifest}).encode())
    try:
        fs.rm(staging, recursive=True)  # empty directories, where the filesystem has them
    except (FileNotFoundError, OSError):
        pass
    _refresh(fs, trial)
    return fs.unstrip_protocol(final)


def remote_clean_staging(fs: Any, trial_url: str) -> None:
    """What a crash left in a remote trial folder: staging uploads, checkpoint folders without a manifest."""
    trial = _strip(fs, trial_url)
    _refresh(fs, trial)
    try:
        entries = fs.ls(trial, detail=False)
    except FileNotFoundError:
        return
    for entry in entries:
        base = entry.rstrip("/").rsplit("/", 1)[-1]
        if base.startswith((STAGING, TRASH)) or (base.startswith(PREFIX) and not fs.exists(rjoin(entry, MANIFEST))):
            try:
                fs.rm(entry, recursive=True)
            except FileNotFoundError:
                pass
    _refresh(fs, trial)


def remote_copy_checkpoint(fs: Any, src_url: str, trial_url: str, name: str) -> str | None:
    """Copy committed checkpoint ``src_url`` into ``trial_url`` as ``name`` (a PBT clone), committed the same way."""
    src = _strip(fs, src_url)
    staging = rjoin(_strip(fs, trial_url), f"{STAGING}{name}")
    _refresh(fs, src)
    fs.pipe_file(rjoin(staging, STAGED_MARK), b"")  # (an empty checkpoint is copied too)
    for path in fs.find(src):
        rel = _rel(src, path)
        if rel != MANIFEST:
            fs.copy(path, rjoin(staging, rel))
    return remote_commit_checkpoint(fs, trial_url, name)


def remote_download(fs: Any, url: str, dest: str, *,
                    keep: Callable[[list[str]], bool] | None = None) -> str:
    """Copy the files under remote folder ``url`` into local folder ``dest`` (the manifest left out).

    ``keep`` gets each file's path parts below ``url`` and says whether to copy it.
    """
    root = _strip(fs, url)
    _refresh(fs, root)
    os.makedirs(dest, exist_ok=True)
    for path in fs.find(root):
        parts = _rel(root, path).split("/")
        if parts == [MANIFEST] or (keep is not None and not keep(parts)):
            continue
        target = os.path.join(dest, *parts)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fs.get_file(path, target)
    return dest


class ExperimentSync:
    """Uploads an experiment's local files (journal, tuner.pkl, result.json...) to remote storage.

    :meth:`maybe_sync` starts an upload in a background thread at most every
    ``period_s`` (the tuner's loop never waits on the network); :meth:`close`
    waits for it and uploads once more. Only files whose size or mtime changed
    are uploaded; each upload is one whole-object write, so a reader of the
    remote copy sees a previous or the new version of each file.
    """

    def __init__(self, local_dir: str, fs: Any, remote_dir: str, period_s: float | None = None) -> None:
        self.local_dir = local_dir
        self.fs = fs
        self.remote_dir = remote_dir
        self.period_s = env_seconds("TUNEPLAT_SYNC_PERIOD_S", 10) if period_s is None else period_s
        self._seen: dict[str, tuple[int, float]] = {}
        self._thread: threading.Thread | None = None
        self._last = 0.0
        self.error: str | None = None

    def _changed(self) -> list[str]:
        out = []
        for root, _dirs, files in os.walk(self.local_dir):
            for f in files:
                if _TMP_MARK in f or f.endswith(".tmp"):
                    continue
                p = os.path.join(root, f)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                key = (st.st_size, st.st_mtime)
                if self._seen.get(p) != key:
                    out.append(p)
                    self._seen[p] = key
        return out

    def _upload(self, paths: list[str]) -> None:
        try:
            for p in paths:
                rel = os.path.relpath(p, self.local_dir).replace(os.sep, "/")
                with open(p, "rb") as f:
                    data = f.read()
                self.fs.pipe_file(rjoin(_strip(self.fs, self.remote_dir), rel), data)
            self.error = None
        except Exception as exc:  # noqa: BLE001 - retried at the next sync; reported at the end
            for p in paths:
                self._seen.pop(p, None)
            self.error = f"{type(exc).__name__}: {exc}"

    def maybe_sync(self) -> None:
        now = time.monotonic()
        if now - self._last < self.period_s or (self._thread is not None and self._thread.is_alive()):
            return
        self._last = now
        paths = self._changed()
        if paths:
            self._thread = threading.Thread(target=self._upload, args=(paths,), name="tuneplat-sync", daemon=True)
            self._thread.start()

    def close(self) -> str | None:
        """Wait for a running upload, upload what changed; returns the error of the last upload, if any."""
        if self._thread is not None:
            self._thread.join()
        paths = self._changed()
        if paths:
            self._upload(paths)
        return self.error


def fetch_experiment(fs: Any, remote_dir: str, local_dir: str) -> None:
    """Download an experiment's files (not its checkpoints) from remote storage into ``local_dir``."""
    remote_download(fs, remote_dir, local_dir,
                    keep=lambda parts: not any(p.startswith((PREFIX, STAGING, TRASH)) for p in parts[:-1]))
