"""The two in-memory engines of the shuffle: compiled (numba) and plain numpy.

An engine does the work on records already in memory; the driver (``_passes``) does the files.
Both engines offer the same two steps over a byte buffer:

* ``scatter``: send each record (or line) of a region to a uniformly random bucket, grouping the
  buckets contiguously in a second buffer (pass 1 of the two-pass shuffle);
* ``permute``: put the records of a region in uniformly random order (pass 2), yielding pieces of
  the final order as soon as they are ready so the writer thread can write them meanwhile
  (``permute_stream``, numba and fixed-size records only: the same, with the records arriving in
  mapped windows of the bucket file rather than from a buffer they were first copied into).

The numba engine splits a region into cache-sized sub-buckets (a uniform scatter, then a
Fisher-Yates permutation inside each sub-bucket; together a uniform permutation) and needs no
memory beyond the two buffers, but importing numba and loading its kernels costs about 140 MB of
resident memory, so it runs only when the budget is large enough to absorb that (see
``choose_engine``). The numpy engine needs index arrays (about 10 bytes per record, 64 per line)
and is roughly three times slower, but fits any budget. Both are exactly uniform; for the same
seed they give different (equally valid) orders, and which one runs depends only on the budget and
the input size, so a run stays reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import numpy as np

MiB = 1 << 20
# Bytes per sub-bucket: a sub-bucket and its permutation index stay in the per-core L2 cache.
SUB_BYTES = 256 * 1024
# Bytes of output handed to the writer at a time in pass 2.
PIECE_BYTES = 16 * MiB
# Largest pass-1 read.
MAX_CHUNK = 64 * MiB
# Resident memory that importing numba and loading the kernels costs (measured about 132 MB above
# ``import padless``, plus 14 MB for numpy), less the 64 MB that the memory contract grants for the
# interpreter and libraries, plus margin.
NUMBA_RESERVE = 128 * MiB
NUMBA_MIN_BUDGET = 256 * MiB
NUMBA_MIN_INPUT = 64 * MiB
# Scratch of the numpy engine per record / per line (labels, order, gather indices).
NUMPY_AUX_PER_RECORD = 10
NUMPY_AUX_PER_LINE = 64

Segment = tuple[np.ndarray, np.ndarray]  # (byte starts, K + 1, absolute in dst), (counts, K)
Piece = tuple[np.ndarray, int, int]  # (buffer, lo, hi): bytes of the final order, ready to write


def choose_engine(budget: int, size: int) -> str:
    """Return ``"numba"`` when the budget absorbs numba's fixed memory and the input is big."""
    return "numba" if budget >= NUMBA_MIN_BUDGET and size >= NUMBA_MIN_INPUT else "numpy"


def make_engine(name: str, record_size: int | None, budget: int) -> Engine:
    """Build the engine called ``name`` for records of ``record_size`` bytes (None: lines)."""
    if name == "numba":
        return NumbaEngine(record_size, budget)
    return NumpyEngine(record_size, budget)


def _round_down(value: int, multiple: int) -> int:
    return value - value % multiple


