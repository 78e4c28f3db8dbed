"""Exact-length batching: runs cut into fixed-size batches, leftovers merged by a cap rule."""

from __future__ import annotations

import numpy as np

from .. import _core
from ._sat import sat


def exact_split(
    order: np.ndarray, starts: np.ndarray, run_size: np.ndarray, mode: int
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Cut run ``r`` of ``order`` (``order[starts[r]:starts[r+1]]``) into batches of ``run_size[r]``.

    A run with ``run_size[r] == 0`` is left out. ``mode`` says what happens to a run's last,
    incomplete batch: 0 keeps it as a smaller batch, 1 or 2 moves its items to ``rest``.
    Kept items are compacted to the front of ``order`` (int64, in place; nothing moves when
    nothing is left out). Returns ``(kept, ends, rest, rest_run)``: ``order[:kept]`` holds the
    batches, ``ends`` their ends, then the left-out items in run order with the run each came
    from. O(runs + batches + items moved) time.
    """
    return _core.exact_split(order, starts, run_size, mode)


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


def capped_ends(sizes: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Greedy batches over items in order: a batch holds at most the cap of its longest item.

    Item ``i`` has size ``sizes[i]`` and cap ``caps[i]`` (the batch size its size allows; equal
    sizes must have equal caps). An item joins the open batch when the count stays within the
    cap of the batch's longest item, itself included; otherwise it opens the next batch.
    Returns the batch ends. O(n).
    """
    return _core.capped_ends(sizes, caps)


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


def least_padding_ends(sizes: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Batch ends over items sorted by size: fewest batches, then least padding among those.

    A batch ``[i, j)`` is allowed when ``j - i <= caps[j - 1]`` (the cap of its longest, last item)
    and pads ``(j - i) · sizes[j - 1] − Σ sizes[i:j]``. Dynamic programming over prefixes with
    (count, padding) compared lexicographically; ties keep the earliest cut. The greedy
    (:func:`capped_ends`) gives the same count but cuts wherever a batch fills, often mid-run of a
    length; this moves cuts to length changes. O(n · max cap) time, O(n) memory.

    Paddings are exact below ``INT64_MAX`` and saturate there (never wrap): when n × the largest
    size could pass it, paddings are summed item by item with saturating adds (about 2× slower).
    """
    return _core.least_padding_ends(sizes, caps)


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
