"""Windowed plans: read a window's items from (memory-mapped) lengths, and plan it in one call.

A window is a list of *blocks* of consecutive positions. Position ``q`` holds item
``(q + rotation) mod n``, block ``b`` the positions ``[b·block, min((b + 1)·block, n))``, so a block
is at most two runs of consecutive items and the lengths are read sequentially, block by block.

The fused kernels (``budget_window``, ``pack_rows``) plan one window exactly as the token
budget and packing planners plan that window's lengths (``spec.plan(lengths[items])``), with
global item ids written straight into the order (the tie-break shuffle moves values without
looking at them, so shuffling global ids or local positions gives the same plan). They release
the GIL, so windows plan in parallel threads. Packing places the items of a run of equal sizes
row by row (:func:`best_fit_runs`): the same rows as ``best_fit_rows`` one item at a time, in
time per row visited instead of per item.

The kernels are C++ (``csrc/windows.hpp``, bound in ``padless._core``). They read the lengths
in place, whatever their integer dtype and strides (a mapped file is never copied); the small
arguments are made int64 arrays and Python ints here, so that the binding of the lengths' own
dtype is the one that runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _core
from .packing import best_fit_rows_reference

# the dtypes padless.planners.windows.source_lengths reads in place (each has its own binding)
_LENGTH_DTYPES = tuple(
    np.dtype(t) for t in (np.int64, np.int32, np.uint32, np.uint16, np.int16, np.int8, np.uint8)
)


def _lengths(src: Any) -> np.ndarray:
    """The lengths as they are when a binding reads them in place, else an int64 copy."""
    if isinstance(src, np.ndarray) and src.dtype in _LENGTH_DTYPES:
        return src
    return np.asarray(src, dtype=np.int64)


def _ints(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


# ---------------------------------------------------------------------------------- layout


def window_items(n: int, block: int, rotation: int, blocks: np.ndarray) -> np.ndarray:
    """Global item ids of the positions in ``blocks`` (block after block, in order)."""
    return _core.window_items(int(n), int(block), int(rotation), _ints(blocks))


def window_items_reference(n: int, block: int, rotation: int, blocks: np.ndarray) -> np.ndarray:
    parts = [np.arange(b * block, min((b + 1) * block, n), dtype=np.int64) for b in blocks]
    pos = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return (pos + rotation) % max(n, 1)


def gather_rows(src: np.ndarray, items: np.ndarray) -> np.ndarray:
    """``src[items]`` of an (N, F) array as int64: one window's lengths, read block by block."""
    return _core.gather_rows(_lengths(src), _ints(items))


def gather_rows_reference(src: np.ndarray, items: np.ndarray) -> np.ndarray:
    return np.asarray(src[items], dtype=np.int64).reshape(items.shape[0], src.shape[1])


# ---------------------------------------------------------------------------------- checks


def scan_lengths(src: np.ndarray) -> tuple[int, int, int, int, int, int]:
    """One pass over an (n, F) chunk: ``(lowest, highest, size_lo, arg_lo, size_hi, arg_hi)``.

    ``lowest``/``highest`` over every entry (the range check), ``size_*`` the smallest and largest
    size (max over fields) and the first row holding each. An empty chunk gives ``(0, 0, 0, -1,
    0, -1)``.
    """
    return _core.scan_lengths(_lengths(src))


def scan_lengths_reference(src: np.ndarray) -> tuple[int, int, int, int, int, int]:
    if src.shape[0] == 0:
        return 0, 0, 0, -1, 0, -1
    sizes = src.max(axis=1).astype(np.int64)
    lo, hi = int(np.argmin(sizes)), int(np.argmax(sizes))
    return int(src.min()), int(src.max()), int(sizes[lo]), lo, int(sizes[hi]), hi


# ---------------------------------------------------------------------------------- order


def window_order(
    sizes: np.ndarray,
    n: int,
    block: int,
    rotation: int,
    blocks: np.ndarray,
    span: int,
    key: int | np.unsignedinteger,
) -> tuple[np.ndarray, np.ndarray]:
    """Global ids of the window by increasing size, ties shuffled from ``key``, and the run
    bounds ``starts`` (length span + 1): ``length_order`` of the window's lengths with every
    position replaced by its item id (for tests)."""
    return _core.window_order(
        _lengths(sizes), int(n), int(block), int(rotation), _ints(blocks), int(span), int(key)
    )


# ---------------------------------------------------------------------------------- budget


def budget_ends_runs1(
    starts: np.ndarray, runs: int, max_tokens: int, max_sentences: int
) -> np.ndarray:
    """``budget_ends_runs`` with ``multiple=1`` over runs of sizes 0, 1, …, runs − 1, a batch
    at a time (for tests).

    With multiple 1 every item that fits joins the batch, so the batch at an item of size s
    closes when it would hold more than ``cap(s) = min(max_sentences, max_tokens // s)`` items
    (sizes only grow, so s is its longest); a run then continues in batches of cap(s). An item
    never breaks max_tokens alone (longer items are skipped before), so no tail closes alone.
    """
    return _core.budget_ends_runs1(_ints(starts), int(runs), int(max_tokens), int(max_sentences))


