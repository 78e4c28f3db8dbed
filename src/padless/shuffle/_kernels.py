"""Compiled loops of the out-of-core shuffle, each with a plain-Python reference beside it.

Importing this module imports numba (tens of MB of resident memory) but compiles nothing: each
kernel compiles on first call and is cached on disk (``cache=True``). Every kernel releases the GIL
(``nogil=True``), so the writer thread keeps the disk busy while a kernel runs.

Random numbers come from the splitmix64 counter of :mod:`padless._kernels` with Lemire's exact
bounded draw, written here with the state in a local variable (``_draw``) rather than in an array,
so the compiler keeps it in a register next to the arrays being written. A ``state`` argument is a
one-element ``uint64`` array that the kernel loads and stores back, so one stream can continue
across calls. The ``*_reference`` twins use :class:`padless._kernels.SplitMix`; the tests prove
they agree byte for byte.

Layout conventions: a records kernel sees a buffer as words of one unsigned dtype (``uint8`` up to
``uint64``) and a record as ``width`` consecutive words; a lines kernel sees bytes plus a ``uint64``
view of the same buffer (for an eight-bytes-at-a-time newline search) and relies on the region it
reads ending with a newline.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic

from .._kernels.rng import _GOLDEN, _MASK32, _MIX1, _MIX2, SplitMix

_NEWLINES = np.uint64(0x0A0A0A0A0A0A0A0A)
_LOW_BITS = np.uint64(0x0101010101010101)
_HIGH_BITS = np.uint64(0x8080808080808080)


@intrinsic
def _memcpy(typingctx, dst, dst_at, src, src_at, count):  # pragma: no cover - compiled
    """Copy ``count`` bytes from ``src[src_at:]`` to ``dst[dst_at:]`` (llvm.memcpy, no checks)."""
    sig = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        d, d_at, s, s_at, n = args
        d_arr = context.make_array(signature.args[0])(context, builder, d)
        s_arr = context.make_array(signature.args[2])(context, builder, s)
        cgutils.raw_memcpy(
            builder, builder.gep(d_arr.data, [d_at]), builder.gep(s_arr.data, [s_at]), n, 1
        )
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, inline="always")
def _draw(state, bound):  # pragma: no cover - compiled
    """Return ``(state, value)``: a uniform int below ``bound`` (1 <= bound < 2**32), exactly.

    Same numbers as ``SplitMix.below`` and ``padless._kernels._below``.
    """
    b = np.uint64(bound)
    while True:
        state += _GOLDEN
        z = state
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z = z ^ (z >> np.uint64(31))
        m = (z >> np.uint64(32)) * b
        low = m & _MASK32
        if low >= b or low >= ((_MASK32 + np.uint64(1)) - b) % b:
            return state, np.int64(m >> np.uint64(32))


@njit(cache=True, inline="always")
def _find_newline(b8, b64, pos):  # pragma: no cover - compiled
    """Position of the first newline at or after ``pos``; one must exist before the buffer ends."""
    while pos & 7:
        if b8[pos] == 10:
            return pos
        pos += 1
    w = pos >> 3
    while True:
        x = b64[w] ^ _NEWLINES
        hits = (x - _LOW_BITS) & ~x & _HIGH_BITS
        if hits != 0:
            return (w << 3) + (trailing_zeros(hits) >> 3)
        w += 1


# --------------------------------------------------------------------------- records


@njit(cache=True, nogil=True)
def scatter_records(
    src, lo, hi, width, num_buckets, key, dst, dst_lo, starts, counts
):  # pragma: no cover - compiled
    """Send each record of ``src[lo:hi]`` to a uniformly random bucket, stably, into ``dst``.

    Bucket k lands in ``dst[starts[k]:starts[k+1]]`` (absolute word positions, starting at
    ``dst_lo``); ``counts[k]`` is its record count. Labels are drawn twice from the same stream
    (once to count, once to copy), so no label array is kept. O(records) time, O(buckets) memory.
    """
    n = (hi - lo) // width
    for k in range(num_buckets):
        counts[k] = 0
    state = np.uint64(key)
    for _ in range(n):
        state, b = _draw(state, num_buckets)
        counts[b] += 1
    starts[0] = dst_lo
    for k in range(num_buckets):
        starts[k + 1] = starts[k] + counts[k] * width
    fill = starts[:num_buckets].copy()
    state = np.uint64(key)
    if width == 1:
        for i in range(n):
            state, b = _draw(state, num_buckets)
            p = fill[b]
            fill[b] = p + 1
            dst[p] = src[lo + i]
    elif width == 2:
        for i in range(n):
            state, b = _draw(state, num_buckets)
            p = fill[b]
            fill[b] = p + 2
            q = lo + 2 * i
            dst[p] = src[q]
            dst[p + 1] = src[q + 1]
    else:
        for i in range(n):
            state, b = _draw(state, num_buckets)
            p = fill[b]
            fill[b] = p + width
            q = lo + i * width
            for t in range(width):
                dst[p + t] = src[q + t]


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


@njit(cache=True, nogil=True)
def count_labels(n, num_buckets, key, counts):  # pragma: no cover - compiled
    """Count how many of the first ``n`` labels of stream ``key`` fall in each bucket.

    With :func:`place_records`, the streaming form of :func:`scatter_records`: the counts fix
    where each bucket starts, then the records can arrive window by window.
    """
    for k in range(num_buckets):
        counts[k] = 0
    state = np.uint64(key)
    for _ in range(n):
        state, b = _draw(state, num_buckets)
        counts[b] += 1


def count_labels_reference(n: int, num_buckets: int, key: int, counts: np.ndarray) -> None:
    gen = SplitMix(key)
    labels = [gen.below(num_buckets) for _ in range(n)]
    counts[:] = np.bincount(np.array(labels, dtype=np.int64), minlength=num_buckets)


@njit(cache=True, nogil=True)
def place_records(src, lo, hi, width, num_buckets, state, dst, fill):  # pragma: no cover - compiled
    """Copy each record of ``src[lo:hi]`` to ``dst[fill[b]]`` for its label b; advance ``fill``.

    Labels continue the stream in ``state`` (one-element uint64 array, updated), so calling it
    on consecutive windows gives the same result as one :func:`scatter_records` call.
    """
    n = (hi - lo) // width
    rng = state[0]
    if width == 2:
        for i in range(n):
            rng, b = _draw(rng, num_buckets)
            p = fill[b]
            fill[b] = p + 2
            q = lo + 2 * i
            dst[p] = src[q]
            dst[p + 1] = src[q + 1]
    else:
        for i in range(n):
            rng, b = _draw(rng, num_buckets)
            p = fill[b]
            fill[b] = p + width
            q = lo + i * width
            for t in range(width):
                dst[p + t] = src[q + t]
    state[0] = rng


def place_records_reference(
    src: np.ndarray, lo: int, hi: int, width: int, num_buckets: int, gen: SplitMix,
    dst: np.ndarray, fill: np.ndarray,
) -> None:  # fmt: skip
    for i in range((hi - lo) // width):
        b = gen.below(num_buckets)
        p = int(fill[b])
        dst[p : p + width] = src[lo + i * width : lo + (i + 1) * width]
        fill[b] = p + width


@njit(cache=True, nogil=True)
def permute_records(
    src, dst, width, sub_starts, first, last, state, perm
):  # pragma: no cover - compiled
    """Permute the records of each sub-bucket ``first <= s < last`` of ``src`` into ``dst``.

    Sub-bucket s is ``src[sub_starts[s]:sub_starts[s+1]]`` and goes, uniformly permuted, to the same
    positions of ``dst``. ``perm`` (int32, at least the largest sub-bucket's record count) holds an
    inside-out Fisher-Yates permutation; sub-buckets are cache-sized, so the gather stays in cache.
    """
    rng = state[0]
    for s in range(first, last):
        lo = sub_starts[s]
        m = (sub_starts[s + 1] - lo) // width
        for i in range(m):
            rng, j = _draw(rng, i + 1)
            perm[i] = perm[j]
            perm[j] = i
        if width == 2:
            for i in range(m):
                p = lo + 2 * i
                q = lo + 2 * perm[i]
                dst[p] = src[q]
                dst[p + 1] = src[q + 1]
        else:
            for i in range(m):
                p = lo + i * width
                q = lo + perm[i] * width
                for t in range(width):
                    dst[p + t] = src[q + t]
    state[0] = rng


def permute_records_reference(
    src: np.ndarray, dst: np.ndarray, width: int, sub_starts: np.ndarray, first: int, last: int,
    gen: SplitMix,
) -> None:  # fmt: skip
    for s in range(first, last):
        lo = int(sub_starts[s])
        m = (int(sub_starts[s + 1]) - lo) // width
        perm = [0] * m
        for i in range(m):
            j = gen.below(i + 1)
            perm[i] = perm[j]
            perm[j] = i
        rows = src[lo : lo + m * width].reshape(m, width)
        dst[lo : lo + m * width] = rows[np.array(perm, dtype=np.int64)].reshape(-1)


# --------------------------------------------------------------------------- lines


@njit(cache=True, nogil=True)
def count_lines(b8, b64, lo, hi):  # pragma: no cover - compiled
    """Number of lines in ``b8[lo:hi]``, which ends with a newline."""
    n = 0
    pos = lo
    while pos < hi:
        pos = _find_newline(b8, b64, pos) + 1
        n += 1
    return n


def count_lines_reference(b8: np.ndarray, lo: int, hi: int) -> int:
    return int(np.count_nonzero(b8[lo:hi] == 10))


@njit(cache=True, nogil=True)
def scatter_lines(
    b8, b64, lo, hi, num_buckets, key, dst, dst_lo, starts, counts
):  # pragma: no cover - compiled
    """Send each line of ``b8[lo:hi]`` (ending with a newline) to a uniformly random bucket.

    Same contract as :func:`scatter_records`, with byte positions: bucket k is
    ``dst[starts[k]:starts[k+1]]`` and holds ``counts[k]`` lines, in input order. The newline
    search reads eight bytes at a time; lines are copied with memcpy.
    """
    sizes = np.zeros(num_buckets, np.int64)
    for k in range(num_buckets):
        counts[k] = 0
    state = np.uint64(key)
    pos = lo
    while pos < hi:
        end = _find_newline(b8, b64, pos) + 1
        state, b = _draw(state, num_buckets)
        sizes[b] += end - pos
        counts[b] += 1
        pos = end
    starts[0] = dst_lo
    for k in range(num_buckets):
        starts[k + 1] = starts[k] + sizes[k]
    fill = starts[:num_buckets].copy()
    state = np.uint64(key)
    pos = lo
    while pos < hi:
        end = _find_newline(b8, b64, pos) + 1
        state, b = _draw(state, num_buckets)
        _memcpy(dst, fill[b], b8, pos, end - pos)
        fill[b] += end - pos
        pos = end


def _split_on_newline(data: bytes) -> list[bytes]:
    parts = data.split(b"\n")
    return [p + b"\n" for p in parts[:-1]]


def scatter_lines_reference(
    b8: np.ndarray, lo: int, hi: int, num_buckets: int, key: int,
    dst: np.ndarray, dst_lo: int, starts: np.ndarray, counts: np.ndarray,
) -> None:  # fmt: skip
    gen = SplitMix(key)
    lines = _split_on_newline(bytes(b8[lo:hi]))
    labels = [gen.below(num_buckets) for _ in lines]
    out = [
        b"".join(ln for ln, b in zip(lines, labels, strict=True) if b == k)
        for k in range(num_buckets)
    ]
    joined = b"".join(out)
    dst[dst_lo : dst_lo + len(joined)] = np.frombuffer(joined, np.uint8)
    counts[:] = np.bincount(np.array(labels, dtype=np.int64), minlength=num_buckets)
    starts[:] = dst_lo + np.concatenate([[0], np.cumsum([len(o) for o in out])])


@njit(cache=True, nogil=True)
def permute_lines(
    b8, b64, dst, sub_starts, first, last, state, line_starts, perm
):  # pragma: no cover - compiled
    """Permute the lines of each sub-bucket ``first <= s < last`` of ``b8`` into ``dst``.

    Sub-bucket s is ``b8[sub_starts[s]:sub_starts[s+1]]`` and goes, its lines uniformly permuted,
    to the same byte range of ``dst``. ``line_starts`` (int64) and ``perm`` (int32) must hold one
    more than the largest sub-bucket's line count.
    """
    rng = state[0]
    for s in range(first, last):
        lo = sub_starts[s]
        hi = sub_starts[s + 1]
        m = 0
        pos = lo
        while pos < hi:
            line_starts[m] = pos
            m += 1
            pos = _find_newline(b8, b64, pos) + 1
        line_starts[m] = hi
        for i in range(m):
            rng, j = _draw(rng, i + 1)
            perm[i] = perm[j]
            perm[j] = i
        out = lo
        for i in range(m):
            a = line_starts[perm[i]]
            n = line_starts[perm[i] + 1] - a
            _memcpy(dst, out, b8, a, n)
            out += n
    state[0] = rng


def permute_lines_reference(
    b8: np.ndarray, dst: np.ndarray, sub_starts: np.ndarray, first: int, last: int, gen: SplitMix
) -> None:
    for s in range(first, last):
        lo, hi = int(sub_starts[s]), int(sub_starts[s + 1])
        lines = _split_on_newline(bytes(b8[lo:hi]))
        m = len(lines)
        perm = [0] * m
        for i in range(m):
            j = gen.below(i + 1)
            perm[i] = perm[j]
            perm[j] = i
        joined = b"".join(lines[p] for p in perm)
        dst[lo:hi] = np.frombuffer(joined, np.uint8)
