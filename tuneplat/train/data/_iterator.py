"""In the rank: ``train.get_dataset_shard(name)`` and the iterator over its batches (``ray.data.DataIterator``).

Each pass over what :meth:`DataIterator.iter_batches` (or ``iter_torch_batches``,
``iter_rows``) returns is one epoch. At its start the rank reads the group's world
size and its rank from the trial's context, plans its slices of the
partitions (:mod:`._plan`), and asks the Dask cluster for the first
``prefetch_partitions + 1`` of them; each partition is computed on a worker
(the user's preprocessing runs there), fetched into the rank, cut into
batches and dropped, and the next one is asked for. The rank's Dask task
secedes from its worker's thread pool first, so that the worker it runs on
can compute partitions too.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .._session import Session, _get_session
from ._config import DataConfig
from ._parquet import iter_pieces
from ._plan import Slice, epoch_order, plan_shard
from ._source import PartitionError, Source

__all__ = ["DataIterator", "PartitionError", "get_dataset_shard"]

logger = logging.getLogger("tuneplat")


# ---------------------------------------------------------------------- the rank's connection to the cluster
_seceded: set[Any] = set()


def _rank_client() -> Any:
    """The Dask client of the worker this rank runs in (None outside a Dask worker).

    The rank's task leaves the worker's thread pool (``distributed.secede``) the
    first time, so that partitions can be computed on this worker while the rank
    waits for them (workers run one task at a time in tuneplat's clusters).
    """
    try:
        from distributed import get_client, get_worker, secede
        from distributed.worker import thread_state

        get_worker()
    except (ImportError, ValueError):
        return None
    key = getattr(thread_state, "key", None)
    if key is not None and key not in _seceded:
        try:
            secede()
            _seceded.add(key)
        except Exception:  # noqa: BLE001 - not the task's own thread: the worker's other threads compute
            logger.debug("tuneplat: the rank could not secede", exc_info=True)
    return get_client()


class _Fetcher:
    """Partitions asked for ahead of use, at most ``window + 1`` in flight or held."""

    def __init__(self, source: Source, slices: list[Slice], window: int, client: Any) -> None:
        self.source = source
        self.slices = slices
        self.window = window
        self.client = client
        self.pool: Any = None
        if client is None:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(max_workers=max(1, window + 1), thread_name_prefix="tuneplat-data")

    def _submit(self, part: int) -> Any:
        delayed = self.source.parts()[part]
        if self.client is not None:
            return self.client.compute(delayed)
        return self.pool.submit(lambda: delayed.compute(scheduler="sync"))

    def __iter__(self) -> Iterator[tuple[Slice, Any]]:
        pending: collections.deque[tuple[Slice, Any]] = collections.deque()
        todo = iter(self.slices)
        try:
            for s in todo:
                pending.append((s, self._submit(s.part)))
                if len(pending) > self.window:
                    break
            while pending:
                s, fut = pending.popleft()
                nxt = next(todo, None)
                if nxt is not None:
                    pending.append((nxt, self._submit(nxt.part)))
                try:
                    value = fut.result()
                except Exception as exc:
                    n = self.source.npartitions
                    raise PartitionError(f"dataset {self.source.name!r} ({self.source.label}): computing partition "
                                         f"{s.part} (of {n}) failed: {type(exc).__name__}: {exc}") from exc
                del fut  # the cluster forgets it once this rank has it
                yield s, value
                del value
        finally:
            for _, fut in pending:
                cancel = getattr(fut, "cancel", None)
                if cancel is not None:
                    try:
                        cancel()
                    except Exception:  # noqa: BLE001 - best effort when an epoch is left early
                        pass
            pending.clear()
            if self.pool is not None:
                self.pool.shutdown(wait=False, cancel_futures=True)


def _columns(source: Source, value: Any, s: Slice) -> dict[str, Any]:
    """One planned slice of a computed partition as a dict of numpy columns."""
    import numpy as np

    n = len(value)
    expected = source.lengths[s.part] if source.lengths is not None else n
    if n != expected:
        raise PartitionError(f"dataset {source.name!r}: partition {s.part} has {n} rows now but {expected} when the "
                             "rows were counted: the preprocessing must give the same rows every time it runs "
                             "(seed random filters or sampling), or the shards would differ between ranks.")
    if source.kind == "frame":
        part = value.iloc[s.start:s.stop]
        return {str(c): _tensor_column(part[c].to_numpy()) for c in part.columns}
    if source.kind == "array":
        return {"data": np.asarray(value[s.start:s.stop])}
    return record_columns(list(value)[s.start:s.stop])


def record_columns(items: list[Any]) -> dict[str, Any]:
    """Items of a bag as columns: records (dicts) give a column per key (Ray's ``from_items``), others ``"item"``."""
    if items and all(isinstance(i, Mapping) for i in items):
        keys = list(dict.fromkeys(k for i in items for k in i))
        return {str(k): _array([i.get(k) for i in items]) for k in keys}
    return {"item": _array(items)}


def _array(values: list[Any]) -> Any:
    """``values`` as one numpy array: numbers, or equal-shape lists/arrays of numbers stacked (a tensor column);
    anything else (text, bytes, ragged or mixed values) as an object array holding the values as they are."""
    import numpy as np

    if not any(isinstance(v, (str, bytes, bytearray, memoryview)) for v in values):
        try:
            arr = np.asarray(values)
            if arr.dtype.kind in "biufc":
                return arr
        except (ValueError, TypeError):  # ragged
            pass
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def _tensor_column(arr: Any) -> Any:
    """An object column of equal-shape lists/arrays of numbers stacked into one ``(rows, k, ...)`` array."""
    import numpy as np

    if arr.dtype != object or not len(arr) or not isinstance(arr[0], (list, tuple, np.ndarray)):
        return arr
    try:
        stacked = np.stack([np.asarray(v) for v in arr])
    except (ValueError, TypeError):  # ragged: stays an object array
        return arr
    return stacked if stacked.dtype.kind in "biufc" else arr


def _cat(pieces: list[Any]) -> Any:
    """numpy arrays or torch tensors (one column's pieces) end to end."""
    import numpy as np

    if isinstance(pieces[0], np.ndarray):
        return np.concatenate(pieces)
    import torch

    return torch.cat(pieces)


def _index(v: Any, perm: Any) -> Any:
    """Rows ``perm`` (a numpy int array) of a numpy array or a torch tensor."""
    import numpy as np

    if isinstance(v, np.ndarray):
        return v[perm]
    import torch

    return v[torch.from_numpy(perm)]


class _Queued:
    """A chunk being cut into batches: rows ``offset:`` are still to be handed out (no re-slicing of the rest)."""

    __slots__ = ("chunk", "offset", "rows")

    def __init__(self, chunk: dict[str, Any], rows: int) -> None:
        self.chunk = chunk
        self.offset = 0
        self.rows = rows


def _take(queued: collections.deque[_Queued], n: int) -> dict[str, Any]:
    """The next ``n`` rows of the queued chunks (chunks used up leave the queue)."""
    pieces: list[dict[str, Any]] = []
    need = n
    while need > 0:
        q = queued[0]
        lo = q.offset
        hi = min(q.rows, lo + need)
        if lo == 0 and hi == q.rows:
            pieces.append(q.chunk)
        else:
            pieces.append({k: v[lo:hi] for k, v in q.chunk.items()})
        need -= hi - lo
        if hi == q.rows:
            queued.popleft()
        else:
            q.offset = hi
    if len(pieces) == 1:
        return pieces[0]
    return {k: _cat([p[k] for p in pieces]) for k in pieces[0]}


def _rows(chunk: dict[str, Any]) -> int:
    return len(next(iter(chunk.values()))) if chunk else 0


def _batched(chunks: Iterator[dict[str, Any]], batch_size: int | None, drop_last: bool,
             shuffle_buffer: int | None, rng: Any) -> Iterator[dict[str, Any]]:
    if batch_size is None:
        yield from (c for c in chunks if _rows(c))
        return
    if shuffle_buffer:
        yield from _shuffled(chunks, batch_size, drop_last, shuffle_buffer, rng)
        return
    queued: collections.deque[_Queued] = collections.deque()
    held = 0
    for chunk in chunks:
        rows = _rows(chunk)
        if not rows:
            continue
        queued.append(_Queued(chunk, rows))
        held += rows
        while held >= batch_size:
            yield _take(queued, batch_size)
            held -= batch_size
    if held and not drop_last:
        yield _take(queued, held)


def _shuffled(chunks: Iterator[dict[str, Any]], batch_size: int, drop_last: bool, buffer_size: int,
              rng: Any) -> Iterator[dict[str, Any]]:
    """Batches drawn at random from a buffer of at least ``buffer_size`` rows (Ray's local shuffle)."""
    buf: dict[str, Any] | None = None

    def draw(k: int) -> Iterator[dict[str, Any]]:
        nonlocal buf
        assert buf is not None
        perm = rng.permutation(_rows(buf))
        cut = k * batch_size
        out = {c: _index(v, perm[:cut]) for c, v in buf.items()}
        buf = {c: _index(v, perm[cut:]) for c, v in buf.items()}
        for i in range(k):
            yield {c: v[i * batch_size:(i + 1) * batch_size] for c, v in out.items()}

    for chunk in chunks:
        if not _rows(chunk):
            continue
        buf = chunk if buf is None else {k: _cat([buf[k], chunk[k]]) for k in buf}
        extra = _rows(buf) - buffer_size
        if extra >= batch_size:
            yield from draw(extra // batch_size)
    if buf is not None and _rows(buf):
        yield from draw(_rows(buf) // batch_size)
        if _rows(buf) and not drop_last:
            perm = rng.permutation(_rows(buf))
            yield {c: _index(v, perm) for c, v in buf.items()}


def _in_background(make: Callable[[], Iterator[Any]], depth: int) -> Iterator[Any]:
    """``make()``'s items produced by a thread, up to ``depth`` ahead of the consumer."""
    q: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def run() -> None:
        try:
            for item in make():
                while not stop.is_set():
                    try:
                        q.put(("item", item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(("end", None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            q.put(("error", exc))

    thread = threading.Thread(target=run, name="tuneplat-data-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = q.get()
            if kind == "item":
                yield value
            elif kind == "error":
                raise value
            else:
                return
    finally:
        stop.set()
        while thread.is_alive():  # let it notice the stop (it never blocks for long)
            try:
                q.get(timeout=0.1)
            except queue.Empty:
                pass
        thread.join()


def _torch_dtype(dtypes: Any, column: str) -> Any:
    if dtypes is None:
        return None
    if isinstance(dtypes, Mapping):
        return dtypes.get(column)
    return dtypes


class _Epochs:
    """What ``iter_batches()`` & co. return: an iterable whose every pass (``for batch in it``) is a new epoch.

    As in Ray, ``batches = shard.iter_torch_batches(...)`` may be made once and looped over at each epoch.
    """

    def __init__(self, start: Callable[[], Iterator[Any]]) -> None:
        self._start = start

    def __iter__(self) -> Iterator[Any]:
        return self._start()

    def map(self, fn: Callable[[Any], Any]) -> _Epochs:
        return _Epochs(lambda: (fn(b) for b in self._start()))


class DataIterator:
    """One rank's view of a dataset: its shard when the dataset is split, the whole dataset otherwise.

    Returned by :func:`get_dataset_shard`; every pass over what :meth:`iter_batches`,
    :meth:`iter_torch_batches` or :meth:`iter_rows` return is one epoch (the same
    iterable may be looped over again for the next epoch). Every rank of a trial must take its passes together (as with DDP's
    collectives): a split dataset gives each rank the same number of rows.
    """

    def __init__(self, source: Source, config: DataConfig, session: Session | None) -> None:
        self._source = source
        self._config = config
        self._session = weakref.ref(session) if session is not None else None
        self._epoch = 0
        # the rank's client, taken where the iterator is made (the rank's own thread: it secedes there): epochs may
        # be opened from tf.data's generator threads (to_tf; iter_tf_batches inside Dataset.from_generator, as Ray's
        # autoencoder example does), where no Dask client is found and dask.local cannot compute the collection
        self._client: Any = _rank_client() if source.files is None and session is not None else None

    def __repr__(self) -> str:
        how = "split across the ranks" if self._config.splits(self._source.name) else "whole on every rank"
        return (f"DataIterator({self._source.name!r}: {self._source.label}, {self._source.npartitions} partitions, "
                f"{how}, epoch {self._epoch})")

    # ------------------------------------------------------------------ one epoch
    def _slices(self) -> tuple[list[Slice], Any]:
        session = self._session() if self._session is not None else None
        world, rank, hosts = 1, 0, None
        seed: int | str | None = self._config.seed
        if session is not None:
            ctx = session.context
            world, rank = ctx.get_world_size(), ctx.get_world_rank()  # read at every epoch: groups may resize
            if seed is None:
                seed = ctx.get_trial_id()
            hosts = list(getattr(session.spec, "rank_hosts", None) or []) or None  # (stale after a resize: unused)
        src = self._source
        client = (self._client or _rank_client()) if src.files is None else None  # plain Parquet: read here
        lengths = src.ensure_lengths(client)
        name = src.name
        order = epoch_order(len(lengths), self._epoch, seed, self._config.shuffles(name))
        split = self._config.splits(name)
        locality = self._config.enable_shard_locality and split
        slices = plan_shard(lengths, world, rank, order, split=split,
                            part_hosts=src.part_hosts if locality else None,
                            rank_hosts=hosts if locality else None)
        self._epoch += 1
        return slices, client

    def _numpy_batches(self, batch_size: int | None, drop_last: bool, local_shuffle_buffer_size: int | None,
                       local_shuffle_seed: int | None, prefetch_batches: int,
                       convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> _Epochs:
        """The epochs' batches; ``convert`` turns each partition slice's columns (numpy) into what is batched
        (tensors), once per slice, before batches are cut from it."""
        import numpy as np

        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise ValueError(f"batch_size={batch_size!r}: it must be a positive int (or None for whole partitions).")
        if local_shuffle_buffer_size is not None and local_shuffle_buffer_size < 0:
            raise ValueError(f"local_shuffle_buffer_size={local_shuffle_buffer_size!r}: it must be >= 0 or None.")
        source, window = self._source, self._config.prefetch_partitions

        def start() -> Iterator[dict[str, Any]]:  # one epoch, planned when the loop over it begins
            epoch = self._epoch
            slices, client = self._slices()
            rng = None
            if local_shuffle_buffer_size:
                session = self._session() if self._session is not None else None
                rank = session.context.get_world_rank() if session is not None else 0
                seq = None if local_shuffle_seed is None else [local_shuffle_seed, epoch, rank]
                rng = np.random.default_rng(seq)

            def make() -> Iterator[dict[str, Any]]:
                chunks: Iterator[dict[str, Any]]
                if source.files is not None:  # row groups read in a thread of their own, converted there
                    chunks = (cols for _s, cols in iter_pieces(source.files, slices, window, source.name, convert))
                else:
                    chunks = (_columns(source, value, s) for s, value in _Fetcher(source, slices, window, client))
                    if convert is not None:
                        chunks = (convert(c) for c in chunks)
                return _batched(chunks, batch_size, drop_last, local_shuffle_buffer_size, rng)

            if prefetch_batches and prefetch_batches > 0:
                return _in_background(make, prefetch_batches)
            return make()

        return _Epochs(start)

    # ------------------------------------------------------------------ Ray's DataIterator methods
    def iter_batches(self, *, prefetch_batches: int = 1, batch_size: int | None = 256, batch_format: str = "numpy",
                     drop_last: bool = False, local_shuffle_buffer_size: int | None = None,
                     local_shuffle_seed: int | None = None) -> Iterable[Any]:
        """One epoch of batches: dicts of numpy arrays by column (``"numpy"``/``"default"``) or pandas DataFrames.

        A Dask array's rows come as the column ``"data"``; a bag's items that are
        dicts as their keys, others as ``"item"`` (Ray's names).

        Args:
            prefetch_batches: batches made ready ahead of use in a background thread (0: none).
            batch_size: rows per batch (the last may be smaller unless ``drop_last``); None gives
                each partition slice as it comes.
            batch_format: ``"numpy"`` (or ``"default"``) or ``"pandas"``.
            drop_last: drop the last, smaller batch.
            local_shuffle_buffer_size: draw batches at random from a buffer of at least this many rows.
            local_shuffle_seed: seed of that draw (with the epoch and the rank).

        Example:
            >>> for batch in train.get_dataset_shard("train").iter_batches(batch_size=128):  # doctest: +SKIP
            ...     x, y = batch["x"], batch["y"]
        """
        if batch_format not in ("numpy", "default", "pandas"):
            raise ValueError(f"batch_format={batch_format!r}: it must be 'numpy' (or 'default') or 'pandas'; for "
                             "tensors use iter_torch_batches().")
        batches = self._numpy_batches(batch_size, drop_last, local_shuffle_buffer_size, local_shuffle_seed,
                                      prefetch_batches)
        if batch_format == "pandas":
            return batches.map(_to_pandas)
        return batches

    def iter_tf_batches(self, *, prefetch_batches: int = 1, batch_size: int | None = 256, dtypes: Any = None,
                        drop_last: bool = False, local_shuffle_buffer_size: int | None = None,
                        local_shuffle_seed: int | None = None) -> Iterable[Any]:
        """One epoch of batches as dicts of TensorFlow tensors by column (Ray's ``iter_tf_batches``).

        Args:
            prefetch_batches: batches made ready ahead of use in a background thread (0: none).
            batch_size: rows per batch (the last may be smaller unless ``drop_last``).
            dtypes: a ``tf.DType`` for every column, a ``{column: tf.DType}`` dict, or None (the arrays' own).
            drop_last: drop the last, smaller batch.
            local_shuffle_buffer_size: draw batches at random from a buffer of at least this many rows.
            local_shuffle_seed: seed of that draw (with the epoch and the rank).

        Example:
            >>> for batch in train.get_dataset_shard("train").iter_tf_batches(batch_size=64):  # doctest: +SKIP
            ...     x, y = batch["image"], batch["label"]
        """
        import tensorflow as tf

        if self._source.files is None and self._client is None:  # (tf.data's threads pull batches too)
            self._client = _rank_client()

        def tensors(batch: dict[str, Any]) -> dict[str, Any]:
            out = {}
            for col, arr in batch.items():
                dtype = dtypes.get(col) if isinstance(dtypes, Mapping) else dtypes
                out[col] = tf.convert_to_tensor(arr, dtype=dtype) if dtype is None else tf.cast(arr, dtype)
            return out

        return self._numpy_batches(batch_size, drop_last, local_shuffle_buffer_size, local_shuffle_seed,
                                   prefetch_batches).map(tensors)

    def iter_torch_batches(self, *, prefetch_batches: int = 1, batch_size: int | None = 256, dtypes: Any = None,
                           device: Any = "auto", collate_fn: Callable[[dict[str, Any]], Any] | None = None,
                           drop_last: bool = False, local_shuffle_buffer_size: int | None = None,
                           local_shuffle_seed: int | None = None) -> Iterable[Any]:
        """One epoch of batches as dicts of torch tensors by column, on the rank's device by default.

        Args:
            dtypes: a torch dtype for every column, or a dict of column -> dtype.
            device: ``"auto"`` (the rank's device: its GPU, else the CPU), a device, or None (CPU).
            collate_fn: turns each numpy batch (dict of arrays) into what the loop wants;
                then the tensors are not moved (as in Ray) and ``dtypes``/``device`` are unused.
            Other arguments: as in :meth:`iter_batches`.

        Example:
            >>> shard = train.get_dataset_shard("train")  # doctest: +SKIP
            >>> for epoch in range(3):  # doctest: +SKIP
            ...     for batch in shard.iter_torch_batches(batch_size=256, dtypes=torch.float32):
            ...         loss = model(batch["x"]) ...
        """
        if collate_fn is not None and (dtypes is not None or device not in ("auto", None)):
            raise ValueError("iter_torch_batches(collate_fn=...) returns what collate_fn returns: move it to a device "
                             "and set dtypes inside collate_fn (dtypes= and device= are for the default conversion).")
        if collate_fn is not None:
            return self._numpy_batches(batch_size, drop_last, local_shuffle_buffer_size, local_shuffle_seed,
                                       prefetch_batches).map(collate_fn)
        import torch

        if device == "auto":
            dev = _rank_device()
        else:
            dev = torch.device(device) if device is not None else None
        name = self._source.name
        if dtypes is not None and not isinstance(dtypes, (Mapping, torch.dtype)):
            raise TypeError(f"iter_torch_batches(dtypes={dtypes!r}): it must be a torch dtype or a dict of column "
                            "-> torch dtype.")

        private = self._source.files is not None  # row groups decoded for this rank alone (else: maybe a
        # partition held in this worker's memory for every trial, seen read-only through pandas)

        def tensors(chunk: dict[str, Any]) -> dict[str, Any]:  # once per partition slice / row group
            return {col: _to_tensor(arr, _torch_dtype(dtypes, col), col, name,
                                    isinstance(dtypes, Mapping) and col in dtypes, private)
                    for col, arr in chunk.items()}

        batches = self._numpy_batches(batch_size, drop_last, local_shuffle_buffer_size, local_shuffle_seed,
                                      prefetch_batches, convert=tensors)
        if dev is None or dev.type == "cpu":
            return batches
        cuda = dev.type == "cuda"

        def move(batch: dict[str, Any]) -> dict[str, Any]:
            return {col: (t.to(device=dev, non_blocking=cuda) if isinstance(t, torch.Tensor) else t)
                    for col, t in batch.items()}

        return batches.map(move)

    def iter_rows(self, *, prefetch_batches: int = 1) -> Iterable[dict[str, Any]]:
        """Row by row (dicts by column); each pass is one epoch."""
        batches = self.iter_batches(batch_size=None, prefetch_batches=prefetch_batches)

        def rows() -> Iterator[dict[str, Any]]:
            for batch in batches:
                cols = list(batch)
                for i in range(_rows(batch)):
                    yield {c: batch[c][i] for c in cols}

        return _Epochs(rows)


    def to_tf(self, feature_columns: str | list[str], label_columns: str | list[str], *,
              additional_columns: str | list[str] | None = None, prefetch_batches: int = 1, batch_size: int = 1,
              drop_last: bool = False, local_shuffle_buffer_size: int | None = None,
              local_shuffle_seed: int | None = None, feature_type_spec: Any = None, label_type_spec: Any = None,
              additional_type_spec: Any = None) -> Any:
        """This rank's shard as a ``tf.data.Dataset`` of ``(features, labels)`` batches (Ray's ``to_tf``).

        A column name gives a tensor, a list of names a dict of tensors. Each
        pass over the dataset is one epoch of this rank's rows (use it with
        ``tuneplat.train.tensorflow.prepare_dataset_shard``: it is the rank's
        shard already). Types are read from the first batch unless given.

        Example:
            >>> ds = train.get_dataset_shard("train").to_tf("x", "y", batch_size=32)  # doctest: +SKIP
            >>> model.fit(prepare_dataset_shard(ds), epochs=3)  # doctest: +SKIP
        """
        from ._tf import to_tf

        if self._source.files is None and self._client is None:  # tf.data pulls epochs from its own threads
            self._client = _rank_client()
        def batches() -> Iterable[dict[str, Any]]:
            return self.iter_batches(prefetch_batches=prefetch_batches, batch_size=batch_size, drop_last=drop_last,
                                     local_shuffle_buffer_size=local_shuffle_buffer_size,
                                     local_shuffle_seed=local_shuffle_seed)

        def first() -> dict[str, Any] | None:  # (for the types; the epoch it opened is not counted)
            epoch = self._epoch
            try:
                return next(iter(self.iter_batches(prefetch_batches=0, batch_size=batch_size)), None)
            finally:
                self._epoch = epoch

        return to_tf(batches, first, feature_columns, label_columns, additional_columns, feature_type_spec,
                     label_type_spec, additional_type_spec)

    def to_pandas(self) -> Any:
        """One epoch of this rank's rows as one pandas DataFrame (for libraries that take a frame: xgboost, LightGBM)."""
        import pandas as pd

        frames = list(self.iter_batches(batch_size=None, batch_format="pandas", prefetch_batches=0))
        if not frames:
            return pd.DataFrame()
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)

    def materialize(self) -> MaterializedShard:
        """This rank's rows read once and held in memory (Ray's ``DataIterator.materialize()``).

        Example:
            >>> df = train.get_dataset_shard("train").materialize().to_pandas()  # doctest: +SKIP
        """
        return MaterializedShard(self.to_pandas())


class MaterializedShard:
    """A rank's shard held in memory (what ``DataIterator.materialize()`` returns; Ray's is a Dataset)."""

    def __init__(self, frame: Any) -> None:
        self._frame = frame

    def __repr__(self) -> str:
        return f"MaterializedShard({len(self._frame)} rows, columns={list(self._frame.columns)})"

    def count(self) -> int:
        """How many rows."""
        return len(self._frame)

    def columns(self) -> list[str]:
        return [str(c) for c in self._frame.columns]

    def to_pandas(self) -> Any:
        """The rows as a pandas DataFrame (a copy: change it freely)."""
        return self._frame.copy()

    def iter_batches(self, *, batch_size: int | None = 256, batch_format: str = "numpy",
                     drop_last: bool = False, **_: Any) -> Iterator[Any]:
        """The rows in order, as dicts of numpy arrays (or DataFrames with ``batch_format="pandas"``)."""
        if batch_format not in ("numpy", "default", "pandas"):
            raise ValueError(f"batch_format={batch_format!r}: it must be 'numpy' (or 'default') or 'pandas'.")
        n = len(self._frame)
        step = n if batch_size is None else int(batch_size)
        for lo in range(0, n, max(step, 1)):
            part = self._frame.iloc[lo:lo + step]
            if drop_last and len(part) < step:
                return
            yield part if batch_format == "pandas" else {str(c): part[c].to_numpy() for c in part.columns}

    def iter_rows(self) -> Iterator[dict[str, Any]]:
        for row in self._frame.to_dict(orient="records"):
            yield row


def _to_tensor(arr: Any, dtype: Any, col: str, name: str, asked: bool, private: bool) -> Any:
    """A numpy column as a torch tensor (converted to ``dtype`` if given); a column torch cannot hold (text, bytes,
    ragged arrays, dates) stays the numpy array it is, unless ``dtypes=`` named it.

    The tensor shares the array's memory when it is writable or ``private`` (an Arrow buffer decoded for this rank
    alone); a read-only view of memory someone else holds (pandas' copy-on-write) is copied once.
    """
    import torch

    arr = _tensor_column(arr)
    if arr.dtype.kind not in "biufc":
        if asked:
            raise TypeError(f"dataset {name!r}: column {col!r} has numpy dtype {arr.dtype}, which torch cannot hold, "
                            f"and iter_torch_batches(dtypes=...) names it; leave it out of dtypes (it then comes as a "
                            "numpy array), convert it in map_partitions, or pass collate_fn=.")
        return arr
    if not arr.flags.writeable:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            t = torch.from_numpy(arr) if arr.dtype.isnative else torch.as_tensor(arr.astype(arr.dtype.newbyteorder("=")))
        if not private and (dtype is None or dtype == t.dtype):
            t = t.clone()  # (a conversion below copies anyway)
    else:
        t = torch.from_numpy(arr) if arr.dtype.isnative else torch.as_tensor(arr.astype(arr.dtype.newbyteorder("=")))
    if dtype is not None and dtype != t.dtype:
        t = t.to(dtype)
    return t


def _to_pandas(batch: dict[str, Any]) -> Any:
    import pandas as pd

    return pd.DataFrame({k: (list(v) if getattr(v, "ndim", 1) > 1 else v) for k, v in batch.items()})


def _rank_device() -> Any:
    import torch

    from ..torch._torch import get_device

    try:
        return get_device()
    except Exception:  # noqa: BLE001 - outside a trial
        return torch.device("cpu")


# ---------------------------------------------------------------------- what a trial's rank holds
_installed: weakref.WeakKeyDictionary[Session, dict[str, DataIterator]] = weakref.WeakKeyDictionary()
_installed_names: weakref.WeakKeyDictionary[Session, list[str]] = weakref.WeakKeyDictionary()


#: glibc's mmap threshold in a rank's process where Dask fixed it (see :func:`_batches_off_mmap`)
RANK_MMAP_THRESHOLD = 4 * 2**20
_MMAP_SET: list[bool] = []


def _batches_off_mmap() -> None:
    """Let glibc serve allocations below :data:`RANK_MMAP_THRESHOLD` from its heap in this process (once).

    Dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_`` set; setting it turns glibc's dynamic mmap
    threshold off, so every allocation of 128 KiB or more (a ``(1024, 32)`` float32 batch stacked in the loop,
    a concatenation at a row group's boundary) is an ``mmap`` + ``munmap`` of fresh pages: 33 page faults per
    such batch, ~33,000 per million rows, measured in a rank (a plain process: ~1,000). glibc raises the
    threshold by itself up to 32 MiB in a plain process; here it is set once to 4 MiB. The trim threshold
    Dask chose is kept: freed memory at the top of the heap still goes back to the system.
    """
    if _MMAP_SET:
        return
    _MMAP_SET.append(True)
    import os
    import sys

    if not sys.platform.startswith("linux") or not os.environ.get("MALLOC_TRIM_THRESHOLD_"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, RANK_MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):  # not glibc
        logger.debug("tuneplat: mallopt not available", exc_info=True)


def install(session: Session, sources: Mapping[str, Source], config: DataConfig) -> None:
    """Give the rank of ``session`` its iterators (called by the trainer's loop before user code runs)."""
    _batches_off_mmap()
    _installed[session] = {name: DataIterator(src, config, session) for name, src in sources.items()}
    _installed_names[session] = list(sources)


def uninstall(session: Session) -> None:
    _installed.pop(session, None)
    _installed_names.pop(session, None)


def get_dataset_shard(dataset_name: str | None = None) -> DataIterator:
    """This rank's :class:`DataIterator` for the trainer's dataset ``dataset_name`` (``ray.train.get_dataset_shard``).

    Args:
        dataset_name: a key of the trainer's ``datasets=``; may be left out when there is only one.

    Raises:
        RuntimeError: outside a trial, or in a trial whose trainer was given no ``datasets=``.
        KeyError: ``dataset_name`` is not one of the trainer's datasets (the message lists them).

    Example:
        >>> def train_loop(config):  # doctest: +SKIP
        ...     shard = train.get_dataset_shard("train")
        ...     for epoch in range(config["epochs"]):
        ...         for batch in shard.iter_torch_batches(batch_size=256):
        ...             ...
    """
    session = _get_session("train.get_dataset_shard")
    shards = _installed.get(session)
    if shards is None:
        raise RuntimeError("train.get_dataset_shard() was called in a trial that has no datasets: pass them to the "
                           "trainer, TorchTrainer(train_loop, datasets={'train': ddf}, ...).")
    if dataset_name is None:
        if len(shards) != 1:
            raise ValueError(f"train.get_dataset_shard() needs a name: the trainer has {len(shards)} datasets, "
                             f"{_installed_names.get(session, sorted(shards))}.")
        return next(iter(shards.values()))
    try:
        return shards[dataset_name]
    except KeyError:
        raise KeyError(f"train.get_dataset_shard({dataset_name!r}): no such dataset; the trainer was given "
                       f"{_installed_names.get(session, sorted(shards))}.") from None
