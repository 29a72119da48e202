"""``prepare_dataset_shard``: a rank's ``tf.data.Dataset`` as its shard (``ray.train.tensorflow.prepare_dataset_shard``)."""

from __future__ import annotations

from typing import Any

__all__ = ["prepare_dataset_shard"]


def prepare_dataset_shard(tf_dataset_shard: Any) -> Any:
    """Turn off TensorFlow's auto-sharding and prefetch (the dataset is already this rank's shard).

    Use it on ``train.get_dataset_shard("train").to_tf(...)`` before
    ``model.fit``: ``MultiWorkerMirroredStrategy`` would otherwise shard the
    shard again.

    Args:
        tf_dataset_shard: a ``tf.data.Dataset``.

    Returns:
        The dataset with ``AutoShardPolicy.OFF`` and ``prefetch(AUTOTUNE)``.

    Example:
        >>> ds = prepare_dataset_shard(shard.to_tf("x", "y", batch_size=32))  # doctest: +SKIP
    """
    import tensorflow as tf

    if not isinstance(tf_dataset_shard, tf.data.Dataset):
        raise TypeError(f"prepare_dataset_shard() takes a tf.data.Dataset, got {type(tf_dataset_shard).__name__}")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return tf_dataset_shard.with_options(options).prefetch(tf.data.AUTOTUNE)
