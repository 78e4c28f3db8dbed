"""The file side of the two-pass bucket shuffle: reading, bucket files, recursion, the writer thread.

An input that fits in the budget is shuffled in one pass: the compiled engine streams its records
(or lines) from windows of the file straight into cache-sized sub-buckets of one buffer, then
writes each sub-bucket in a uniformly random order through small output pieces; the numpy engine
reads it into one buffer and permutes it into the other.

Otherwise, pass 1 reads the source window by window; the engine sends every record to one of K
buckets chosen uniformly at random, grouping them in one half of a buffer, and the writer
thread appends each bucket's slice to its temporary file while the next window is scattered into
the other half. Pass 2 takes one bucket at a time and shuffles it in memory as above, in bucket
order, the writer thread writing the output of one piece (or bucket) while the next is prepared.
A bucket that comes out too large for memory is shuffled the same way (recursively); one that holds
a single record larger than memory (a very long line) is copied through.

The source is only ever read (``readinto``), never mapped: a file cut short while it is read then
gives an ``OSError`` naming it, where a mapped page past the new end would end the process with
SIGBUS. Bucket files (in the run's private folder) are mapped where mmap is available.

Given the bucket sizes, the split into buckets is a uniformly random partition and each bucket
gets a uniformly random order, so the output is a uniformly random permutation of the input.
"""

from __future__ import annotations

import errno
import itertools
import mmap
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ._engines import CompiledEngine, Engine, Piece, Source

# A bucket is planned at this fraction of what fits, leaving room for random fluctuation.
FILL = 0.85
# At most this many bucket files per level (more data recurses). A constant, so that the output
# does not depend on the open-files limit; ``_raise_open_files_limit`` makes room for them.
MAX_BUCKETS = 256
KICK_BYTES = 32 << 20
# Bucket files are mapped instead of copied into a buffer (Linux, macOS); the source never is.
USE_MMAP = hasattr(mmap, "MAP_SHARED") and hasattr(mmap, "PROT_READ")
_MAP_FLAGS = getattr(mmap, "MAP_SHARED", 0) | getattr(mmap, "MAP_POPULATE", 0)
_SCAN = 64 * 1024


def _write_all(fd: int, data: Any) -> None:
    """Write every byte of ``data`` to ``fd`` (``os.write`` may write less than asked)."""
    view = memoryview(data).cast("B")
    while len(view):
        written = os.write(fd, view)
        view = view[written:]


