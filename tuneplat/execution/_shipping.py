"""How the trainable travels to its ranks: pickled once on the tuner's side, unpickled by the rank itself.

Two things depend on *when* and *how* the training function is unpickled:

* **The rank's environment first.** A function defined in the user's script
  reaches the ranks by value, and unpickling it imports the modules its globals
  name (a module-level ``import pytorch_lightning as pl``). Lightning fixes its
  ``rank_zero_only.rank`` from ``RANK``/``LOCAL_RANK`` at import, so the rank's
  ``RANK``, ``LOCAL_RANK``, ``NODE_RANK`` and ``WORLD_SIZE`` must be set before
  the function is unpickled (Ray's workers have them before the function
  arrives). Dask unpickles a task's arguments before the task runs, so the
  trainable travels as bytes (:class:`Shipped`) and the runner unpickles it
  after it has set the environment.
* **Where the code came from.** cloudpickle writes ``<dynamic-code>`` as the
  file name of every code object it pickles by value, so a rank's stacks
  and tracebacks could not say which line of the user's script it was in
  (``tuneplat stacks``, the hung-rank summary). :func:`dumps` keeps each code
  object's own file name (line numbers are kept by cloudpickle).
"""

from __future__ import annotations

import io
import logging
import types
from collections import ChainMap
from collections.abc import Callable
from typing import Any

import cloudpickle

__all__ = ["Shipped", "dumps", "ship"]

logger = logging.getLogger("tuneplat")

_DYNAMIC = "<dynamic-code>"


#: cloudpickle's reduction of code objects (it writes ``<dynamic-code>`` as their file name)
_LIBRARY_CODE_REDUCE = cloudpickle.Pickler.dispatch_table.get(types.CodeType)


def _code_keeping_filename(code: types.CodeType) -> Any:
    """cloudpickle's own reduction of ``code``, with the real file name where it wrote ``<dynamic-code>``."""
    assert _LIBRARY_CODE_REDUCE is not None
    reduced = _LIBRARY_CODE_REDUCE(code)
    if code.co_filename == _DYNAMIC or not isinstance(reduced, tuple) or len(reduced) < 2:
        return reduced
    fn, args, *rest = reduced
    if not isinstance(args, tuple):
        return reduced
    at = [i for i, a in enumerate(args) if isinstance(a, str) and a == _DYNAMIC]
    if len(at) != 1:  # nothing replaced (a cloudpickle that keeps file names) or ambiguous: as the library made it
        return reduced
    args = args[:at[0]] + (code.co_filename,) + args[at[0] + 1:]
    return (fn, args, *rest)


class _Pickler(cloudpickle.Pickler):
    if _LIBRARY_CODE_REDUCE is not None:  # (else the library pickles code its own way: as it does)
        dispatch_table = ChainMap({types.CodeType: _code_keeping_filename}, cloudpickle.Pickler.dispatch_table)


def dumps(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, keeping the file names of the code it pickles by value."""
    buf = io.BytesIO()
    _Pickler(buf, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(obj)
    return buf.getvalue()


class Shipped:
    """A trainable as bytes: the rank unpickles it (:meth:`load`) once its environment is set.

    Each :meth:`load` makes a fresh copy, as a new Dask task would (single-rank
    trials chained in one task get one each).
    """

    __slots__ = ("_original", "blob", "name")

    def __init__(self, blob: bytes, name: str, original: Any = None) -> None:
        self.blob = blob
        self.name = name
        # (the tuner's side only: the object itself keeps what it holds alive there, e.g. the Dask futures of a
        # dataset's partitions, which the copies in the blob only name)
        self._original = original

    def __reduce__(self) -> tuple[Any, ...]:
        return (Shipped, (self.blob, self.name))  # the bytes travel, never the original

    def load(self) -> Callable[..., Any]:
        return cloudpickle.loads(self.blob)  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"Shipped({self.name}, {len(self.blob)} bytes)"


def ship(trainable: Any) -> Any:
    """``trainable`` as a :class:`Shipped`, or itself when cloudpickle cannot pickle it (Dask's serializers may)."""
    try:
        blob = dumps(trainable)
    except Exception:  # noqa: BLE001 - e.g. an object only Dask's own serializers handle: sent as it is
        logger.debug("tuneplat: the trainable is sent as it is (cloudpickle cannot pickle it)", exc_info=True)
        return trainable
    return Shipped(blob, getattr(trainable, "__name__", type(trainable).__name__), trainable)
