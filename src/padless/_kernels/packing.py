"""Packing: best-fit decreasing into rows over a 64-ary bit tree, then one scatter into rows."""

from __future__ import annotations

import numpy as np
from numba import njit

from .rng import _MASK64

# Open rows are kept on one LIFO stack per remaining space r in
# [0, capacity]; a 64-ary bit hierarchy over r (bit r set iff stack r is non-empty, one level of
# "word non-empty" bits above another) finds the smallest r >= size in O(log_64 capacity) words.

_DEBRUIJN64 = np.uint64(0x03F79D71B4CB0A89)
_DEBRUIJN_TABLE = np.zeros(64, np.int64)
for _bit in range(64):
    _DEBRUIJN_TABLE[((1 << _bit) * 0x03F79D71B4CB0A89 & _MASK64) >> 58] = _bit
del _bit
_ALL64 = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True, inline="always")
def _lowest_bit(word):  # pragma: no cover - compiled
    """Position of the lowest set bit of a non-zero uint64 (de Bruijn multiplication)."""
    low = word & (~word + np.uint64(1))
    return _DEBRUIJN_TABLE[(low * _DEBRUIJN64) >> np.uint64(58)]


@njit(cache=True)
def _bit_levels(universe):  # pragma: no cover - compiled
    """Word offsets and bit counts of the levels of a bit hierarchy over [0, universe)."""
    offs = np.zeros(16, np.int64)
    nbits = np.zeros(16, np.int64)
    levels = 0
    bits = universe
    total = 0
    while True:
        words = (bits + 63) >> 6
        offs[levels] = total
        nbits[levels] = bits
        total += words
        levels += 1
        if words == 1:
            break
        bits = words
    return offs[:levels].copy(), nbits[:levels].copy(), total


@njit(cache=True, inline="always")
def _bits_set(words, offs, pos):  # pragma: no cover - compiled
    one = np.uint64(1)
    for lev in range(offs.shape[0]):
        k = offs[lev] + (pos >> 6)
        was = words[k]
        words[k] = was | (one << np.uint64(pos & 63))
        if was != 0:
            return
        pos >>= 6


@njit(cache=True, inline="always")
def _bits_clear(words, offs, pos):  # pragma: no cover - compiled
    one = np.uint64(1)
    for lev in range(offs.shape[0]):
        k = offs[lev] + (pos >> 6)
        now = words[k] & ~(one << np.uint64(pos & 63))
        words[k] = now
        if now != 0:
            return
        pos >>= 6


@njit(cache=True, inline="always")
def _push_row(words, offs, head, below, row, space):  # pragma: no cover - compiled
    """Put ``row`` on top of the stack of open rows with ``space`` left (a stack per space,
    ``head[space]`` its top and ``below[row]`` the next; the bit tree marks non-empty stacks)."""
    below[row] = head[space]
    if head[space] < 0:
        _bits_set(words, offs, space)
    head[space] = row


@njit(cache=True, inline="always")
def _pop_row(words, offs, head, below, space):  # pragma: no cover - compiled
    """Take the top row off the stack of rows with ``space`` left (see :func:`_push_row`)."""
    row = head[space]
    head[space] = below[row]
    if head[space] < 0:
        _bits_clear(words, offs, space)
    return row


@njit(cache=True, inline="always")
def _bits_next(words, offs, nbits, pos):  # pragma: no cover - compiled
    """Smallest set position >= pos, or -1."""
    levels = offs.shape[0]
    lev = 0
    while True:
        if pos >= nbits[lev]:
            return -1
        w = pos >> 6
        word = words[offs[lev] + w] & (_ALL64 << np.uint64(pos & 63))
        if word != 0:
            pos = (w << 6) + _lowest_bit(word)
            break
        lev += 1
        if lev == levels:
            return -1
        pos = w + 1
    while lev > 0:
        lev -= 1
        pos = (pos << 6) + _lowest_bit(words[offs[lev] + pos])
    return pos


@njit(cache=True)
def _grown(a, keep, size):  # pragma: no cover - compiled
    """A new array of ``size`` entries holding the first ``keep`` of ``a`` (row tables grow)."""
    out = np.empty(size, a.dtype)
    out[:keep] = a[:keep]
    return out


@njit(cache=True)
def best_fit_rows(sizes, capacity, max_per_row):  # pragma: no cover - compiled
    """Best-fit placement of items (in the order given) into rows of ``capacity``.

    Each item goes to the open row with the smallest remaining space >= its size (among equal
    remaining spaces, the row that reached it last), else opens a new row. A row holding
    ``max_per_row`` items (0: no cap) closes. Sizes must lie in [0, capacity]. Returns
    ``(row_of, num_rows)``: rows are numbered in the order they open. O(n · log_64 capacity).
    """
    n = sizes.shape[0]
    offs, nbits, total = _bit_levels(capacity + 1)
    words = np.zeros(total, np.uint64)
    head = np.full(capacity + 1, -1, np.int64)  # top of the stack of rows with remaining r
    room = 64
    below = np.empty(room, np.int64)  # next row down the same stack (grown by doubling)
    count = np.empty(room, np.int64)
    row_of = np.empty(n, np.int64)
    rows = 0
    for i in range(n):
        s = sizes[i]
        r = _bits_next(words, offs, nbits, s)
        if r < 0:
            if rows == room:
                room *= 2
                below = _grown(below, rows, room)
                count = _grown(count, rows, room)
            row = rows
            rows += 1
            left = capacity - s
            count[row] = 1
        else:
            row = _pop_row(words, offs, head, below, r)
            left = r - s
            count[row] += 1
        row_of[i] = row
        if max_per_row == 0 or count[row] < max_per_row:
            _push_row(words, offs, head, below, row, left)
    return row_of, rows


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


@njit(cache=True)
def scatter_rows(row_of, row_rank, values, sizes):  # pragma: no cover - compiled
    """Group items by row: rows in increasing ``row_rank[row]``, a row's items in input order.

    Returns ``(values, sizes, bounds)`` regrouped, with ``bounds[k]:bounds[k + 1]`` the items of
    the row of rank k. One counting pass and one scatter pass, O(n + rows).
    """
    n = row_of.shape[0]
    num_rows = row_rank.shape[0]
    bounds = np.zeros(num_rows + 1, np.int64)
    for i in range(n):
        bounds[row_rank[row_of[i]] + 1] += 1
    for k in range(num_rows):
        bounds[k + 1] += bounds[k]
    fill = bounds[:num_rows].copy()
    out_values = np.empty(n, np.int64)
    out_sizes = np.empty(n, np.int64)
    for i in range(n):
        k = row_rank[row_of[i]]
        p = fill[k]
        fill[k] = p + 1
        out_values[p] = values[i]
        out_sizes[p] = sizes[i]
    return out_values, out_sizes, bounds


def scatter_rows_reference(
    row_of: np.ndarray, row_rank: np.ndarray, values: np.ndarray, sizes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same regrouping with a stable argsort of the row ranks."""
    keys = np.asarray(row_rank)[row_of]
    order = np.argsort(keys, kind="stable")
    counts = np.bincount(keys, minlength=len(row_rank))
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return np.asarray(values)[order], np.asarray(sizes)[order], bounds
