"""Packing: best-fit decreasing into rows over a 64-ary bit tree (over a max tree and an ordered
set for rows of two fields), then one scatter into rows.

The kernels are C++ (``padless._core``, csrc/packing.hpp); the ``*_reference`` twins are the spec.
"""

from __future__ import annotations

import numpy as np

from .. import _core


def best_fit_rows(sizes: np.ndarray, capacity: int, max_per_row: int) -> tuple[np.ndarray, int]:
    """Best-fit placement of items (in the order given) into rows of ``capacity``.

    Each item goes to the open row with the smallest remaining space >= its size (among equal
    remaining spaces, the row that reached it last), else opens a new row. A row holding
    ``max_per_row`` items (0: no cap) closes. Sizes must lie in [0, capacity]. Returns
    ``(row_of, num_rows)``: rows are numbered in the order they open. O(n · log_64 capacity).
    """
    return _core.best_fit_rows(sizes, capacity, max_per_row)


def best_fit_rows_reference(
    sizes: np.ndarray, capacity: int, max_per_row: int
) -> tuple[np.ndarray, int]:
    """The same rule with a dict of Python lists, scanning every remaining space."""
    stacks: dict[int, list[int]] = {}
    counts: list[int] = []
    row_of = []
    for s in (int(x) for x in sizes):
        fits = [r for r, rows in stacks.items() if r >= s and rows]
        if fits:
            r = min(fits)
            row = stacks[r].pop()
            left = r - s
            counts[row] += 1
        else:
            row = len(counts)
            counts.append(1)
            left = capacity - s
        row_of.append(row)
        if max_per_row == 0 or counts[row] < max_per_row:
            stacks.setdefault(left, []).append(row)
    return np.array(row_of, dtype=np.int64), len(counts)


def best_fit_pairs(
    first: np.ndarray, second: np.ndarray, capacity0: int, capacity1: int, max_per_row: int
) -> tuple[np.ndarray, int]:
    """Vector best fit of items with two sizes (``first[i]``, ``second[i]``), in the order given,
    into rows of ``capacity0`` and ``capacity1``.

    An item (a, b) goes to the open row whose remaining spaces r0 >= a and r1 >= b have the
    least r0, then the least r1, then (among equal ones) the row opened last; else it opens a
    new row. A row holding ``max_per_row`` items (0: no cap) closes. Sizes must lie in
    [0, capacity] of their field. Returns ``(row_of, num_rows)``: rows are numbered in the
    order they open. O(n · (log rows + 64 · log_64 capacity0)): the open rows of each r0 in an
    ordered set by r1, a max tree over r0 holding each set's largest r1; memory: a node per open
    row and 12 bytes per unit of ``capacity0``.
    """
    return _core.best_fit_pairs(first, second, capacity0, capacity1, max_per_row)


def best_fit_pairs_reference(
    first: np.ndarray, second: np.ndarray, capacity0: int, capacity1: int, max_per_row: int
) -> tuple[np.ndarray, int]:
    """The same rule, scanning every open row's remaining spaces."""
    left: dict[int, tuple[int, int]] = {}  # open row -> its remaining spaces
    counts: list[int] = []
    row_of = []
    for a, b in zip((int(x) for x in first), (int(x) for x in second), strict=True):
        fits = [(r0, r1, -row) for row, (r0, r1) in left.items() if r0 >= a and r1 >= b]
        if fits:
            r0, r1, row = min(fits)
            row = -row
            counts[row] += 1
        else:
            row, r0, r1 = len(counts), capacity0, capacity1
            counts.append(1)
        row_of.append(row)
        if max_per_row == 0 or counts[row] < max_per_row:
            left[row] = (r0 - a, r1 - b)
        else:
            left.pop(row, None)
    return np.array(row_of, dtype=np.int64), len(counts)


def scatter_rows(
    row_of: np.ndarray, row_rank: np.ndarray, values: np.ndarray, sizes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group items by row: rows in increasing ``row_rank[row]``, a row's items in input order.

    Returns ``(values, sizes, bounds)`` regrouped, with ``bounds[k]:bounds[k + 1]`` the items of
    the row of rank k. One counting pass and one scatter pass, O(n + rows).
    """
    return _core.scatter_rows(row_of, row_rank, values, sizes)


def scatter_rows_reference(
    row_of: np.ndarray, row_rank: np.ndarray, values: np.ndarray, sizes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same regrouping with a stable argsort of the row ranks."""
    keys = np.asarray(row_rank)[row_of]
    order = np.argsort(keys, kind="stable")
    counts = np.bincount(keys, minlength=len(row_rank))
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return np.asarray(values)[order], np.asarray(sizes)[order], bounds
