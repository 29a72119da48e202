"""Plain Parquet files read by the ranks themselves: row groups with pyarrow, no Dask task graph.

A dataset that is Parquet files and nothing to compute (a path, glob, folder or
list of them, or a bare ``dask.dataframe.read_parquet(...)``, optionally with a
column selection) is planned over its row groups: the file footers give each
row group's row count when the trainer is built, every rank plans its slices of
those row groups (:mod:`._plan`), and reads them in a background thread,
Arrow -> numpy without per-row Python (zero-copy for numeric columns without
nulls). Dask is used for what needs computing (``map_partitions``, CSV, bags,
in-memory data).

Every read that can block on a remote store (listing, footers, a row group) is
bounded by a timeout; the error names the URL.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["TIMEOUT_FIX", "PartitionError", "Piece", "PlainParquet", "arrow_columns", "bounded", "plain_parquet_of", "read_timeout_s",
           "resolve_parquet"]

logger = logging.getLogger("tuneplat")

T = TypeVar("T")


class PartitionError(RuntimeError):
    """Computing or reading one partition of a dataset failed; ``__cause__`` is the original exception."""

#: the default bound on one remote operation (listing, a footer, a row group); DataConfig(read_timeout_s=...)
DEFAULT_TIMEOUT_S = 120.0
_EXTENSIONS = (".parquet", ".pq", ".parq")


def read_timeout_s(value: float | None = None) -> float | None:
    """``value``, else ``TUNEPLAT_DATA_TIMEOUT_S``, else :data:`DEFAULT_TIMEOUT_S` (``0``/``none``: no bound)."""
    import os

    if value is None:
        raw = os.environ.get("TUNEPLAT_DATA_TIMEOUT_S", "").strip().lower()
        if raw in ("0", "none", "inf"):
            return None
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    return None if value <= 0 else float(value)


class _Watch:
    """The URLs being read right now (for the message when a read does not answer)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._urls: list[str] = []

    def add(self, url: str) -> None:
        with self._lock:
            self._urls.append(url)

    def remove(self, url: str) -> None:
        with self._lock:
            if url in self._urls:
                self._urls.remove(url)

    def first(self, default: str) -> str:
        with self._lock:
            return self._urls[0] if self._urls else default


def bounded(fn: Callable[[], T], timeout: float | None, what: Callable[[], str], fix: str) -> T:
    """``fn()`` in a thread, waited for at most ``timeout`` s; a ``TimeoutError`` saying ``what()`` otherwise.

    The thread of a read that never answers is left behind (a daemon thread blocked in the filesystem client):
    Python cannot interrupt it; it holds no lock of ours.
    """
    if timeout is None:
        return fn()
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc
        done.set()

    threading.Thread(target=run, name="tuneplat-data-read", daemon=True).start()
    if not done.wait(timeout):
        raise TimeoutError(f"{what()} did not answer within {timeout:g} s; {fix}")
    if "error" in box:
        raise box["error"]
    return box["value"]


TIMEOUT_FIX = ("check the URL and that the server answers, or allow longer with DataConfig(read_timeout_s=...) "
        "(or TUNEPLAT_DATA_TIMEOUT_S)")


@dataclass(frozen=True)
class Piece:
    """Row group ``row_group`` of file ``path`` (``rows`` rows)."""

    path: str
    row_group: int
    rows: int


