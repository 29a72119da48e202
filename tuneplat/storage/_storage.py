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

import json
import math
import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

from .._settings import env_seconds, env_str

__all__ = [
    "CheckpointStore",
    "FsspecCheckpointStore",
    "LocalCheckpointStore",
    "checkpoint_name",
    "clean_staging",
    "commit_checkpoint",
    "fsync_dir",
    "list_checkpoints",
    "resolve_storage",
    "resolve_storage_path",
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


# ---------------------------------------------------------------------------------------------- remote storage
#
# On a filesystem reached through fsspec (s3://, gs://, abfs://, sftp://, ...), the tuner keeps the experiment's
# small files (journal, tuner.pkl, result.json per trial, Optuna's journal) in a local cache folder and uploads
# them in the background (every TUNEPLAT_SYNC_PERIOD_S, and at the end of fit()); checkpoints go straight from
# the ranks to the remote filesystem. The commit protocol mirrors the local one, adapted to filesystems whose
# "rename" may be a copy (object stores): ranks upload into ``<trial>/.staging_<name>/``; once every rank of the
# group has uploaded, the tuner moves the files to ``<trial>/<name>/`` and then writes the manifest
# ``<trial>/<name>/.tuneplat_manifest.json`` (one atomic object write) last. A checkpoint folder without its
# manifest is not a checkpoint: it is never loaded, and it is removed when the trial starts again.

MANIFEST = ".tuneplat_manifest.json"
#: written into a remote staging folder by every rank that staged there (see :func:`remote_stage_checkpoint`)
STAGED_MARK = ".tuneplat_staged"


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
