"""Windowed plans: read a window's items from (memory-mapped) lengths, and plan it in one call.

A window is a list of *blocks* of consecutive positions. Position ``q`` holds item
``(q + rotation) mod n``, block ``b`` the positions ``[b·block, min((b + 1)·block, n))``, so a block
is at most two runs of consecutive items and the lengths are read sequentially, block by block.

The fused kernels (``budget_window``, ``pack_window_rows``) plan one window exactly as the token
budget and packing planners plan that window's lengths (``spec.plan(lengths[items])``), with
global item ids written straight into the order (the tie-break shuffle moves values without
looking at them, so shuffling global ids or local positions gives the same plan). They release
the GIL (``nogil=True``), so windows plan in parallel threads. Packing places the items of a run
of equal sizes row by row (:func:`best_fit_runs`): the same rows as ``best_fit_rows`` one item at
a time, in time per row visited instead of per item.

Numba's cache does not see edits to the kernels these call (``order``, ``budget``, ``packing``):
after editing those, delete this package's ``__pycache__`` cache files too.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .budget import budget_ends_runs
from .order import shuffle_runs
from .packing import (
    _bit_levels,
    _bits_next,
    _grown,
    _pop_row,
    _push_row,
    best_fit_rows_reference,
)

# ---------------------------------------------------------------------------------- layout


@njit(cache=True, nogil=True)
def window_items(n, block, rotation, blocks):  # pragma: no cover - compiled
    """Global item ids of the positions in ``blocks`` (block after block, in order)."""
    total = 0
    for t in range(blocks.shape[0]):
        q0 = blocks[t] * block
        total += min(q0 + block, n) - q0
    out = np.empty(total, np.int64)
    pos = 0
    for t in range(blocks.shape[0]):
        q0 = blocks[t] * block
        q1 = min(q0 + block, n)
        g = q0 + rotation
        if g >= n:
            g -= n
        for _ in range(q1 - q0):
            out[pos] = g
            pos += 1
            g += 1
            if g == n:
                g = 0
    return out


def window_items_reference(n: int, block: int, rotation: int, blocks: np.ndarray) -> np.ndarray:
    parts = [np.arange(b * block, min((b + 1) * block, n), dtype=np.int64) for b in blocks]
    pos = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return (pos + rotation) % max(n, 1)


@njit(cache=True, nogil=True)
def gather_rows(src, items):  # pragma: no cover - compiled
    """``src[items]`` of an (N, F) array as int64: one window's lengths, read block by block."""
    out = np.empty((items.shape[0], src.shape[1]), np.int64)
    for i in range(items.shape[0]):
        row = src[items[i]]
        for f in range(src.shape[1]):
            out[i, f] = row[f]
    return out


def gather_rows_reference(src: np.ndarray, items: np.ndarray) -> np.ndarray:
    return np.asarray(src[items], dtype=np.int64).reshape(items.shape[0], src.shape[1])


# ---------------------------------------------------------------------------------- checks


@njit(cache=True, nogil=True)
def scan_lengths(src):  # pragma: no cover - compiled
    """One pass over an (n, F) chunk: ``(lowest, highest, size_lo, arg_lo, size_hi, arg_hi)``.

    ``lowest``/``highest`` over every entry (the range check), ``size_*`` the smallest and largest
    size (max over fields) and the first row holding each. An empty chunk gives ``(0, 0, 0, -1,
    0, -1)``.
    """
    n = src.shape[0]
    if n == 0:
        return 0, 0, 0, -1, 0, -1
    lowest = np.int64(src[0, 0])
    highest = lowest
    size_lo = np.int64(0)
    size_hi = np.int64(0)
    arg_lo = -1
    arg_hi = -1
    for i in range(n):
        row = src[i]
        s = np.int64(row[0])
        if s < lowest:
            lowest = s
        if s > highest:
            highest = s
        for f in range(1, src.shape[1]):
            v = np.int64(row[f])
            if v < lowest:
                lowest = v
            if v > highest:
                highest = v
            if v > s:
                s = v
        if arg_lo < 0 or s < size_lo:
            size_lo = s
            arg_lo = i
        if arg_hi < 0 or s > size_hi:
            size_hi = s
            arg_hi = i
    return lowest, highest, size_lo, arg_lo, size_hi, arg_hi


