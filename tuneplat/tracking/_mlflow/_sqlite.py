"""The embedded SQLite store: WAL on local disks, checkpointed at the end; network errors told apart."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


__all__ = ["_LOCAL_FS", "_WAL_FILES", "_checkpoint_wal", "_is_network", "_on_local_disk", "_tune_sqlite"]

logger = logging.getLogger("tuneplat")


#: filesystems on which sqlite's WAL mode is safe (one host, real shared memory); anything else
#: (NFS, SMB, Lustre, FUSE mounts, or no /proc/mounts to tell) keeps sqlite's default rollback journal
_LOCAL_FS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "tmpfs", "overlay", "f2fs", "jfs", "bcachefs"})
#: sqlite files the uploader put in WAL mode (checkpointed at the end of every session)
_WAL_FILES: set[str] = set()


def _on_local_disk(path: str) -> bool:
    """Whether ``path`` lies on a local filesystem (by the longest matching mount point in /proc/mounts)."""
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return False
    real = os.path.realpath(path)
    best, fstype = "", None
    for parts in mounts:
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, fstype = mnt, parts[2]
    return fstype in _LOCAL_FS


def _tune_sqlite(dbapi_conn: Any, _record: Any) -> None:
    """SQLAlchemy "connect" listener of the uploader process: WAL + synchronous=NORMAL for a local sqlite store.

    MLflow's sqlite store commits several transactions per ``log_batch``; in
    sqlite's default mode each costs a few fsyncs. In WAL mode with
    ``synchronous=NORMAL`` a commit is an append to the ``-wal`` file (durable
    at the next checkpoint; the database stays consistent on power loss).
    Readers such as ``mlflow ui`` on the same host read concurrently with the
    writer. WAL needs shared memory, so network filesystems are left alone.
    """
    import sqlite3

    if not isinstance(dbapi_conn, sqlite3.Connection):
        return
    try:
        rows = dbapi_conn.execute("PRAGMA database_list").fetchall()
        path = next((r[2] for r in rows if r[1] == "main"), "")
        if not path or not (path in _WAL_FILES or _on_local_disk(path)):
            return
        if dbapi_conn.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() == "wal":
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")
            _WAL_FILES.add(path)
    except sqlite3.Error:
        pass  # e.g. locked by another writer for now: this connection keeps the defaults


def _checkpoint_wal() -> None:
    """Move what the ``-wal`` files hold into the database files, so that a copy of ``mlflow.db`` is complete.

    The uploader keeps its connections (and so the ``-wal`` file) between
    fits; this runs at the end of each one. A checkpoint writes no new data.
    """
    import sqlite3

    for path in list(_WAL_FILES):
        try:
            conn = sqlite3.connect(path, timeout=5)
            try:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                conn.close()
        except sqlite3.Error as exc:
            logger.debug("tuneplat: WAL checkpoint of %s: %s", path, exc)


def _is_network(exc: BaseException) -> bool:
    return isinstance(exc, (ConnectionError, TimeoutError)) or "connection" in type(exc).__name__.lower()


# ---------------------------------------------------------------- the uploader process
