"""Compiled loops of the out-of-core shuffle, each with a plain-Python reference beside it.

Importing this module imports numba (tens of MB of resident memory) but compiles nothing: each
kernel compiles on first call and is cached on disk (``cache=True``). Every kernel releases the GIL
(``nogil=True``), so the writer thread keeps the disk busy while a kernel runs.

Random numbers come from the splitmix64 counter of :mod:`padless._kernels` (constants and the
plain-Python twin in :mod:`padless._splitmix`, which does not load the planning kernels) with Lemire's exact
bounded draw, written here with the state in a local variable (``_draw``) rather than in an array,
so the compiler keeps it in a register next to the arrays being written. A ``state`` argument is a
one-element ``uint64`` array that the kernel loads and stores back, so one stream can continue
across calls. The ``*_reference`` twins use :class:`padless._splitmix.SplitMix`; the tests prove
they agree byte for byte.

Layout conventions: a records kernel sees a buffer as words of one unsigned dtype (``uint8`` up to
``uint64``) and a record as ``width`` consecutive words; a lines kernel sees bytes plus a ``uint64``
view of the same buffer (for an eight-bytes-at-a-time newline search) and relies on the region it
reads ending with a newline.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic

from .._splitmix import _GOLDEN, _MASK32, _MIX1, _MIX2, SplitMix

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


@intrinsic
def _prefetch(typingctx, array, at):  # pragma: no cover - compiled
    """Hint the CPU to load ``array[at]`` into the caches (llvm.prefetch; no effect on results)."""
    sig = types.void(array, types.intp)

    def codegen(context, builder, signature, args):
        a, i = args
        arr = context.make_array(signature.args[0])(context, builder, a)
        byte = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        address = builder.bitcast(builder.gep(arr.data, [i]), byte)
        # read, high temporal locality, data cache
        builder.call(fn, [address, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


# How far ahead a gather asks for the next items (in items).
_AHEAD = 8


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
    """Position of the first newline at or after ``pos``; one must exist before ``b8`` ends.

    ``b64`` views the first ``len(b64) * 8`` bytes of ``b8`` (it may be shorter than ``b8``, as
    for a mapped window whose length is not a multiple of 8); bytes past it are read one by one.
    """
    while pos & 7:
        if b8[pos] == 10:
            return pos
        pos += 1
    w = pos >> 3
    words = b64.shape[0]
    while w < words:
        x = b64[w] ^ _NEWLINES
        hits = (x - _LOW_BITS) & ~x & _HIGH_BITS
        if hits != 0:
            return (w << 3) + (trailing_zeros(hits) >> 3)
        w += 1
    pos = w << 3
    while b8[pos] != 10:
        pos += 1
    return pos


@njit(cache=True, inline="always")
def _shuffle_indices(rng, m, perm):  # pragma: no cover - compiled
    """Fill ``perm[:m]`` with a uniform permutation (inside-out Fisher-Yates); return the state."""
    for i in range(m):
        rng, j = _draw(rng, i + 1)
        perm[i] = perm[j]
        perm[j] = i
    return rng


@njit(cache=True, nogil=True)
def draw_below(state, bound):  # pragma: no cover - compiled
    """Return one uniform int below ``bound`` from the stream in ``state`` (advanced)."""
    rng, value = _draw(state[0], bound)
    state[0] = rng
    return value


def draw_below_reference(gen: SplitMix, bound: int) -> int:
    return gen.below(bound)


@njit(cache=True, nogil=True)
def shuffle_indices(m, state, perm):  # pragma: no cover - compiled
    """Fill ``perm[:m]`` (int32) with a uniform permutation from the stream in ``state``.

    Same draws as the per-sub-bucket step of :func:`permute_records` and :func:`permute_lines`,
    so a sub-bucket too large for an output piece can be written item by item in the same order.
    """
    state[0] = _shuffle_indices(state[0], m, perm)


def shuffle_indices_reference(m: int, gen: SplitMix) -> list[int]:
    perm = [0] * m
    for i in range(m):
        j = gen.below(i + 1)
        perm[i] = perm[j]
        perm[j] = i
    return perm


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


# --------------------------------------------------------------------------- lines


def _split_on_newline(data: bytes) -> list[bytes]:
    parts = data.split(b"\n")
    return [p + b"\n" for p in parts[:-1]]


@njit(cache=True, nogil=True)
def scatter_window_lines(
    b8, b64, lo, hi, num_buckets, state, lengths, dst, dst_lo, bounds, counts
):  # pragma: no cover - compiled
    """Send each line of ``b8[lo:hi]`` to a uniformly random bucket, grouped, into ``dst``.

    Pass 1 (a chunk, into bucket groups) and pass 2 (a window, into sub-buckets) both use it:
    the labels continue the stream in ``state``, and the lines are scanned once (their lengths
    kept in ``lengths``, uint32; at most ``len(lengths)`` lines per call). Bucket k of this call lands in ``dst[bounds[k]:bounds[k+1]]``
    (absolute, from ``dst_lo``), and ``counts[k]`` grows by its line count. Returns where the
    lines done end (``hi`` unless ``lengths`` filled up first).
    """
    room = lengths.shape[0]
    first = state[0]
    rng = first
    for k in range(num_buckets + 1):
        bounds[k] = 0
    n = 0
    pos = lo
    while pos < hi and n < room:
        end = _find_newline(b8, b64, pos) + 1
        lengths[n] = end - pos
        rng, b = _draw(rng, num_buckets)
        bounds[b + 1] += end - pos
        counts[b] += 1
        n += 1
        pos = end
    bounds[0] = dst_lo
    for k in range(num_buckets):
        bounds[k + 1] += bounds[k]
    fill = bounds[:num_buckets].copy()
    rng = first
    at = lo
    for i in range(n):
        rng, b = _draw(rng, num_buckets)
        length = lengths[i]
        _memcpy(dst, fill[b], b8, at, length)
        fill[b] += length
        at += length
    state[0] = rng
    return pos


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
_START_BITS = np.uint64(40)
_START_MASK = np.uint64((1 << 40) - 1)
_LONG = (1 << 24) - 1


@njit(cache=True, nogil=True)
def order_lines(b8, b64, bounds, s, state, items):  # pragma: no cover - compiled
    """Gather the lines of bucket ``s`` and put them in a uniformly random order.

    Bucket s is made of the pieces ``b8[bounds[r, s]:bounds[r, s+1]]`` for each row r (one row
    per :func:`scatter_window_lines` call), in row order. Each line goes to ``items`` (uint64) as
    its start plus its length (``start | min(length, _LONG) << 40``), then a Fisher-Yates shuffle
    (draws ``below(i + 1)`` for i = 0, 1, ...) orders them. Returns the line count.
    """
    m = 0
    for r in range(bounds.shape[0]):
        pos = bounds[r, s]
        hi = bounds[r, s + 1]
        while pos < hi:
            end = _find_newline(b8, b64, pos) + 1
            items[m] = np.uint64(pos) | (np.uint64(min(end - pos, _LONG)) << _START_BITS)
            m += 1
            pos = end
    rng = state[0]
    for i in range(m):
        rng, j = _draw(rng, i + 1)
        t = items[i]
        items[i] = items[j]
        items[j] = t
    state[0] = rng
    return m


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


@njit(cache=True, nogil=True)
def gather_lines(b8, b64, items, i, m, dst, at, limit):  # pragma: no cover - compiled
    """Copy the lines ``items[i]``, ``items[i+1]``, ... (from :func:`order_lines`) to ``dst[at:]``.

    Stops before the first line that would end past ``limit`` (or at ``m``); returns
    ``(next i, next at)``. Asks the CPU for the lines a few items ahead (the lines of a
    sub-bucket come from all over it).
    """
    while i < m:
        if i + _AHEAD < m:
            ahead = np.int64(items[i + _AHEAD] & _START_MASK)
            _prefetch(b8, ahead)
            _prefetch(b8, ahead + 64)
        a = np.int64(items[i] & _START_MASK)
        n = np.int64(items[i] >> _START_BITS)
        if n == _LONG:
            n = _find_newline(b8, b64, a) + 1 - a
        if at + n > limit:
            break
        _memcpy(dst, at, b8, a, n)
        at += n
        i += 1
    return i, at


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


@njit(cache=True, nogil=True)
def gather_records(src, width, lo, perm, i, m, dst, at, limit):  # pragma: no cover - compiled
    """Copy records ``lo + perm[i] * width``, ... of ``src`` to ``dst[at:]`` (word positions).

    Stops before the first record that would end past ``limit`` (or at ``m``); returns
    ``(next i, next at)``.
    """
    if width == 2:
        while i < m and at + 2 <= limit:
            if i + _AHEAD < m:
                _prefetch(src, lo + 2 * perm[i + _AHEAD])
            q = lo + 2 * perm[i]
            dst[at] = src[q]
            dst[at + 1] = src[q + 1]
            at += 2
            i += 1
    else:
        while i < m and at + width <= limit:
            if i + _AHEAD < m:
                _prefetch(src, lo + perm[i + _AHEAD] * width)
            q = lo + perm[i] * width
            for t in range(width):
                dst[at + t] = src[q + t]
            at += width
            i += 1
    return i, at


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
