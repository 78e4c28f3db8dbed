"""``shuffle_file``: checks, temporary files, atomic replacement, and the result."""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, BinaryIO

import numpy as np

from .. import _rng
from .._check import check_bool, check_seed, positive, positive_or_none
from .._progress import Progress
from . import _engines, _passes, _safety

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)
MIN_MEMORY = 1 << 20
SPOOL_CHUNK = 8 << 20


@dataclass(frozen=True)
class ShuffleResult:
    """Report what :func:`shuffle_file` did.

    Attributes:
        seed: the seed used (drawn fresh when none was given); pass it again to reproduce.
        records: records (or lines) written.
        bytes: bytes written (one more than read when a final newline was added).
        buckets: temporary bucket files used, over all levels (0: shuffled in memory).
        seconds: wall time.
        outputs: the files written (``("-",)`` for stdout), in concatenation order.
        engine: ``"numba"`` or ``"numpy"`` (see :func:`shuffle_file`).
        depth: levels of bucket recursion below the first (0 when no bucket outgrew memory).
        stale_removed: temporary files or folders of earlier shuffles that were interrupted
            (their process gone) and that this run removed.

    >>> ShuffleResult(1, 4, 4_000_000, 2, 0.5, ("out.bin",), "numpy", 0).mb_per_s
    8.0
    """

    seed: int
    records: int
    bytes: int
    buckets: int
    seconds: float
    outputs: tuple[str, ...]
    engine: str
    depth: int
    stale_removed: tuple[str, ...] = ()

    @property
    def mb_per_s(self) -> float:
        """Return the throughput: bytes ÷ wall time, in MB/s (10^6 bytes per second)."""
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0


def parse_memory(value: Any, name: str = "memory") -> int:
    """Return a memory size in bytes from an int or a string such as ``"512M"`` or ``"1.5G"``.

    Units are binary: K, M, G, T are 2**10, 2**20, 2**30, 2**40 bytes (a trailing ``B`` or
    ``iB`` is allowed). The result must be at least 1M.

    >>> parse_memory("512M"), parse_memory("1G"), parse_memory(4 << 20)
    (536870912, 1073741824, 4194304)
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, str)):
        raise TypeError(
            f"{name} must be an int (bytes) or a string such as '512M', "
            f"got {type(value).__name__} {value!r}"
        )
    if isinstance(value, str):
        match = _SIZE.fullmatch(value)
        if match is None:
            raise ValueError(
                f"{name} must be a size such as '512M' or '1G' (K, M, G, T: powers of 1024), "
                f"got {value!r}"
            )
        nbytes = int(Fraction(match.group(1)) * _UNITS[match.group(2).lower()])
    else:
        nbytes = int(value)
    if nbytes < MIN_MEMORY:
        raise ValueError(f"{name} must be at least 1M ({MIN_MEMORY} bytes), got {value!r}")
    return nbytes


def _fresh_seed() -> int:
    entropy = np.random.SeedSequence().entropy
    value = entropy if isinstance(entropy, int) else int(np.asarray(entropy).ravel()[0])
    return int(value) & ((1 << 63) - 1)


class _FileTarget:
    """One output file, written under a temporary name in its final directory."""

    def __init__(self, final: str) -> None:
        self.final = final
        folder, base = os.path.split(final)
        self.fd = -1
        for _ in range(100):
            self.path = os.path.join(folder, _safety.output_name(base))
            try:
                self.fd = os.open(
                    self.path,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                    0o666,
                )
                break
            except FileExistsError:  # pragma: no cover - 32 random bits collided
                continue
        self.name = f"output {self.path}"
        self.written = 0
        self.kicked = 0

    def write(self, data: np.ndarray) -> None:
        _passes._write_all(self.fd, data)
        self.written += len(data)
        if self.written - self.kicked >= _passes.KICK_BYTES and hasattr(os, "posix_fadvise"):
            # Start writing these pages to disk now rather than all at the final fsync (Linux
            # starts writeback of dirty pages on DONTNEED); only a speed-up, so errors are ignored.
            try:
                os.posix_fadvise(
                    self.fd, self.kicked, self.written - self.kicked, os.POSIX_FADV_DONTNEED
                )
            except OSError:  # pragma: no cover - file systems that refuse the advice
                pass
            self.kicked = self.written

    def commit(self) -> None:
        """Flush to disk, keep an existing destination's permissions, rename into place."""
        os.fsync(self.fd)
        try:
            mode = stat.S_IMODE(os.stat(self.final).st_mode)
        except FileNotFoundError:
            mode = None
        if mode is not None and hasattr(os, "fchmod"):
            os.fchmod(self.fd, mode)
        os.close(self.fd)
        self.fd = -1
        os.replace(self.path, self.final)

    def discard(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:  # pragma: no cover
                pass
            self.fd = -1
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class _StreamTarget:
    """Standard output, or an existing device or pipe given as ``dst`` (written in place)."""

    def __init__(self, stream: BinaryIO, name: str = "standard output") -> None:
        self.stream = stream
        try:
            stream.flush()
            self.fd: int | None = stream.fileno()
        except (OSError, ValueError, AttributeError):
            self.fd = None
        self.name = name
        self.final = "-"

    def write(self, data: np.ndarray) -> None:
        if self.fd is not None:
            _passes._write_all(self.fd, data)
        else:
            self.stream.write(data.data)

    def commit(self) -> None:
        if self.fd is None:
            self.stream.flush()

    def discard(self) -> None:
        pass

    def close(self) -> None:
        self.stream.close()


def shard_paths(dst: str | os.PathLike[str], shards: int) -> list[str]:
    """Return the file names that ``shuffle_file(..., shards=n)`` writes for ``dst``.

    Shard i of n is ``dst`` followed by ``.{i:05d}-of-{n:05d}``; with one shard, ``dst`` itself.

    >>> shard_paths("train.bin", 2)
    ['train.bin.00000-of-00002', 'train.bin.00001-of-00002']
    """
    base = os.fspath(dst)
    if shards == 1:
        return [base]
    return [f"{base}.{i:05d}-of-{shards:05d}" for i in range(shards)]


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder or ".", os.O_RDONLY)
    except OSError:  # pragma: no cover - not possible on this platform
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse
        pass
    finally:
        os.close(fd)


