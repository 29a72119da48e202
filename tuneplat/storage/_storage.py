"""Where experiments are stored (a local folder, or an fsspec filesystem and a local cache), and the checkpoint
stores the tuner commits through.

The commit protocols themselves are in :mod:`._local` (one ``rename``) and
:mod:`._remote` (a manifest written last); this module also gives their names
to the rest of tuneplat.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from .._settings import env_str
from ._local import (
    _TMP_MARK,
    PREFIX,
    checkpoint_name,
    clean_staging,
    commit_checkpoint,
    fsync_dir,
    list_checkpoints,
    retain,
    stage_checkpoint,
    staging_dir,
)
from ._remote import (
    MANIFEST,
    ExperimentSync,
    _refresh,
    _strip,
    fetch_experiment,
    fs_for_url,
    remote_clean_staging,
    remote_commit_checkpoint,
    remote_copy_checkpoint,
    remote_delete_checkpoint,
    remote_download,
    remote_is_committed,
    remote_stage_checkpoint,
    rjoin,
)

__all__ = [
    "MANIFEST",
    "PREFIX",
    "CheckpointStore",
    "ExperimentSync",
    "FsspecCheckpointStore",
    "LocalCheckpointStore",
    "Storage",
    "checkpoint_name",
    "clean_staging",
    "commit_checkpoint",
    "fetch_experiment",
    "fs_for_url",
    "fsync_dir",
    "is_remote",
    "list_checkpoints",
    "local_cache_for",
    "remote_clean_staging",
    "remote_commit_checkpoint",
    "remote_download",
    "remote_is_committed",
    "remote_stage_checkpoint",
    "reported_checkpoints",
    "resolve_storage",
    "resolve_storage_path",
    "retain",
    "rjoin",
    "stage_checkpoint",
    "staging_dir",
    "write_checkpoint_metrics",
]


def is_remote(path: str | os.PathLike[str] | None) -> bool:
    """Whether ``path`` is a URL of a filesystem other than the local one (``s3://``, ``gs://``, ``memory://``...)."""
    if path is None:
        return False
    p = os.fspath(path)
    return "://" in p and urlparse(p).scheme not in ("file", "local")


def resolve_storage_path(storage_path: str | os.PathLike[str] | None) -> str:
    """The local folder for ``storage_path``: a path, ``~/path``, or a ``file://`` URL.

    Raises:
        ValueError: for a URL of another filesystem (use :func:`resolve_storage`).

    Example:
        >>> resolve_storage_path("file:///tmp/results")
        '/tmp/results'
    """
    path = os.fspath(storage_path) if storage_path is not None else os.path.join(os.getcwd(), "tuneplat_results")
    if "://" in path:
        url = urlparse(path)
        if url.scheme not in ("file", "local"):
            raise ValueError(f"storage_path={path!r} is not a local folder")
        if url.netloc not in ("", "localhost"):
            raise ValueError(f"storage_path={path!r}: a file:// URL names a local path: write file:///abs/path "
                             "(three slashes) or a plain folder.")
        path = unquote(url.path)
    return os.path.abspath(os.path.expanduser(path))

def _metrics_file(name: str) -> str:
    """The file beside checkpoint ``name`` that holds the metrics reported with it."""
    return f".{name}.metrics.json"


def write_checkpoint_metrics(trial_dir: str, name: str, metrics: Mapping[str, Any], fs: Any = None) -> None:
    """Keep the metrics reported with checkpoint ``name`` beside it (read by :func:`reported_checkpoints`)."""
    text = json.dumps(metrics, default=str)
    if fs is not None:
        fs.pipe_file(rjoin(_strip(fs, trial_dir), _metrics_file(name)), text.encode())
        return
    path = os.path.join(trial_dir, _metrics_file(name))
    tmp = f"{path}{_TMP_MARK}{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def reported_checkpoints(trial_dir: str, fs: Any = None) -> list[tuple[str, dict[str, Any]]]:
    """The committed checkpoints of a trial (oldest first) with the metrics reported with each (``{}`` unknown).

    Safe while the trial's ranks run: it only reads (committed folders; staging ones are left alone).
    """
    out: list[tuple[str, dict[str, Any]]] = []
    if fs is not None:
        root = _strip(fs, trial_dir)
        _refresh(fs, root)
        try:
            entries = sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(root, detail=False))
        except FileNotFoundError:
            return []
        for base in entries:
            if base.startswith(PREFIX) and fs.exists(rjoin(root, base, MANIFEST)):
                try:
                    metrics = json.loads(fs.cat_file(rjoin(root, _metrics_file(base))))
                except (FileNotFoundError, ValueError):
                    metrics = {}
                out.append((fs.unstrip_protocol(rjoin(root, base)), metrics))
        return out
    if not os.path.isdir(trial_dir):
        return []
    for base in sorted(os.listdir(trial_dir)):
        path = os.path.join(trial_dir, base)
        if base.startswith(PREFIX) and os.path.isdir(path):
            try:
                with open(os.path.join(trial_dir, _metrics_file(base)), encoding="utf-8") as f:
                    metrics = json.load(f)
            except (OSError, ValueError):
                metrics = {}
            out.append((path, metrics))
    return out


