"""A rank's columns converted: bag items to numpy columns, numpy columns to torch tensors or a pandas frame."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["batch_to_pandas", "column_to_tensor", "rank_device", "record_columns", "tensor_column", "torch_dtype"]


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


def tensor_column(arr: Any) -> Any:
    """An object column of equal-shape lists/arrays of numbers stacked into one ``(rows, k, ...)`` array."""
    import numpy as np

    if arr.dtype != object or not len(arr) or not isinstance(arr[0], (list, tuple, np.ndarray)):
        return arr
    try:
        stacked = np.stack([np.asarray(v) for v in arr])
    except (ValueError, TypeError):  # ragged: stays an object array
        return arr
    return stacked if stacked.dtype.kind in "biufc" else arr


def torch_dtype(dtypes: Any, column: str) -> Any:
    if dtypes is None:
        return None
    if isinstance(dtypes, Mapping):
        return dtypes.get(column)
    return dtypes


def column_to_tensor(arr: Any, dtype: Any, col: str, name: str, asked: bool, private: bool) -> Any:
    """A numpy column as a torch tensor (converted to ``dtype`` if given); a column torch cannot hold (text, bytes,
    ragged arrays, dates) stays the numpy array it is, unless ``dtypes=`` named it.

    The tensor shares the array's memory when it is writable or ``private`` (an Arrow buffer decoded for this rank
    alone); a read-only view of memory someone else holds (pandas' copy-on-write) is copied once.
    """
    import torch

    arr = tensor_column(arr)
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


def batch_to_pandas(batch: dict[str, Any]) -> Any:
    import pandas as pd

    return pd.DataFrame({k: (list(v) if getattr(v, "ndim", 1) > 1 else v) for k, v in batch.items()})


def rank_device() -> Any:
    import torch

    from ..torch._torch import get_device

    try:
        return get_device()
    except Exception:  # noqa: BLE001 - outside a trial
        return torch.device("cpu")
