"""The rank's side of the cluster: its Dask client, and partitions computed ahead of use as planned slices."""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterator
from typing import Any

from ._convert import record_columns, tensor_column
from ._plan import Slice
from ._source import PartitionError, Source

__all__ = ["Fetcher", "rank_client", "slice_columns"]

logger = logging.getLogger("tuneplat")


_seceded: set[Any] = set()


def rank_client() -> Any:
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


class Fetcher:
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


def slice_columns(source: Source, value: Any, s: Slice) -> dict[str, Any]:
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
        return {str(c): tensor_column(part[c].to_numpy()) for c in part.columns}
    if source.kind == "array":
        return {"data": np.asarray(value[s.start:s.stop])}
    return record_columns(list(value)[s.start:s.stop])
