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

from .. import _core
from .budget import greedy_ends_reference


def budget_cost_ends(
    sizes: np.ndarray,
    units: np.ndarray,
    max_tokens: int,
    max_sentences: int,
    multiple: int,
    max_cost: float,
) -> np.ndarray:
    """fairseq's greedy token-budget rule with one more limit: ``count × max unit ≤ max_cost``.

    ``sizes`` (int64) and ``units`` (float64, each item's cost) are in walk order. The open batch
    ``[start, cut)`` grows by a tail ``[cut, pos]`` that joins it when the union is small
    (< multiple) or a multiple of ``multiple``. When batch + tail breaks a limit (0 = none), the
    batch closes and the tail opens the next one; if the tail alone (with the new item) breaks
    max_tokens or max_cost, the tail without the new item closes too. Items must each fit both
    budgets alone. With ``max_cost = 0`` the ends are exactly those of ``budget_ends``.
    """
    return _core.budget_cost_ends(sizes, units, max_tokens, max_sentences, multiple, max_cost)


def budget_cost_ends_reference(
    sizes: np.ndarray,
    units: np.ndarray,
    max_tokens: int,
    max_sentences: int,
    multiple: int,
    max_cost: float,
) -> np.ndarray:
    """The same rule with Python lists: :func:`budget_field_cost_ends_reference`, one field."""
    one = np.asarray(units, dtype=np.float64).reshape(-1, 1)
    return budget_field_cost_ends_reference(
        sizes, one, max_tokens, max_sentences, multiple, max_cost
    )


def budget_field_cost_ends(
    sizes: np.ndarray,
    units: np.ndarray,
    max_tokens: int,
    max_sentences: int,
    multiple: int,
    max_cost: float,
) -> np.ndarray:
    """:func:`budget_cost_ends` with a cost per field: ``units`` is (n, F) float64 (each item's
    cost in each field) and a batch costs ``count × Σ_f max unit_f`` (fields added left to
    right from 0.0): each field of a padded batch pays for its own longest member. With one
    field the ends are those of :func:`budget_cost_ends`."""
    return _core.budget_field_cost_ends(sizes, units, max_tokens, max_sentences, multiple, max_cost)


def budget_field_cost_ends_reference(
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
        if max_cost <= 0.0:
            return False
        total = 0.0
        for f in range(units.shape[1]):
            total += max(float(units[i, f]) for i in items)
        return len(items) * total > max_cost

    def over(items: list[int]) -> bool:
        return over_tokens(items) or over_cost(items)

    return greedy_ends_reference(len(sizes), over, max_sentences, multiple)


def padded_batch_costs_reference(units: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``count × max unit`` of each segment (0.0 if empty): what ``padless.core.cost`` computes as the
    segment sizes times ``segment_max`` of the units."""
    out = [
        (int(b) - int(a)) * max([0.0, *(float(u) for u in units[a:b])])
        for a, b in zip(offsets[:-1], offsets[1:], strict=True)
    ]
    return np.array(out, dtype=np.float64)


def packed_batch_costs(
    extras: np.ndarray, row_bounds: np.ndarray, row_offsets: np.ndarray, base: float
) -> np.ndarray:
    """Σ over a batch's rows of ``base + Σ extras`` (each row summed left to right from 0.0).

    Row ``r`` is entries ``row_bounds[r]:row_bounds[r + 1]``; batch ``b`` is rows
    ``row_offsets[b]:row_offsets[b + 1]``.
    """
    return _core.packed_batch_costs(extras, row_bounds, row_offsets, base)


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


def best_fit_rows_cost(
    sizes: np.ndarray,
    extras: np.ndarray,
    capacity: int,
    max_per_row: int,
    base: float,
    max_row_cost: float,
) -> tuple[np.ndarray, int]:
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
    return _core.best_fit_rows_cost(sizes, extras, capacity, max_per_row, base, max_row_cost)


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
