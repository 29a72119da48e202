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

import logging
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .._session import Session, _get_session
from ._batching import Epochs, batched, in_background, row_count
from ._config import DataConfig
from ._convert import batch_to_pandas, column_to_tensor, rank_device, torch_dtype
from ._fetch import Fetcher, rank_client, slice_columns
from ._parquet import iter_pieces
from ._plan import Slice, epoch_order, plan_shard
from ._source import PartitionError, Source

__all__ = ["DataIterator", "PartitionError", "get_dataset_shard"]

logger = logging.getLogger("tuneplat")


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
        self._client: Any = rank_client() if source.files is None and session is not None else None

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
        client = (self._client or rank_client()) if src.files is None else None  # plain Parquet: read here
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
                       convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Epochs:
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
                    chunks = (slice_columns(source, value, s) for s, value in Fetcher(source, slices, window, client))
                    if convert is not None:
                        chunks = (convert(c) for c in chunks)
                return batched(chunks, batch_size, drop_last, local_shuffle_buffer_size, rng)

            if prefetch_batches and prefetch_batches > 0:
                return in_background(make, prefetch_batches)
            return make()

        return Epochs(start)

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
            return batches.map(batch_to_pandas)
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
            self._client = rank_client()

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
            dev = rank_device()
        else:
            dev = torch.device(device) if device is not None else None
        name = self._source.name
        if dtypes is not None and not isinstance(dtypes, (Mapping, torch.dtype)):
            raise TypeError(f"iter_torch_batches(dtypes={dtypes!r}): it must be a torch dtype or a dict of column "
                            "-> torch dtype.")

        private = self._source.files is not None  # row groups decoded for this rank alone (else: maybe a
        # partition held in this worker's memory for every trial, seen read-only through pandas)

        def tensors(chunk: dict[str, Any]) -> dict[str, Any]:  # once per partition slice / row group
            return {col: column_to_tensor(arr, torch_dtype(dtypes, col), col, name,
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
                for i in range(row_count(batch)):
                    yield {c: batch[c][i] for c in cols}

        return Epochs(rows)


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
            self._client = rank_client()
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
