"""The two in-memory engines of the shuffle: compiled (C++ kernels) and plain numpy.

An engine does the work on records already in memory (or arriving in mapped windows); the driver
(``_passes``) does the files. Both engines offer the pass-1 step over a byte buffer:

* ``scatter``: send each record (or line) of a region to a uniformly random bucket, grouping the
  buckets contiguously in a second buffer (pass 1 of the two-pass shuffle).

For pass 2 (and for an input that fits in memory whole) they differ:

* numpy (``permute``): the region is read into one buffer and permuted into the other through
  index arrays (about 10 bytes per record, 64 per line), piece by piece;
* compiled (``permute_stream``): records or lines arrive in windows of the file (mapped, so they
  are never copied whole) and go straight to a uniformly random cache-sized sub-bucket of the one
  big buffer; then each sub-bucket gets a Fisher-Yates order, written into small output pieces
  that the writer thread writes while the next ones are filled. Together a uniform permutation,
  with about the region's size in memory (plus two pieces and one window), not twice.

The compiled engine runs always (``choose_engine``): its kernels live in the extension module
``padless._core``, which costs a few hundred KiB (see ``COMPILED_RESERVE``), and for every budget
it holds a larger region in memory than the numpy engine (which needs two buffers and index
arrays). The numpy engine stays as the plain, independent implementation that the tests run
beside it. Both engines are exactly uniform; for the same seed they give different (equally
valid) orders, so a run stays reproducible as long as the same engine runs.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

MiB = 1 << 20
# Bytes per sub-bucket, at least: a sub-bucket and its permutation index stay in the per-core L2
# cache. (Larger for a large region, smaller when the pieces are small: see
# ``CompiledEngine.sub_bytes``.)
SUB_BYTES = 256 * 1024
# Most sub-buckets filled at once in pass 2 (see ``CompiledEngine.sub_bytes``).
MAX_STREAMS = 64
# Bytes of output handed to the writer at a time in pass 2 (at most).
PIECE_BYTES = 16 * MiB
# Bytes of a file mapped at a time when its records stream into their sub-buckets (at most).
WINDOW_BYTES = 16 * MiB
# Largest pass-1 read.
MAX_CHUNK = 64 * MiB
# Fixed memory of a compiled-engine run beyond its budget split, taken out of the budget: the
# extension module (0.3 MiB resident once loaded), the writer thread, the run's Python objects,
# the page tables of mapped windows. Measured on Linux x86-64 (the peak of the call above its
# entry, with no reserve, against the budget: 2M to 256M, records and lines, in memory and
# through buckets): at most 1.7 MiB over, at the smallest budgets; the split's own slack absorbs
# it from 16M up. (numba's runtime and kernels took 175 MiB, and numba needed 384M budgets.)
COMPILED_RESERVE = 2 * MiB
# Scratch of the numpy engine per record / per line (labels, order, gather indices).
NUMPY_AUX_PER_RECORD = 10
NUMPY_AUX_PER_LINE = 64
# Fixed memory of a numpy-engine run (the writer thread, Python objects), with margin.
NUMPY_FIXED = 4 * MiB

Segment = tuple[np.ndarray, np.ndarray]  # (byte starts, K + 1, absolute in dst), (counts, K)
Piece = tuple[np.ndarray, int, int]  # (buffer, lo, hi): bytes of the final order, ready to write
# Where pass 2 finds the items of a region, in order (see ``CompiledEngine.permute_stream``):
# ("map", array, lo, hi): whole items in array[lo:hi] (a mapped window of the file, usually);
# ("read", length, add_newline, reader): one item that reader(buffer, at) copies to buffer[at:]
# (a line longer than a window, or the last line of a file without its newline: add_newline).
Source = tuple[Any, ...]


ENGINES = ("compiled", "numpy")


def choose_engine(budget: int, size: int) -> str:
    """Return the engine for a budget and an input size: ``"compiled"``, whatever they are.

    The compiled engine serves every input and budget: for the same budget it holds about two
    and a half times the bytes the numpy engine holds in memory (one buffer, no index arrays),
    with a fixed cost of 2 MiB (``COMPILED_RESERVE``) against numpy's 4 MiB (``NUMPY_FIXED``),
    and it is the faster one. (numba's 175 MiB and its start-up time, which kept budgets below
    384M and inputs below 64M on numpy, are gone.)
    """
    return "compiled"


def engine_name(name: str) -> str:
    """Return the engine called ``name``: ``"compiled"`` or ``"numpy"``."""
    if name not in ENGINES:
        hint = " (the compiled engine's former name: it is now 'compiled')" * (name == "numba")
        raise ValueError(
            f"engine must be one of {', '.join(map(repr, ENGINES))}, got {name!r}{hint}"
        )
    return name


def make_engine(name: str, record_size: int | None, budget: int) -> Engine:
    """Build the engine called ``name`` for records of ``record_size`` bytes (None: lines)."""
    if engine_name(name) == "compiled":
        return CompiledEngine(record_size, budget)
    return NumpyEngine(record_size, budget)


def _round_down(value: int, multiple: int) -> int:
    return value - value % multiple


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


class Engine:
    """What the driver needs from an engine; see the module docstring."""

    name = "engine"
    # True when ``permute_stream`` exists: items arrive from the file window by window.
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

    def buffers(self, size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(X, Y)``: X takes pass-1 reads, Y the scattered halves (untouched pages).

        ``size``: the bytes of an input shuffled whole in memory (the buffers need not be larger);
        None: buffers for the bucket passes.
        """
        n = self._alloc(size)
        return np.empty(n, np.uint8), np.empty(n, np.uint8)

    def _alloc(self, size: int | None) -> int:
        if size is None:
            return self.alloc
        return min(self.alloc, _round_down(size + 32, 8) + 8)

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