def budget_window(
    sizes: np.ndarray,
    n: int,
    block: int,
    rotation: int,
    blocks: np.ndarray,
    span: int,
    key: int | np.unsignedinteger,
    limit: int,
    max_tokens: int,
    max_sentences: int,
    multiple: int,
) -> tuple[np.ndarray, int, np.ndarray]:
    """Token-budget plan of one window of 1-D ``sizes`` (all below ``span``).

    Returns ``(order, kept, ends)``: global ids by increasing size (ties shuffled from ``key``),
    the number of them planned (those of size <= ``limit``; the rest are skipped) and the
    batch ends: ``budget_ends_runs``'s, as the token-budget planner makes them (a batch at a
    time with ``multiple`` 1, :func:`budget_ends_runs1`).
    """
    return _core.budget_window(
        _lengths(sizes), int(n), int(block), int(rotation), _ints(blocks), int(span), int(key),
        int(limit), int(max_tokens), int(max_sentences), int(multiple),
    )  # fmt: skip


def budget_window_count(
    sizes: np.ndarray,
    n: int,
    block: int,
    rotation: int,
    blocks: np.ndarray,
    span: int,
    limit: int,
    max_tokens: int,
    max_sentences: int,
    multiple: int,
) -> int:
    """Number of batches :func:`budget_window` makes (the histogram is all it needs)."""
    return _core.budget_window_count(
        _lengths(sizes), int(n), int(block), int(rotation), _ints(blocks), int(span),
        int(limit), int(max_tokens), int(max_sentences), int(multiple),
    )  # fmt: skip


# ---------------------------------------------------------------------------------- packing


def best_fit_runs(starts: np.ndarray, capacity: int, max_per_row: int) -> tuple[np.ndarray, int]:
    """``row_of`` and row count of best fit over the runs ``starts`` (for tests).

    Best fit over items by decreasing size, a run of equal sizes at a time: run ``r`` (sizes
    ``r``, ``starts[r + 1] - starts[r]`` items) is walked from the largest size down. Each step
    takes the open row with the smallest remaining space >= r (among equal spaces the one that
    reached it last), else opens a row, and puts as many of the run's items in it as fit: one
    item at a time, best fit would pick that same row again for each (its new space is below
    the old one and still >= r, and nothing lay in between). So the rows equal
    ``best_fit_rows`` of the sizes in decreasing order (run r holding size r).
    """
    visits = best_fit_visits(starts, capacity, max_per_row)
    rows = int(visits[:, 0].max()) + 1 if visits.size else 0
    return np.repeat(visits[:, 0], visits[:, 2]), rows


def best_fit_runs_reference(
    starts: np.ndarray, capacity: int, max_per_row: int
) -> tuple[np.ndarray, int]:
    """``best_fit_rows_reference`` of the sizes the runs stand for, largest first."""
    counts = np.diff(starts)
    sizes = np.repeat(np.arange(counts.size, dtype=np.int64), counts)[::-1]
    return best_fit_rows_reference(sizes, capacity, max_per_row)


def width_scatter(
    widths: np.ndarray,
    first_id: int,
    runs: int,
    cursor: np.ndarray,
    index: np.ndarray,
    low: int = 0,
) -> None:
    """Place one chunk of sequences in the by-width index, in place: sequence ``first_id + i``
    (of width ``widths[i]``; widths outside ``[low, runs)`` left out) goes to
    ``index[cursor[w]]``, and ``cursor[w]`` moves on. Chunks given in order make the index
    stable by width; disjoint width ranges may be placed by threads at once. ``cursor`` is
    int64, ``index`` int32 or int64 (a memory-mapped file's array included)."""
    _core.width_scatter(widths, int(first_id), int(low), int(runs), cursor, index)


def width_scatter_reference(
    widths: np.ndarray,
    first_id: int,
    runs: int,
    cursor: np.ndarray,
    index: np.ndarray,
    low: int = 0,
) -> None:
    """The same placement, one sequence at a time."""
    for i, w in enumerate(np.asarray(widths).tolist()):
        if low <= w < runs:
            index[cursor[w]] = first_id + i
            cursor[w] += 1


def best_fit_visits(starts: np.ndarray, capacity: int, max_per_row: int) -> np.ndarray:
    """The visits of :func:`best_fit_runs`, a (visits, 4) int64 array of ``(row, first, items,
    size)``: visit ``v`` puts ``items`` items of ``size`` into ``row``, the walk's positions
    ``first`` on (the walk: the runs' items largest first). Rows are numbered in the order they
    opened; a row's visits come in walk order. O(visits) memory, never one entry per item.
    """
    flat = _core.best_fit_visits(_ints(starts), int(capacity), int(max_per_row))
    return flat.reshape(-1, 4)