class PlainParquet:
    """Parquet files as row groups, read in the rank with pyarrow.

    Args:
        fs: the fsspec filesystem of the files (pickled to the ranks).
        paths: the files, as ``fs`` names them (no protocol).
        columns: the columns to read (None: all but a pandas index stored as columns).
        label: how messages name the dataset's origin (the pattern the user gave).
        timeout: seconds one read may take (None: unbounded).
    """

    def __init__(self, fs: Any, paths: Sequence[str], columns: Sequence[str] | None, label: str,
                 timeout: float | None) -> None:
        self.fs = fs
        self.paths = list(paths)
        self.columns = list(columns) if columns is not None else None
        self.label = label
        self.timeout = timeout
        self.pieces: list[Piece] = []

    def _local(self) -> bool:
        protocols = (self.fs.protocol,) if isinstance(self.fs.protocol, str) else tuple(self.fs.protocol)
        return bool({"file", "local"} & set(protocols))

    def url(self, path: str) -> str:
        if self._local():
            return path
        try:
            return str(self.fs.unstrip_protocol(path))
        except Exception:  # noqa: BLE001 - a filesystem without it
            return path

    # ------------------------------------------------------------------ footers (where the trainer is built)
    def read_footers(self, name: str) -> None:
        """Row groups and their row counts from every file's footer (threads; each read bounded)."""
        from concurrent.futures import ThreadPoolExecutor


        watch = _Watch()

        def footer(path: str) -> tuple[list[Piece], Any]:
            import pyarrow.parquet as pq

            url = self.url(path)
            watch.add(url)
            try:
                with self.fs.open(path, "rb") as f:
                    meta = pq.ParquetFile(f).metadata
                    return [Piece(path, i, meta.row_group(i).num_rows) for i in range(meta.num_row_groups)], \
                        meta.schema.to_arrow_schema()
            except Exception as exc:
                raise PartitionError(f"dataset {name!r}: {url} is not a readable Parquet file (its footer): "
                                     f"{type(exc).__name__}: {exc}") from exc
            finally:
                watch.remove(url)

        def all_footers() -> list[tuple[list[Piece], Any]]:
            with ThreadPoolExecutor(max_workers=min(16, max(1, len(self.paths))),
                                    thread_name_prefix="tuneplat-footers") as pool:
                return list(pool.map(footer, self.paths))

        found = bounded(all_footers, self.timeout, lambda: f"dataset {name!r}: reading the footer of "
                        f"{watch.first(self.label)}", TIMEOUT_FIX)
        self.pieces = [p for pieces, _schema in found for p in pieces]
        if self.columns is None and found:
            self.columns = _data_columns(found[0][1])

    @property
    def lengths(self) -> tuple[int, ...]:
        return tuple(p.rows for p in self.pieces)

    # ------------------------------------------------------------------ in the rank
    def read(self, piece: Piece, handles: dict[str, Any]) -> dict[str, Any]:
        """One row group as numpy columns. ``handles`` keeps the open file between row groups of one file."""
        pf = handles.get(piece.path)
        if pf is None:
            import pyarrow.parquet as pq

            for old in list(handles.values()):  # one file open at a time: files are read in order
                _close(old)
            handles.clear()
            if self._local():  # Arrow's own file reader: no Python bytes per read, less memory, faster
                pf = handles[piece.path] = pq.ParquetFile(piece.path)
            else:
                pf = handles[piece.path] = pq.ParquetFile(self.fs.open(piece.path, "rb"))
        table = pf.read_row_group(piece.row_group, columns=self.columns, use_threads=False)
        return arrow_columns(table)


def _close(pf: Any) -> None:
    try:
        pf.close()
    except Exception:  # noqa: BLE001
        pass


def _data_columns(schema: Any) -> list[str]:
    """The schema's columns without a pandas index stored as columns (``__index_level_0__``, a named index)."""
    names = list(schema.names)
    meta = schema.metadata or {}
    raw = meta.get(b"pandas")
    if raw:
        try:
            index = [c for c in json.loads(raw).get("index_columns", []) if isinstance(c, str)]
        except ValueError:
            index = []
        names = [n for n in names if n not in index]
    return names


# ---------------------------------------------------------------------- Arrow -> numpy
def arrow_columns(table: Any) -> dict[str, Any]:
    """A pyarrow Table as a dict of numpy arrays, one per column (see :func:`arrow_to_numpy`)."""
    return {str(name): arrow_to_numpy(table.column(i)) for i, name in enumerate(table.column_names)}


def arrow_to_numpy(col: Any) -> Any:
    """One Arrow column as numpy, without per-row Python where the type allows.

    * numbers without nulls: zero-copy (read-only views of the Arrow buffer); with nulls, floats with NaN;
    * lists of numbers of one length (``list``, ``large_list``, ``fixed_size_list``, nested): one
      ``(rows, k, ...)`` array (Ray's tensor columns);
    * anything else (strings, bytes, ragged lists, timestamps, structs): what pyarrow gives, e.g. an
      object array of ``str``/``bytes``/arrays.
    """
    import numpy as np
    import pyarrow as pa

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) and arr.null_count == 0:
        n = len(arr)
        if pa.types.is_fixed_size_list(t):
            k = t.list_size
        else:
            offsets = np.asarray(arr.offsets)
            sizes = np.diff(offsets)
            k = int(sizes[0]) if n else 0
            if n and not (sizes == k).all():
                return arr.to_numpy(zero_copy_only=False)  # ragged: an object array of arrays
        values = arrow_to_numpy(arr.flatten())
        if values.dtype != object:
            return values.reshape((n, k) + values.shape[1:])
        return arr.to_numpy(zero_copy_only=False)
    return arr.to_numpy(zero_copy_only=False)


# ---------------------------------------------------------------------- where the trainer is built
def resolve_parquet(name: str, given: Sequence[str], timeout: float | None,
                    storage_options: dict[str, Any] | None = None) -> PlainParquet:
    """The files of paths, globs and folders (local or fsspec URLs); ``FileNotFoundError`` naming what matched nothing."""
    import fsspec

    shown = given[0] if len(given) == 1 else f"{given[0]!r} and {len(given) - 1} more"
    watch = _Watch()

    def listing() -> tuple[Any, list[str]]:
        fs = None
        out: list[str] = []
        for pattern in given:
            watch.add(pattern)
            try:
                fs_p, path = fsspec.core.url_to_fs(pattern, **(storage_options or {}))
                fs = fs or fs_p
                if any(ch in path for ch in "*?["):
                    found = sorted(p for p in fs_p.glob(path) if not fs_p.isdir(p))
                elif fs_p.isdir(path):
                    found = sorted(p for p in fs_p.find(path) if _is_data_file(p))
                elif fs_p.exists(path):
                    found = [path]
                else:
                    found = []
                if not found:
                    raise FileNotFoundError(f"No files found: {pattern} (datasets[{name!r}]); check the path, the "
                                            "glob or the folder.")
                out.extend(found)
            finally:
                watch.remove(pattern)
        return fs, out

    fs, paths = bounded(listing, timeout, lambda: f"dataset {name!r}: listing {watch.first(shown)}", TIMEOUT_FIX)
    return PlainParquet(fs, paths, None, f"Parquet files {shown}", timeout)


