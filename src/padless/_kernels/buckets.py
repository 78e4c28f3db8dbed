"""Bucket boundaries: the split of a length histogram that minimises padded slots."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def optimal_cuts(values, counts, k):  # pragma: no cover - compiled
    """Split sorted distinct ``values`` (with ``counts``) into ``min(k, L)`` contiguous groups that
    minimise Σ group count × group max; return the index of each group's last value but the last.

    DP over groups with the divide-and-conquer optimisation: the cost (C[j] − C[i])·v[j−1] of a
    group i..j−1 satisfies the quadrangle inequality, so the leftmost best split is monotone in j.
    O(k · L · log L) time, O(k · L) memory (int32 split table); exact int64 arithmetic; ties go to
    the leftmost split.
    """
    n = values.shape[0]
    groups = min(k, n)
    if groups <= 1:
        return np.zeros(0, np.int64)
    csum = np.zeros(n + 1, np.int64)
    for j in range(n):
        csum[j + 1] = csum[j] + counts[j]
    prev = np.empty(n + 1, np.int64)
    cur = np.empty(n + 1, np.int64)
    for j in range(n + 1):
        prev[j] = csum[j] * values[j - 1] if j > 0 else 0
    best = np.zeros((groups + 1, n + 1), np.int32)
    stack = np.empty((130, 4), np.int64)  # depth-first: at most one pending sibling per level
    for m in range(2, groups + 1):
        # cur[j] for j in [m, n]: best cost of the first j values in m groups
        stack[0, 0] = m
        stack[0, 1] = n
        stack[0, 2] = m - 1
        stack[0, 3] = n - 1
        top = 1
        while top > 0:
            top -= 1
            lo = stack[top, 0]
            hi = stack[top, 1]
            olo = stack[top, 2]
            ohi = stack[top, 3]
            if lo > hi:
                continue
            mid = (lo + hi) // 2
            last = ohi if ohi < mid - 1 else mid - 1
            arg = olo
            val = prev[olo] + (csum[mid] - csum[olo]) * values[mid - 1]
            for i in range(olo + 1, last + 1):
                c = prev[i] + (csum[mid] - csum[i]) * values[mid - 1]
                if c < val:
                    val = c
                    arg = i
            cur[mid] = val
            best[m, mid] = np.int32(arg)
            stack[top, 0] = lo
            stack[top, 1] = mid - 1
            stack[top, 2] = olo
            stack[top, 3] = arg
            top += 1
            stack[top, 0] = mid + 1
            stack[top, 1] = hi
            stack[top, 2] = arg
            stack[top, 3] = ohi
            top += 1
        for j in range(m, n + 1):
            prev[j] = cur[j]
    out = np.empty(groups - 1, np.int64)
    j = n
    for m in range(groups, 1, -1):
        i = np.int64(best[m, j])
        out[m - 2] = i - 1
        j = i
    return out


def optimal_cuts_reference(values: np.ndarray, counts: np.ndarray, k: int) -> np.ndarray:
    """The plain O(k · L²) DP with the same leftmost tie rule."""
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
