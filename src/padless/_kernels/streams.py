"""Streams: one round of token-budget batching over a buffer (exact runs first, then greedy).

:func:`budget_round` is the hot loop of ``padless.StreamBatcher`` with a ``TokenBudget``: it
sorts the buffer by length, takes out the batches of one length (no padding), cuts the rest
with fairseq's greedy rule and decides which of those batches leave now and which wait.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .budget import budget_ends_reference, budget_ends_runs
from .order import counting_order, counting_order_reference

_BIG = np.int64(0x7FFFFFFFFFFFFFFF)
_NO_RUNS = np.zeros(0, np.int64)


@njit(cache=True, inline="always")
def _run_batch(size, count, max_tokens, max_sentences, multiple):  # pragma: no cover - compiled
    """Items per batch when every item has ``size``: what the greedy rule gives such a run."""
    k = _BIG
    if max_tokens > 0 and size > 0:
        k = max_tokens // size
    if max_sentences > 0 and max_sentences < k:
        k = max_sentences
    if multiple > 1 and k >= multiple and k != _BIG:
        k = k // multiple * multiple
    if k == _BIG:
        k = count
    return max(k, 1)


@njit(cache=True)
def budget_round(keys, span, sizes, late, max_tokens, max_sentences, multiple, final, target):  # fmt: skip  # pragma: no cover
    """Plan one round over a buffer of ``n`` entries.

    1. Stable counting sort by ``keys`` (length order; oldest first among equal keys).
    2. Each run of one key gives its full batches of one length, oldest items first: they
       leave (no padding).
    3. The run remainders, in key order, are cut by the greedy budget rule (0 = no limit). A
       batch leaves when ``final``, when it holds a ``late`` entry, or when it is full (one more
       item of its longest size, or ``multiple`` more once it holds that many, would break a
       limit) and pads at most ``target`` of its slots (count × longest); else its entries wait.

    Returns ``(order, ends, real, padded, leave)`` over all the batches (the one-length ones
    first): entries batch after batch, batch ends into ``order``, per batch its summed sizes,
    count × longest size and whether it leaves now. O(n + span).
    """
    n = keys.shape[0]
    order, starts = counting_order(keys, span)
    out = np.empty(n, np.int64)
    ends = np.empty(n, np.int64)
    real = np.empty(n, np.int64)
    padded = np.empty(n, np.int64)
    rest = np.empty(n, np.int64)
    pos = 0
    nb = 0
    nr = 0
    for r in range(span):
        lo = starts[r]
        hi = starts[r + 1]
        if hi == lo:
            continue
        size = sizes[order[lo]]
        k = _run_batch(size, hi - lo, max_tokens, max_sentences, multiple)
        full = (hi - lo) // k * k
        for i in range(lo, lo + full):
            out[pos] = order[i]
            pos += 1
            if (i - lo + 1) % k == 0:
                ends[nb] = pos
                real[nb] = k * size
                padded[nb] = k * size
                nb += 1
        for i in range(lo + full, hi):
            rest[nr] = order[i]
            nr += 1
    rs = np.empty(nr, sizes.dtype)
    for i in range(nr):
        rs[i] = sizes[rest[i]]
    cuts = budget_ends_runs(rs, _NO_RUNS, max_tokens, max_sentences, multiple)
    leave = np.ones(n, np.bool_)
    start = 0
    for e in cuts:
        count = e - start
        longest = rs[start]
        total = np.int64(0)
        due = final
        for i in range(start, e):
            if rs[i] > longest:
                longest = rs[i]
            total += rs[i]
            if late[rest[i]]:
                due = True
            out[pos] = rest[i]
            pos += 1
        cost = count * longest
        go = due
        if not go:
            step = multiple if count >= multiple else 1
            full = max_tokens == 0 and max_sentences == 0
            if max_tokens > 0 and (count + step) * longest > max_tokens:
                full = True
            if max_sentences > 0 and count + step > max_sentences:
                full = True
            go = full and (cost - total) <= target * cost
        ends[nb] = pos
        real[nb] = total
        padded[nb] = cost
        leave[nb] = go
        nb += 1
        start = e
    return (
        out[:pos].copy(),
        ends[:nb].copy(),
        real[:nb].copy(),
        padded[:nb].copy(),
        leave[:nb].copy(),
    )


def budget_round_reference(
    keys: np.ndarray,
    span: int,
    sizes: np.ndarray,
    late: np.ndarray,
    max_tokens: int,
    max_sentences: int,
    multiple: int,
    final: bool,
    target: float,
) -> tuple[np.ndarray, ...]:
    """The same round with Python lists and the reference sort and greedy rule."""
    order, starts = counting_order_reference(np.asarray(keys), span)
    out: list[int] = []
    ends: list[int] = []
    real: list[int] = []
    padded: list[int] = []
    rest: list[int] = []
    for r in range(span):
        run = [int(i) for i in order[starts[r] : starts[r + 1]]]
        if not run:
            continue
        size = int(sizes[run[0]])
        k = None
        if max_tokens and size:
            k = max_tokens // size
        if max_sentences:
            k = max_sentences if k is None else min(k, max_sentences)
        if k is not None and multiple > 1 and k >= multiple:
            k = k // multiple * multiple
        k = max(len(run) if k is None else k, 1)
        full = len(run) // k * k
        for b in range(0, full, k):
            out += run[b : b + k]
            ends.append(len(out))
            real.append(k * size)
            padded.append(k * size)
        rest += run[full:]
    rs = np.array([int(sizes[i]) for i in rest], dtype=np.int64)
    cuts = budget_ends_reference(rs, max_tokens, max_sentences, multiple)
    leave = [True] * len(ends)
    start = 0
    for e in (int(c) for c in cuts):
        batch = rest[start:e]
        vals = [int(sizes[i]) for i in batch]
        count, longest, total = len(batch), max(vals), sum(vals)
        step = multiple if count >= multiple else 1
        full = (not max_tokens and not max_sentences) or bool(
            (max_tokens and (count + step) * longest > max_tokens)
            or (max_sentences and count + step > max_sentences)
        )
        good = full and count * longest - total <= target * count * longest
        out += batch
        ends.append(len(out))
        real.append(total)
        padded.append(count * longest)
        leave.append(bool(final or any(bool(late[i]) for i in batch) or good))
        start = e
    as64 = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
    return as64(out), as64(ends), as64(real), as64(padded), np.array(leave, dtype=np.bool_)
