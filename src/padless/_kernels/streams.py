"""Streams: one round of token-budget batching over a buffer (exact runs first, then greedy).

:func:`budget_round` is the hot loop of ``padless.StreamBatcher`` with a ``TokenBudget``: it
sorts the buffer by length, takes out the batches of one length (no padding), cuts the rest
with fairseq's greedy rule and decides which of those batches leave now and which wait.
"""

from __future__ import annotations

import numpy as np

from .. import _core
from .budget import budget_ends_reference
from .order import counting_order_reference

_KEY_DTYPES = (np.dtype(np.int64),)
_SIZE_DTYPES = tuple(np.dtype(t) for t in (np.int64, np.int32, np.uint32, np.uint16))


def budget_round(
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
    """Plan one round over a buffer of ``n`` entries.

    1. Stable counting sort by ``keys`` (length order; oldest first among equal keys).
    2. Each run of one key gives its full batches of one length, oldest items first: they
       leave (no padding). A run of size s makes batches of what the greedy rule gives such a
       run: ``max_tokens // s`` items, at most ``max_sentences``, rounded down to a multiple
       of ``multiple`` when it holds one.
    3. The run remainders, in key order, are cut by the greedy budget rule (0 = no limit). A
       batch leaves when ``final``, when it holds a ``late`` entry, or when it is full (one more
       item of its longest size, or ``multiple`` more once it holds that many, would break a
       limit) and pads at most ``target`` of its slots (count × longest); else its entries wait.

    Returns ``(order, ends, real, padded, leave)`` over all the batches (the one-length ones
    first): entries batch after batch, batch ends into ``order``, per batch its summed sizes,
    count × longest size and whether it leaves now. O(n + span).
    """
    sizes = np.ascontiguousarray(sizes, None if sizes.dtype in _SIZE_DTYPES else np.int64)
    # keys are the 1-D lengths themselves (the sizes' dtype) or int64 ranks/composites
    kd = keys.dtype
    keys = np.ascontiguousarray(keys, None if kd in _KEY_DTYPES or kd == sizes.dtype else np.int64)
    late = np.ascontiguousarray(late, np.bool_)
    return _core.budget_round(
        keys, span, sizes, late, max_tokens, max_sentences, multiple, bool(final), float(target)
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