@dataclass(frozen=True)
class Storage:
    """Where experiments are kept: a local folder, or a remote fsspec filesystem plus a local cache.

    Attributes:
        local_root: the folder holding experiment folders (the cache, for remote storage).
        fs: the fsspec filesystem of remote storage, else None.
        remote_root: the remote folder as a URL (``s3://bucket/results``), else None.
    """

    local_root: str
    fs: Any = None
    remote_root: str | None = None

    @property
    def is_remote(self) -> bool:
        return self.fs is not None

    def remote_experiment(self, name: str) -> str | None:
        return None if self.remote_root is None else rjoin(self.remote_root, name)

    def exists(self, name: str) -> bool:
        if os.path.exists(os.path.join(self.local_root, name)):
            return True
        return self.fs is not None and self.fs.exists(rjoin(self.remote_root, name))  # type: ignore[arg-type]


def _cache_root() -> str:
    return env_str("TUNEPLAT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tuneplat")


def local_cache_for(url: str) -> str:
    """The local folder that mirrors remote folder ``url`` (under ``$TUNEPLAT_CACHE_DIR``, default ~/.cache/tuneplat)."""
    u = urlparse(url)
    parts = [u.scheme or "fs", u.netloc or "_"] + [p for p in u.path.split("/") if p not in ("", ".", "..")]
    return os.path.join(_cache_root(), "storage", *parts)


def resolve_storage(storage_path: str | os.PathLike[str] | None, storage_filesystem: Any = None) -> Storage:
    """Where ``RunConfig(storage_path=..., storage_filesystem=...)`` keeps experiments.

    ``storage_path`` is a local folder, a ``file://`` URL, or the URL of any
    filesystem fsspec knows (``s3://bucket/results`` with s3fs installed, ...).
    ``storage_filesystem`` is an fsspec filesystem (credentials, endpoint) for
    that path; without it fsspec builds one from the URL (and its configuration:
    environment variables, ``~/.config/fsspec``).

    Raises:
        ValueError: the URL's protocol has no fsspec implementation installed, or
            ``storage_filesystem`` is not an fsspec filesystem.
    """
    if storage_filesystem is not None:
        import fsspec

        if not isinstance(storage_filesystem, fsspec.AbstractFileSystem):
            raise ValueError(f"RunConfig.storage_filesystem must be an fsspec filesystem (e.g. "
                             f"s3fs.S3FileSystem(...)), got {type(storage_filesystem).__name__}")
        if storage_path is None:
            raise ValueError("RunConfig.storage_filesystem is set but storage_path is not: name the folder on that "
                             "filesystem, e.g. storage_path='s3://my-bucket/results'")
        protocols = storage_filesystem.protocol if isinstance(storage_filesystem.protocol, (tuple, list)) else (storage_filesystem.protocol,)
        if "file" in protocols or "local" in protocols:
            return Storage(resolve_storage_path(storage_path))
        root = storage_filesystem._strip_protocol(os.fspath(storage_path)).rstrip("/")
        url = storage_filesystem.unstrip_protocol(root)
        return Storage(local_cache_for(url), storage_filesystem, url)
    if not is_remote(storage_path):
        return Storage(resolve_storage_path(storage_path))
    fs, root = fs_for_url(os.fspath(storage_path))  # type: ignore[arg-type]
    url = fs.unstrip_protocol(root.rstrip("/"))
    return Storage(local_cache_for(url), fs, url)


