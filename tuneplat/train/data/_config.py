"""``DataConfig``: which datasets are split across the ranks, and how they are read (``ray.train.DataConfig``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

__all__ = ["DataConfig"]


class DataConfig:
    """How the trainer's ``datasets=`` reach the ranks.

    Args:
        datasets_to_split: ``"all"`` (the default) or the names of the datasets
            whose rows are divided among the ranks; the others go whole to every rank.
        randomize_block_order: reshuffle the order of the partitions at every
            epoch (Ray's ``Dataset.randomize_block_order()``): ``True`` for every
            dataset, or a list of names. Deterministic for a ``seed``.
        seed: the seed of that shuffle (each epoch uses ``(seed, epoch)``); None
            takes one from the trial id, the same on every rank of the trial.
        prefetch_partitions: how many partitions a rank asks the cluster for
            ahead of the one it reads (each is dropped once read): the bound on
            a rank's data in memory is about ``prefetch_partitions + 1`` partitions.
        enable_shard_locality: when splitting, give a rank the partitions already
            held on its host where that keeps the shards equal (Ray's flag).
        execution_options: accepted for Ray compatibility; Dask decides where
            partitions are computed.
        read_timeout_s: the longest one read of Parquet files may take (listing a
            glob, a file's footer, a row group), e.g. from a remote store that
            stopped answering; the ``TimeoutError`` names the URL. None: the
            ``TUNEPLAT_DATA_TIMEOUT_S`` environment variable, else 120 s; 0: no bound.

    Example:
        >>> from tuneplat.train import DataConfig
        >>> DataConfig(datasets_to_split=["train"], randomize_block_order=True, seed=0)
        DataConfig(datasets_to_split=['train'], randomize_block_order=True, seed=0, prefetch_partitions=2)
    """

    def __init__(self, datasets_to_split: Literal["all"] | Sequence[str] = "all", execution_options: Any = None,
                 enable_shard_locality: bool = True, *, randomize_block_order: bool | Sequence[str] = False,
                 seed: int | None = None, prefetch_partitions: int = 2,
                 read_timeout_s: float | None = None) -> None:
        if isinstance(datasets_to_split, str):
            if datasets_to_split != "all":
                raise ValueError(f"DataConfig(datasets_to_split={datasets_to_split!r}): it must be 'all' or a list of "
                                 f"dataset names, e.g. datasets_to_split=[{datasets_to_split!r}].")
            split: Literal["all"] | list[str] = "all"
        else:
            split = [str(n) for n in datasets_to_split]
        if not isinstance(randomize_block_order, bool):
            randomize_block_order = [str(n) for n in randomize_block_order]
        if isinstance(prefetch_partitions, bool) or not isinstance(prefetch_partitions, int) or prefetch_partitions < 0:
            raise ValueError(f"DataConfig(prefetch_partitions={prefetch_partitions!r}): it must be an int >= 0.")
        if read_timeout_s is not None and (isinstance(read_timeout_s, bool)
                                           or not isinstance(read_timeout_s, (int, float)) or read_timeout_s < 0):
            raise ValueError(f"DataConfig(read_timeout_s={read_timeout_s!r}): it must be a number of seconds >= 0 "
                             "(0: no bound) or None (the default).")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"DataConfig(seed={seed!r}): it must be an int or None.")
        self.datasets_to_split = split
        self.execution_options = execution_options
        self.enable_shard_locality = bool(enable_shard_locality)
        self.randomize_block_order = randomize_block_order
        self.seed = seed
        self.prefetch_partitions = prefetch_partitions
        self.read_timeout_s = read_timeout_s

    def splits(self, name: str) -> bool:
        """Whether the dataset ``name`` is divided among the ranks."""
        return self.datasets_to_split == "all" or name in self.datasets_to_split

    def shuffles(self, name: str) -> bool:
        """Whether the partition order of ``name`` is reshuffled at every epoch."""
        r = self.randomize_block_order
        return r if isinstance(r, bool) else name in r

    def check_names(self, names: Sequence[str]) -> None:
        """Refuse names in this config that are not among the trainer's datasets."""
        given = sorted(names)
        for arg, listed in (("datasets_to_split", self.datasets_to_split),
                            ("randomize_block_order", self.randomize_block_order)):
            if isinstance(listed, list):
                unknown = [n for n in listed if n not in names]
                if unknown:
                    raise ValueError(f"DataConfig({arg}=...) names {unknown}, which are not among the trainer's "
                                     f"datasets {given}.")

    def __repr__(self) -> str:
        return (f"DataConfig(datasets_to_split={self.datasets_to_split!r}, randomize_block_order="
                f"{self.randomize_block_order!r}, seed={self.seed!r}, prefetch_partitions={self.prefetch_partitions})")
