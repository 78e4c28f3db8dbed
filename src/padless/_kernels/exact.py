"""Exact-length batching: runs cut into fixed-size batches, leftovers merged by a cap rule."""

from __future__ import annotations

import numpy as np
from numba import njit

from ._sat import INT64_MAX, mul_exceeds, sat, sat_add


@njit(cache=True)
def exact_split(order, starts, run_size, mode):  # pragma: no cover - compiled
    """Cut run ``r`` of ``order`` (``order[starts[r]:starts[r+1]]``) into batches of ``run_size[r]``.

    A run with ``run_size[r] == 0`` is left out. ``mode`` says what happens to a run's last,
    incomplete batch: 0 keeps it as a smaller batch, 1 or 2 moves its items to ``rest``.
    Kept items are compacted to the front of ``order`` in place (nothing moves when nothing is
    left out). Returns ``(kept, ends, rest, rest_run)``: ``order[:kept]`` holds the batches,
    ``ends`` their ends, then the left-out items in run order with the run each came from.
    O(runs + batches + items moved) time.
    """
    runs = starts.shape[0] - 1
    n_keep = 0
    n_batches = 0
    for r in range(runs):
        count = starts[r + 1] - starts[r]
        size = run_size[r]
        if count == 0 or size == 0:
            continue
        full = count // size
        n_keep += full * size
        n_batches += full
        if mode == 0 and count > full * size:
            n_keep += count - full * size
            n_batches += 1
    n_rest = order.shape[0] - n_keep
    ends = np.empty(n_batches, np.int64)
    rest = np.empty(n_rest, np.int64)
    rest_run = np.empty(n_rest, np.int64)
    k = 0
    b = 0
    q = 0
    for r in range(runs):
        lo = starts[r]
        hi = starts[r + 1]
        size = run_size[r]
        if hi == lo:
            continue
        stop = lo
        if size > 0:
            stop = hi if mode == 0 else lo + ((hi - lo) // size) * size
        if k < lo:
            for i in range(lo, stop):
                order[k + i - lo] = order[i]
        pos = k
        k += stop - lo
        while pos < k:
            pos = pos + size if size < k - pos else k  # pos + size could pass INT64_MAX
            ends[b] = pos
            b += 1
        for i in range(stop, hi):
            rest[q] = order[i]
            rest_run[q] = r
            q += 1
    return n_keep, ends, rest, rest_run


def exact_split_reference(
    order: np.ndarray, starts: np.ndarray, run_size: np.ndarray, mode: int
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    batches: list[list[int]] = []
    rest: list[int] = []
    rest_run: list[int] = []
    for r in range(len(starts) - 1):
        items = [int(i) for i in order[starts[r] : starts[r + 1]]]
        size = int(run_size[r])
        if size == 0:
            rest += items
            rest_run += [r] * len(items)
            continue
        chunks = [items[j : j + size] for j in range(0, len(items), size)]
        if chunks and len(chunks[-1]) < size and mode != 0:
            tail = chunks.pop()
            rest += tail
            rest_run += [r] * len(tail)
        batches += chunks
    flat = [i for batch in batches for i in batch]
    order[: len(flat)] = flat
    ends = np.cumsum([len(batch) for batch in batches], dtype=np.int64)
    return (
        len(flat),
        ends if len(ends) else np.zeros(0, np.int64),
        np.array(rest, dtype=np.int64),
        np.array(rest_run, dtype=np.int64),
    )


@njit(cache=True)
def capped_ends(sizes, caps):  # pragma: no cover - compiled
    """Greedy batches over items in order: a batch holds at most the cap of its longest item.

    Item ``i`` has size ``sizes[i]`` and cap ``caps[i]`` (the batch size its size allows; equal
    sizes must have equal caps). An item joins the open batch when the count stays within the
    cap of the batch's longest item, itself included; otherwise it opens the next batch.
    Returns the batch ends. O(n).
    """
    n = sizes.shape[0]
    ends = np.empty(n, np.int64)
    b = 0
    count = 0
    longest = 0
    cap = 0
    for i in range(n):
        s = sizes[i]
        new_longest = longest
        new_cap = cap
        if count == 0 or s >= longest:
            new_longest = s
            new_cap = caps[i]
        if count > 0 and count + 1 > new_cap:
            ends[b] = i
            b += 1
            count = 0
            new_longest = s
            new_cap = caps[i]
        count += 1
        longest = new_longest
        cap = new_cap
    if count > 0:
        ends[b] = n
        b += 1
    return ends[:b].copy()


def capped_ends_reference(sizes: np.ndarray, caps: np.ndarray) -> np.ndarray:
    ends: list[int] = []
    batch: list[int] = []
    for i in range(len(sizes)):
        trial = batch + [i]
        top = max(int(sizes[j]) for j in trial)
        cap = min(int(caps[j]) for j in trial if int(sizes[j]) == top)
        if batch and len(trial) > cap:
            ends.append(i)
            batch = [i]
        else:
            batch = trial
    if batch:
        ends.append(len(sizes))
    return np.array(ends, dtype=np.int64)


@njit(cache=True)
def _least_padding_dp(sizes, caps, best_count, best_pad, back):  # pragma: no cover - compiled
    """Fill the prefix tables of :func:`least_padding_ends` with exact int64 arithmetic (the
    caller makes sure no total passes ``INT64_MAX``): the best last batch ``[i, j)`` for each j,
    the earliest i on ties."""
    n = sizes.shape[0]
    csum = np.zeros(n + 1, np.int64)
    for i in range(n):
        csum[i + 1] = csum[i] + sizes[i]
    for j in range(1, n + 1):
        top = sizes[j - 1]
        lo = min(max(j - caps[j - 1], 0), j - 1)
        bc = np.int64(-1)
        bp = np.int64(0)
        bi = np.int64(j - 1)
        for i in range(lo, j):
            c = best_count[i] + 1
            pad = best_pad[i] + (j - i) * top - (csum[j] - csum[i])
            if bc < 0 or c < bc or (c == bc and pad < bp):
                bc = c
                bp = pad
                bi = i
        best_count[j] = bc
        best_pad[j] = bp
        back[j] = bi


@njit(cache=True)
def _least_padding_dp_saturating(sizes, caps, best_count, best_pad, back):  # pragma: no cover
    """:func:`_least_padding_dp` with paddings summed item by item, saturating at INT64_MAX."""
    n = sizes.shape[0]
    for j in range(1, n + 1):
        top = sizes[j - 1]
        lo = min(max(j - caps[j - 1], 0), j - 1)
        bc = np.int64(-1)
        bp = np.int64(0)
        bi = np.int64(j - 1)
        window = np.int64(0)  # padding of the batch [i, j)
        for i in range(j - 1, lo - 1, -1):  # last cuts first, so "<=" keeps the earliest tie
            window = sat_add(window, top - sizes[i])
            c = best_count[i] + 1
            pad = sat_add(best_pad[i], window)
            if bc < 0 or c < bc or (c == bc and pad <= bp):
                bc = c
                bp = pad
                bi = i
        best_count[j] = bc
        best_pad[j] = bp
        back[j] = bi


@njit(cache=True)
def least_padding_ends(sizes, caps):  # pragma: no cover - compiled
    """Batch ends over items sorted by size: fewest batches, then least padding among those.

    A batch ``[i, j)`` is allowed when ``j - i <= caps[j - 1]`` (the cap of its longest, last item)
    and pads ``(j - i) · sizes[j - 1] − Σ sizes[i:j]``. Dynamic programming over prefixes with
    (count, padding) compared lexicographically; ties keep the earliest cut. The greedy
    (:func:`capped_ends`) gives the same count but cuts wherever a batch fills, often mid-run of a
    length; this moves cuts to length changes. O(n · max cap) time, O(n) memory.

    Paddings are exact below ``INT64_MAX`` and saturate there (never wrap): when n × the largest
    size could pass it, paddings are summed item by item with saturating adds (about 2× slower).
    """
    n = sizes.shape[0]
    biggest = np.int64(0)
    for i in range(n):
        biggest = max(biggest, sizes[i])
    best_count = np.zeros(n + 1, np.int64)
    best_pad = np.zeros(n + 1, np.int64)
    back = np.zeros(n + 1, np.int64)
    if mul_exceeds(n, biggest, INT64_MAX):
        _least_padding_dp_saturating(sizes, caps, best_count, best_pad, back)
    else:
        _least_padding_dp(sizes, caps, best_count, best_pad, back)
    count = best_count[n]
    ends = np.empty(count, np.int64)
    j = n
    for b in range(count - 1, -1, -1):
        ends[b] = j
        j = back[j]
    return ends


def least_padding_ends_reference(sizes: np.ndarray, caps: np.ndarray) -> tuple[int, int]:
    """(fewest batches, least padding among them) by exhaustive search over cut sets (tiny n).

    Exact Python ints; the padding is reported as ``min(padding, INT64_MAX)`` (the kernel's rule).
    """
    n = len(sizes)
    if n == 0:
        return 0, 0
    best: tuple[int, int] | None = None
    for mask in range(1 << (n - 1)):
        cuts = [i + 1 for i in range(n - 1) if mask >> i & 1] + [n]
        start, pad, ok = 0, 0, True
        for end in cuts:
            if end - start > int(caps[end - 1]):
                ok = False
                break
            pad += sum(int(sizes[end - 1]) - int(s) for s in sizes[start:end])
            start = end
        if ok and (best is None or (len(cuts), pad) < best):
            best = (len(cuts), pad)
    return (best[0], sat(best[1])) if best is not None else (0, 0)
