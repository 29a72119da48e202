"""``DataIterator.to_tf``: a rank's shard as a ``tf.data.Dataset`` of ``(features, labels)`` batches (Ray's)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["to_tf"]


def _names(columns: str | list[str] | None, what: str) -> list[str]:
    if columns is None:
        return []
    if isinstance(columns, str):
        return [columns]
    if isinstance(columns, (list, tuple)) and all(isinstance(c, str) for c in columns):
        return list(columns)
    raise TypeError(f"to_tf({what}=...) takes a column name or a list of names, got {columns!r}")


def _pick(batch: dict[str, Any], columns: str | list[str], available: list[str]) -> Any:
    missing = [c for c in _names(columns, "columns") if c not in batch]
    if missing:
        raise KeyError(f"to_tf(): no column {missing[0]!r} in the dataset; it has {available}")
    if isinstance(columns, str):
        return batch[columns]
    return {c: batch[c] for c in columns}


def _spec(tf: Any, value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _spec(tf, v) for k, v in value.items()}
    return tf.TensorSpec(shape=(None, *value.shape[1:]), dtype=tf.as_dtype(value.dtype))


def to_tf(batches: Callable[[], Iterable[dict[str, Any]]], first: Callable[[], dict[str, Any] | None],
          feature_columns: str | list[str],
          label_columns: str | list[str], additional_columns: str | list[str] | None = None,
          feature_type_spec: Any = None, label_type_spec: Any = None, additional_type_spec: Any = None) -> Any:
    """A ``tf.data.Dataset`` over ``batches()`` (called once per pass: one epoch each time it is iterated).

    ``first()`` gives a batch to read the types from when a type spec is not given.
    """
    import tensorflow as tf

    _names(feature_columns, "feature_columns")
    _names(label_columns, "label_columns")
    extra = _names(additional_columns, "additional_columns")

    def split(batch: dict[str, Any]) -> tuple[Any, ...]:
        cols = list(batch)
        out = [_pick(batch, feature_columns, cols), _pick(batch, label_columns, cols)]
        if additional_columns is not None:
            out.append(_pick(batch, additional_columns, cols))
        return tuple(out)

    specs = [feature_type_spec, label_type_spec] + ([additional_type_spec] if extra else [])
    if any(s is None for s in specs):
        sample = first()
        if sample is None:
            raise ValueError("to_tf(): this rank's shard has no rows, so the batches' types are unknown; pass "
                             "feature_type_spec= and label_type_spec=")
        inferred = split(sample)
        specs = [s if s is not None else _spec(tf, v) for s, v in zip(specs, inferred)]

    def generate() -> Iterator[tuple[Any, ...]]:
        for batch in batches():
            yield split(batch)

    dataset = tf.data.Dataset.from_generator(generate, output_signature=tuple(specs))
    # the batches are this rank's shard already: without this, MultiWorkerMirroredStrategy's AUTO policy falls back
    # to DATA sharding and each rank keeps every world_size-th of its own batches (Ray's to_tf turns it off too)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options)