def _raise_open_files_limit(needed: int) -> None:
    """Raise the soft limit on open files to ``needed`` if it is lower (up to the hard limit)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < needed:
            target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ImportError, OSError, ValueError):  # pragma: no cover - not POSIX, or not allowed
        pass


def _ignore(_: int) -> None:
    pass


_MADV_NOHUGEPAGE = 15
_MADV_POPULATE_WRITE = 23  # Linux 5.14+


def _madvise(array: np.ndarray, advice: int) -> None:
    """``madvise(advice)`` on the whole pages of ``array`` (Linux; a speed-up only)."""
    if not sys.platform.startswith("linux") or len(array) < (1 << 20):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        page = mmap.PAGESIZE
        start = array.ctypes.data
        first = -(-start // page) * page
        length = (start + len(array) - first) // page * page
        if length > 0:
            libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(length), advice)
    except (OSError, AttributeError, ValueError):  # pragma: no cover - no libc to call
        pass


def _populate(array: np.ndarray) -> None:
    """Fault in the pages of ``array`` for writing, without touching its bytes (a speed-up only).

    ``madvise(MADV_POPULATE_WRITE)`` does what a first write to each page would, minus the write,
    so it may run while another thread fills the array. Where it is not available, nothing.
    """
    _madvise(array, _MADV_POPULATE_WRITE)


def _small_pages(array: np.ndarray) -> None:
    """Keep ``array`` (untouched yet) on ordinary pages (``MADV_NOHUGEPAGE``; Linux).

    numpy asks for transparent huge pages for large arrays; where the kernel compacts memory to
    find them (``defrag=madvise``, the default), faulting in a big buffer once other processes
    left memory fragmented stalled for 1.3-2.1 s per 550 MiB, against 0.2 s on ordinary pages,
    and the kernels ran no faster on huge pages (measured on a shared 2-vCPU VM: the ``padless
    shuffle`` command on 550 MiB of lines took 3.07 s with huge pages, 1.52 s without, medians
    of 8 rounds between GNU shuf's runs).
    """
    _madvise(array, _MADV_NOHUGEPAGE)


class WriteError(OSError):
    """A write failed in the writer thread; carries the path that could not be written."""


class Writer:
    """One background thread that performs writes in submission order.

    ``submit`` returns a ticket; ``wait(ticket)`` returns once that write and all earlier ones are
    done. A failure is kept and raised in the submitting thread at its next call; later writes are
    skipped. Data handed to ``submit`` must stay untouched until its ticket is done.
    """

    def __init__(self) -> None:
        self._items: deque[tuple[Callable[[Any], None], Any, str]] = deque()
        self._cond = threading.Condition()
        self.submitted = 0
        self._done = 0
        self._stop = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, name="padless-shuffle-writer", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                func, data, what = self._items.popleft()
            if self.error is None:
                try:
                    func(data)
                except OSError as exc:
                    code = exc.errno if exc.errno is not None else errno.EIO
                    reason = exc.strerror or str(exc)
                    self.error = WriteError(code, f"{reason} while writing {what}")
                except BaseException as exc:  # handed to the main thread
                    self.error = exc
            with self._cond:
                self._done += 1
                self._cond.notify_all()

    def check(self) -> None:
        """Raise the failure of an earlier write, if any."""
        if self.error is not None:
            raise self.error

    def submit(self, func: Callable[[Any], None], data: Any, what: str) -> int:
        """Queue ``func(data)``; ``what`` names the file for error messages."""
        self.check()
        with self._cond:
            self._items.append((func, data, what))
            self.submitted += 1
            self._cond.notify_all()
            return self.submitted

    def wait(self, ticket: int) -> None:
        """Block until write ``ticket`` (and every earlier one) is done."""
        with self._cond:
            while self._done < ticket:
                self._cond.wait()
        self.check()

    def drain(self) -> None:
        """Block until every submitted write is done."""
        self.wait(self.submitted)

    def close(self) -> None:
        """Stop the thread after the write in progress; pending writes are dropped."""
        with self._cond:
            self._stop = True
            self._items.clear()
            self._cond.notify_all()
        self._thread.join()


class Sink:
    """The output side: one target, or shards that each receive an equal share of the records.

    Targets are objects with ``write(view)`` and ``name``. ``begin(total)`` fixes the shares: shard
    i gets ``total * (i + 1) // n - total * i // n`` records. ``write`` runs in the writer thread.
    """

    def __init__(self, targets: list[Any], record_size: int | None) -> None:
        self.targets = targets
        self.record_size = record_size
        self.left: list[int] = []
        self.current = 0
        self.bytes = 0

    def begin(self, total: int) -> None:
        n = len(self.targets)
        self.left = [total * (i + 1) // n - total * i // n for i in range(n)]
        self.current = 0

    @property
    def name(self) -> str:
        return self.targets[self.current].name

    def write(self, data: np.ndarray) -> None:
        self.bytes += len(data)
        pos = 0
        end = len(data)
        last = len(self.targets) - 1
        while pos < end:
            while self.current < last and self.left[self.current] == 0:
                self.current += 1
            target = self.targets[self.current]
            if self.current == last:
                target.write(data[pos:])
                return
            need = self.left[self.current]
            if self.record_size is not None:
                take = min(end - pos, need * self.record_size)
                self.left[self.current] -= take // self.record_size
            else:
                block = data[pos : pos + _SCAN * 16]
                marks = np.flatnonzero(block == 10)
                if len(marks) < need:
                    take = len(block)
                    self.left[self.current] -= len(marks)
                else:
                    take = int(marks[need - 1]) + 1
                    self.left[self.current] = 0
            target.write(data[pos : pos + take])
            pos += take


def _last_newline(buf: np.ndarray, lo: int, hi: int) -> int:
    """Position of the last newline in ``buf[lo:hi]``, or -1."""
    b = hi
    while b > lo:
        a = max(lo, b - _SCAN)
        hits = np.flatnonzero(buf[a:b] == 10)
        if len(hits):
            return a + int(hits[-1])
        b = a
    return -1


def _first_newline(buf: np.ndarray, lo: int, hi: int) -> int:
    """Position of the first newline in ``buf[lo:hi]``, or -1."""
    a = lo
    while a < hi:
        b = min(hi, a + _SCAN)
        hits = np.flatnonzero(buf[a:b] == 10)
        if len(hits):
            return a + int(hits[0])
        a = b
    return -1


def _read_into(f: Any, buf: np.ndarray, at: int, n: int, name: str) -> None:
    """Read exactly ``n`` bytes of ``f`` into ``buf[at:at + n]``."""
    view = buf.data[at : at + n]
    while len(view):
        got = f.readinto(view)
        if not got:
            raise OSError(errno.EIO, f"{name} ended early: it changed while being shuffled")
        view = view[got:]


def _map(f: Any, base: int, hi: int, name: str) -> mmap.mmap:
    """Map bytes ``base:hi`` of ``f`` (a bucket file), refusing a file cut short meanwhile.

    Only bucket files are mapped, never the source: a page of a mapping whose file was cut
    below it raises SIGBUS on access, which ends the process. The size check narrows that to a
    bucket file cut by someone else while it is read (they live in a private folder).
    """
    now = os.fstat(f.fileno()).st_size
    if now < hi:
        raise OSError(
            errno.EIO,
            f"{name} ended early: it changed while being shuffled ({now} bytes, {hi} expected)",
        )
    return mmap.mmap(f.fileno(), hi - base, flags=_MAP_FLAGS, prot=mmap.PROT_READ, offset=base)


class Shuffler:
    """One shuffle run: the buffers, the bucket files and the random streams."""

    def __init__(
        self,
        engine: Engine,
        work_dir: str,
        seeds: np.random.SeedSequence,
        writer: Writer,
        progress: Any,
    ) -> None:
        self.engine = engine
        self.X = self.Y = np.empty(0, np.uint8)  # allocated once the path is known (``run``)
        self.work_dir = work_dir
        self.seeds = seeds
        self.writer = writer
        self.progress = progress
        self.buckets = 0
        self.depth = 0
        self.added_newline = False
        self.open_fds: set[int] = set()
        self.pending: np.ndarray | None = None  # the buffer whose output may not be written yet
        self.pieces: list[np.ndarray] | None = None  # compiled: the two output pieces
        self.tickets: dict[int, int] = {}  # id(buffer) -> last write ticket that reads it
        self.big_ticket = 0  # last write ticket that reads the big buffer Y
        self.scratch: np.ndarray | None = None  # compiled, without mmap: where windows are read
        self._streamed = 0
        self._ids = itertools.count()

    # ----------------------------------------------------------------------- helpers

    def _seed(self) -> np.random.SeedSequence:
        return self.seeds.spawn(1)[0]

    def close_files(self) -> None:
        """Close every bucket file still open (call only once the writer has stopped)."""
        for fd in list(self.open_fds):
            try:
                os.close(fd)
            except OSError:
                pass
            self.open_fds.discard(fd)

    def _emit(self, pieces: Iterable[Piece], sink: Sink) -> None:
        """Hand each piece to the writer; remember which buffer still holds pending output."""
        for buf, a, b in pieces:
            ticket = self.writer.submit(sink.write, buf[a:b], sink.name)
            self.pending = buf
            self.tickets[id(buf)] = ticket
            if buf is self.Y:
                self.big_ticket = ticket
            self.progress.update(b - a)

    def _num_buckets(self, size: int, count: int) -> int:
        per_bucket = max(1.0, self.engine.bucket_bytes(size, count) * FILL)
        return int(min(MAX_BUCKETS, max(2, np.ceil(size / per_bucket))))

    def _estimate_count(self, path: str, size: int) -> int:
        r = self.engine.record_size
        if r is not None:
            return size // r
        probe = min(size, 1 << 20, self.engine.cap)
        with open(path, "rb", buffering=0) as f:
            data = f.read(probe)
        found = data.count(b"\n")
        return max(1, int(np.ceil(size * found / probe)))

    # ----------------------------------------------------------------------- the run

    def run(self, path: str, size: int, sink: Sink) -> int:
        """Shuffle the file ``path`` (``size`` bytes) into ``sink``; return the record count."""
        if size == 0:
            sink.begin(0)
            return 0
        engine = self.engine
        if isinstance(engine, CompiledEngine):
            if engine.fits(size + 1, 0):  # one byte for a newline that may be added
                self.X, self.Y = engine.buffers(size)
                _small_pages(self.Y)
                return self._permute_file(path, size, sink, top=True)
            self.X, self.Y = engine.buffers()
            _small_pages(self.Y)
            r = engine.record_size
            return self._buckets(path, size, size // r if r else 0, sink, depth=0)
        estimate = self._estimate_count(path, size)
        if engine.fits(size + 1, estimate):
            self.X, self.Y = engine.buffers(size)
            done = self._whole(path, size, sink)
            if done is not None:
                return done
        self.X = self.Y = np.empty(0, np.uint8)  # drop the small buffers first
        self.X, self.Y = engine.buffers()
        return self._buckets(path, size, estimate, sink, depth=0)

    def _whole(self, path: str, size: int, sink: Sink) -> int | None:
        """numpy engine: read the whole input into X, permute it into Y (None: it did not fit)."""
        engine, X = self.engine, self.X
        with open(path, "rb", buffering=0) as f:
            _read_into(f, X, 0, size, path)
        end = size
        if engine.lines and X[end - 1] != 10:
            X[end] = 10
            end += 1
            self.added_newline = True
        count = (
            engine.count_lines(X, 0, end) if engine.lines else end // int(engine.record_size or 1)
        )
        if not engine.fits(end, count):
            return None
        self.progress.update(size)
        sink.begin(count)
        self._emit(engine.permute(X, self.Y, 0, end, count, self._seed()), sink)
        self.writer.drain()
        return count

    def _permute_file(self, path: str, size: int, sink: Sink, top: bool) -> int:
        """Compiled engine: shuffle the whole file ``path`` in memory, straight from mapped windows.

        ``top``: ``path`` is the input itself (the output's shares are set once the count is known,
        and a last line without a newline gets one); otherwise a bucket file.
        """
        engine = self.engine
        assert isinstance(engine, CompiledEngine)
        if self.pieces is None:
            self.pieces = engine.piece_buffers()
        # The big buffer may still hold output (a pass-1 half, or a giant sub-bucket) being written.
        self.writer.wait(self.big_ticket)
        if top:
            # Let the writer thread (idle until the first output) fault the buffer's pages in,
            # while this thread loads the kernels and reads the input.
            self.writer.submit(_populate, self.Y[: size + 1], "memory")
        total = 0

        def begin(count: int) -> None:
            nonlocal total
            total = count
            if top:
                sink.begin(count)

        with open(path, "rb", buffering=0) as f:
            pieces = engine.permute_stream(
                self._sources(f, size, path, top, USE_MMAP and not top), size, self.Y, self.pieces,
                self._seed(), begin, self._reuse, self.progress.update if top else _ignore,
            )  # fmt: skip
            self._emit(pieces, sink)
        return total

    def _reuse(self, piece: np.ndarray) -> None:
        """Wait until the writer is done with ``piece`` (an output piece about to be refilled)."""
        self.writer.wait(self.tickets.get(id(piece), 0))

    def _sources(self, f: Any, size: int, path: str, top: bool, mapped: bool) -> Iterator[Source]:
        """The items of the file ``f``, in order, as sources for ``CompiledEngine.permute_stream``.

        Windows of whole records or lines, mapped (``mapped``: bucket files) or read into a
        scratch buffer (the source, which others may cut); a line longer than a window, and a
        last line without a newline (``top`` only: bucket files always end with one), come as
        one ``"read"`` item each.
        """
        engine = self.engine
        window = engine.window
        r = engine.record_size
        pos = 0
        while pos < size:
            if r is not None and r > window:
                yield ("read", r, False, self._reader(f, pos, r, path))
                pos += r
                continue
            hi = min(size, pos + window)
            if r is not None:
                hi = pos + (hi - pos) // r * r
            array, lo, end, mapping = self._window(f, pos, hi, path, mapped)
            try:
                if r is not None:
                    yield ("map", array, lo, end)
                    pos = hi
                    continue
                last = _last_newline(array, lo, end)
                if last >= 0:
                    yield ("map", array, lo, last + 1)
                    pos += last + 1 - lo
                    continue
            finally:
                del array
                if mapping is not None:
                    try:
                        mapping.close()
                    except BufferError:  # pragma: no cover - a traceback still holds the array
                        pass
            # No newline in a whole window: one long line (or the unterminated last one).
            stop = self._next_newline(f, hi, size, path, mapped)
            add = stop < 0
            if add and not top:  # pragma: no cover - bucket files always end with a newline
                raise RuntimeError("internal error: a bucket file did not end with a newline")
            stop = size if add else stop + 1
            if add:
                self.added_newline = True
            yield ("read", stop - pos, add, self._reader(f, pos, stop - pos, path))
            pos = stop

    def _window(
        self, f: Any, pos: int, hi: int, path: str, mapped: bool
    ) -> tuple[np.ndarray, int, int, mmap.mmap | None]:
        """Bytes ``pos:hi`` of ``f`` as ``(array, lo, end, mapping)``: mapped, or read."""
        if mapped:
            base = pos - pos % mmap.ALLOCATIONGRANULARITY
            mapping = _map(f, base, hi, path)
            return np.frombuffer(mapping, np.uint8), pos - base, hi - base, mapping
        if self.scratch is None:
            self.scratch = np.empty(self.engine.window + 16, np.uint8)
        f.seek(pos)
        _read_into(f, self.scratch, 0, hi - pos, path)
        return self.scratch, 0, hi - pos, None

    def _next_newline(self, f: Any, pos: int, size: int, path: str, mapped: bool) -> int:
        """Position of the first newline of ``f`` at or after ``pos``, or -1."""
        window = self.engine.window
        while pos < size:
            hi = min(size, pos + window)
            array, lo, end, mapping = self._window(f, pos, hi, path, mapped)
            found = _first_newline(array, lo, end)
            del array
            if mapping is not None:
                mapping.close()
            if found >= 0:
                return pos + found - lo
            pos = hi
        return -1

    @staticmethod
    def _reader(f: Any, pos: int, length: int, path: str) -> Any:
        def read(buf: np.ndarray, at: int) -> None:
            f.seek(pos)
            _read_into(f, buf, at, length, path)

        return read

    def _buckets(self, path: str, size: int, count: int, sink: Sink, depth: int) -> int:
        """Shuffle ``path`` through bucket files into ``sink`` (depth > 0: ``path`` is a bucket)."""
        engine = self.engine
        if depth > 48:  # pragma: no cover - would need astronomically bad luck
            raise RuntimeError("bucket recursion did not converge")
        self.depth = max(self.depth, depth)
        k = self._num_buckets(size, count)
        _raise_open_files_limit(k + 64 + len(sink.targets))
        self.buckets += k
        tag = next(self._ids)
        names = [os.path.join(self.work_dir, f"bucket-{depth}-{tag}-{i}") for i in range(k)]
        fds: list[int] = []
        for name in names:
            fd = os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600
            )
            self.open_fds.add(fd)
            fds.append(fd)
        # The source is read, never mapped (see ``_map``); bucket files may be.
        sizes, counts = self._pass_one(path, size, fds, names, USE_MMAP and depth > 0)
        for fd in fds:
            os.close(fd)
            self.open_fds.discard(fd)
        if depth > 0:
            os.unlink(path)  # the parent bucket is no longer needed
        total = int(counts.sum())
        if depth == 0:
            sink.begin(total)
        for i in range(k):
            b, n, name = int(sizes[i]), int(counts[i]), names[i]
            if b == 0:
                os.unlink(name)
            elif engine.fits(b, n):
                if isinstance(engine, CompiledEngine):
                    self._permute_file(name, b, sink, top=False)
                    os.unlink(name)
                    continue
                # Read into the buffer that holds no pending output, while the writer thread
                # finishes writing the previous bucket from the other one.
                free, other = (self.Y, self.X) if self.pending is self.X else (self.X, self.Y)
                with open(name, "rb", buffering=0) as f:
                    _read_into(f, free, 0, b, name)
                os.unlink(name)
                self.writer.drain()
                self._emit(engine.permute(free, other, 0, b, n, self._seed()), sink)
            elif n == 1:
                self._copy_through(name, b, sink)
                os.unlink(name)
            else:
                self.progress.add_total(b)
                self._buckets(name, b, n, sink, depth + 1)
        self.writer.drain()
        return total

    def _copy_through(self, path: str, size: int, sink: Sink) -> None:
        """Stream one record that is larger than memory straight to the output."""
        chunk = self.engine.chunk
        with open(path, "rb", buffering=0) as f:
            for at in range(0, size, chunk):
                n = min(chunk, size - at)
                self.writer.drain()
                _read_into(f, self.X, 0, n, path)
                self.writer.submit(sink.write, self.X[:n], sink.name)
                self.progress.update(n)
        self.writer.drain()
        self.pending = None

    def _pass_one(
        self, path: str, size: int, fds: list[int], names: list[str], mapped: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """Scatter the records of ``path`` over the bucket files ``fds``; return bytes and counts.

        Each step reads a window of the file into X (``mapped``, for a bucket file: maps it, no
        copy, except the last window, read to add a missing final newline) and the engine
        scatters its whole records into one half of Y while the writer thread writes the other
        half to the bucket files.
        """
        engine, X, Y, writer = self.engine, self.X, self.Y, self.writer
        writer.drain()  # both buffers may still hold output being written
        self.pending = None
        k = len(fds)
        sizes = np.zeros(k, np.int64)
        counts = np.zeros(k, np.int64)
        chunk = engine.chunk
        room = chunk - 8 if engine.lines else chunk  # lines: keep a byte for an added newline
        step = 1 if engine.lines else int(engine.record_size or 1)
        writers = [_FdWrite(fd) for fd in fds]
        tickets = [0, 0]
        half = 0
        giant: np.random.Generator | None = None
        pos = 0
        with open(path, "rb", buffering=0) as f:
            while pos < size:
                # Step boundaries depend only on the data and the chunk size (not on whether
                # the window is mapped or read), so the output does not either.
                hi = min(size, pos + room)
                if hi < size and hi - hi % 8 - pos >= step:
                    hi -= hi % 8  # a mapped window is a whole number of 8-byte words
                window: mmap.mmap | None = None
                if mapped and hi < size and hi % 8 == 0:
                    base = pos - pos % mmap.ALLOCATIONGRANULARITY
                    window = _map(f, base, hi, path)
                    src = np.frombuffer(window, np.uint8)
                else:
                    base = pos
                    f.seek(pos)
                    _read_into(f, X, 0, hi - pos, path)
                    src = X
                lo, end = pos - base, hi - base
                if engine.lines:
                    if hi == size and window is None:
                        if src[end - 1] != 10:
                            X[end] = 10
                            end += 1
                            self.added_newline = True
                    else:
                        end = _last_newline(src, lo, end) + 1
                        if end == 0:  # one line longer than a chunk: stream it to its bucket
                            del src
                            if window is not None:
                                window.close()
                            if giant is None:
                                giant = np.random.default_rng(self._seed())
                            i = int(giant.integers(k))
                            pos = self._stream_line(f, pos, size, path, writers[i], names[i])
                            sizes[i] += self._streamed
                            counts[i] += 1
                            continue
                else:
                    end = lo + (end - lo) // step * step
                writer.wait(tickets[half])
                for starts, got in engine.scatter(src, lo, end, Y, half * chunk, k, self._seed()):
                    for i in range(k):
                        a, b = int(starts[i]), int(starts[i + 1])
                        if b > a:
                            writer.submit(writers[i], Y[a:b], names[i])
                    sizes += np.diff(starts)
                    counts += got
                tickets[half] = writer.submitted
                half ^= 1
                self.progress.update(min(end, hi - base) - lo)
                pos = base + end
                del src
                if window is not None:
                    window.close()
        writer.drain()
        return sizes, counts

    def _stream_line(
        self, f: Any, pos: int, size: int, path: str, write: _FdWrite, name: str
    ) -> int:
        """Copy the line of ``path`` (``f``) at ``pos`` to the bucket file ``name``; return its end.

        Sets ``self._streamed`` to the bytes written (one more than read if the file ended
        without a newline, which is then added).
        """
        X, writer = self.X, self.writer
        room = self.engine.chunk - 8
        writer.drain()
        f.seek(pos)
        written = 0
        while pos < size:
            n = min(room, size - pos)
            _read_into(f, X, 0, n, path)
            p = _first_newline(X, 0, n)
            take = n if p < 0 else p + 1
            writer.submit(write, X[:take], name)
            writer.drain()
            written += take
            pos += take
            self.progress.update(take)
            if p >= 0:
                self._streamed = written
                return pos
        X[0] = 10  # the file ends inside the line: close it with a newline
        writer.submit(write, X[:1], name)
        writer.drain()
        self.added_newline = True
        self._streamed = written + 1
        return pos


class _FdWrite:
    """``_write_all`` bound to one descriptor (looked up at call time, so tests can replace it)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __call__(self, data: Any) -> None:
        _write_all(self.fd, data)
