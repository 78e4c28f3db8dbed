"""Compiled loops of the out-of-core shuffle, each with a plain-Python reference beside it.

Each kernel is a thin call into the C++ extension ``padless._core`` (``csrc/shuffle.hpp``,
``csrc/shuffle.cpp``), which releases the GIL around its loop, so the writer thread keeps the disk
busy while a kernel runs.

Random numbers come from the splitmix64 counter (constants and the plain-Python twin in
:mod:`padless._splitmix`) with Lemire's exact bounded draw, kept in a local variable while a
kernel runs. A ``state`` argument is a one-element ``uint64`` array that the kernel loads and
stores back, so one stream can continue across calls. The ``*_reference`` twins use
:class:`padless._splitmix.SplitMix`; the tests prove they agree byte for byte.

Layout conventions: a records kernel sees a buffer as words of one unsigned dtype (``uint8`` up to
``uint64``) and a record as ``width`` consecutive words; a lines kernel sees bytes plus a ``uint64``
view of the same buffer's first whole words (for an eight-bytes-at-a-time newline search) and
relies on the region it reads ending with a newline.
"""

from __future__ import annotations

import numpy as np

from .. import _core
from .._splitmix import SplitMix


def draw_below(state: np.ndarray, bound: int) -> int:
    """Return one uniform int below ``bound`` from the stream in ``state`` (advanced)."""
    return int(_core.draw_below(state, int(bound)))


def draw_below_reference(gen: SplitMix, bound: int) -> int:
    return gen.below(bound)


def shuffle_indices(m: int, state: np.ndarray, perm: np.ndarray) -> None:
    """Fill ``perm[:m]`` (int32) with a uniform permutation from the stream in ``state``.

    Same draws as the per-sub-bucket step of :func:`permute_records` and :func:`permute_lines`,
    so a sub-bucket too large for an output piece can be written item by item in the same order.
    """
    _core.shuffle_indices(int(m), state, perm)


def shuffle_indices_reference(m: int, gen: SplitMix) -> list[int]:
    perm = [0] * m
    for i in range(m):
        j = gen.below(i + 1)
        perm[i] = perm[j]
        perm[j] = i
    return perm


# --------------------------------------------------------------------------- records


def scatter_records(
    src: np.ndarray, lo: int, hi: int, width: int, num_buckets: int, key: int,
    dst: np.ndarray, dst_lo: int, starts: np.ndarray, counts: np.ndarray,
) -> None:  # fmt: skip
    """Send each record of ``src[lo:hi]`` to a uniformly random bucket, stably, into ``dst``.

    Bucket k lands in ``dst[starts[k]:starts[k+1]]`` (absolute word positions, starting at
    ``dst_lo``); ``counts[k]`` is its record count. Labels are drawn twice from the same stream
    (once to count, once to copy), so no label array is kept. O(records) time, O(buckets) memory.
    """
    _core.scatter_records(
        src, int(lo), int(hi), int(width), int(num_buckets), int(key), dst, int(dst_lo), starts,
        counts,
    )  # fmt: skip


def scatter_records_reference(
    src: np.ndarray, lo: int, hi: int, width: int, num_buckets: int, key: int,
    dst: np.ndarray, dst_lo: int, starts: np.ndarray, counts: np.ndarray,
) -> None:  # fmt: skip
    gen = SplitMix(key)
    n = (hi - lo) // width
    labels = np.array([gen.below(num_buckets) for _ in range(n)], dtype=np.int64)
    order = np.argsort(labels, kind="stable")
    rows = src[lo:hi].reshape(n, width)
    dst[dst_lo : dst_lo + n * width] = rows[order].reshape(-1)
    counts[:] = np.bincount(labels, minlength=num_buckets)
    starts[:] = dst_lo + np.concatenate([[0], np.cumsum(counts)]) * width


def count_labels(n: int, num_buckets: int, key: int | np.uint64, counts: np.ndarray) -> None:
    """Count how many of the first ``n`` labels of stream ``key`` fall in each bucket.

    With :func:`place_records`, the streaming form of :func:`scatter_records`: the counts fix
    where each bucket starts, then the records can arrive window by window.
    """
    _core.count_labels(int(n), int(num_buckets), int(key), counts)


def count_labels_reference(n: int, num_buckets: int, key: int, counts: np.ndarray) -> None:
    gen = SplitMix(key)
    labels = [gen.below(num_buckets) for _ in range(n)]
    counts[:] = np.bincount(np.array(labels, dtype=np.int64), minlength=num_buckets)


def place_records(
    src: np.ndarray, lo: int, hi: int, width: int, num_buckets: int, state: np.ndarray,
    dst: np.ndarray, fill: np.ndarray,
) -> None:  # fmt: skip
    """Copy each record of ``src[lo:hi]`` to ``dst[fill[b]]`` for its label b; advance ``fill``.

    Labels continue the stream in ``state`` (one-element uint64 array, updated), so calling it
    on consecutive windows gives the same result as one :func:`scatter_records` call.
    """
    _core.place_records(src, int(lo), int(hi), int(width), int(num_buckets), state, dst, fill)