class Engine:
    """What the driver needs from an engine; see the module docstring."""

    name = "engine"
    # True when ``permute_stream`` exists: records arrive from the file window by window.
    streams = False
    window = 0

    def __init__(self, record_size: int | None, cap: int, chunk: int) -> None:
        self.record_size = record_size
        self.lines = record_size is None
        # cap: bytes one buffer may hold in pass 2; chunk: bytes read per pass-1 step (the scatter
        # fills one half of the second buffer while the other half is being written); alloc:
        # bytes allocated per buffer, with room for an added newline and the 8-byte newline scan.
        step = 8 if record_size is None else record_size
        self.cap = max(step, _round_down(cap, step))
        self.chunk = max(step, _round_down(min(chunk, MAX_CHUNK, self.cap // 2), step))
        self.alloc = _round_down(max(self.cap, 2 * self.chunk) + 16, 8) + 8

    def buffers(self) -> tuple[np.ndarray, np.ndarray]:
        """Allocate the two working buffers (their pages are touched only when used)."""
        return np.empty(self.alloc, np.uint8), np.empty(self.alloc, np.uint8)

    def fits(self, nbytes: int, count: int) -> bool:
        """Return True if a region of ``nbytes`` holding ``count`` records can be permuted here."""
        return nbytes <= self.cap

    def bucket_bytes(self, nbytes: int, count: int) -> int:
        """Largest bucket (in bytes) that fits, for data of this density."""
        return self.cap

    def count_lines(self, buf: np.ndarray, lo: int, hi: int) -> int:
        raise NotImplementedError

    def scatter(
        self, src: np.ndarray, lo: int, hi: int, dst: np.ndarray, dst_lo: int, num_buckets: int,
        seed: np.random.SeedSequence,
    ) -> list[Segment]:  # fmt: skip
        raise NotImplementedError

    def permute(
        self, buf: np.ndarray, tmp: np.ndarray, lo: int, hi: int, count: int,
        seed: np.random.SeedSequence,
    ) -> Iterator[Piece]:  # fmt: skip
        raise NotImplementedError

    def permute_stream(
        self, windows: Iterable[tuple[np.ndarray, int, int]], nbytes: int, dst: np.ndarray,
        out: np.ndarray, seed: np.random.SeedSequence, before_output: Callable[[], None],
    ) -> Iterator[Piece]:  # fmt: skip
        raise NotImplementedError


# --------------------------------------------------------------------------- numba


def _word_dtype(record_size: int) -> np.dtype:
    for size in (8, 4, 2):
        if record_size % size == 0:
            return np.dtype(f"u{size}")
    return np.dtype(np.uint8)


class NumbaEngine(Engine):
    """Compiled kernels; memory: the two buffers only."""

    name = "numba"
    # Bytes of a bucket file mapped at a time when its records stream into their sub-buckets.
    window = 16 * MiB

    def __init__(self, record_size: int | None, budget: int) -> None:
        # Chosen only when the budget exceeds the reserve by far; the fallback keeps a forced
        # engine (tests) working with small budgets.
        work = budget - NUMBA_RESERVE if budget >= 2 * NUMBA_RESERVE else budget
        # Two buffers, and 1/16 of the budget for the mapped window and the small change.
        cap = work * 15 // 32
        super().__init__(record_size, cap, cap // 2)
        from . import _kernels

        self.k = _kernels
        if record_size is not None:
            self.word = _word_dtype(record_size)
            self.width = record_size // self.word.itemsize
            self.streams = True
            self.window = max(NumbaEngine.window, 2 * record_size)

    def count_lines(self, buf: np.ndarray, lo: int, hi: int) -> int:
        return int(self.k.count_lines(buf, buf.view(np.uint64), lo, hi))

    def scatter(
        self, src: np.ndarray, lo: int, hi: int, dst: np.ndarray, dst_lo: int, num_buckets: int,
        seed: np.random.SeedSequence,
    ) -> list[Segment]:  # fmt: skip
        return [
            self._scatter(
                src, lo, hi, dst, dst_lo, num_buckets, seed.generate_state(1, np.uint64)[0]
            )
        ]

    def _scatter(
        self, src: np.ndarray, lo: int, hi: int, dst: np.ndarray, dst_lo: int, num_buckets: int,
        key: np.uint64,
    ) -> Segment:  # fmt: skip
        starts = np.empty(num_buckets + 1, np.int64)
        counts = np.empty(num_buckets, np.int64)
        if self.lines:
            self.k.scatter_lines(
                src, src.view(np.uint64), lo, hi, num_buckets, key, dst, dst_lo, starts, counts
            )
        else:
            w = self.word.itemsize
            self.k.scatter_records(
                src.view(self.word), lo // w, hi // w, self.width, num_buckets, key,
                dst.view(self.word), dst_lo // w, starts, counts,
            )  # fmt: skip
            starts *= w
        return starts, counts

    def permute(
        self, buf: np.ndarray, tmp: np.ndarray, lo: int, hi: int, count: int,
        seed: np.random.SeedSequence,
    ) -> Iterator[Piece]:  # fmt: skip
        scatter_key, permute_key = seed.generate_state(2, np.uint64)
        num_sub = max(1, -(-(hi - lo) // SUB_BYTES))
        # Uniform scatter into cache-sized sub-buckets (buf -> tmp) ...
        starts, counts = self._scatter(buf, lo, hi, tmp, lo, num_sub, scatter_key)
        # ... then a uniform permutation inside each sub-bucket (tmp -> buf), piece by piece.
        yield from self._permute_sub_buckets(tmp, buf, starts, counts, permute_key)

    def permute_stream(
        self, windows: Iterable[tuple[np.ndarray, int, int]], nbytes: int, dst: np.ndarray,
        out: np.ndarray, seed: np.random.SeedSequence, before_output: Callable[[], None],
    ) -> Iterator[Piece]:  # fmt: skip
        """Permute records that arrive in windows (``(array, lo, hi)``, whole records, in order).

        The records go straight from each window into their sub-buckets in ``dst`` (no copy of
        the whole region first), then are permuted into ``out``; ``before_output`` runs before
        ``out`` is written. Same output, for the same seed, as :meth:`permute` on the region.
        Records only.
        """
        scatter_key, permute_key = seed.generate_state(2, np.uint64)
        w = self.word.itemsize
        num_sub = max(1, -(-nbytes // SUB_BYTES))
        counts = np.empty(num_sub, np.int64)
        self.k.count_labels(nbytes // int(self.record_size or 1), num_sub, scatter_key, counts)
        starts = np.zeros(num_sub + 1, np.int64)
        np.cumsum(counts * self.width, out=starts[1:])
        fill = starts[:-1].copy()
        state = np.array([scatter_key], np.uint64)
        dst_words = dst.view(self.word)
        for src, lo, hi in windows:
            self.k.place_records(
                src.view(self.word), lo // w, hi // w, self.width, num_sub, state, dst_words, fill
            )
        before_output()
        yield from self._permute_sub_buckets(dst, out, starts * w, counts, permute_key)

    def _permute_sub_buckets(
        self, src_buf: np.ndarray, out: np.ndarray, starts: np.ndarray, counts: np.ndarray,
        key: np.uint64,
    ) -> Iterator[Piece]:  # fmt: skip
        num_sub = len(counts)
        buf, tmp = out, src_buf
        state = np.array([key], np.uint64)
        largest = int(counts.max()) if num_sub else 0
        perm = np.empty(largest + 1, np.int32)
        per_piece = max(1, PIECE_BYTES // SUB_BYTES)
        if self.lines:
            line_starts = np.empty(largest + 1, np.int64)
            tmp64 = tmp.view(np.uint64)
            for first in range(0, num_sub, per_piece):
                last = min(num_sub, first + per_piece)
                self.k.permute_lines(tmp, tmp64, buf, starts, first, last, state, line_starts, perm)
                yield buf, int(starts[first]), int(starts[last])
        else:
            w = self.word.itemsize
            word_starts = starts // w
            src, dst = tmp.view(self.word), buf.view(self.word)
            for first in range(0, num_sub, per_piece):
                last = min(num_sub, first + per_piece)
                self.k.permute_records(src, dst, self.width, word_starts, first, last, state, perm)
                yield buf, int(starts[first]), int(starts[last])


# --------------------------------------------------------------------------- numpy


def _label_dtype(num_buckets: int) -> type[np.unsignedinteger]:
    if num_buckets <= 1 << 8:
        return np.uint8
    if num_buckets <= 1 << 16:
        return np.uint16
    return np.uint32


def _record_view(buf: np.ndarray, lo: int, hi: int, record_size: int) -> np.ndarray:
    part = buf[lo:hi]
    if record_size in (1, 2, 4, 8):
        return part.view(f"u{record_size}")
    return part.view(f"V{record_size}")


class NumpyEngine(Engine):
    """Vectorised numpy; memory: the two buffers plus index arrays bounded by ``aux``."""

    name = "numpy"

    def __init__(self, record_size: int | None, budget: int) -> None:
        # Three eighths of the budget per buffer, a quarter for index arrays, an eighth for
        # temporaries of the byte gather and the interpreter's small change.
        super().__init__(record_size, budget * 3 // 8, budget * 3 // 16)
        self.aux = budget // 4
        self.block = max(4096, min(256 * 1024, budget // 128))

    def _per_item(self) -> int:
        return NUMPY_AUX_PER_LINE if self.lines else NUMPY_AUX_PER_RECORD

    def fits(self, nbytes: int, count: int) -> bool:
        return nbytes <= self.cap and count * self._per_item() <= self.aux

    def bucket_bytes(self, nbytes: int, count: int) -> int:
        if count <= 0:
            return self.cap
        per_byte = count / max(nbytes, 1)
        return int(min(self.cap, self.aux / (self._per_item() * per_byte)))

    def count_lines(self, buf: np.ndarray, lo: int, hi: int) -> int:
        total = 0
        for a in range(lo, hi, self.block * 4):
            total += int(np.count_nonzero(buf[a : min(hi, a + self.block * 4)] == 10))
        return total

    def _line_ends(self, buf: np.ndarray, lo: int, hi: int, limit: int) -> np.ndarray:
        """Exclusive ends of the first lines of ``buf[lo:hi]``: all, or at least ``limit``."""
        parts: list[np.ndarray] = []
        found = 0
        a = lo
        while a < hi and found < limit:
            b = min(hi, a + self.block)
            ends = np.flatnonzero(buf[a:b] == 10)
            ends += a + 1
            parts.append(ends)
            found += len(ends)
            a = b
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def _gather_lines(
        self, src: np.ndarray, starts: np.ndarray, lens: np.ndarray, dst: np.ndarray, at: int
    ) -> Iterator[int]:
        """Copy lines (given in output order) to ``dst[at:]`` block by block; yield progress."""
        if len(lens) == 0:
            return
        cum = np.cumsum(lens)
        base = 0
        i = 0
        n = len(lens)
        block = self.block
        while i < n:
            j = int(np.searchsorted(cum, base + block, side="right"))
            if j <= i:  # one line longer than a block: copy it directly
                j = i + 1
                a = int(starts[i])
                ln = int(lens[i])
                dst[at + base : at + base + ln] = src[a : a + ln]
            else:
                size = int(cum[j - 1]) - base
                out_first = cum[i:j] - lens[i:j] - base
                index = np.repeat(starts[i:j] - out_first, lens[i:j])
                index += np.arange(size, dtype=np.int64)
                np.take(src, index, out=dst[at + base : at + base + size])
            base = int(cum[j - 1])
            i = j
            yield at + base

    def scatter(
        self, src: np.ndarray, lo: int, hi: int, dst: np.ndarray, dst_lo: int, num_buckets: int,
        seed: np.random.SeedSequence,
    ) -> list[Segment]:  # fmt: skip
        rng = np.random.default_rng(seed)
        label_type = _label_dtype(num_buckets)
        limit = max(1, self.aux // self._per_item())
        segments: list[Segment] = []
        a = lo
        while a < hi:
            if self.lines:
                ends = self._line_ends(src, a, hi, limit)
                b = int(ends[-1])
                labels = rng.integers(0, num_buckets, size=len(ends), dtype=label_type)
                order = np.argsort(labels, kind="stable")
                starts_in = np.empty_like(ends)
                starts_in[0] = a
                starts_in[1:] = ends[:-1]
                lens = ends - starts_in
                del ends
                sizes = np.bincount(labels, weights=lens, minlength=num_buckets)
                counts = np.bincount(labels, minlength=num_buckets).astype(np.int64)
                del labels
                out_at = dst_lo + (a - lo)
                for _ in self._gather_lines(src, starts_in[order], lens[order], dst, out_at):
                    pass
                starts = out_at + np.concatenate([[0], np.cumsum(sizes.astype(np.int64))])
            else:
                r = int(self.record_size or 1)
                b = min(hi, a + limit * r)
                labels = rng.integers(0, num_buckets, size=(b - a) // r, dtype=label_type)
                order = np.argsort(labels, kind="stable")
                out_at = dst_lo + (a - lo)
                np.take(
                    _record_view(src, a, b, r),
                    order,
                    out=_record_view(dst, out_at, out_at + b - a, r),
                )
                counts = np.bincount(labels, minlength=num_buckets).astype(np.int64)
                starts = out_at + np.concatenate([[0], np.cumsum(counts)]) * r
            segments.append((starts.astype(np.int64), counts))
            a = b
        return segments

    def permute(
        self, buf: np.ndarray, tmp: np.ndarray, lo: int, hi: int, count: int,
        seed: np.random.SeedSequence,
    ) -> Iterator[Piece]:  # fmt: skip
        rng = np.random.default_rng(seed)
        if self.lines:
            ends = self._line_ends(buf, lo, hi, 1 << 62)
            perm = rng.permutation(len(ends))
            starts = np.empty_like(ends)
            if len(ends):
                starts[0] = lo
                starts[1:] = ends[:-1]
            lens = ends - starts
            del ends
            done = lo
            for end in self._gather_lines(buf, starts[perm], lens[perm], tmp, lo):
                if end - done >= PIECE_BYTES or end == hi:
                    yield tmp, done, end
                    done = end
        else:
            r = int(self.record_size or 1)
            perm = rng.permutation((hi - lo) // r)
            src = _record_view(buf, lo, hi, r)
            dst = _record_view(tmp, lo, hi, r)
            step = max(1, PIECE_BYTES // r)
            for a in range(0, len(perm), step):
                b = min(len(perm), a + step)
                np.take(src, perm[a:b], out=dst[a:b])
                yield tmp, lo + a * r, lo + b * r