class CheckpointStore:
    """Where a trial's checkpoints are committed, deleted and copied: one interface for every storage.

    :class:`LocalCheckpointStore` (a local or shared folder: one ``rename`` commits)
    and :class:`FsspecCheckpointStore` (any fsspec filesystem: the manifest
    commits). Trials are addressed by their local folder; the store maps it to
    where the checkpoints really live.
    """

    filesystem: Any = None
    #: each call is a network round trip or more (object stores): the tuner runs commits, deletions and copies
    #: on its I/O threads so that one slow request never delays another trial's decision
    slow: bool = False

    def trial_url(self, trial_path: str) -> str | None:
        """The trial's folder on remote storage (None: checkpoints live in ``trial_path``)."""
        return None

    def clean_staging(self, trial_path: str) -> None:
        raise NotImplementedError

    def commit(self, trial_path: str, name: str) -> str | None:
        """Publish what the ranks staged as checkpoint ``name``; its path or URL, or None if nothing was staged."""
        raise NotImplementedError

    def delete(self, checkpoint_path: str) -> None:
        raise NotImplementedError

    def copy(self, src_checkpoint: str, trial_path: str, name: str) -> str | None:
        """Copy a committed checkpoint into ``trial_path`` as ``name`` (PBT's clone), committed the same way."""
        raise NotImplementedError


class LocalCheckpointStore(CheckpointStore):
    def clean_staging(self, trial_path: str) -> None:
        clean_staging(trial_path)

    def commit(self, trial_path: str, name: str) -> str | None:
        return commit_checkpoint(trial_path, name)

    def delete(self, checkpoint_path: str) -> None:
        shutil.rmtree(checkpoint_path, ignore_errors=True)
        head, name = os.path.split(checkpoint_path.rstrip(os.sep))
        try:
            os.unlink(os.path.join(head, _metrics_file(name)))
        except OSError:
            pass

    def copy(self, src_checkpoint: str, trial_path: str, name: str) -> str | None:
        stage_checkpoint(src_checkpoint, trial_path, name)
        return commit_checkpoint(trial_path, name)


class FsspecCheckpointStore(CheckpointStore):
    slow = True

    def __init__(self, fs: Any, remote_dir: str) -> None:
        self.filesystem = fs
        self.remote_dir = remote_dir

    def trial_url(self, trial_path: str) -> str:
        return rjoin(self.remote_dir, os.path.basename(trial_path))

    def clean_staging(self, trial_path: str) -> None:
        clean_staging(trial_path)
        remote_clean_staging(self.filesystem, self.trial_url(trial_path))

    def commit(self, trial_path: str, name: str) -> str | None:
        return remote_commit_checkpoint(self.filesystem, self.trial_url(trial_path), name)

    def delete(self, checkpoint_path: str) -> None:
        remote_delete_checkpoint(self.filesystem, checkpoint_path)
        head, _, name = _strip(self.filesystem, checkpoint_path).rstrip("/").rpartition("/")
        try:
            self.filesystem.rm_file(rjoin(head, _metrics_file(name)))
        except (FileNotFoundError, OSError):
            pass

    def copy(self, src_checkpoint: str, trial_path: str, name: str) -> str | None:
        return remote_copy_checkpoint(self.filesystem, src_checkpoint, self.trial_url(trial_path), name)
