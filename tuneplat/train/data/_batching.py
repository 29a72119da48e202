"""Batches cut from a stream of column chunks: in order or locally shuffled, made ahead in a thread, one epoch
per pass."""

from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Epochs", "batched", "in_background", "row_count"]


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


def row_count(chunk: dict[str, Any]) -> int:
    return len(next(iter(chunk.values()))) if chunk else 0


def batched(chunks: Iterator[dict[str, Any]], batch_size: int | None, drop_last: bool,
             shuffle_buffer: int | None, rng: Any) -> Iterator[dict[str, Any]]:
    if batch_size is None:
        yield from (c for c in chunks if row_count(c))
        return
    if shuffle_buffer:
        yield from _shuffled(chunks, batch_size, drop_last, shuffle_buffer, rng)
        return
    queued: collections.deque[_Queued] = collections.deque()
    held = 0
    for chunk in chunks:
        rows = row_count(chunk)
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
        perm = rng.permutation(row_count(buf))
        cut = k * batch_size
        out = {c: _index(v, perm[:cut]) for c, v in buf.items()}
        buf = {c: _index(v, perm[cut:]) for c, v in buf.items()}
        for i in range(k):
            yield {c: v[i * batch_size:(i + 1) * batch_size] for c, v in out.items()}

    for chunk in chunks:
        if not row_count(chunk):
            continue
        buf = chunk if buf is None else {k: _cat([buf[k], chunk[k]]) for k in buf}
        extra = row_count(buf) - buffer_size
        if extra >= batch_size:
            yield from draw(extra // batch_size)
    if buf is not None and row_count(buf):
        yield from draw(row_count(buf) // batch_size)
        if row_count(buf) and not drop_last:
            perm = rng.permutation(row_count(buf))
            yield {c: _index(v, perm) for c, v in buf.items()}


def in_background(make: Callable[[], Iterator[Any]], depth: int) -> Iterator[Any]:
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


class Epochs:
    """What ``iter_batches()`` & co. return: an iterable whose every pass (``for batch in it``) is a new epoch.

    As in Ray, ``batches = shard.iter_torch_batches(...)`` may be made once and looped over at each epoch.
    """

    def __init__(self, start: Callable[[], Iterator[Any]]) -> None:
        self._start = start

    def __iter__(self) -> Iterator[Any]:
        return self._start()

    def map(self, fn: Callable[[Any], Any]) -> Epochs:
        return Epochs(lambda: (fn(b) for b in self._start()))
