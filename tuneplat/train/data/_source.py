"""A trainer's dataset as Dask partitions: what the user passed, normalised, and bound to the cluster once.

Accepted (:data:`ACCEPTED`): a ``dask.dataframe.DataFrame`` (or Series), a
``dask.array.Array`` (rows along axis 0), a ``dask.bag.Bag``, a pandas
DataFrame, a numpy array, or the path, glob or list of paths (local or any
fsspec URL) of Parquet or CSV files.

Plain Parquet (paths, or a bare ``dd.read_parquet``) is read by the ranks
themselves, row group by row group (:mod:`._parquet`, kind ``"parquet"``);
everything else goes through Dask.

In-memory data (pandas, numpy, or a Dask collection whose graph carries more
than :data:`INLINE_LIMIT` bytes of data) is persisted on the cluster once per
experiment when the tuner starts: every trial then reads the same partitions
from the workers' memory. Lazy sources (files, the user's ``map_partitions``)
are computed partition by partition on the workers, when a rank asks for them.
A collection the user persisted is used as it is (its partitions stay where
they are, shared by all trials).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ._parquet import TIMEOUT_FIX, PartitionError, PlainParquet, bounded, plain_parquet_of, resolve_parquet

__all__ = ["ACCEPTED", "INLINE_LIMIT", "PartitionError", "Source", "as_source", "as_sources"]

logger = logging.getLogger("tuneplat")

ACCEPTED = ("a dask.dataframe.DataFrame, a dask.array.Array, a dask.bag.Bag, a pandas.DataFrame, a numpy.ndarray, "
            "or the path, glob or list of paths of Parquet or CSV files (local or fsspec URLs)")

#: a Dask collection whose pickled graph is larger than this carries its data inline (``from_pandas``, ``from_array``
#: of a numpy array): it is persisted on the cluster once instead of travelling with every rank's task
INLINE_LIMIT = 16 * 2**20

_CSV_SUFFIXES = (".csv", ".tsv", ".txt")
_COMPRESSION = (".gz", ".bz2", ".xz", ".zst", ".zip")


def _count(part: Any) -> list[int]:
    return [sum(1 for _ in part)]


def _size(part: Any) -> int:
    return len(part) if hasattr(part, "__len__") else sum(1 for _ in part)


class Source:
    """One dataset as a list of partitions, with their row counts once known.

    ``kind`` is ``"frame"`` (partitions are pandas DataFrames), ``"array"``
    (numpy arrays, rows along axis 0), ``"bag"`` (lists of items), or
    ``"parquet"`` (``files``: plain Parquet files whose row groups are the
    partitions, read by the ranks without Dask).
    """

    def __init__(self, name: str, kind: str, collection: Any, label: str, in_memory: bool = False,
                 lengths: tuple[int, ...] | None = None, files: PlainParquet | None = None) -> None:
        self.name = name
        self.kind = kind
        self.collection = collection
        self.label = label
        self.in_memory = in_memory
        self.lengths = lengths
        self.files = files
        self.part_hosts: tuple[str | None, ...] | None = None  # where persisted partitions live (a hint)
        #: what bind() persisted on the cluster for this experiment (released when fit() ends; never the user's)
        self.persisted: list[Any] = []
        self._parts: list[Any] | None = None

    @property
    def npartitions(self) -> int:
        if self.files is not None:
            return len(self.files.pieces)
        return int(self.collection.npartitions) if self.kind != "array" else len(self.collection.chunks[0])

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["persisted"] = []  # the tuner's to release, not the ranks'
        state["_parts"] = None  # rebuilt where they are used (one optimisation per process)
        return state

    # ------------------------------------------------------------------ partitions
    def parts(self) -> list[Any]:
        """One ``dask.delayed`` object per partition (one optimised graph, culled per compute)."""
        if self._parts is None:
            delayed = self.collection.to_delayed(optimize_graph=True)
            if self.kind == "array":
                delayed = list(delayed.reshape(-1))  # one block per row range (other axes are single chunks)
            self._parts = list(delayed)
        return self._parts

    def lengths_collection(self) -> Any:
        """A Dask object whose result is the tuple of partition lengths (metadata only where Dask knows them)."""
        if self.kind == "frame":
            try:  # parquet footers and from_pandas give the lengths without reading the data
                from dask.dataframe.dask_expr import new_collection
                from dask.dataframe.dask_expr._expr import Lengths

                return new_collection(Lengths(self.collection.expr))
            except Exception:  # noqa: BLE001 - another dask: count on the workers
                return self.collection.map_partitions(len, meta=(None, "int64"))
        return self.collection.map_partitions(_count)

    def ensure_lengths(self, client: Any = None) -> tuple[int, ...]:
        """The row count of every partition: computed on the cluster (never here) the first time."""
        if self.lengths is None:
            if self.files is not None:
                self.lengths = self.files.lengths
            elif self.kind == "array":
                self.lengths = tuple(int(n) for n in self.collection.chunks[0])
            else:
                lazy = self.lengths_collection()
                try:
                    value = client.compute(lazy).result() if client is not None else lazy.compute(scheduler="sync")
                except Exception as exc:
                    self._blame(client, exc)  # which partition: raises PartitionError naming it
                    raise
                self.lengths = tuple(int(n) for n in (value.tolist() if hasattr(value, "tolist") else value))
            if len(self.lengths) != self.npartitions:
                raise RuntimeError(f"dataset {self.name!r}: {len(self.lengths)} partition lengths for "
                                   f"{self.npartitions} partitions")
        return self.lengths

    def _blame(self, client: Any, error: BaseException) -> None:
        """After counting failed: compute the partitions one by one and raise for the first that fails."""
        import dask

        for i, part in enumerate(self.parts()):
            counted = dask.delayed(_size)(part)
            try:
                if client is not None:
                    client.compute(counted).result()
                else:
                    counted.compute(scheduler="sync")
            except Exception as exc:
                raise PartitionError(f"dataset {self.name!r} ({self.label}): computing partition {i} (of "
                                     f"{self.npartitions}) failed: {type(exc).__name__}: {exc}") from exc

    # ------------------------------------------------------------------ the experiment's copy
    def bind(self, client: Any) -> Source:
        """The copy trials use: in-memory data persisted on the cluster, row counts known, locations noted.

        Called once per experiment, on the tuner's side; only row counts come back here.

        Raises:
            ValueError: the dataset has no rows.
        """
        if self.files is not None:  # plain Parquet: the footers were read where the trainer was built
            return self
        coll = self.collection
        persist = self.in_memory
        if not persist and not _is_persisted(coll):
            size = _pickled_size(coll)
            if size > INLINE_LIMIT:
                logger.info("tuneplat: dataset %r carries %.0f MB in its Dask graph: persisting it on the cluster "
                            "once (read it from files, or persist it yourself, to choose)", self.name, size / 1e6)
                persist = True
        mine: list[Any] = []
        if persist:
            from distributed import futures_of

            coll = client.persist(coll)
            mine = list(futures_of(coll))
        bound = Source(self.name, self.kind, coll, self.label, in_memory=False, lengths=self.lengths)
        bound.persisted = mine
        try:
            bound.ensure_lengths(client)
        except Exception as exc:  # noqa: BLE001 - each trial counts again, and fails naming the partition
            logger.warning("tuneplat: counting the rows of dataset %r failed (%s: %s); each trial will try again",
                           self.name, type(exc).__name__, exc)
        if bound.lengths is not None and sum(bound.lengths) == 0:
            bound.release()
            raise ValueError(f"dataset {self.name!r} ({self.label}) has no rows: there is nothing to train on.")
        if persist or _is_persisted(coll):
            bound.part_hosts = _locations(client, coll, bound.npartitions)
        return bound


    def release(self) -> None:
        """Release what :meth:`bind` persisted (nothing of the user's): the cluster forgets it."""
        mine, self.persisted = self.persisted, []
        for future in mine:
            try:
                future.release()
            except Exception:  # noqa: BLE001 - a client already closed holds nothing
                logger.debug("tuneplat: releasing %r failed", future, exc_info=True)


def _pickled_size(coll: Any) -> int:
    import cloudpickle

    try:
        return len(cloudpickle.dumps(coll))
    except Exception:  # noqa: BLE001 - Dask pickles it its own way when it ships it
        return 0


def _is_persisted(coll: Any) -> bool:
    try:
        from distributed import futures_of

        return bool(futures_of(coll))
    except Exception:  # noqa: BLE001
        return False


def _locations(client: Any, coll: Any, n: int) -> tuple[str | None, ...] | None:
    """The host holding each persisted partition (the first holder), or None when it cannot be told."""
    try:
        from dask.core import flatten
        from distributed import futures_of
        from distributed.comm import get_address_host

        keys = list(flatten(coll.__dask_keys__()))
        if len(keys) != n:
            return None
        who = client.who_has(futures_of(coll))
        hosts: list[str | None] = []
        for k in keys:
            holders = who.get(k) or who.get(str(k)) or ()
            hosts.append(get_address_host(holders[0]) if holders else None)
        return tuple(hosts)
    except Exception:  # noqa: BLE001 - locality is a hint
        logger.debug("tuneplat: no partition locations", exc_info=True)
        return None


def _suffix(path: str) -> str:
    p = path.lower().split("?", 1)[0].rstrip("/")
    for c in _COMPRESSION:
        if p.endswith(c):
            p = p[: -len(c)]
    return os.path.splitext(p)[1]


def _from_paths(name: str, paths: list[str], timeout: float | None) -> Source:
    import dask.dataframe as dd

    suffixes = {_suffix(p) for p in paths}
    shown = paths[0] if len(paths) == 1 else f"{paths[0]!r} and {len(paths) - 1} more"
    if suffixes <= set(_CSV_SUFFIXES):  # (Dask lists the files and reads a sample now: bounded like Parquet's reads)
        ddf = bounded(lambda: dd.read_csv(paths if len(paths) > 1 else paths[0]), timeout,
                      lambda: f"dataset {name!r}: reading {shown}", TIMEOUT_FIX)
        return Source(name, "frame", ddf, f"CSV files {shown}")
    if suffixes <= {".parquet", ".pq", ".parq", ""}:  # a directory of parquet files, or a glob without a suffix
        return _plain(name, resolve_parquet(name, paths, timeout))
    raise ValueError(f"datasets[{name!r}] = {shown}: cannot tell the file format from the suffixes "
                     f"{sorted(suffixes)}; paths must end in .parquet/.pq (or name a folder of Parquet files) or "
                     ".csv/.tsv (optionally compressed). For another format pass a Dask collection, e.g. "
                     "dask.dataframe.read_json(...).")


def _plain(name: str, files: PlainParquet) -> Source:
    files.read_footers(name)
    if not files.pieces or sum(p.rows for p in files.pieces) == 0:
        raise ValueError(f"dataset {name!r} ({files.label}) has no rows: there is nothing to train on.")
    return Source(name, "parquet", None, files.label, lengths=files.lengths, files=files)


def as_source(name: str, data: Any, num_workers: int = 1, timeout: float | None = None) -> Source:
    """``data`` as a :class:`Source`, or a ``TypeError`` naming the accepted types.

    Plain Parquet files are listed and their footers read here (each read bounded by ``timeout`` seconds):
    a glob matching nothing is a ``FileNotFoundError`` naming it, a file that is not Parquet a
    :class:`PartitionError` naming its path.
    """
    import dask.array as da
    import dask.bag as db
    import dask.dataframe as dd

    if isinstance(data, dd.Series):
        data = data.to_frame()
    if isinstance(data, dd.DataFrame):
        files = plain_parquet_of(data, timeout)
        if files is not None:
            return _plain(name, files)
        return Source(name, "frame", data, "dask DataFrame")
    if isinstance(data, da.Array):
        if data.ndim == 0:
            raise ValueError(f"datasets[{name!r}] is a 0-d dask array: it needs rows along axis 0.")
        if data.ndim > 1 and any(len(c) > 1 for c in data.chunks[1:]):
            data = data.rechunk({i: -1 for i in range(1, data.ndim)})  # a partition = whole rows
        return Source(name, "array", data, "dask Array")
    if isinstance(data, db.Bag):
        return Source(name, "bag", data, "dask Bag")
    if isinstance(data, (str, os.PathLike)):
        return _from_paths(name, [os.fspath(data)], timeout)
    if isinstance(data, (list, tuple)) and data and all(isinstance(p, (str, os.PathLike)) for p in data):
        return _from_paths(name, [os.fspath(p) for p in data], timeout)
    parts = max(1, 2 * num_workers)
    import numpy as np
    import pandas as pd  # (dependencies of dask.dataframe)

    if isinstance(data, (pd.DataFrame, pd.Series)):
        frame = data.to_frame() if isinstance(data, pd.Series) else data
        n = max(1, min(len(frame), max(parts, int(frame.memory_usage(deep=False).sum() // (64 * 2**20)) + 1)))
        import dask

        with dask.config.set({"dataframe.convert-string": False}):  # cells holding lists stay lists (not str)
            ddf = dd.from_pandas(frame, npartitions=n, sort=False)
        return Source(name, "frame", ddf, "pandas DataFrame", in_memory=True)
    if isinstance(data, np.ndarray):
        if data.ndim == 0:
            raise ValueError(f"datasets[{name!r}] is a 0-d numpy array: it needs rows along axis 0.")
        n = max(1, min(len(data), max(parts, data.nbytes // (64 * 2**20) + 1)))
        rows = -(-len(data) // n) if len(data) else 1
        return Source(name, "array", da.from_array(data, chunks=(rows,) + data.shape[1:]), "numpy array",
                      in_memory=True)
    raise TypeError(f"datasets[{name!r}] is a {type(data).__module__}.{type(data).__qualname__}; a dataset must be "
                    f"{ACCEPTED}. (Ray Datasets are not read: build the same pipeline with Dask, see "
                    "docs/data-ingest.md.)")


def as_sources(datasets: Any, num_workers: int = 1, timeout: float | None = None) -> dict[str, Source]:
    """The trainer's ``datasets=`` mapping, each value as a :class:`Source`."""
    from collections.abc import Mapping

    if not isinstance(datasets, Mapping):
        raise TypeError(f"datasets= must be a dict of name -> dataset, e.g. datasets={{'train': ddf}}; got "
                        f"{type(datasets).__name__}.")
    out: dict[str, Source] = {}
    for key, value in datasets.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"datasets= keys are dataset names (non-empty strings); got {key!r}.")
        out[key] = as_source(key, value, num_workers, timeout)
    return out


