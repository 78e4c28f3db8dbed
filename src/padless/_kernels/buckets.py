"""Bucket boundaries: the split of a length histogram that minimises padded slots."""

from __future__ import annotations

import numpy as np

from .. import _core


def optimal_cuts(values: np.ndarray, counts: np.ndarray, k: int) -> np.ndarray:
    """Split sorted distinct ``values`` (with ``counts``) into ``min(k, L)`` contiguous groups that
    minimise Σ group count × group max; return the index of each group's last value but the last.

    DP over groups with the divide-and-conquer optimisation: the cost (C[j] − C[i])·v[j−1] of a
    group i..j−1 satisfies the quadrangle inequality, so the leftmost best split is monotone in j.
    O(k · L · log L) time, O(k · L) memory (int32 split table); ties go to the leftmost split.
    Exact integer arithmetic, never wrapping: int64 while Σ counts × max value fits in it, else
    128-bit costs (about 2× slower). Raises ValueError when the counts add up to 2**63 − 1 or
    more (they count items).
    """
    return _core.optimal_cuts(values, counts, k)


def optimal_cuts_reference(values: np.ndarray, counts: np.ndarray, k: int) -> np.ndarray:
    """The plain O(k · L²) DP with the same leftmost tie rule (exact Python ints, never wrap)."""
    n = len(values)
    groups = min(k, n)
    if groups <= 1:
        return np.zeros(0, np.int64)
    csum = [0]
    for c in counts:
        csum.append(csum[-1] + int(c))
    inf = float("inf")
    cost = [[inf] * (n + 1) for _ in range(groups + 1)]
    arg = [[0] * (n + 1) for _ in range(groups + 1)]
    for j in range(1, n + 1):
        cost[1][j] = csum[j] * int(values[j - 1])
    for m in range(2, groups + 1):
        for j in range(m, n + 1):
            for i in range(m - 1, j):
                c = cost[m - 1][i] + (csum[j] - csum[i]) * int(values[j - 1])
                if c < cost[m][j]:
                    cost[m][j] = c
                    arg[m][j] = i
    out = []
    j = n
    for m in range(groups, 1, -1):
        i = arg[m][j]
        out.append(i - 1)
        j = i
    return np.array(out[::-1], dtype=np.int64)