def _is_data_file(path: str) -> bool:
    base = path.rstrip("/").rsplit("/", 1)[-1]
    return not base.startswith((".", "_")) and (base.lower().endswith(_EXTENSIONS) or "." not in base)


def plain_parquet_of(ddf: Any, timeout: float | None) -> PlainParquet | None:
    """The files of a bare ``dask.dataframe.read_parquet(...)`` (columns selected at most), else None.

    Anything Dask would compute (filters, a hive-partitioned folder, an index set from a column, categories,
    selected partitions, other reader options) keeps the Dask path.
    """
    try:
        expr = ddf.expr.simplify()
        if type(expr).__name__ != "ReadParquetFSSpec":
            return None
        ops = {p: expr.operand(p) for p in expr._parameters}
        if (ops.get("filters") or ops.get("categories") or ops.get("index") not in (None,)
                or ops.get("_partitions") is not None or ops.get("_series")
                or (ops.get("kwargs") or {}) not in ({}, {"dtype_backend": None})
                or ops.get("aggregate_files")):
            return None
        info = expr._dataset_info
        if info.get("partition_names"):  # (an index from the pandas metadata is left out: columns= below)
            return None
        fs = info["fs"]
        files = list(info["ds"].files)
    except Exception:  # noqa: BLE001 - another dask, or not what we recognise: the Dask path
        logger.debug("tuneplat: not a plain read_parquet", exc_info=True)
        return None
    path = ops.get("path")
    shown = path if isinstance(path, str) else (f"{path[0]!r} and {len(path) - 1} more" if path else "[]")
    if not files:
        raise FileNotFoundError(f"No files found: {shown} (dask.dataframe.read_parquet); check the path, the glob "
                                "or the folder.")
    return PlainParquet(fs, files, [str(c) for c in ddf.columns], f"Parquet files {shown}", timeout)


def iter_pieces(files: PlainParquet, slices: Sequence[Any], window: int, name: str,
                convert: Callable[[dict[str, Any]], dict[str, Any]] | None) -> Iterator[tuple[Any, dict[str, Any]]]:
    """``(slice, columns)`` for each slice, read ``window`` row groups ahead by a background thread.

    Memory: the thread holds at most ``max(1, window)`` row groups in its queue and one it is reading; a row group
    read for a slice is cut to the slice's rows (views) before it is queued, and ``convert`` (numpy -> tensors)
    runs in the thread too.
    """
    import queue


    q: queue.Queue[tuple[str, Any, Any]] = queue.Queue(maxsize=max(1, window))
    stop = threading.Event()
    reading: list[str] = [files.label]

    def put(item: tuple[str, Any, Any]) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        handles: dict[str, Any] = {}
        try:
            for s in slices:
                piece = files.pieces[s.part]
                reading[0] = f"{files.url(piece.path)} (row group {piece.row_group})"
                try:
                    cols = files.read(piece, handles)
                except Exception as exc:
                    raise PartitionError(f"dataset {name!r}: reading row group {piece.row_group} of "
                                         f"{files.url(piece.path)} failed: {type(exc).__name__}: {exc}") from exc
                n = len(next(iter(cols.values()))) if cols else piece.rows
                if n != piece.rows:
                    raise PartitionError(f"dataset {name!r}: row group {piece.row_group} of {files.url(piece.path)} "
                                         f"has {n} rows, its footer said {piece.rows}: the file changed while the "
                                         "trial ran.")
                if s.start or s.stop != n:
                    cols = {k: v[s.start:s.stop] for k, v in cols.items()}
                if convert is not None:
                    cols = convert(cols)
                if not put(("item", s, cols)):
                    return
                del cols
            put(("end", None, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put(("error", exc, None))
        finally:
            for pf in handles.values():
                _close(pf)

    thread = threading.Thread(target=run, name="tuneplat-data-read", daemon=True)
    thread.start()
    timeout = files.timeout
    try:
        while True:
            try:
                kind, a, b = q.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"dataset {name!r}: reading {reading[0]} did not answer within {timeout:g} s; "
                                   f"{TIMEOUT_FIX}") from None
            if kind == "item":
                yield a, b
            elif kind == "error":
                raise a
            else:
                return
    finally:
        stop.set()