def scan_lengths_reference(src: np.ndarray) -> tuple[int, int, int, int, int, int]:
    if src.shape[0] == 0:
        return 0, 0, 0, -1, 0, -1
    sizes = src.max(axis=1).astype(np.int64)
    lo, hi = int(np.argmin(sizes)), int(np.argmax(sizes))
    return int(src.min()), int(src.max()), int(sizes[lo]), lo, int(sizes[hi]), hi


# ---------------------------------------------------------------------------------- order


@njit(cache=True, inline="always")
def _window_histogram(sizes, n, block, rotation, blocks, span):  # pragma: no cover - compiled
    """Run bounds ``starts`` (length span + 1) of the window's sizes, and the window's size."""
    starts = np.zeros(span + 1, np.int64)
    total = 0
    for t in range(blocks.shape[0]):
        q0 = blocks[t] * block
        q1 = min(q0 + block, n)
        g = q0 + rotation
        if g >= n:
            g -= n
        first = min(q1 - q0, n - g)  # items g, g+1, ... before the wrap at n
        for i in range(g, g + first):
            starts[sizes[i] + 1] += 1
        for i in range(0, q1 - q0 - first):
            starts[sizes[i] + 1] += 1
        total += q1 - q0
    for k in range(span):
        starts[k + 1] += starts[k]
    return starts, total


@njit(cache=True, inline="always")
def _window_order(sizes, n, block, rotation, blocks, span, key):  # pragma: no cover - compiled
    """Global ids of the window by increasing size, ties shuffled: ``length_order`` of the
    window's lengths with every position replaced by its item id."""
    starts, total = _window_histogram(sizes, n, block, rotation, blocks, span)
    fill = starts[:span].copy()
    order = np.empty(total, np.int64)
    for t in range(blocks.shape[0]):
        q0 = blocks[t] * block
        q1 = min(q0 + block, n)
        g = q0 + rotation
        if g >= n:
            g -= n
        first = min(q1 - q0, n - g)
        for i in range(g, g + first):
            k = sizes[i]
            order[fill[k]] = i
            fill[k] += 1
        for i in range(0, q1 - q0 - first):
            k = sizes[i]
            order[fill[k]] = i
            fill[k] += 1
    shuffle_runs(order, starts, key)
    return order, starts


@njit(cache=True, nogil=True)
def window_order(sizes, n, block, rotation, blocks, span, key):  # pragma: no cover - compiled
    """:func:`_window_order` (for tests): ``(order, starts)``."""
    return _window_order(sizes, n, block, rotation, blocks, span, key)


# ---------------------------------------------------------------------------------- budget


_NO_CAP = np.int64(1) << np.int64(62)


@njit(cache=True, inline="always")
def _budget_ends_runs1(starts, runs, max_tokens, max_sentences, ends):  # pragma: no cover
    """``budget_ends_runs`` with ``multiple=1`` over runs of sizes 0, 1, …, runs − 1, a batch
    at a time: returns the number of ends written to ``ends`` (None: just count them).

    With multiple 1 every item that fits joins the batch, so the batch at an item of size s
    closes when it would hold more than ``cap(s) = min(max_sentences, max_tokens // s)`` items
    (sizes only grow, so s is its longest); a run then continues in batches of cap(s). An item
    never breaks max_tokens alone (longer items are skipped before), so no tail closes alone.
    """
    closed = 0
    start = 0
    for r in range(runs):
        p0 = starts[r]
        p1 = starts[r + 1]
        if p1 == p0:
            continue
        cap = _NO_CAP
        if max_sentences > 0:
            cap = max_sentences
        if max_tokens > 0 and r > 0 and max_tokens // r < cap:
            cap = max_tokens // r
        pos = max(p0, start + cap)
        while pos < p1:
            if ends.shape[0] > 0:
                ends[closed] = pos
            closed += 1
            start = pos
            pos = start + cap
    if starts[runs] > start:
        if ends.shape[0] > 0:
            ends[closed] = starts[runs]
        closed += 1
    return closed


@njit(cache=True, nogil=True)
def budget_ends_runs1(starts, runs, max_tokens, max_sentences):  # pragma: no cover - compiled
    """Batch ends of :func:`_budget_ends_runs1` (for tests)."""
    ends = np.empty(max(starts[runs], 1), np.int64)
    closed = _budget_ends_runs1(starts, runs, max_tokens, max_sentences, ends)
    return ends[:closed].copy()


