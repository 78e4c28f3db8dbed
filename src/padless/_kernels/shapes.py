"""Static shapes: greedy batching into fixed (batch size, length) shapes, shape tags, shape sets."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _first_at_least(sorted_values, x):  # pragma: no cover - compiled
    """Index of the first entry of ascending ``sorted_values`` that is >= x (len if none)."""
    lo = 0
    hi = sorted_values.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if sorted_values[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def shape_ends(sizes, tiers, caps):  # pragma: no cover - compiled
    """Cut a walk of sizes greedily into batches that each fit one of the shapes.

    ``tiers`` are the distinct shape lengths, ascending; ``caps[t]`` is the most rows of any shape
    at least ``tiers[t]`` long (non-increasing). A batch of ``c`` items whose longest is ``m``
    takes the next item ``x`` when ``c + 1 <= caps[t]`` for the first tier ``t`` with
    ``tiers[t] >= max(m, x)``; otherwise it closes and ``x`` opens the next batch (its length
    counted). Every size must be <= ``tiers[-1]``. Returns the end of every batch and its longest
    size. O(N + batches · log tiers) time.
    """
    n = sizes.shape[0]
    ends = np.empty(n, np.int64)
    longest = np.empty(n, np.int64)
    nb = 0
    count = 0
    m = 0
    t = 0
    for p in range(n):
        x = sizes[p]
        if count > 0:
            mm = m if m >= x else x
            u = t
            while tiers[u] < mm:
                u += 1
            if count + 1 <= caps[u]:
                count += 1
                m = mm
                t = u
                continue
            ends[nb] = p
            longest[nb] = m
            nb += 1
        count = 1
        m = x
        t = _first_at_least(tiers, x)
    if count > 0:
        ends[nb] = n
        longest[nb] = m
        nb += 1
    return ends[:nb], longest[:nb]


def shape_ends_reference(
    sizes: np.ndarray, tiers: np.ndarray, caps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Plain Python :func:`shape_ends`: scan the shapes afresh for every item."""
    ends: list[int] = []
    longest: list[int] = []
    count, m = 0, 0
    for p, x in enumerate(int(v) for v in sizes):
        if count > 0:
            mm = max(m, x)
            room = max(int(c) for c, t in zip(caps, tiers, strict=True) if t >= mm)
            if count + 1 <= room:
                count, m = count + 1, mm
                continue
            ends.append(p)
            longest.append(m)
        count, m = 1, x
    if count > 0:
        ends.append(len(sizes))
        longest.append(m)
    return np.array(ends, dtype=np.int64), np.array(longest, dtype=np.int64)


@njit(cache=True)
def pick_shapes(counts, longest, rows, lengths, pad_batches):  # pragma: no cover - compiled
    """Tag batches with their shape: the index of the shape each ``(count, longest)`` takes.

    Shapes are sorted by (length, rows). Among the shapes at least ``longest`` long with at
    least ``count`` rows, the one with the fewest padded slots: rows × length when
    ``pad_batches``, else length alone; ties go to the first (shorter, then fewer rows).
    -1 where none fits. O(batches · shapes) time at worst.
    """
    nb = counts.shape[0]
    k = rows.shape[0]
    out = np.full(nb, -1, np.int64)
    for b in range(nb):
        c = counts[b]
        best = np.int64(0)
        for s in range(_first_at_least(lengths, longest[b]), k):
            if rows[s] < c:
                continue
            cost = rows[s] * lengths[s] if pad_batches else lengths[s]
            if out[b] < 0 or cost < best:
                out[b] = s
                best = cost
            if not pad_batches:
                break
    return out


def pick_shapes_reference(
    counts: np.ndarray, longest: np.ndarray, rows: np.ndarray, lengths: np.ndarray, pad: bool
) -> np.ndarray:
    """Plain :func:`pick_shapes`: the minimum of (cost, position) over the shapes that fit."""
    out = []
    for c, m in zip(counts.tolist(), longest.tolist(), strict=True):
        fits = [
            (int(r) * int(length) if pad else int(length), s)
            for s, (r, length) in enumerate(zip(rows, lengths, strict=True))
            if r >= c and length >= m
        ]
        out.append(min(fits)[1] if fits else -1)
    return np.array(out, dtype=np.int64)


