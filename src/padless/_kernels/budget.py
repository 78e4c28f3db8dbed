"""Token-budget batching: fairseq's greedy rule over sizes in order, or over runs of one size."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit

from ._sat import mul_exceeds


@njit(cache=True, inline="always")
def _multiple_of(count, multiple):  # pragma: no cover
    """``count % multiple == 0``, with a mask instead of a division when ``multiple`` is a power
    of two (1, 8, 64...: the usual settings); the test is loop-invariant, so it is hoisted."""
    if multiple & (multiple - 1) == 0:
        return count & (multiple - 1) == 0
    return count % multiple == 0


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
    elif count < multiple or _multiple_of(count, multiple):
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


_CHUNK = 4096  # positions gathered before their repeat flags are set (the chunk stays in cache)


@njit(cache=True, nogil=True)
def _gather_walk(order, sizes, lo, hi, walk, gathered, seen):  # pragma: no cover
    """Positions ``lo:hi`` of a given walk: copy each index to ``walk`` and its size to
    ``gathered``, and set its bit in ``seen`` (one bit per item). Returns False at the first
    index out of range or set before, else True.

    By chunks: the chunk's reads of ``sizes`` are independent of each other (the memory system
    serves many at once), then its bits are set while its indices are in cache. Threads run
    disjoint ``lo:hi`` with a bit set each; bits two sets share are repeats across parts.
    """
    n_items = sizes.shape[0]
    one = np.uint64(1)
    for c0 in range(lo, hi, _CHUNK):
        c1 = min(hi, c0 + _CHUNK)
        for k in range(c0, c1):
            i = order[k]
            if i < 0 or i >= n_items:
                return False
            walk[k] = i
            gathered[k] = sizes[i]
        for k in range(c0, c1):
            i = walk[k]
            bit = one << np.uint64(i & 63)
            word = seen[i >> 6]
            if word & bit:
                return False
            seen[i >> 6] = word | bit
    return True


@njit(cache=True)
def _first_error(order, n_items):  # pragma: no cover
    """The first fault of a walk, one item at a time: ``-1 - k`` for an index out of
    ``[0, n_items)`` at position k, ``-1 - n - k`` for an index seen before at k, else 0."""
    n = order.shape[0]
    seen = np.zeros((n_items >> 6) + 1, np.uint64)
    one = np.uint64(1)
    for k in range(n):
        i = order[k]
        if i < 0 or i >= n_items:
            return -1 - k
        bit = one << np.uint64(i & 63)
        if seen[i >> 6] & bit:
            return -1 - n - k
        seen[i >> 6] |= bit
    return 0


@njit(cache=True, nogil=True)
def _narrow_into(sizes, lo, hi, out):  # pragma: no cover
    """Copy ``sizes[lo:hi]`` into ``out[lo:hi]`` (uint16, the low bits); return ``(bits, top)``:
    the OR of every value (a value outside [0, 2**k) sets a bit at k or above; a negative one,
    the sign bit) and the largest value.

    Neither is tested one value at a time, so the loop has no exit and compiles to vector
    instructions.
    """
    bits = np.int64(0)
    top = np.int64(0)
    for k in range(lo, hi):
        s = np.int64(sizes[k])
        bits |= s
        top = max(top, s)
        out[k] = s
    return bits, top


_SPLIT_MIN = 1 << 18  # positions per thread below which work is not split


def _threads(n: int) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores, n // _SPLIT_MIN))


def in_parts(n: int, work: Callable[[int, int, int], Any]) -> list[Any]:
    """``[work(lo, hi, part) for each part of range(n)]``, the parts on threads of their own.

    Up to four parts, one per core and at least :data:`_SPLIT_MIN` positions each; ``work`` is
    meant to call ``nogil`` kernels. An exception in any part is raised here, after every thread
    has ended.
    """
    parts = _threads(n)
    cuts = [n * p // parts for p in range(parts + 1)]
    results: list[Any] = [None] * parts
    errors: list[BaseException] = []

    def run(p: int) -> None:
        try:
            results[p] = work(cuts[p], cuts[p + 1], p)
        except BaseException as exc:  # re-raised below, in the calling thread
            errors.append(exc)

    helpers = [threading.Thread(target=run, args=(p,), daemon=True) for p in range(1, parts)]
    for t in helpers:
        t.start()
    try:
        run(0)
    finally:
        for t in helpers:
            t.join()
    if errors:
        raise errors[0]
    return results


def narrow_sizes(sizes: np.ndarray) -> tuple[np.ndarray, int, int]:
    """``(narrowed, bits, top)``: ``sizes`` in uint16, or uint32, when they are non-negative and
    fit (else as they are), the OR of all of them and the largest (0, 0 when empty).

    One pass, on up to four threads. A random gather from 2-byte sizes touches a quarter of the
    memory that 8-byte ones do, so much more of it stays in cache; ``bits`` and ``top`` let a
    caller check the range of the sizes and a budget without another pass.
    """
    n = sizes.shape[0]
    if n == 0:
        return sizes, 0, 0
    if sizes.dtype.itemsize <= 2:
        return sizes, int(np.bitwise_or.reduce(sizes)), int(sizes.max())
    out = np.empty(n, np.uint16)
    parts = in_parts(n, lambda lo, hi, _: _narrow_into(sizes, lo, hi, out))
    bits = int(np.bitwise_or.reduce([int(b) for b, _ in parts]))
    top = max(int(t) for _, t in parts)
    if 0 <= bits < 1 << 16:
        return out, bits, top
    if sizes.dtype.itemsize > 4 and 0 <= bits < 1 << 32:
        return sizes.astype(np.uint32), bits, top
    return sizes, bits, top


def budget_order(
    order: np.ndarray,
    sizes: np.ndarray,
    max_tokens: int,
    max_sentences: int,
    multiple: int,
    skip_over: bool,
) -> tuple[int, np.ndarray, np.ndarray]:
    """Check a given walk, gather its sizes and run the greedy rule.

    ``order`` must hold indices into ``sizes``, each at most once. With ``skip_over``, items
    larger than ``max_tokens`` are left out of the walk. Returns ``(status, walk, ends)``:
    ``status`` is 0, or ``-1 - k`` for an index out of range at position k, or ``-1 - n - k``
    (n = len(order)) for an index seen before at position k (the first error in walk order);
    then walk and ends are empty.

    The check and gather (:func:`_gather_walk`) run on up to four threads over parts of the walk
    (a fault sends the walk to :func:`_first_error`, which names the first one); the greedy rule
    then runs over the gathered sizes in walk order.
    """
    n, n_items = order.shape[0], sizes.shape[0]
    walk = np.empty(n, np.int64)
    gathered = np.empty(n, sizes.dtype)
    seen: dict[int, np.ndarray] = {}

    def gather(lo: int, hi: int, part: int) -> bool:
        seen[part] = bits = np.zeros((n_items >> 6) + 1, np.uint64)
        return bool(_gather_walk(order, sizes, lo, hi, walk, gathered, bits))

    ok = all(in_parts(n, gather))
    for p in range(1, len(seen)):  # a bit two parts share is an index in both
        ok = ok and not np.bitwise_and(seen[0], seen[p]).any()
        np.bitwise_or(seen[0], seen[p], out=seen[0])
    if not ok:
        empty = np.zeros(0, np.int64)
        status = _first_error(order, n_items)
        if status == 0:  # pragma: no cover - the parts and the one-by-one check disagree
            raise RuntimeError("padless: the walk check found a fault it cannot place")
        return status, empty, empty
    if skip_over:
        keep = gathered <= max_tokens
        if not keep.all():
            walk, gathered = walk[keep], gathered[keep]
    return 0, walk, budget_ends(gathered, max_tokens, max_sentences, multiple)


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
