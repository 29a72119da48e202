"""Ranking points of several objectives (lower is better): non-dominated sorting and two tie-breaks.

Pure standard library; used by MO-ASHA (:class:`~schedulers.ASHAScheduler`
with ``metric=[...]``) and multi-objective :class:`~schedulers.HyperBandScheduler`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["TIEBREAKS", "crowding_distance", "dominates", "eps_net_order", "mo_rank", "nondominated_fronts"]

#: the tie-breaks :func:`mo_rank` knows
TIEBREAKS = ("crowding", "epsnet")

Point = Sequence[float]


def dominates(a: Point, b: Point) -> bool:
    """``a`` is nowhere worse than ``b`` and better somewhere (lower is better)."""
    better = False
    for x, y in zip(a, b):
        if x > y:
            return False
        if x < y:
            better = True
    return better


def nondominated_fronts(points: Sequence[Point]) -> list[list[int]]:
    """Indices of ``points`` in fronts (NSGA-II's fast non-dominated sort): front 0 is the Pareto front.

    ``+inf`` is an ordinary (worst) value, so a point with an infinite
    objective is dominated by any point finite and not worse elsewhere.

    Example:
        >>> nondominated_fronts([(1, 5), (2, 2), (3, 3), (4, 4)])
        [[0, 1], [2], [3]]
    """
    n = len(points)
    beaten_by = [0] * n
    beats: list[list[int]] = [[] for _ in range(n)]
    # in lexicographic order a point can only be dominated by points before it: one test per pair
    order = sorted(range(n), key=lambda i: tuple(points[i]))
    for a, i in enumerate(order):
        pi = points[i]
        for j in order[a + 1:]:
            if dominates(pi, points[j]):
                beats[i].append(j)
                beaten_by[j] += 1
    fronts: list[list[int]] = []
    current = [i for i in range(n) if beaten_by[i] == 0]
    while current:
        fronts.append(sorted(current))
        following: list[int] = []
        for i in current:
            for j in beats[i]:
                beaten_by[j] -= 1
                if beaten_by[j] == 0:
                    following.append(j)
        current = following
    return fronts


def _ranges(points: Sequence[Point], members: Sequence[int]) -> list[tuple[float, float]]:
    dims = len(points[members[0]]) if members else 0
    out = []
    for d in range(dims):
        finite = [points[i][d] for i in members if math.isfinite(points[i][d])]
        out.append((min(finite), max(finite)) if finite else (0.0, 0.0))
    return out


def crowding_distance(points: Sequence[Point], front: Sequence[int]) -> dict[int, float]:
    """NSGA-II's crowding distance of each member of ``front`` (larger: more isolated, preferred).

    The extremes of each objective get ``inf``; a point with a non-finite
    objective gets 0 (it is never preferred for its spread).
    """
    distance = {i: 0.0 for i in front}
    finite = [i for i in front if all(math.isfinite(v) for v in points[i])]
    if len(finite) <= 2:
        for i in finite:
            distance[i] = math.inf
        return distance
    for d, (low, high) in enumerate(_ranges(points, finite)):
        ordered = sorted(finite, key=lambda i: (points[i][d], i))
        distance[ordered[0]] = distance[ordered[-1]] = math.inf
        span = high - low
        if span <= 0:
            continue
        for k in range(1, len(ordered) - 1):
            distance[ordered[k]] += (points[ordered[k + 1]][d] - points[ordered[k - 1]][d]) / span
    return distance


def eps_net_order(points: Sequence[Point], front: Sequence[int]) -> list[int]:
    """Members of ``front`` in epsilon-net order (Schmucker et al. 2021): greedy farthest-point selection.

    The first is the best in the first objective (ties: lowest index); each
    next one is the member farthest (Euclidean, objectives scaled to [0, 1]
    over the front) from those already chosen. Points with a non-finite
    objective come last, by index.
    """
    finite = [i for i in front if all(math.isfinite(v) for v in points[i])]
    rest = sorted(i for i in front if i not in set(finite))
    if not finite:
        return rest
    ranges = _ranges(points, finite)

    def scaled(i: int) -> list[float]:
        return [(points[i][d] - low) / (high - low) if high > low else 0.0 for d, (low, high) in enumerate(ranges)]

    coords = {i: scaled(i) for i in finite}
    chosen = [min(finite, key=lambda i: (points[i][0], i))]
    nearest = {i: math.dist(coords[i], coords[chosen[0]]) for i in finite if i != chosen[0]}
    while nearest:
        pick = max(nearest, key=lambda i: (nearest[i], -i))
        chosen.append(pick)
        del nearest[pick]
        for i in nearest:
            nearest[i] = min(nearest[i], math.dist(coords[i], coords[pick]))
    return chosen + rest


def mo_rank(points: Sequence[Point], tiebreak: str = "crowding") -> list[int]:
    """All indices of ``points``, best first: by front, then within a front by ``tiebreak``.

    ``"crowding"``: larger crowding distance first (NSGA-II); ``"epsnet"``:
    :func:`eps_net_order`. Remaining ties go to the lower index (the earlier
    arrival), so the order is deterministic.

    Example:
        >>> mo_rank([(3, 3), (1, 5), (2, 2), (5, 1), (4, 4)])
        [1, 3, 2, 0, 4]
    """
    if tiebreak not in TIEBREAKS:
        raise ValueError(f"The value of `tiebreak` is {tiebreak!r}, but must be one of {list(TIEBREAKS)}.")
    order: list[int] = []
    for front in nondominated_fronts(points):
        if tiebreak == "epsnet":
            order.extend(eps_net_order(points, front))
        else:
            distance = crowding_distance(points, front)
            order.extend(sorted(front, key=lambda i: (-distance[i], i)))
    return order
