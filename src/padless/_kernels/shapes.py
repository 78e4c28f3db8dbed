"""Static shapes: greedy batching into fixed (batch size, length) shapes, shape tags, shape sets."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _core


def shape_ends(
    sizes: np.ndarray, tiers: np.ndarray, caps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Cut a walk of sizes greedily into batches that each fit one of the shapes.

    ``tiers`` are the distinct shape lengths, ascending; ``caps[t]`` is the most rows of any shape
    at least ``tiers[t]`` long (non-increasing). A batch of ``c`` items whose longest is ``m``
    takes the next item ``x`` when ``c + 1 <= caps[t]`` for the first tier ``t`` with
    ``tiers[t] >= max(m, x)``; otherwise it closes and ``x`` opens the next batch (its length
    counted). Every size must be <= ``tiers[-1]``. Returns the end of every batch and its longest
    size. O(N + batches · log tiers) time.
    """
    return _core.shape_ends(sizes, tiers, caps)


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


def pick_shapes(
    counts: np.ndarray,
    longest: np.ndarray,
    rows: np.ndarray,
    lengths: np.ndarray,
    pad_batches: bool,
) -> np.ndarray:
    """Tag batches with their shape: the index of the shape each ``(count, longest)`` takes.

    Shapes are sorted by (length, rows). Among the shapes at least ``longest`` long with at
    least ``count`` rows, the one with the fewest padded slots: rows × length when
    ``pad_batches``, else length alone; ties go to the first (shorter, then fewer rows).
    -1 where none fits. O(batches · shapes) time at worst.
    """
    return _core.pick_shapes(counts, longest, rows, lengths, bool(pad_batches))


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


