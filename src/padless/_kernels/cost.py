"""Cost models: budgets in cost units, per-batch costs, best fit under a row cost cap.

A cost model gives every sequence a float64 cost (``padless.Cost``: ``per_sequence + linear·l
+ quadratic·l²``), computed once by the caller and passed in as an array: a kernel never
evaluates the model itself, so every kernel and its reference add and multiply the same
numbers in the same order and agree bit for bit.

- A **padded** batch costs ``count × max unit cost`` (every row pays for its longest member;
  the model is non-decreasing in the length, so the longest has the largest cost).
- A **packed** row costs ``base + Σ extra`` over its entries, summed left to right from 0.0, where
  ``base = linear · capacity`` (every slot of the row goes through the linear layers, padding
  included) and ``extra = per_sequence + quadratic · l²`` (attention, per sequence).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._sat import mul_exceeds
from .budget import _multiple_of, greedy_ends_reference
from .packing import _bit_levels, _bits_clear, _bits_next, _grown, _push_row


@njit(cache=True)
def budget_cost_ends(sizes, units, max_tokens, max_sentences, multiple, max_cost):  # fmt: skip  # pragma: no cover
    """fairseq's greedy token-budget rule with one more limit: ``count × max unit ≤ max_cost``.

    ``sizes`` (int64) and ``units`` (float64, each item's cost) are in walk order. The open batch
    ``[start, cut)`` grows by a tail ``[cut, pos]`` that joins it when the union is small
    (< multiple) or a multiple of ``multiple``. When batch + tail breaks a limit (0 = none), the
    batch closes and the tail opens the next one; if the tail alone (with the new item) breaks
    max_tokens or max_cost, the tail without the new item closes too. Items must each fit both
    budgets alone. With ``max_cost = 0`` the ends are exactly those of ``budget_ends``.
    """
    n = sizes.shape[0]
    ends = np.empty(n + 1, np.int64)
    closed, start, cut = 0, 0, 0
    batch_max, tail_max = sizes.dtype.type(0), sizes.dtype.type(0)
    batch_u, tail_u = 0.0, 0.0
    for pos in range(n):
        s = sizes[pos]
        u = units[pos]
        if s > tail_max:
            tail_max = s
        if u > tail_u:
            tail_u = u
        count = pos + 1 - start
        longest = batch_max if batch_max > tail_max else tail_max
        umax = batch_u if batch_u > tail_u else tail_u
        over = (max_sentences > 0 and count > max_sentences) or (
            max_tokens > 0 and mul_exceeds(count, longest, max_tokens)
        )
        if not over and max_cost > 0.0:
            over = count * umax > max_cost
        if over:
            ends[closed] = cut
            closed += 1
            left = pos + 1 - cut
            alone = max_tokens > 0 and mul_exceeds(left, tail_max, max_tokens)
            if not alone and max_cost > 0.0:
                alone = left * tail_u > max_cost
            if alone:
                ends[closed] = pos
                closed += 1
                tail_max = s
                tail_u = u
                start = pos
            else:
                start = cut
            cut = pos + 1
            batch_max = tail_max
            batch_u = tail_u
            tail_max = 0
            tail_u = 0.0
        elif count < multiple or _multiple_of(count, multiple):
            cut = pos + 1
            batch_max = longest
            batch_u = umax
            tail_max = 0
            tail_u = 0.0
    if cut > start:
        ends[closed] = cut
        closed += 1
    if n > cut:
        ends[closed] = n
        closed += 1
    return ends[:closed].copy()


def budget_cost_ends_reference(
    sizes: np.ndarray,
    units: np.ndarray,
    max_tokens: int,
    max_sentences: int,
    multiple: int,
    max_cost: float,
) -> np.ndarray:
    """The same rule with Python lists, one batch and one tail at a time."""

    def over_tokens(items: list[int]) -> bool:
        return max_tokens > 0 and len(items) * max(int(sizes[i]) for i in items) > max_tokens

    def over_cost(items: list[int]) -> bool:
        return max_cost > 0.0 and len(items) * max(float(units[i]) for i in items) > max_cost

    def over(items: list[int]) -> bool:
        return over_tokens(items) or over_cost(items)

    return greedy_ends_reference(len(sizes), over, max_sentences, multiple)


def padded_batch_costs_reference(units: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``count × max unit`` of each segment (0.0 if empty): what ``padless.cost`` computes as the
    segment sizes times ``segment_max`` of the units."""
    out = [
        (int(b) - int(a)) * max([0.0, *(float(u) for u in units[a:b])])
        for a, b in zip(offsets[:-1], offsets[1:], strict=True)
    ]
    return np.array(out, dtype=np.float64)


@njit(cache=True)
def packed_batch_costs(extras, row_bounds, row_offsets, base):  # pragma: no cover - compiled
    """Σ over a batch's rows of ``base + Σ extras`` (each row summed left to right from 0.0).

    Row ``r`` is entries ``row_bounds[r]:row_bounds[r + 1]``; batch ``b`` is rows
    ``row_offsets[b]:row_offsets[b + 1]``.
    """
    nb = row_offsets.shape[0] - 1
    out = np.zeros(nb, np.float64)
    for b in range(nb):
        total = 0.0
        for r in range(row_offsets[b], row_offsets[b + 1]):
            acc = 0.0
            for e in range(row_bounds[r], row_bounds[r + 1]):
                acc += extras[e]
            total += base + acc
        out[b] = total
    return out


def packed_batch_costs_reference(
    extras: np.ndarray, row_bounds: np.ndarray, row_offsets: np.ndarray, base: float
) -> np.ndarray:
    rows = []
    for lo, hi in zip(row_bounds[:-1], row_bounds[1:], strict=True):
        acc = 0.0
        for e in extras[lo:hi]:
            acc += float(e)
        rows.append(base + acc)
    out = []
    for lo, hi in zip(row_offsets[:-1], row_offsets[1:], strict=True):
        total = 0.0
        for c in rows[lo:hi]:
            total += c
        out.append(total)
    return np.array(out, dtype=np.float64)


@njit(cache=True, inline="always")
def _before(u1, r1, u2, r2):  # pragma: no cover - compiled
    """Heap order of parked rows: less used cost first, then the lower row number."""
    return u1 < u2 or (u1 == u2 and r1 < r2)


@njit(cache=True)
def _heap_push(keys, rows, size, u, row):  # pragma: no cover - compiled
    """Push ``(u, row)`` on the min-heap ``keys[:size]``/``rows[:size]``; returns the new size."""
    k = size
    while k > 0:
        parent = (k - 1) >> 1
        if not _before(u, row, keys[parent], rows[parent]):
            break
        keys[k] = keys[parent]
        rows[k] = rows[parent]
        k = parent
    keys[k] = u
    rows[k] = row
    return size + 1


@njit(cache=True)
def _heap_pop(keys, rows, size):  # pragma: no cover - compiled
    """Drop the top of the min-heap (read it first); returns the new size."""
    size -= 1
    u, row = keys[size], rows[size]
    k = 0
    while True:
        child = 2 * k + 1
        if child >= size:
            break
        if child + 1 < size and _before(keys[child + 1], rows[child + 1], keys[child], rows[child]):
            child += 1
        if not _before(keys[child], rows[child], u, row):
            break
        keys[k] = keys[child]
        rows[k] = rows[child]
        k = child
    if size > 0:
        keys[k] = u
        rows[k] = row
    return size


@njit(cache=True)
def best_fit_rows_cost(sizes, extras, capacity, max_per_row, base, max_row_cost):  # fmt: skip  # pragma: no cover
    """Best fit by tokens among the rows whose cost stays within ``max_row_cost``.

    Items come in the order given (longest first, so ``extras`` never increase). An open row
    fits an item when ``base + (used + extra) <= max_row_cost`` (``used``: its extras so far,
    summed from 0.0). Each item goes to the best-fitting row by tokens, as ``best_fit_rows``
    (the smallest remaining space >= its size; among equal spaces the row that reached it
    last), looking only at the rows that fit its cost. Rows passed over for their cost are set
    aside (a min-heap by used cost, then row number) and rejoin the top of their stack, in
    heap order, as soon as the items' extras have fallen to what they can still take. No open
    row fits: the item opens a new one (each item must fit an empty row). A row closes when it
    holds ``max_per_row`` items (0: no cap) or cannot take even the last (smallest) item's
    extra. Returns ``(row_of, num_rows)``, rows numbered in the order they open. With a cap no
    row reaches, the rows are exactly those of ``best_fit_rows``.

    Cost: O(log_64 capacity) per placement, plus O(log rows) each time a row is set aside or
    rejoins (a row is set aside at most once per item it receives, plus once).
    """
    n = sizes.shape[0]
    floor = extras[n - 1] if n else 0.0
    offs, nbits, total = _bit_levels(capacity + 1)
    words = np.zeros(total, np.uint64)
    head = np.full(capacity + 1, -1, np.int64)
    room = 64
    below = np.empty(room, np.int64)
    count = np.empty(room, np.int64)
    used = np.empty(room, np.float64)
    space = np.empty(room, np.int64)
    keys = np.empty(room, np.float64)
    parked = np.empty(room, np.int64)
    waiting = 0
    row_of = np.empty(n, np.int64)
    rows = 0
    for i in range(n):
        s = sizes[i]
        e = extras[i]
        while waiting > 0 and not (base + (keys[0] + e) > max_row_cost):
            back = parked[0]
            waiting = _heap_pop(keys, parked, waiting)
            _push_row(words, offs, head, below, back, space[back])
        row = -1
        r = _bits_next(words, offs, nbits, s)
        while r >= 0:
            cand = head[r]
            while cand >= 0 and base + (used[cand] + e) > max_row_cost:
                head[r] = below[cand]
                waiting = _heap_push(keys, parked, waiting, used[cand], cand)
                cand = head[r]
            if cand >= 0:
                row = cand
                head[r] = below[cand]
            if head[r] < 0:
                _bits_clear(words, offs, r)
            if row >= 0:
                break
            r = _bits_next(words, offs, nbits, r + 1)
        if row < 0:
            if rows == room:
                room *= 2
                below = _grown(below, rows, room)
                count = _grown(count, rows, room)
                space = _grown(space, rows, room)
                parked = _grown(parked, rows, room)
                used = _grown(used, rows, room)
                keys = _grown(keys, waiting, room)
            row = rows
            rows += 1
            left = capacity - s
            count[row] = 1
            used[row] = 0.0 + e
        else:
            left = r - s
            count[row] += 1
            used[row] = used[row] + e
        row_of[i] = row
        space[row] = left
        if (max_per_row == 0 or count[row] < max_per_row) and not (
            base + (used[row] + floor) > max_row_cost
        ):
            _push_row(words, offs, head, below, row, left)
    return row_of, rows


def best_fit_rows_cost_reference(
    sizes: np.ndarray,
    extras: np.ndarray,
    capacity: int,
    max_per_row: int,
    base: float,
    max_row_cost: float,
) -> tuple[np.ndarray, int]:
    """The same rule with a dict of Python lists (stacks) and ``heapq`` for the rows set aside."""
    import heapq

    def fits(u: float, e: float) -> bool:
        return not base + (u + e) > max_row_cost

    floor = float(extras[-1]) if len(extras) else 0.0
    stacks: dict[int, list[int]] = {}
    counts: list[int] = []
    used: list[float] = []
    space: list[int] = []
    parked: list[tuple[float, int]] = []
    row_of = []
    for s, e in zip((int(x) for x in sizes), (float(x) for x in extras), strict=True):
        while parked and fits(parked[0][0], e):
            _, back = heapq.heappop(parked)
            stacks.setdefault(space[back], []).append(back)
        row = -1
        for r in sorted(k for k, v in stacks.items() if k >= s and v):
            stack = stacks[r]
            while stack and not fits(used[stack[-1]], e):
                out = stack.pop()
                heapq.heappush(parked, (used[out], out))
            if stack:
                row = stack.pop()
                left = r - s
                counts[row] += 1
                used[row] = used[row] + e
                break
        if row < 0:
            row = len(counts)
            counts.append(1)
            used.append(0.0 + e)
            space.append(0)
            left = capacity - s
        row_of.append(row)
        space[row] = left
        if (max_per_row == 0 or counts[row] < max_per_row) and fits(used[row], floor):
            stacks.setdefault(left, []).append(row)
    return np.array(row_of, dtype=np.int64), len(counts)
