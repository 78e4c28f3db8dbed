"""Token-budget batching: fairseq's greedy rule over sizes in order, or over runs of one size."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

from ._sat import mul_exceeds


@njit(cache=True)
def _budget_step(pos, s, ends, closed, start, cut, batch_max, tail_max, max_tokens, max_sentences, multiple):  # fmt: skip  # pragma: no cover
    """One item of the greedy rule; returns the new (closed, start, cut, batch_max, tail_max).

    The open batch ``[start, cut)`` grows by a tail ``[cut, pos]``; the tail joins it whenever
    the union is small (< multiple) or a multiple of ``multiple``. When batch + tail would break
    a limit (0 = none), the batch closes and the tail opens the next one; if the tail alone
    (with the new item) breaks max_tokens, the tail without the new item closes too.
    Costs (count × longest) are compared with :func:`mul_exceeds`, so they never wrap around.
    """
    if s > tail_max:
        tail_max = s
    count = pos + 1 - start
    longest = batch_max if batch_max > tail_max else tail_max
    over = (max_sentences > 0 and count > max_sentences) or (
        max_tokens > 0 and mul_exceeds(count, longest, max_tokens)
    )
    if over:
        ends[closed] = cut
        closed += 1
        if max_tokens > 0 and mul_exceeds(pos + 1 - cut, tail_max, max_tokens):
            ends[closed] = pos
            closed += 1
            tail_max = s
            start = pos
        else:
            start = cut
        cut = pos + 1
        batch_max = tail_max
        tail_max = 0
    elif count < multiple or count % multiple == 0:
        cut = pos + 1
        batch_max = longest
        tail_max = 0
    return closed, start, cut, batch_max, tail_max


@njit(cache=True)
def budget_ends_runs(values, starts, max_tokens, max_sentences, multiple):  # pragma: no cover
    """Greedy token-budget batching (fairseq's rule, see :func:`_budget_step`); batch ends.

    Positions ``starts[r]:starts[r+1]`` all have size ``values[r]`` (a length-sorted order from a
    counting sort needs no per-position size array); an empty ``starts`` means one position per
    value, i.e. ``values`` are the sizes in order. ``max_tokens``/``max_sentences`` of 0 mean
    "no limit".
    """
    per_item = starts.shape[0] == 0
    n = values.shape[0] if per_item else starts[starts.shape[0] - 1]
    ends = np.empty(n + 1, np.int64)  # pages past the batch count are never touched
    closed, start, cut, batch_max, tail_max = 0, 0, 0, values.dtype.type(0), values.dtype.type(0)
    if per_item:
        for pos in range(n):
            closed, start, cut, batch_max, tail_max = _budget_step(
                pos, values[pos], ends, closed, start, cut, batch_max, tail_max,
                max_tokens, max_sentences, multiple,
            )  # fmt: skip
    else:
        for r in range(starts.shape[0] - 1):
            s = values[r]
            for pos in range(starts[r], starts[r + 1]):
                closed, start, cut, batch_max, tail_max = _budget_step(
                    pos, s, ends, closed, start, cut, batch_max, tail_max,
                    max_tokens, max_sentences, multiple,
                )  # fmt: skip
    if cut > start:
        ends[closed] = cut
        closed += 1
    if n > cut:
        ends[closed] = n
        closed += 1
    return ends[:closed].copy()


_NO_RUNS = np.zeros(0, np.int64)


def budget_ends(
    sizes: np.ndarray, max_tokens: int, max_sentences: int, multiple: int
) -> np.ndarray:
    """:func:`budget_ends_runs` over per-position ``sizes`` (already in order)."""
    return budget_ends_runs(sizes, _NO_RUNS, max_tokens, max_sentences, multiple)


def greedy_ends_reference(
    n: int, over: Callable[[list[int]], bool], max_sentences: int, multiple: int
) -> np.ndarray:
    """fairseq's greedy rule with Python lists, one batch and one tail at a time.

    ``over(items)`` says whether positions ``items`` break a budget (tokens, cost...); the
    references of the token-budget and the cost-budget kernels both run on this one rule.
    """
    batches: list[list[int]] = []
    batch: list[int] = []
    tail: list[int] = []
    for pos in range(n):
        tail.append(pos)
        union = batch + tail
        if (max_sentences > 0 and len(union) > max_sentences) or over(union):
            batches.append(batch)
            if over(tail):
                batches.append(tail[:-1])
                tail = tail[-1:]
            batch, tail = tail, []
        elif len(union) < multiple or len(union) % multiple == 0:
            batch, tail = union, []
    batches.extend(part for part in (batch, tail) if part)
    ends = np.cumsum([len(b) for b in batches], dtype=np.int64)
    return ends if len(ends) else np.zeros(0, np.int64)


def budget_ends_reference(
    sizes: np.ndarray, max_tokens: int, max_sentences: int, multiple: int
) -> np.ndarray:
    """:func:`greedy_ends_reference` under a padded-token budget.

    Costs are exact Python ints, so they cannot wrap around (the kernel's rule).
    """

    def over(items: list[int]) -> bool:
        return max_tokens > 0 and len(items) * max(int(sizes[i]) for i in items) > max_tokens

    return greedy_ends_reference(len(sizes), over, max_sentences, multiple)


_ORDER_CHUNK = 4096  # items gathered before the greedy rule runs over them (cache-resident)


@njit(cache=True)
def budget_order(order, sizes, max_tokens, max_sentences, multiple, skip_over):  # pragma: no cover
    """Check a given walk, gather its sizes and run the greedy rule, in one pass.

    ``order`` must hold indices into ``sizes``, each at most once. With ``skip_over``, items
    larger than ``max_tokens`` are left out of the walk. Returns ``(status, walk, ends)``:
    ``status`` is 0, or ``-1 - k`` for an index out of range at position k, or ``-1 - n - k``
    (n = len(order)) for an index seen before at position k; then walk and ends are empty.

    The pass goes by chunks of :data:`_ORDER_CHUNK` items: the random reads of a chunk (sizes,
    and the seen-flags) are independent of each other, so the memory system serves many at
    once; the greedy rule, whose branches depend on every size, then runs over the chunk in cache.
    """
    n_items = sizes.shape[0]
    n = order.shape[0]
    seen = np.zeros((n_items >> 6) + 1, np.uint64)  # one bit per item: stays in cache longer
    walk = np.empty(n, np.int64)
    ends = np.empty(n + 1, np.int64)
    buf = np.empty(_ORDER_CHUNK, sizes.dtype)
    one = np.uint64(1)
    empty = np.zeros(0, np.int64)
    closed, start, cut, batch_max, tail_max = 0, 0, 0, sizes.dtype.type(0), sizes.dtype.type(0)
    m = 0
    for c0 in range(0, n, _ORDER_CHUNK):
        c1 = min(n, c0 + _ORDER_CHUNK)
        for k in range(c0, c1):
            i = order[k]
            if i < 0 or i >= n_items:
                return -1 - k, empty, empty
            bit = one << np.uint64(i & 63)
            if seen[i >> 6] & bit:
                return -1 - n - k, empty, empty
            seen[i >> 6] |= bit
            buf[k - c0] = sizes[i]
        for k in range(c0, c1):
            s = buf[k - c0]
            if skip_over and s > max_tokens:
                continue
            walk[m] = order[k]
            closed, start, cut, batch_max, tail_max = _budget_step(
                m, s, ends, closed, start, cut, batch_max, tail_max,
                max_tokens, max_sentences, multiple,
            )  # fmt: skip
            m += 1
    if cut > start:
        ends[closed] = cut
        closed += 1
    if m > cut:
        ends[closed] = m
        closed += 1
    return 0, walk[:m], ends[:closed]  # views: pages past the end were never touched


def budget_order_reference(
    order: np.ndarray,
    sizes: np.ndarray,
    max_tokens: int,
    max_sentences: int,
    multiple: int,
    skip_over: bool,
) -> tuple[int, np.ndarray, np.ndarray]:
    """:func:`budget_order` as separate steps: check, filter, gather, greedy reference."""
    n = len(order)
    seen: set[int] = set()
    walk = []
    for k, i in enumerate(int(x) for x in order):
        if not 0 <= i < len(sizes):
            return -1 - k, np.zeros(0, np.int64), np.zeros(0, np.int64)
        if i in seen:
            return -1 - n - k, np.zeros(0, np.int64), np.zeros(0, np.int64)
        seen.add(i)
        if not (skip_over and sizes[i] > max_tokens):
            walk.append(i)
    arr = np.array(walk, dtype=np.int64)
    ends = budget_ends_reference(sizes[arr], max_tokens, max_sentences, multiple)
    return 0, arr, ends