def static_cuts(values: np.ndarray, counts: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
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
    return _core.static_cuts(values, counts, rows, k)


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


def shaped_cost(values: np.ndarray, counts: np.ndarray, rows: np.ndarray, ends: np.ndarray) -> int:
    """Padded slots (dummy rows included) of the FixedShapes plan of a length-sorted walk.

    The shapes are ``(rows[e], values[e])`` for the group ends ``e`` in ``ends`` (ascending, the
    last ``len(values) − 1``), rows not increasing. Group by group: the open batch carries
    into the next group when one more row fits there, else it closes at its cheapest shape;
    full batches of a group cost rows × length. O(L + groups · shapes) time.
    """
    return _core.shaped_cost(values, counts, rows, ends)


def shaped_cost_reference(
    values: np.ndarray, counts: np.ndarray, rows: np.ndarray, ends: np.ndarray
) -> int:
    """Plain :func:`shaped_cost`: walk item by item with :func:`shape_ends_reference`'s rule."""
    shapes = [(int(rows[e]), int(values[e])) for e in ends]
    sizes = np.repeat(np.asarray(values, dtype=np.int64), np.asarray(counts, dtype=np.int64))
    tiers = np.array([n for _, n in shapes], dtype=np.int64)
    caps = np.array([max(b for b, n in shapes if n >= t) for t in tiers], dtype=np.int64)
    cut, longest = shape_ends_reference(sizes, tiers, caps)
    counts_per_batch = np.diff(np.concatenate([[0], cut]))
    total = 0
    for c, m in zip(counts_per_batch.tolist(), longest.tolist(), strict=True):
        total += min(b * n for b, n in shapes if b >= c and n >= m)
    return total


def polish_ends(
    values: np.ndarray, counts: np.ndarray, rows: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, int]:
    """Improve group ends against :func:`shaped_cost` by local moves; return (ends, cost).

    Repeats passes until none improves: move each interior end to every position between its
    neighbours, then drop each interior end (one shape fewer), keeping any strict improvement.
    The result never costs more than the input. O(passes · L · shapes²) time.
    """
    return _core.polish_ends(values, counts, rows, ends)


def polish_ends_reference(
    values: np.ndarray, counts: np.ndarray, rows: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, int]:
    """Plain :func:`polish_ends`, the same moves in the same order, costs from the reference."""
    cur = [int(e) for e in ends]

    def cost(e: list[int]) -> int:
        return shaped_cost_reference(values, counts, rows, np.array(e, dtype=np.int64))

    best = cost(cur)
    improved = True
    while improved:
        improved = False
        for t in range(len(cur) - 1):
            lo = cur[t - 1] + 1 if t > 0 else 0
            keep = cur[t]
            for p in range(lo, cur[t + 1]):
                if p == keep:
                    continue
                c = cost(cur[:t] + [p] + cur[t + 1 :])
                if c < best:
                    best, keep, improved = c, p, True
            cur[t] = keep
        t = 0
        while t < len(cur) - 1:
            c = cost(cur[:t] + cur[t + 1 :])
            if c < best:
                best, improved = c, True
                del cur[t]
            else:
                t += 1
    return np.array(cur, dtype=np.int64), best


def carry_cuts(
    values: np.ndarray, counts: np.ndarray, rows: np.ndarray, k: int, bound: int
) -> np.ndarray:
    """Group ends for at most ``k`` shapes minimising :func:`shaped_cost` exactly.

    DP over (groups used, group end j, open-batch count c): the plan's greedy walk, group by
    group, is fully described by the count of the batch left open at a group's end (its longest
    is that group's length). From each state the next group ``[i, j)`` either takes the open
    batch (when one more row fits its shape) or closes it first; a closed batch pads to its own
    group's shape, or to the next one when that holds exactly as many rows for fewer slots (the
    cheapest shape that holds it: rows do not increase along the shapes). The closing branch
    needs only the cheapest state with at least ``rows[j − 1]`` open rows (a suffix minimum), so
    the work is O(k · Σ_j min(rows_j, rows_i) over pairs i < j) and the table O(k · states),
    states = Σ_j min(rows_j, items up to j). Ties keep fewer shapes. Returns ascending ends.

    ``bound`` is the cost of any feasible set of ends (at most ``k`` groups): states and groups
    that cannot end below it are skipped. A state's closed batches plus every later token at
    its own length is a lower bound on where it can end, and for a start ``i`` that bound only
    grows with the end ``j`` (longer groups pad more), so each start's scan stops early. With a
    bound near the optimum this prunes most of the work; the result is the same for any valid
    bound.
    """
    return _core.carry_cuts(values, counts, rows, k, bound)


def carry_cuts_reference(
    values: np.ndarray, counts: np.ndarray, rows: np.ndarray, k: int
) -> tuple[np.ndarray, int]:
    """Plain :func:`carry_cuts`: every (state, next group) pair relaxed one by one; returns the
    ends and their cost (the closing of the last batch included)."""
    n = len(values)
    groups = min(k, n)
    csum = [0]
    for c in counts:
        csum.append(csum[-1] + int(c))
    # level -> {(j, open count): (cost, previous key or None)}
    level: dict[tuple[int, int], tuple[int, Any]] = {}
    for j in range(1, n + 1):
        r, items = int(rows[j - 1]), csum[j]
        full = (items - 1) // r
        level[(j, items - full * r)] = (full * r * int(values[j - 1]), None)
    levels = [level]
    for _ in range(2, groups + 1):
        prev, nxt = levels[-1], dict(levels[-1])
        for (i, c), (val, _) in sorted(prev.items()):
            if i == n:
                continue
            ri, vi = int(rows[i - 1]), int(values[i - 1])
            for j in range(i + 1, n + 1):
                r, v, items = int(rows[j - 1]), int(values[j - 1]), csum[j] - csum[i]
                total, cost = c + items, val
                if c + 1 > r:
                    cost += min(ri * vi, r * v) if c == r else ri * vi
                    total = items
                full = (total - 1) // r
                key = (j, total - full * r)
                cost += full * r * v
                if key not in nxt or cost < nxt[key][0]:
                    nxt[key] = (cost, (i, c))
        levels.append(nxt)
    final = {key: val for key, val in levels[-1].items() if key[0] == n}
    key = min(final, key=lambda q: (final[q][0], q[1]))
    best = final[key][0] + int(rows[n - 1]) * int(values[n - 1])
    ends = [n - 1]
    for depth in range(len(levels) - 1, 0, -1):
        _, back = levels[depth][key]
        if back is not None and levels[depth - 1].get(key) != levels[depth][key]:
            ends.append(back[0] - 1)
            key = back
    return np.array(sorted(ends), dtype=np.int64), best