def place_records_reference(
    src: np.ndarray, lo: int, hi: int, width: int, num_buckets: int, gen: SplitMix,
    dst: np.ndarray, fill: np.ndarray,
) -> None:  # fmt: skip
    for i in range((hi - lo) // width):
        b = gen.below(num_buckets)
        p = int(fill[b])
        dst[p : p + width] = src[lo + i * width : lo + (i + 1) * width]
        fill[b] = p + width


# --------------------------------------------------------------------------- lines


def _split_on_newline(data: bytes) -> list[bytes]:
    parts = data.split(b"\n")
    return [p + b"\n" for p in parts[:-1]]


def scatter_window_lines(
    b8: np.ndarray, b64: np.ndarray, lo: int, hi: int, num_buckets: int, state: np.ndarray,
    lengths: np.ndarray, dst: np.ndarray, dst_lo: int, bounds: np.ndarray, counts: np.ndarray,
) -> int:  # fmt: skip
    """Send each line of ``b8[lo:hi]`` to a uniformly random bucket, grouped, into ``dst``.

    Pass 1 (a chunk, into bucket groups) and pass 2 (a window, into sub-buckets) both use it:
    the labels continue the stream in ``state``, and the lines are scanned once (their lengths
    kept in ``lengths``, uint32; at most ``len(lengths)`` lines per call). Bucket k of this call
    lands in ``dst[bounds[k]:bounds[k+1]]`` (absolute, from ``dst_lo``), and ``counts[k]`` grows
    by its line count. Returns where the lines done end (``hi`` unless ``lengths`` filled up
    first).
    """
    return int(_core.scatter_window_lines(
        b8, b64, int(lo), int(hi), int(num_buckets), state, lengths, dst, int(dst_lo), bounds,
        counts,
    ))  # fmt: skip


def scatter_window_lines_reference(
    b8: np.ndarray, lo: int, hi: int, num_buckets: int, gen: SplitMix, room: int,
    dst: np.ndarray, dst_lo: int, bounds: np.ndarray, counts: np.ndarray,
) -> int:  # fmt: skip
    lines = _split_on_newline(bytes(b8[lo:hi]))[:room]
    labels = [gen.below(num_buckets) for _ in lines]
    groups = [
        [ln for ln, b in zip(lines, labels, strict=True) if b == k] for k in range(num_buckets)
    ]
    sizes = [sum(len(ln) for ln in g) for g in groups]
    joined = b"".join(b"".join(g) for g in groups)
    dst[dst_lo : dst_lo + len(joined)] = np.frombuffer(joined, np.uint8)
    bounds[:] = dst_lo + np.concatenate([[0], np.cumsum(sizes)])
    counts += np.array([len(g) for g in groups], dtype=np.int64)
    return lo + sum(len(ln) for ln in lines)


# A line in a sub-bucket's order: its start in the low 40 bits, its length in the high 24 (or
# _LONG when 16 MiB or more: the gather then finds its end itself).
_LONG = (1 << 24) - 1


def order_lines(
    b8: np.ndarray, b64: np.ndarray, bounds: np.ndarray, s: int, state: np.ndarray,
    items: np.ndarray,
) -> int:  # fmt: skip
    """Gather the lines of bucket ``s`` and put them in a uniformly random order.

    Bucket s is made of the pieces ``b8[bounds[r, s]:bounds[r, s+1]]`` for each row r (one row
    per :func:`scatter_window_lines` call), in row order. Each line goes to ``items`` (uint64) as
    its start plus its length (``start | min(length, _LONG) << 40``), then a Fisher-Yates shuffle
    (draws ``below(i + 1)`` for i = 0, 1, ...) orders them. Returns the line count.
    """
    return int(_core.order_lines(b8, b64, bounds, int(s), state, items))


def order_lines_reference(b8: np.ndarray, bounds: np.ndarray, s: int, gen: SplitMix) -> list[int]:
    items: list[int] = []
    for r in range(bounds.shape[0]):
        lo, hi = int(bounds[r, s]), int(bounds[r, s + 1])
        pos = lo
        for line in _split_on_newline(bytes(b8[lo:hi])):
            items.append(pos | min(len(line), _LONG) << 40)
            pos += len(line)
    for i in range(len(items)):
        j = gen.below(i + 1)
        items[i], items[j] = items[j], items[i]
    return items


def gather_lines(
    b8: np.ndarray, b64: np.ndarray, items: np.ndarray, i: int, m: int, dst: np.ndarray, at: int,
    limit: int,
) -> tuple[int, int]:  # fmt: skip
    """Copy the lines ``items[i]``, ``items[i+1]``, ... (from :func:`order_lines`) to ``dst[at:]``.

    Stops before the first line that would end past ``limit`` (or at ``m``); returns
    ``(next i, next at)``. Asks the CPU for the lines a few items ahead (the lines of a
    sub-bucket come from all over it).
    """
    return _core.gather_lines(b8, b64, items, int(i), int(m), dst, int(at), int(limit))


def gather_lines_reference(
    b8: np.ndarray, items: list[int], i: int, m: int, dst: np.ndarray, at: int, limit: int
) -> tuple[int, int]:
    while i < m:
        a = items[i] & ((1 << 40) - 1)
        n = int(np.flatnonzero(b8[a:] == 10)[0]) + 1
        if at + n > limit:
            break
        dst[at : at + n] = b8[a : a + n]
        at += n
        i += 1
    return i, at


def gather_records(
    src: np.ndarray, width: int, lo: int, perm: np.ndarray, i: int, m: int, dst: np.ndarray,
    at: int, limit: int,
) -> tuple[int, int]:  # fmt: skip
    """Copy records ``lo + perm[i] * width``, ... of ``src`` to ``dst[at:]`` (word positions).

    Stops before the first record that would end past ``limit`` (or at ``m``); returns
    ``(next i, next at)``.
    """
    return _core.gather_records(
        src, int(width), int(lo), perm, int(i), int(m), dst, int(at), int(limit)
    )


def gather_records_reference(
    src: np.ndarray, width: int, lo: int, perm: list[int], i: int, m: int, dst: np.ndarray,
    at: int, limit: int,
) -> tuple[int, int]:  # fmt: skip
    while i < m and at + width <= limit:
        q = lo + perm[i] * width
        dst[at : at + width] = src[q : q + width]
        at += width
        i += 1
    return i, at
