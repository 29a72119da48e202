"""Datasets sharded to the ranks from Dask: ``TorchTrainer(datasets=...)`` and ``train.get_dataset_shard()``.

See docs/data-ingest.md.
"""

from __future__ import annotations

from ._config import DataConfig
from ._iterator import DataIterator, get_dataset_shard
from ._map import map_batches
from ._source import PartitionError

__all__ = ["DataConfig", "DataIterator", "PartitionError", "get_dataset_shard", "map_batches"]