@njit(cache=True)
def static_cuts(values, counts, rows, k):  # pragma: no cover - compiled
    """Split sorted distinct ``values`` (with ``counts``) into at most ``k`` contiguous groups that
    minimise the static cost; return the index of each group's last value but the last.

    A group ``i..j−1`` is served by one shape of length ``values[j−1]`` and ``rows[j−1]`` rows:
    its cost is its items rounded up to whole batches of that many rows, times the length,
    ``ceil(n / r) · r · v``. Fewer groups win ties, then a shorter last group. Exact DP over
    groups: for each end ``j`` the start ``i`` is scanned downward and the scan stops once the
    group's cost without its padding (real tokens before ``i``, plus the group's items at full
    length) reaches the best found, a lower bound that only grows as ``i`` falls. O(k · L²) time
    at worst (much less in practice), O(k · L) memory (int32 table); exact int64 arithmetic.
    """
    n = values.shape[0]
    groups = min(k, n)
    if groups <= 1:
        return np.zeros(0, np.int64)
    csum = np.zeros(n + 1, np.int64)
    tokens = np.zeros(n + 1, np.int64)
    for j in range(n):
        csum[j + 1] = csum[j] + counts[j]
        tokens[j + 1] = tokens[j] + counts[j] * values[j]
    prev = np.empty(n + 1, np.int64)
    cur = np.empty(n + 1, np.int64)
    prev[0] = 0
    for j in range(1, n + 1):
        r = rows[j - 1]
        prev[j] = (csum[j] + r - 1) // r * r * values[j - 1]
    best = np.zeros((groups + 1, n + 1), np.int32)
    for m in range(2, groups + 1):
        cur[0] = 0
        for j in range(1, n + 1):
            v = values[j - 1]
            r = rows[j - 1]
            top = csum[j]
            val = prev[j]  # at most m - 1 groups
            arg = j
            for i in range(j - 1, -1, -1):
                items = top - csum[i]
                if tokens[i] + items * v >= val:
                    break
                c = prev[i] + (items + r - 1) // r * r * v
                if c < val:
                    val = c
                    arg = i
            cur[j] = val
            best[m, j] = np.int32(arg)
        for j in range(n + 1):
            prev[j] = cur[j]
    out = np.empty(groups, np.int64)
    num = 0
    j = n
    m = groups
    while m >= 2 and j > 0:
        i = np.int64(best[m, j])
        if i < j and i > 0:
            out[num] = i - 1
            num += 1
        if i < j:
            j = i
        m -= 1
    res = np.empty(num, np.int64)
    for q in range(num):
        res[q] = out[num - 1 - q]
    return res


def static_cuts_reference(
    values: np.ndarray, counts: np.ndarray, rows: np.ndarray, k: int
) -> np.ndarray:
    """The plain O(k · L²) DP of :func:`static_cuts`, no pruning, same tie rules."""
    n = len(values)
    groups = min(k, n)
    if groups <= 1:
        return np.zeros(0, np.int64)
    csum = [0]
    for c in counts:
        csum.append(csum[-1] + int(c))

    def cost(i: int, j: int) -> int:
        r, v = int(rows[j - 1]), int(values[j - 1])
        return -(-(csum[j] - csum[i]) // r) * r * v

    table = [[0] * (n + 1) for _ in range(groups + 1)]
    arg = [[0] * (n + 1) for _ in range(groups + 1)]
    for j in range(1, n + 1):
        table[1][j] = cost(0, j)
    for m in range(2, groups + 1):
        for j in range(1, n + 1):
            val, at = table[m - 1][j], j
            for i in range(j - 1, -1, -1):
                c = table[m - 1][i] + cost(i, j)
                if c < val:
                    val, at = c, i
            table[m][j], arg[m][j] = val, at
    cuts = []
    j, m = n, groups
    while m >= 2 and j > 0:
        i = arg[m][j]
        if 0 < i < j:
            cuts.append(i - 1)
        if i < j:
            j = i
        m -= 1
    return np.array(cuts[::-1], dtype=np.int64)
