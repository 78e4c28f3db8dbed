"""Bucket boundaries: the split of a length histogram that minimises padded slots."""

from __future__ import annotations

import numpy as np
from numba import njit

from ._sat import INT64_MAX, mul_exceeds, sat_add

_LOW32 = np.uint64(0xFFFFFFFF)
_U32 = np.uint64(32)


@njit(cache=True, inline="always")
def _mul_wide(a, b):  # pragma: no cover - compiled
    """Exact ``a × b`` of non-negative int64s as ``(hi, lo)``: ``hi · 2**64 + lo``, lo unsigned."""
    x = np.uint64(a)
    y = np.uint64(b)
    x0 = x & _LOW32
    x1 = x >> _U32
    y0 = y & _LOW32
    y1 = y >> _U32
    p00 = x0 * y0
    p01 = x0 * y1
    p10 = x1 * y0
    mid = (p00 >> _U32) + (p01 & _LOW32) + (p10 & _LOW32)
    lo = (p00 & _LOW32) | (mid << _U32)
    hi = x1 * y1 + (p01 >> _U32) + (p10 >> _U32) + (mid >> _U32)
    return np.int64(hi), lo


@njit(cache=True, inline="always")
def _add_wide(ahi, alo, bhi, blo):  # pragma: no cover - compiled
    lo = alo + blo
    return ahi + bhi + np.int64(lo < alo), lo


@njit(cache=True, inline="always")
def _best_split(prev, csum, values, mid, olo, last):  # pragma: no cover - compiled
    """Leftmost ``i`` in ``[olo, last]`` minimising ``prev[i] + (C[mid] − C[i]) · v[mid − 1]``."""
    v = values[mid - 1]
    arg = olo
    val = prev[olo] + (csum[mid] - csum[olo]) * v
    for i in range(olo + 1, last + 1):
        c = prev[i] + (csum[mid] - csum[i]) * v
        if c < val:
            val = c
            arg = i
    return arg, val


@njit(cache=True, inline="always")
def _best_split_wide(prev, prev_lo, csum, values, mid, olo, last):  # pragma: no cover - compiled
    """:func:`_best_split` on 128-bit costs ``prev[i] · 2**64 + prev_lo[i]``."""
    v = values[mid - 1]
    arg = olo
    vhi, vlo = _mul_wide(csum[mid] - csum[olo], v)
    vhi, vlo = _add_wide(prev[olo], prev_lo[olo], vhi, vlo)
    for i in range(olo + 1, last + 1):
        chi, clo = _mul_wide(csum[mid] - csum[i], v)
        chi, clo = _add_wide(prev[i], prev_lo[i], chi, clo)
        if chi < vhi or (chi == vhi and clo < vlo):
            vhi = chi
            vlo = clo
            arg = i
    return arg, vhi, vlo


@njit(cache=True)
def optimal_cuts(values, counts, k):  # pragma: no cover - compiled
    """Split sorted distinct ``values`` (with ``counts``) into ``min(k, L)`` contiguous groups that
    minimise Σ group count × group max; return the index of each group's last value but the last.

    DP over groups with the divide-and-conquer optimisation: the cost (C[j] − C[i])·v[j−1] of a
    group i..j−1 satisfies the quadrangle inequality, so the leftmost best split is monotone in j.
    O(k · L · log L) time, O(k · L) memory (int32 split table); ties go to the leftmost split.
    Exact integer arithmetic, never wrapping: int64 while Σ counts × max value fits in it, else
    128-bit costs (two words; about 3× slower). Raises ValueError when the counts add up to
    2**63 − 1 or more (they count items).
    """
    n = values.shape[0]
    groups = min(k, n)
    if groups <= 1:
        return np.zeros(0, np.int64)
    csum = np.zeros(n + 1, np.int64)
    biggest = values[0]
    for j in range(n):
        csum[j + 1] = sat_add(csum[j], counts[j])
        biggest = max(biggest, values[j])
    if csum[n] == INT64_MAX:
        raise ValueError("optimal_cuts: counts must add up to less than 2**63 - 1")
    wide = mul_exceeds(csum[n], biggest, INT64_MAX)  # every cost is at most Σ counts × max value
    # cost of the first j values in the groups so far: prev[j] (wide: prev[j] · 2**64 + prev_lo[j])
    prev = np.empty(n + 1, np.int64)
    cur = np.empty(n + 1, np.int64)
    prev_lo = np.zeros(n + 1 if wide else 0, np.uint64)
    cur_lo = np.zeros(n + 1 if wide else 0, np.uint64)
    prev[0] = 0
    for j in range(1, n + 1):
        if wide:
            prev[j], prev_lo[j] = _mul_wide(csum[j], values[j - 1])
        else:
            prev[j] = csum[j] * values[j - 1]
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
            if wide:
                arg, cur[mid], cur_lo[mid] = _best_split_wide(
                    prev, prev_lo, csum, values, mid, olo, last
                )
            else:
                arg, cur[mid] = _best_split(prev, csum, values, mid, olo, last)
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
        prev[m:] = cur[m:]
        if wide:
            prev_lo[m:] = cur_lo[m:]
    out = np.empty(groups - 1, np.int64)
    j = n
    for m in range(groups, 1, -1):
        i = np.int64(best[m, j])
        out[m - 2] = i - 1
        j = i
    return out


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