@njit(cache=True, inline="always")
def _budget_ends(starts, runs, max_tokens, max_sentences, multiple):  # pragma: no cover
    if multiple == 1:
        ends = np.empty(max(starts[runs], 1), np.int64)
        closed = _budget_ends_runs1(starts, runs, max_tokens, max_sentences, ends)
        return ends[:closed].copy()
    values = np.arange(runs, dtype=np.int64)
    return budget_ends_runs(values, starts[: runs + 1], max_tokens, max_sentences, multiple)


@njit(cache=True, nogil=True)
def budget_window(sizes, n, block, rotation, blocks, span, key, limit, max_tokens, max_sentences, multiple):  # fmt: skip  # pragma: no cover
    """Token-budget plan of one window of 1-D ``sizes`` (all below ``span``).

    Returns ``(order, kept, ends)``: global ids by increasing size (ties shuffled from ``key``),
    the number of them planned (those of size <= ``limit``; the rest are skipped) and the
    batch ends: ``budget_ends_runs``'s, as the token-budget planner makes them (a batch at a
    time with ``multiple`` 1, :func:`_budget_ends_runs1`).
    """
    order, starts = _window_order(sizes, n, block, rotation, blocks, span, key)
    runs = min(span, limit + 1)
    ends = _budget_ends(starts, runs, max_tokens, max_sentences, multiple)
    return order, starts[runs], ends


@njit(cache=True, nogil=True)
def budget_window_count(sizes, n, block, rotation, blocks, span, limit, max_tokens, max_sentences, multiple):  # fmt: skip  # pragma: no cover
    """Number of batches :func:`budget_window` makes (the histogram is all it needs)."""
    starts, _ = _window_histogram(sizes, n, block, rotation, blocks, span)
    runs = min(span, limit + 1)
    if multiple == 1:
        return _budget_ends_runs1(starts, runs, max_tokens, max_sentences, np.empty(0, np.int64))
    values = np.arange(runs, dtype=np.int64)
    ends = budget_ends_runs(values, starts[: runs + 1], max_tokens, max_sentences, multiple)
    return ends.shape[0]


# ---------------------------------------------------------------------------------- packing


@njit(cache=True, inline="always")
def _best_fit_runs(starts, capacity, max_per_row, visits):  # pragma: no cover - compiled
    """Best fit over items by decreasing size, a run of equal sizes at a time.

    Run ``r`` (sizes ``r``, ``starts[r + 1] - starts[r]`` items) is walked from the largest size
    down. Each step takes the open row with the smallest remaining space >= r (among equal
    spaces the one that reached it last), else opens a row, and puts as many of the run's items
    in it as fit: one item at a time, best fit would pick that same row again for each (its new
    space is below the old one and still >= r, and nothing lay in between). So the rows are
    those of ``best_fit_rows`` on the expanded sizes. When ``visits`` has room (one row per
    item), visit ``v`` is recorded as ``visits[v] = (row, first walk position, items, size)``.
    Returns ``(visit count, rows)``.
    """
    record = visits.shape[0] > 0
    offs, nbits, total = _bit_levels(capacity + 1)
    words = np.zeros(total, np.uint64)
    head = np.full(capacity + 1, -1, np.int64)
    room = 64
    below = np.empty(room, np.int64)
    count = np.empty(room, np.int64)
    rows = 0
    nv = 0
    pos = 0
    for r in range(starts.shape[0] - 2, -1, -1):
        c = starts[r + 1] - starts[r]
        s = r
        while c > 0:
            slot = _bits_next(words, offs, nbits, s)
            if slot < 0:
                if rows == room:
                    room *= 2
                    below = _grown(below, rows, room)
                    count = _grown(count, rows, room)
                row = rows
                rows += 1
                rem = capacity
                have = 0
            else:
                row = _pop_row(words, offs, head, below, slot)
                rem = slot
                have = count[row]
            q = c
            if s > 0 and rem // s < q:
                q = rem // s
            if max_per_row > 0 and max_per_row - have < q:
                q = max_per_row - have
            if record:
                visits[nv, 0] = row
                visits[nv, 1] = pos
                visits[nv, 2] = q
                visits[nv, 3] = s
            nv += 1
            pos += q
            c -= q
            rem -= q * s
            have += q
            count[row] = have
            if max_per_row == 0 or have < max_per_row:
                _push_row(words, offs, head, below, row, rem)
    return nv, rows


