"""Which rows of which partitions a rank reads in one epoch: a pure function of the inputs every rank shares.

The rule (documented in docs/data-ingest.md):

1. The epoch's partition order is ``0..n-1``, or, when the dataset is
   reshuffled, a permutation drawn from ``random.Random(f"{seed}:{epoch}")``.
2. With locality hints (the host of each persisted partition and of each
   rank), partitions are first dealt to the ranks, each to the least loaded
   rank on its host while that rank is below its share, else to the least
   loaded rank; the ranks' lists are then laid end to end. Without hints, the
   order of step 1 is kept.
3. That sequence of rows is cut into ``world_size`` equal, contiguous ranges of
   ``q = total_rows // world_size`` rows; rank ``r`` reads range ``r``. A
   partition on a boundary is read by two ranks, each its own rows.
   The last ``total_rows % world_size`` rows of the sequence (fewer than
   ``world_size``) are not read in that epoch; with a reshuffle, different
   rows each epoch.

So within an epoch every row is read exactly once across the ranks except
those dropped rows, and every rank reads the same number of rows, hence the
same number of batches.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Slice", "epoch_order", "plan_shard", "rows_per_rank"]


@dataclass(frozen=True)
class Slice:
    """Rows ``start:stop`` of partition ``part``."""

    part: int
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


def epoch_order(n: int, epoch: int, seed: int | str | None, shuffle: bool) -> list[int]:
    """The partition order of ``epoch``: identity, or a permutation that depends only on ``(seed, epoch)``."""
    order = list(range(n))
    if shuffle:
        random.Random(f"{seed}:{epoch}").shuffle(order)
    return order


def rows_per_rank(lengths: Sequence[int], world_size: int) -> int:
    """Rows each rank reads in an epoch of a split dataset."""
    return sum(lengths) // world_size


def _deal(lengths: Sequence[int], order: Sequence[int], world_size: int, part_hosts: Sequence[str | None],
          rank_hosts: Sequence[str | None]) -> list[int]:
    share = rows_per_rank(lengths, world_size)
    loads = [0] * world_size
    dealt: list[list[int]] = [[] for _ in range(world_size)]
    for p in order:
        host = part_hosts[p]
        local = [r for r in range(world_size) if host is not None and rank_hosts[r] == host and loads[r] < share]
        pool = local or range(world_size)
        r = min(pool, key=lambda i: (loads[i], i))
        dealt[r].append(p)
        loads[r] += lengths[p]
    return [p for ps in dealt for p in ps]


def plan_shard(lengths: Sequence[int], world_size: int, rank: int, order: Sequence[int], *, split: bool = True,
               part_hosts: Sequence[str | None] | None = None,
               rank_hosts: Sequence[str | None] | None = None) -> list[Slice]:
    """The slices rank ``rank`` of ``world_size`` reads, in reading order.

    Args:
        lengths: rows in each partition.
        world_size, rank: the group as it stands at this epoch's start.
        order: the epoch's partition order (:func:`epoch_order`).
        split: False gives every partition whole (a dataset not in ``datasets_to_split``).
        part_hosts, rank_hosts: locality hints (see the module docstring); ignored unless both are given.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} of a group of {world_size}")
    if not split:
        return [Slice(p, 0, lengths[p]) for p in order if lengths[p] > 0]
    if (part_hosts is not None and rank_hosts is not None and len(part_hosts) == len(lengths)
            and len(rank_hosts) == world_size and world_size > 1):
        order = _deal(lengths, order, world_size, part_hosts, rank_hosts)
    share = rows_per_rank(lengths, world_size)
    lo, hi = rank * share, (rank + 1) * share
    out: list[Slice] = []
    offset = 0
    for p in order:
        n = lengths[p]
        a, b = max(lo, offset), min(hi, offset + n)
        if a < b:
            out.append(Slice(p, a - offset, b - offset))
        offset += n
        if offset >= hi:
            break
    return out
