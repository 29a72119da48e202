"""``map_batches(collection, fn)``: Ray Data's ``Dataset.map_batches`` on a Dask collection, lazily."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["map_batches"]


def _records_in_columns(records: Any, fn: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
    from ._convert import record_columns

    items = list(records)
    if not items:
        return []
    out = fn(record_columns(items))
    if not isinstance(out, dict):
        raise TypeError(f"map_batches: the function returned a {type(out).__name__}; it must return a dict of "
                        "column -> array (Ray's batch_format='numpy').")
    lengths = {len(v) for v in out.values()}
    if len(lengths) > 1:
        raise ValueError(f"map_batches: the function returned columns of different lengths {sorted(lengths)}.")
    n = lengths.pop() if lengths else 0
    return [{k: v[i] for k, v in out.items()} for i in range(n)]


def _frame_in_columns(frame: Any, fn: Callable[[dict[str, Any]], Any]) -> Any:
    import pandas as pd

    from ._convert import tensor_column

    out = fn({str(c): tensor_column(frame[c].to_numpy()) for c in frame.columns})
    if not isinstance(out, dict):
        raise TypeError(f"map_batches: the function returned a {type(out).__name__}; it must return a dict of "
                        "column -> array (Ray's batch_format='numpy').")
    return pd.DataFrame({k: (list(v) if getattr(v, "ndim", 1) > 1 else v) for k, v in out.items()})


def map_batches(data: Any, fn: Callable[[Any], Any], *, batch_format: str = "numpy") -> Any:
    """Ray's ``ds.map_batches(fn)`` on a Dask bag or DataFrame: ``fn`` gets each partition as a batch.

    With ``batch_format="numpy"`` (Ray's default) ``fn`` receives a dict of numpy arrays by column and returns
    one: a bag of records (``dask.bag.from_sequence([{"x": [1.0], "y": [2.0]}, ...])``, Ray's ``from_items``)
    comes as columns, values of equal shape stacked (``(rows, 1)`` here); the result is a bag of records again.
    A DataFrame's columns come as arrays (lists in a cell stacked into ``(rows, k)``); the result is a DataFrame.
    With ``batch_format="pandas"`` ``fn`` gets and returns a pandas DataFrame (``ddf.map_partitions(fn)``).
    Nothing runs until the data is read (on the Dask workers).

    Args:
        data: a ``dask.bag.Bag`` or ``dask.dataframe.DataFrame``.
        fn: the batch function, as written for Ray.
        batch_format: ``"numpy"`` (or ``"default"``) or ``"pandas"`` (DataFrames only).

    Returns:
        The lazy collection of the same kind, to pass in ``datasets=``.

    Example:
        >>> import dask.bag as db
        >>> from tuneplat.train.data import map_batches
        >>> def increment(batch):
        ...     batch["y"] = batch["y"] + 1
        ...     return batch
        >>> bag = map_batches(db.from_sequence([{"x": [x], "y": [2 * x]} for x in range(4)]), increment)
        >>> [int(r["y"][0]) for r in bag.compute()]
        [1, 3, 5, 7]
    """
    import dask.bag as db
    import dask.dataframe as dd

    if batch_format not in ("numpy", "default", "pandas"):
        raise ValueError(f"map_batches(batch_format={batch_format!r}): it must be 'numpy' (or 'default') or 'pandas'.")
    if isinstance(data, db.Bag):
        if batch_format == "pandas":
            raise ValueError("map_batches(bag, batch_format='pandas'): a bag's batches are numpy columns; build a "
                             "DataFrame with bag.to_dataframe() for pandas batches.")
        return data.map_partitions(_records_in_columns, fn)
    if isinstance(data, dd.DataFrame):
        if batch_format == "pandas":
            return data.map_partitions(fn)
        return data.map_partitions(_frame_in_columns, fn)
    raise TypeError(f"map_batches(data=...) takes a dask.bag.Bag or a dask.dataframe.DataFrame, got "
                    f"{type(data).__module__}.{type(data).__qualname__}.")