@njit(cache=True, nogil=True)
def best_fit_runs(starts, capacity, max_per_row):  # pragma: no cover - compiled
    """``row_of`` and row count of best fit over the runs ``starts`` (for tests).

    Equals ``best_fit_rows`` of the sizes in decreasing order (run r holding size r).
    """
    n = starts[starts.shape[0] - 1]
    visits = np.empty((max(n, 1), 4), np.int64)
    nv, rows = _best_fit_runs(starts, capacity, max_per_row, visits)
    row_of = np.empty(n, np.int64)
    for v in range(nv):
        for p in range(visits[v, 1], visits[v, 1] + visits[v, 2]):
            row_of[p] = visits[v, 0]
    return row_of, rows


def best_fit_runs_reference(
    starts: np.ndarray, capacity: int, max_per_row: int
) -> tuple[np.ndarray, int]:
    """``best_fit_rows_reference`` of the sizes the runs stand for, largest first."""
    counts = np.diff(starts)
    sizes = np.repeat(np.arange(counts.size, dtype=np.int64), counts)[::-1]
    return best_fit_rows_reference(sizes, capacity, max_per_row)


@njit(cache=True, nogil=True)
def pack_window_rows(sizes, n, block, rotation, blocks, span, key, capacity, max_per_row):  # fmt: skip  # pragma: no cover
    """First half of the packing plan of one window: order, best fit, visits.

    Returns ``(order, visits, rows)``: global ids by increasing size (ties shuffled from
    ``key``), the row visits of :func:`_best_fit_runs` over the decreasing walk
    ``order[::-1]``, and the number of rows.
    """
    order, starts = _window_order(sizes, n, block, rotation, blocks, span, key)
    visits = np.empty((max(order.shape[0], 1), 4), np.int64)
    nv, rows = _best_fit_runs(starts, capacity, max_per_row, visits)
    return order, visits[:nv].copy(), rows


@njit(cache=True, nogil=True)
def pack_window_count(sizes, n, block, rotation, blocks, span, capacity, max_per_row):  # fmt: skip  # pragma: no cover
    """Rows :func:`pack_window_rows` makes (the histogram is all it needs)."""
    starts, _ = _window_histogram(sizes, n, block, rotation, blocks, span)
    nv, rows = _best_fit_runs(starts, capacity, max_per_row, np.empty((0, 4), np.int64))
    return rows


@njit(cache=True, nogil=True)
def best_fit_visits(starts, capacity, max_per_row):  # pragma: no cover - compiled
    """The row visits of :func:`_best_fit_runs` over the runs ``starts``: ``(visits, rows)``."""
    visits = np.empty((max(starts[starts.shape[0] - 1], 1), 4), np.int64)
    nv, rows = _best_fit_runs(starts, capacity, max_per_row, visits)
    return visits[:nv].copy(), rows


@njit(cache=True, nogil=True)
def scatter_visits(order, visits, row_rank):  # pragma: no cover - compiled
    """The walk's items grouped by row rank, as ``scatter_rows`` groups them.

    Returns ``(indices, row_bounds)``: rows by increasing ``row_rank[row]``, a row's items in
    walk order (walk position p is ``order[len - 1 - p]``). With :func:`visit_lengths`, the
    same as ``scatter_rows(row_of, row_rank, order[::-1], walk_sizes)``, with no per-item row
    or size array (and ``order`` may be freed before the lengths are made).
    """
    n = order.shape[0]
    num_rows = row_rank.shape[0]
    bounds = np.zeros(num_rows + 1, np.int64)
    for v in range(visits.shape[0]):
        bounds[row_rank[visits[v, 0]] + 1] += visits[v, 2]
    for k in range(num_rows):
        bounds[k + 1] += bounds[k]
    fill = bounds[:num_rows].copy()
    out = np.empty(n, np.int64)
    for v in range(visits.shape[0]):
        k = row_rank[visits[v, 0]]
        p = fill[k]
        first = n - 1 - visits[v, 1]
        for j in range(visits[v, 2]):
            out[p + j] = order[first - j]
        fill[k] = p + visits[v, 2]
    return out, bounds


@njit(cache=True, nogil=True)
def visit_lengths(visits, row_rank, bounds):  # pragma: no cover - compiled
    """The size of every entry of :func:`scatter_visits`' layout (piece lengths)."""
    num_rows = row_rank.shape[0]
    fill = bounds[:num_rows].copy()
    lens = np.empty(bounds[num_rows], np.int64)
    for v in range(visits.shape[0]):
        k = row_rank[visits[v, 0]]
        p = fill[k]
        for j in range(visits[v, 2]):
            lens[p + j] = visits[v, 3]
        fill[k] = p + visits[v, 2]
    return lens
