"""Token-budget batching: fairseq's greedy rule over sizes in order, or over runs of one size."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _core


def budget_ends_runs(
    values: np.ndarray, starts: np.ndarray, max_tokens: int, max_sentences: int, multiple: int
) -> np.ndarray:
    """Greedy token-budget batching (fairseq's rule); batch ends.

    The open batch ``[start, cut)`` grows by a tail ``[cut, pos]``; the tail joins it whenever
    the union is small (< multiple) or a multiple of ``multiple``. When batch + tail would break
    a limit (0 = none), the batch closes and the tail opens the next one; if the tail alone
    (with the new item) breaks max_tokens, the tail without the new item closes too. Costs
    (count × longest) are compared exactly, so they never wrap around.

    Positions ``starts[r]:starts[r+1]`` all have size ``values[r]`` (a length-sorted order from a
    counting sort needs no per-position size array); an empty ``starts`` means one position per
    value, i.e. ``values`` are the sizes in order. ``max_tokens``/``max_sentences`` of 0 mean
    "no limit". Every item must fit ``max_tokens`` and ``multiple`` be at least 1: the kernel
    refuses anything else with a ValueError (an item over the budget by its position), as it
    refuses ``starts`` that do not run from 0 up, one bound per run plus one.
    """
    return _core.budget_ends_runs(values, starts, max_tokens, max_sentences, multiple)


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


_SIZE_DTYPES = tuple(np.dtype(t) for t in (np.int64, np.int32, np.uint32, np.uint16))
_NARROW_DTYPES = _SIZE_DTYPES[:3]  # narrow_sizes passes sizes wider than 2 bytes only
_ORDER_DTYPES = (np.dtype(np.int64), np.dtype(np.int32))

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
    # another dtype (uint64...) is read as int64, as numba's np.int64(value) of each
    wide = np.ascontiguousarray(sizes, None if sizes.dtype in _NARROW_DTYPES else np.int64)
    out = np.empty(n, np.uint16)
    # each part copies its low bits and returns its (OR, largest)
    parts = in_parts(n, lambda lo, hi, _: _core.narrow_into(wide, lo, hi, out))
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

    The check and gather (``_core.gather_walk``) run on up to four threads over parts of the walk:
    each part copies its indices and their sizes and sets one bit per item in a bit set of its
    own, stopping at an index out of range or seen before; a bit two parts' sets share is an
    index in both. A fault sends the walk to ``_core.walk_first_error``, which names the first
    one, one item at a time. The greedy rule then runs over the gathered sizes in walk order.
    """
    # contiguous, in a dtype the kernels take, once (not once per part)
    order = np.ascontiguousarray(order, None if order.dtype in _ORDER_DTYPES else np.int64)
    sizes = np.ascontiguousarray(sizes, None if sizes.dtype in _SIZE_DTYPES else np.int64)
    n, n_items = order.shape[0], sizes.shape[0]
    walk = np.empty(n, np.int64)
    gathered = np.empty(n, sizes.dtype)
    seen: dict[int, np.ndarray] = {}

    def gather(lo: int, hi: int, part: int) -> bool:
        seen[part] = bits = np.zeros((n_items >> 6) + 1, np.uint64)
        return bool(_core.gather_walk(order, sizes, lo, hi, walk, gathered, bits))

    ok = all(in_parts(n, gather))
    for p in range(1, len(seen)):  # a bit two parts share is an index in both
        ok = ok and not np.bitwise_and(seen[0], seen[p]).any()
        np.bitwise_or(seen[0], seen[p], out=seen[0])
    if not ok:
        empty = np.zeros(0, np.int64)
        status = int(_core.walk_first_error(order, n_items))
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