# --------------------------------------------------------------------------- compiled


def _word_dtype(record_size: int) -> np.dtype:
    for size in (8, 4, 2):
        if record_size % size == 0:
            return np.dtype(f"u{size}")
    return np.dtype(np.uint8)


def _words(array: np.ndarray) -> np.ndarray:
    """The first ``len(array) // 8`` eight-byte words of a byte array (for the newline search)."""
    return array[: len(array) & ~7].view(np.uint64)


class CompiledEngine(Engine):
    """C++ kernels; memory: one buffer, two output pieces and one mapped window.

    Budget split (after ``COMPILED_RESERVE``, the run's fixed memory): two output pieces, a third
    piece's worth for the index of one sub-bucket's lines, and one mapped window, 1/16 of the
    budget each (at most 16 MiB each); a quarter window for line lengths; 1/32 of small change
    (the interpreter's objects, the writer thread); the rest, ``cap``, for the buffer that holds a
    whole bucket (or the whole input). Pass 1 uses the same buffer: two halves of ``chunk`` bytes
    for the scatter and a third for plain reads, with a mapped window of ``chunk`` beside them
    (``chunk`` is at most the pieces and window together, so pass 1 needs no more than pass 2).
    """

    name = "compiled"
    streams = True

    def __init__(self, record_size: int | None, budget: int) -> None:
        # A budget below four times the reserve (1M-8M) keeps three quarters for the split: its
        # fixed costs then pass it by 1-2 MB, as the numpy engine's do (see ``shuffle_file``).
        work = max(budget - COMPILED_RESERVE, budget * 3 // 4)
        self.piece = _round_down(_clamp(work // 16, 16 * 1024, PIECE_BYTES), 4096)
        self.window = _round_down(
            _clamp(work // 16, mmap.ALLOCATIONGRANULARITY, WINDOW_BYTES),
            mmap.ALLOCATIONGRANULARITY,
        )
        # Two pieces, one piece for the index of a sub-bucket, one window with its line lengths
        # (a quarter window), small change.
        cap = work - 3 * self.piece - self.window - self.window // 4 - work // 32 - 64
        chunk = min(cap // 3, 2 * self.piece + self.window)
        super().__init__(record_size, cap, chunk)
        self.alloc = _round_down(max(self.cap, 3 * self.chunk) + 24, 8) + 8
        from . import _kernels

        self.k = _kernels
        self.lengths: np.ndarray | None = None
        if record_size is not None:
            self.word = _word_dtype(record_size)
            self.width = record_size // self.word.itemsize

    def sub_bytes(self, nbytes: int) -> int:
        """Bytes per sub-bucket for a region of ``nbytes``.

        ``SUB_BYTES`` (cache-sized), or larger so that there are at most ``MAX_STREAMS``
        sub-buckets (placing items into thousands of sub-buckets at once thrashes the TLB and the
        caches), but at most an eighth of a piece, which bounds the index of a sub-bucket's lines
        (8 bytes a line, one-byte lines at worst) by a piece.
        """
        wanted = max(SUB_BYTES, -(-nbytes // MAX_STREAMS))
        return max(1, min(wanted, self.piece // 8))

    def buffers(self, size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """One allocation: X is its third part (pass-1 reads), Y all of it (the big buffer)."""
        big = np.empty(self._alloc(size), np.uint8)
        return big[2 * self.chunk :], big

    def piece_buffers(self) -> list[np.ndarray]:
        """The two output pieces (allocated on first use of pass 2)."""
        return [np.empty(self.piece + 8, np.uint8) for _ in range(2)]

    def scatter(
        self, src: np.ndarray, lo: int, hi: int, dst: np.ndarray, dst_lo: int, num_buckets: int,
        seed: np.random.SeedSequence,
    ) -> list[Segment]:  # fmt: skip
        key = seed.generate_state(1, np.uint64)[0]
        if self.lines:
            # One scan of the lines (their lengths kept for the copy); a call stops early when
            # the lengths fill up (very short lines), so a chunk may give several segments.
            state = np.array([key], np.uint64)
            lengths = self._lengths()
            words = _words(src)
            segments: list[Segment] = []
            while lo < hi:
                starts = np.empty(num_buckets + 1, np.int64)
                counts = np.zeros(num_buckets, np.int64)
                done = int(self.k.scatter_window_lines(
                    src, words, lo, hi, num_buckets, state, lengths, dst, dst_lo, starts, counts
                ))  # fmt: skip
                segments.append((starts, counts))
                dst_lo += done - lo
                lo = done
            return segments
        starts = np.empty(num_buckets + 1, np.int64)
        counts = np.empty(num_buckets, np.int64)
        w = self.word.itemsize
        self.k.scatter_records(
            src.view(self.word), lo // w, hi // w, self.width, num_buckets, key,
            dst.view(self.word), dst_lo // w, starts, counts,
        )  # fmt: skip
        starts *= w
        return [(starts, counts)]

    def _lengths(self) -> np.ndarray:
        """Room for the lengths of the lines of one scan (a sixteenth of a window: 4 bytes each)."""
        if self.lengths is None:
            self.lengths = np.empty(max(1, self.window // 16), np.uint32)
        return self.lengths

    def permute_stream(
        self, sources: Iterable[Source], nbytes: int, buf: np.ndarray, pieces: list[np.ndarray],
        seed: np.random.SeedSequence, before_output: Callable[[int], None],
        reuse: Callable[[np.ndarray], None], progress: Callable[[int], None],
    ) -> Iterator[Piece]:  # fmt: skip
        """Permute the ``nbytes`` of items that ``sources`` delivers, yielding output pieces.

        Each item goes to a uniformly random sub-bucket of ``buf``: lines window by window (each
        window's lines grouped by sub-bucket where the window lands, so a sub-bucket is a series
        of fragments), records straight to their place (the sub-bucket sizes follow from the
        labels alone). ``before_output(count)`` then runs with the number of items, and each
        sub-bucket in turn is put in a uniformly random order and copied into the output pieces
        (``reuse(piece)`` first waits until the writer is done with a piece); an item larger than
        a piece is yielded straight from ``buf``. ``progress(n)`` is told the bytes placed.
        """
        scatter_key, order_key = seed.generate_state(2, np.uint64)
        num_sub = max(1, -(-nbytes // self.sub_bytes(nbytes)))
        counts = np.zeros(num_sub, np.int64)
        if self.lines:
            bounds = self._scatter_lines(sources, num_sub, scatter_key, buf, counts, progress)
            before_output(int(counts.sum()))
            yield from self._lines_out(buf, bounds, counts, order_key, pieces, reuse)
        else:
            starts = self._place_records(sources, nbytes, num_sub, scatter_key, buf, counts,
                                         progress)  # fmt: skip
            before_output(int(counts.sum()))
            yield from self._records_out(buf, starts, counts, order_key, pieces, reuse)

    def _scatter_lines(
        self, sources: Iterable[Source], num_sub: int, key: np.uint64, buf: np.ndarray,
        counts: np.ndarray, progress: Callable[[int], None],
    ) -> np.ndarray:  # fmt: skip
        """Scatter the lines of ``sources`` into ``buf``; return the bounds (one row per call)."""
        state = np.array([key], np.uint64)
        lengths = self._lengths()
        rows: list[np.ndarray] = []
        at = 0
        for source in sources:
            if source[0] == "map":
                _, array, lo, hi = source
                words = _words(array)
                while lo < hi:
                    row = np.empty(num_sub + 1, np.int64)
                    done = int(self.k.scatter_window_lines(
                        array, words, lo, hi, num_sub, state, lengths, buf, at, row, counts
                    ))  # fmt: skip
                    rows.append(row)
                    progress(done - lo)
                    at += done - lo
                    lo = done
                del array, words
            else:
                _, length, add_newline, reader = source
                b = int(self.k.draw_below(state, num_sub))
                reader(buf, at)
                if add_newline:
                    buf[at + length] = 10
                row = np.full(num_sub + 1, at, np.int64)
                row[b + 1 :] += length + add_newline
                rows.append(row)
                counts[b] += 1
                progress(length)
                at += length + add_newline
            del source  # let the window's mapping close
        return np.array(rows, np.int64).reshape(len(rows), num_sub + 1)

    def _place_records(
        self, sources: Iterable[Source], nbytes: int, num_sub: int, key: np.uint64,
        buf: np.ndarray, counts: np.ndarray, progress: Callable[[int], None],
    ) -> np.ndarray:  # fmt: skip
        """Place the records of ``sources`` in their sub-buckets of ``buf``; return the starts."""
        w = self.word.itemsize
        r = int(self.record_size or 1)
        self.k.count_labels(nbytes // r, num_sub, key, counts)
        starts = np.zeros(num_sub + 1, np.int64)
        np.cumsum(counts * self.width, out=starts[1:])  # in words
        fill = starts[:-1].copy()
        state = np.array([key], np.uint64)
        words = buf.view(self.word)
        for source in sources:
            if source[0] == "map":
                _, array, lo, hi = source
                self.k.place_records(
                    array.view(self.word), lo // w, hi // w, self.width, num_sub, state, words,
                    fill,
                )  # fmt: skip
                progress(hi - lo)
                del array
            else:
                _, length, _, reader = source
                b = int(self.k.draw_below(state, num_sub))
                reader(buf, int(fill[b]) * w)
                fill[b] += self.width
                progress(length)
            del source
        return starts

    def _lines_out(
        self, buf: np.ndarray, bounds: np.ndarray, counts: np.ndarray, key: np.uint64,
        pieces: list[np.ndarray], reuse: Callable[[np.ndarray], None],
    ) -> Iterator[Piece]:  # fmt: skip
        """Each sub-bucket's lines in a uniform order, packed into output pieces."""
        k = self.k
        state = np.array([key], np.uint64)
        items = np.empty(int(counts.max()) + 1, np.uint64)
        words = _words(buf)
        out = _Pieces(pieces, reuse)
        for s in range(len(counts)):
            m = int(k.order_lines(buf, words, bounds, s, state, items))
            i = 0
            while i < m:
                i2, at = k.gather_lines(buf, words, items, i, m, out.piece, out.at, self.piece)
                if i2 > i:
                    i, out.at = int(i2), int(at)
                elif out.at:
                    yield from out.flush()
                else:  # one line larger than a piece
                    a = int(items[i]) & ((1 << 40) - 1)
                    yield buf, a, _line_end(buf, a)
                    i += 1
        yield from out.flush()

    def _records_out(
        self, buf: np.ndarray, starts: np.ndarray, counts: np.ndarray, key: np.uint64,
        pieces: list[np.ndarray], reuse: Callable[[np.ndarray], None],
    ) -> Iterator[Piece]:  # fmt: skip
        """Each sub-bucket's records in a uniform order, packed into output pieces."""
        k = self.k
        w = self.word.itemsize
        r = int(self.record_size or 1)
        state = np.array([key], np.uint64)
        perm = np.empty(int(counts.max()) + 1, np.int32)
        words = buf.view(self.word)
        out = _Pieces(pieces, reuse)
        limit = self.piece // w
        for s in range(len(counts)):
            m = int(counts[s])
            k.shuffle_indices(m, state, perm)
            i = 0
            while i < m:
                i2, at = k.gather_records(
                    words, self.width, starts[s], perm, i, m, out.piece.view(self.word),
                    out.at // w, limit,
                )  # fmt: skip
                if i2 > i:
                    i, out.at = int(i2), int(at) * w
                elif out.at:
                    yield from out.flush()
                else:  # one record larger than a piece
                    a = int(starts[s]) * w + int(perm[i]) * r
                    yield buf, a, a + r
                    i += 1
        yield from out.flush()


def _line_end(buf: np.ndarray, a: int) -> int:
    """End (exclusive) of the line that starts at ``buf[a]`` (it ends with a newline)."""
    step = 1 << 16
    while True:
        hits = np.flatnonzero(buf[a : a + step] == 10)
        if len(hits):
            return a + int(hits[0]) + 1
        a += step


class _Pieces:
    """The output piece being filled (``piece[:at]``), taking turns between two buffers."""

    def __init__(self, pieces: list[np.ndarray], reuse: Callable[[np.ndarray], None]) -> None:
        self.pieces = pieces
        self.reuse = reuse
        self.turn = 0
        self.piece = pieces[0]
        self.at = 0
        reuse(self.piece)

    def flush(self) -> Iterator[Piece]:
        """Yield the filled part and switch to the other buffer (once the writer is done with it)."""
        if self.at:
            yield self.piece, 0, self.at
            self.turn ^= 1
            self.piece = self.pieces[self.turn]
            self.at = 0
            self.reuse(self.piece)


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
        # Measured peaks run about 1.2 times the nominal split below (numpy's temporaries, the
        # allocator's slack) plus about 5 MB of fixed costs (the writer thread, Python objects):
        # the split gets three quarters of the budget less 4 MiB. Of that, three eighths per
        # buffer, a quarter for index arrays, an eighth for temporaries of the byte gather.
        work = max(budget // 4, budget * 3 // 4 - NUMPY_FIXED)
        super().__init__(record_size, work * 3 // 8, work * 3 // 16)
        self.aux = work // 4
        self.block = max(4096, min(256 * 1024, work // 128))

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