def best_fit_visits_reference(starts: np.ndarray, capacity: int, max_per_row: int) -> np.ndarray:
    """:func:`best_fit_visits` from the rows of :func:`best_fit_runs_reference`: a visit is a
    run of consecutive walk positions with one row and one size (the next visit of a run always
    goes to another row: the last one could take no more of that size)."""
    row_of, _ = best_fit_runs_reference(starts, capacity, max_per_row)
    counts = np.diff(starts)
    sizes = np.repeat(np.arange(counts.size, dtype=np.int64), counts)[::-1]
    out: list[list[int]] = []
    for p, (row, size) in enumerate(zip(row_of.tolist(), sizes.tolist(), strict=True)):
        if out and out[-1][0] == row and out[-1][3] == size:
            out[-1][2] += 1
        else:
            out.append([row, p, 1, size])
    return np.array(out, dtype=np.int64).reshape(-1, 4)


def pack_window_count(
    sizes: np.ndarray,
    n: int,
    block: int,
    rotation: int,
    blocks: np.ndarray,
    span: int,
    capacity: int,
    max_per_row: int,
) -> int:
    """Rows :func:`pack_rows` makes of the window (the histogram is all it needs)."""
    return _core.pack_window_count(
        _lengths(sizes), int(n), int(block), int(rotation), _ints(blocks), int(span),
        int(capacity), int(max_per_row),
    )  # fmt: skip


# ------------------------------------------------------------------ packing, a row at a time


def pack_rows(
    sizes: np.ndarray,
    n: int,
    block: int,
    rotation: int,
    blocks: np.ndarray,
    span: int,
    key: int | np.unsignedinteger,
    capacity: int,
    max_per_row: int,
    rows_per_batch: int,
    row_order: Callable[[int], np.ndarray],
    names: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The packing plan of one window of 1-D ``sizes`` (all below ``span``), its rows in the
    order ``row_order`` draws. ``names`` (int64, one per size): the entries are ``names[i]``
    in place of the item ids ``i`` (written by the counting sort: no gather after).

    The items by increasing size, ties shuffled from ``key`` (:func:`window_order`), are placed
    best fit from the longest down, a run of equal sizes at a time (:func:`best_fit_runs`). Row
    ``k`` of the plan is then row ``final[k]`` (rows numbered in the order they opened), where
    ``final = row_order(rows)`` is a permutation of the rows (int64; sorted in place batch by
    batch: each batch of ``rows_per_batch`` rows, the last one shorter, lists its rows in the
    order they opened), a row's items longest first. Returns ``(items, row_bounds,
    piece_lengths, offsets, real)``: the plan's entries (global ids) and their sizes, the CSR
    bounds of its rows and of its batches (into the entries), and the sum of the sizes.

    The rows depend on the sizes alone, so on a large window a thread sorts and groups the
    items while ``row_order`` runs (numpy's permutation releases the GIL); the plan is the same.
    """
    return _core.pack_rows(
        _lengths(sizes), int(n), int(block), int(rotation), _ints(blocks), int(span), int(key),
        int(capacity), int(max_per_row), int(rows_per_batch), row_order,
        _NO_NAMES if names is None else names,
    )  # fmt: skip


_NO_NAMES = np.zeros(0, dtype=np.int64)


def pack_rows_reference(
    sizes: np.ndarray,
    n: int,
    block: int,
    rotation: int,
    blocks: np.ndarray,
    span: int,
    key: int | np.unsignedinteger,
    capacity: int,
    max_per_row: int,
    rows_per_batch: int,
    row_order: Callable[[int], np.ndarray],
    names: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """``best_fit_rows_reference`` of the walk ``order[::-1]``, rows regrouped in the drawn order."""
    order, starts = window_order(sizes, n, block, rotation, blocks, span, key)
    counts = np.diff(starts)
    walk = order[::-1]
    walk_sizes = np.repeat(np.arange(counts.size, dtype=np.int64), counts)[::-1]
    row_of, rows = best_fit_rows_reference(walk_sizes, capacity, max_per_row)
    final = np.array(row_order(rows), dtype=np.int64)
    if sorted(final.tolist()) != list(range(rows)):
        raise ValueError("row_order must give a permutation of the rows")
    full = rows // rows_per_batch * rows_per_batch
    final[:full].reshape(-1, rows_per_batch).sort(axis=1)
    final[full:].sort()
    rank = np.empty(rows, dtype=np.int64)
    rank[final] = np.arange(rows, dtype=np.int64)
    by_rank = np.argsort(rank[row_of], kind="stable")
    bounds = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rank[row_of], minlength=rows), out=bounds[1:])
    batches = -(-rows // rows_per_batch)
    at = np.minimum(np.arange(batches + 1, dtype=np.int64) * rows_per_batch, rows)
    lens = walk_sizes[by_rank]
    items = walk[by_rank] if names is None else names[walk[by_rank]]
    return items, bounds, lens, bounds[at], int(lens.sum())