def _spool(stream: BinaryIO, folder: str, progress: Progress) -> tuple[str, int]:
    path = os.path.join(folder, "input")
    size = 0
    with open(path, "wb", buffering=0) as out:
        while True:
            block = stream.read(SPOOL_CHUNK)
            if not block:
                break
            _passes._write_all(out.fileno(), block)
            size += len(block)
            progress.add_total(3 * len(block))
            progress.update(len(block))
    return path, size


def _make_work_dir(root: str) -> str:
    """Create the folder of bucket files in ``root`` (private to this user)."""
    for _ in range(100):
        path = os.path.join(root, _safety.folder_name())
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:  # pragma: no cover - 32 random bits collided
            continue
    raise FileExistsError(errno.EEXIST, "could not create a temporary folder", root)


def _trailing_error(size: int, record_size: int, what: str) -> ValueError:
    whole, extra = divmod(size, record_size)
    return ValueError(
        f"{what} size must be a multiple of record_size={record_size}, got {size} bytes "
        f"({whole} records and {extra} trailing bytes); nothing was written"
    )


def shuffle_file(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    record_size: int | None = None,
    lines: bool = False,
    memory: int | str = "1G",
    seed: int | None = None,
    tmp_dir: str | os.PathLike[str] | None = None,
    progress: bool = False,
    shards: int = 1,
) -> ShuffleResult:
    """Shuffle the records of a file into a new file, uniformly, within a memory budget.

    Records are either fixed-size binary records of ``record_size`` bytes, or lines
    (``lines=True``): each line is the bytes up to and including a newline (``b"\\n"``), any
    bytes included (0x00, 0xFF, ``\\r`` of CRLF are data and kept as they are). The final-newline
    rule: a last line without a newline gets one in the output (with a warning; ``bytes`` in the
    result counts it), so that it cannot run into the line placed after it.

    Every permutation of the records is equally likely. An input that fits in the budget is
    shuffled in one pass in memory; a bigger one by a two-pass bucket shuffle that sends each
    record to one of K temporary bucket files chosen uniformly at random, then shuffles each
    bucket in memory and appends it to the output (a bucket that outgrows memory is shuffled the
    same way). The same input, seed, ``memory`` and record kind give the same output, byte for
    byte.

    Safety: the output is written under a temporary name in ``dst``'s directory, flushed to disk
    (fsync) and renamed over ``dst`` only when complete, so ``dst`` is either untouched or
    complete; ``src`` is only read (``src == dst`` works). A symbolic link ``dst`` is followed
    (the file it points to is replaced); an existing device or pipe (``/dev/null``, a FIFO) is
    written in place. Bucket files live in a ``.padless-shuffle-*`` directory in ``tmp_dir``;
    they and the temporary output are removed on success, on error, on KeyboardInterrupt, and
    on SIGTERM and SIGHUP (when their handler is the default one and the call runs in the main
    thread: the process then still ends by that signal, as it would have). The temporary names
    carry the host, the boot and the process id: a later run removes those whose process is
    gone (killed by SIGKILL, say) and reports them in ``stale_removed``; never other users',
    other hosts' or live processes' files. A write failure (a full disk, say) raises ``OSError``
    naming the file that could not be written.

    Memory: the call's peak resident size above the process's size when the call starts stays
    within ``memory`` (for budgets of at least 16M; below that a few MB of fixed costs may pass
    it). That counts all the call adds: numba's runtime and its compiled kernels (about 175 MB
    when the call is the first to load them), buffers, index arrays, the mapped windows of the
    files, the writer thread. (The ``padless shuffle`` command counts the whole process:
    ``--memory`` also covers the interpreter, numpy and padless.) The numba engine works for
    inputs of at least 64M with budgets of at least 384M: an input fits when it is at most about
    ``memory`` less 270 MB, and in memory it then takes about its own size plus 50 MB, plus
    numba's. Otherwise numpy does the work, with index arrays (10 bytes a record, 64 a line):
    an input fits when it is at most about a quarter of ``memory``, and takes about 2.7 times
    its size. ``memory`` larger than the machine's memory is refused.

    Cost: in memory, one read of the input and one write of the output; through buckets, about
    two reads and two writes; then the final flush of the output to disk. On a shared, loaded
    2-vCPU VM (``benchmarks/results/shuffle.md``), with numba's kernels loaded: 550 MiB of lines
    that fit ran at 1.4-1.5 times GNU ``shuf``'s speed, 512 MiB of 16-byte records at about 0.18
    times ``cp``'s, and lines through buckets (384M) at 1.1-1.2 times shuf's. Importing numba and
    loading its cached kernels takes 0.6-0.9 s per process (the ``padless shuffle`` command, all
    of it counted, ran at 1.0-1.1 times shuf's speed on those lines; the very first call compiles
    the kernels for a few seconds, with more memory, before they are cached on disk). Temporary
    disk: about the input size in
    ``tmp_dir`` when it does not fit (twice that for a pipe or stdin, which is first copied to a
    file there). The output depends on the input, the seed, ``memory`` and the record kind;
    nothing else.

    Args:
        src: the file to shuffle, or ``"-"`` for standard input (copied to ``tmp_dir`` first).
        dst: the file to write, or ``"-"`` for standard output (then not atomic).
        record_size: bytes per record, for fixed-size binary records.
        lines: shuffle lines instead (exactly one of ``record_size`` and ``lines`` is given).
        memory: the budget: bytes as an int, or a string such as ``"512M"`` or ``"1G"``
            (see Memory above).
        seed: a non-negative int; None draws a fresh one, reported in the result.
        tmp_dir: where bucket files go; ``dst``'s directory when None (the system temporary
            directory when ``dst`` is ``"-"``).
        progress: draw a progress bar on standard error when it is a terminal.
        shards: write this many files whose concatenation is the shuffle: shard i of n is named
            ``dst`` + ``.{i:05d}-of-{n:05d}`` (see :func:`shard_paths`) and holds
            ``records * (i + 1) // n - records * i // n`` records, so shards differ by at most one.

    Returns:
        A :class:`ShuffleResult` with the seed, counts, bucket files used and wall time.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument has a wrong value, or the input's size is not a multiple of
            ``record_size`` (nothing is written then); ``memory`` is more than the machine's
            memory; ``shards`` is more than the open-files limit allows (raised first up to the
            hard limit).
        KeyboardInterrupt: Ctrl-C (or SIGTERM or SIGHUP, as above); temporaries are removed.
        OSError: reading or writing failed; ``dst`` is left as it was and temporaries removed.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> src, dst = os.path.join(folder, "in.txt"), os.path.join(folder, "out.txt")
    >>> with open(src, "w") as f:
    ...     _ = f.write("one\\ntwo\\nthree\\n")
    >>> result = shuffle_file(src, dst, lines=True, seed=7)
    >>> result.records, sorted(open(dst).read().splitlines())
    (3, ['one', 'three', 'two'])
    >>> shuffle_file(src, dst, lines=True, seed=7).seed
    7
    >>> import shutil; shutil.rmtree(folder)
    """
    started = time.perf_counter()
    record_size = positive_or_none("record_size", record_size)
    lines = check_bool("lines", lines)
    if (record_size is None) == (not lines):
        if lines:
            raise ValueError(
                f"give either record_size or lines=True, not both; got record_size={record_size}"
            )
        raise ValueError("give record_size (bytes per record) or lines=True, got neither")
    budget = parse_memory(memory)
    _safety.check_memory(budget, memory)
    seed = _fresh_seed() if seed is None else check_seed(seed)
    progress = check_bool("progress", progress)
    shards = positive("shards", shards)
    _safety.check_open_files(shards)
    for name, value in (("src", src), ("dst", dst)):
        if not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"{name} must be a path or '-', got {type(value).__name__} {value!r}")
    src_name, dst_name = os.fspath(src), os.fspath(dst)
    from_stdin, to_stdout = src_name == "-", dst_name == "-"
    if to_stdout and shards > 1:
        raise ValueError(f"shards must be 1 when dst is '-' (standard output), got {shards}")

    # Check the source before anything is written.
    stream_src = from_stdin
    size = 0
    if not from_stdin:
        info = os.stat(src_name)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "src is a directory", src_name)
        stream_src = not stat.S_ISREG(info.st_mode)  # a pipe or device: copy it first
        size = info.st_size
        if not stream_src and record_size is not None and size % record_size:
            raise _trailing_error(size, record_size, f"src {src_name!r}")
    device = False
    if to_stdout:
        out_dir = ""
        finals: list[str] = []
    else:
        out_dir = os.path.dirname(os.path.abspath(dst_name))
        if not os.path.isdir(out_dir):
            raise FileNotFoundError(errno.ENOENT, "the directory of dst does not exist", out_dir)
        # A symbolic link is followed: the file it points to is replaced, as `sort -o` does.
        finals = [os.path.realpath(p) for p in shard_paths(dst_name, shards)]
        for path in finals:
            if os.path.isdir(path):
                raise IsADirectoryError(errno.EISDIR, "dst is a directory", path)
        # An existing device or pipe (/dev/null, a FIFO) is written in place, not replaced.
        device = shards == 1 and os.path.exists(finals[0]) and not os.path.isfile(finals[0])
    if tmp_dir is None:
        tmp_root = tempfile.gettempdir() if to_stdout else out_dir
    else:
        if not isinstance(tmp_dir, (str, os.PathLike)):
            raise TypeError(f"tmp_dir must be a path or None, got {type(tmp_dir).__name__}")
        tmp_root = os.fspath(tmp_dir)
        if not os.path.isdir(tmp_root):
            raise ValueError(f"tmp_dir must be an existing directory, got {tmp_root!r}")

    # Temporary files of earlier runs that were killed (their process is gone) are removed first.
    stale = tuple(_safety.remove_stale([d for d in dict.fromkeys([out_dir, tmp_root]) if d]))
    # SIGTERM and SIGHUP clean up like Ctrl-C does, then end the process as they would have.
    with _safety.Signals() as signals:
        bar = Progress(2 * size, label="shuffle", enabled=progress)
        work_dir: str | None = None
        targets: list[Any] = []
        writer: _passes.Writer | None = None
        shuffler: _passes.Shuffler | None = None
        committed = False
        try:
            work_dir = _make_work_dir(tmp_root)
            src_path = src_name
            if stream_src:
                stdin = getattr(sys.stdin, "buffer", None)
                if from_stdin and stdin is None:
                    raise ValueError("src '-' needs a binary standard input (sys.stdin.buffer)")
                source: Any = stdin if from_stdin else open(src_name, "rb")
                try:
                    src_path, size = _spool(source, work_dir, bar)
                finally:
                    if not from_stdin:
                        source.close()
                if record_size is not None and size % record_size:
                    raise _trailing_error(
                        size, record_size, "standard input" if from_stdin else src_name
                    )
            engine = _engines.make_engine(_engines.choose_engine(budget, size), record_size, budget)
            if record_size is not None and engine.cap < 2 * record_size:
                raise ValueError(
                    f"memory={memory!r} is too small for record_size={record_size}: a buffer must "
                    f"hold at least two records; give memory of at least {-(-16 * record_size // 3)}"
                )
            if to_stdout:
                stdout = getattr(sys.stdout, "buffer", None)
                if stdout is None:
                    raise ValueError("dst '-' needs a binary standard output (sys.stdout.buffer)")
                targets = [_StreamTarget(stdout)]
            elif device:
                targets = [_StreamTarget(open(finals[0], "wb", buffering=0), finals[0])]
            else:
                for path in finals:
                    targets.append(_FileTarget(path))
            sink = _passes.Sink(targets, record_size)
            writer = _passes.Writer()
            seeds = _rng.seed_sequence(seed, 0, _rng.FILE_SHUFFLE)
            shuffler = _passes.Shuffler(engine, work_dir, seeds, writer, bar)
            records = shuffler.run(src_path, size, sink)
            writer.drain()
            signals.check()  # a signal swallowed by a C callback still stops the run here
            for target in targets:
                target.commit()
            if not to_stdout and not device:
                _fsync_dir(out_dir)
            committed = True
        except OSError as exc:
            if to_stdout or device:
                kept = f"{'standard output' if to_stdout else dst_name} may hold part of the output"
            else:
                kept = f"{dst_name!r} was left unchanged"
            code = exc.errno if exc.errno is not None else errno.EIO
            where = f": {exc.filename!r}" if exc.filename else ""
            raise type(exc)(
                code, f"{exc.strerror or exc}{where}; {kept} and temporary files were removed"
            ) from exc
        finally:
            if writer is not None:
                writer.close()
            if shuffler is not None:
                shuffler.close_files()
            bar.close()
            for target in targets:
                if not committed:
                    target.discard()
                if device:
                    target.close()
            if work_dir is not None:
                shutil.rmtree(work_dir, ignore_errors=True)
        if shuffler is None:  # pragma: no cover - the try block either sets it or raises
            raise RuntimeError("internal error: the shuffle did not run")
        if shuffler.added_newline:
            where = "standard input" if from_stdin else repr(src_name)
            warnings.warn(
                f"the last line of {where} had no newline; one was added to the output",
                UserWarning,
                stacklevel=2,
            )
        return ShuffleResult(
            seed=seed,
            records=records,
            bytes=sink.bytes,
            buckets=shuffler.buckets,
            seconds=time.perf_counter() - started,
            outputs=("-",) if to_stdout else tuple(finals),
            engine=engine.name,
            depth=shuffler.depth,
            stale_removed=stale,
        )
