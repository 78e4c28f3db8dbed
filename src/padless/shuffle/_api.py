"""``shuffle_file`` in four stages: check, resolve, run, commit.

:func:`_check` refuses bad arguments before anything is touched; :func:`_resolve` makes what the
run needs (recording each piece in a :class:`_Held` so that it is undone whatever happens);
:func:`_run` writes only temporary files; :func:`_commit` renames the finished outputs into place.
"""

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

from ..core import _rng
from ..core._check import check_bool, check_seed, positive, positive_or_none
from ..core._output import is_device, open_in_place
from ..core._progress import Progress
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
        engine: ``"compiled"``, the C++ kernels (``"numpy"`` only where that engine is
            forced, as the tests do).
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
        self.renamed = False

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

    def finish(self) -> None:
        """Flush to disk, keep an existing destination's permissions, close (nothing renamed)."""
        try:
            self._finish()
        except OSError as exc:
            if exc.filename is not None:
                raise
            code = exc.errno if exc.errno is not None else errno.EIO
            reason = f"{exc.strerror or exc} while flushing the output to disk"
            raise type(exc)(code, reason, self.path) from exc

    def _finish(self) -> None:
        os.fsync(self.fd)
        try:
            mode = stat.S_IMODE(os.stat(self.final).st_mode)
        except FileNotFoundError:
            mode = None
        if mode is not None and hasattr(os, "fchmod"):
            os.fchmod(self.fd, mode)
        fd, self.fd = self.fd, -1
        os.close(fd)

    def rename(self) -> None:
        """Put the finished file in place (after :meth:`finish`)."""
        os.replace(self.path, self.final)
        self.renamed = True

    def discard(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:  # pragma: no cover
                pass
            self.fd = -1
        if self.renamed:
            return
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


# --------------------------------------------------------------------------- check


@dataclass(frozen=True)
class _Settings:
    """The checked arguments of one :func:`shuffle_file` call and the paths they name."""

    src: str
    dst: str
    record_size: int | None
    memory: Any  # as given, for messages
    budget: int
    seed: int
    progress: bool
    shards: int
    stream_src: bool  # a pipe, a device or standard input: copied to a file first
    size: int  # of a regular ``src`` (0 until a copied one is read)
    out_dir: str  # "" for standard output
    finals: tuple[str, ...]  # the outputs' final names, links followed
    device: bool  # ``dst`` is an existing device or pipe, written in place
    tmp_root: str

    @property
    def from_stdin(self) -> bool:
        return self.src == "-"

    @property
    def to_stdout(self) -> bool:
        return self.dst == "-"


def _check_kind(record_size: Any, lines: Any) -> int | None:
    """Return ``record_size`` once exactly one of it and ``lines`` is given."""
    record_size = positive_or_none("record_size", record_size)
    lines = check_bool("lines", lines)
    if (record_size is None) == (not lines):
        if lines:
            raise ValueError(
                f"give either record_size or lines=True, not both; got record_size={record_size}"
            )
        raise ValueError("give record_size (bytes per record) or lines=True, got neither")
    return record_size


def _check_names(src: Any, dst: Any, shards: int) -> tuple[str, str]:
    """Return ``src`` and ``dst`` as strings once both are paths (or ``"-"``)."""
    for name, value in (("src", src), ("dst", dst)):
        if not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"{name} must be a path or '-', got {type(value).__name__} {value!r}")
    src_name, dst_name = os.fspath(src), os.fspath(dst)
    if dst_name == "-" and shards > 1:
        raise ValueError(f"shards must be 1 when dst is '-' (standard output), got {shards}")
    return src_name, dst_name


def _check_source(src_name: str, record_size: int | None) -> tuple[bool, int]:
    """Return (copied first?, size) for ``src``, refusing a folder or a partial record."""
    if src_name == "-":
        return True, 0
    info = os.stat(src_name)
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(errno.EISDIR, "src is a directory", src_name)
    stream_src = not stat.S_ISREG(info.st_mode)  # a pipe or device: copy it first
    if not stream_src and record_size is not None and info.st_size % record_size:
        raise _trailing_error(info.st_size, record_size, f"src {src_name!r}")
    return stream_src, info.st_size


def _check_destination(dst_name: str, shards: int) -> tuple[str, tuple[str, ...], bool]:
    """Return (folder, final names, device?) for ``dst``, refusing what cannot be written."""
    if dst_name == "-":
        return "", (), False
    out_dir = os.path.dirname(os.path.abspath(dst_name))
    if not os.path.isdir(out_dir):
        raise FileNotFoundError(errno.ENOENT, "the directory of dst does not exist", out_dir)
    # An existing device or pipe (/dev/null, a FIFO, /dev/stdout or /dev/fd/N of a pipe) is
    # written in place, not replaced, at the name given: the links of /dev/fd name no path.
    if is_device(dst_name):
        if shards != 1:
            raise ValueError(
                f"dst {dst_name!r} is a device or pipe, and shards={shards} writes one file "
                "per shard beside the name given: name a file, or write one shard (shards=1) "
                "into the device"
            )
        return out_dir, (dst_name,), True
    # A symbolic link is followed: the file it points to is replaced, as `sort -o` does.
    finals = tuple(os.path.realpath(p) for p in shard_paths(dst_name, shards))
    for path in finals:
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, "dst is a directory", path)
    return out_dir, finals, False


def _check_tmp_dir(tmp_dir: Any, out_dir: str, to_stdout: bool) -> str:
    """Return the folder for bucket files: ``tmp_dir``, or a default beside the output."""
    if tmp_dir is None:
        return tempfile.gettempdir() if to_stdout else out_dir
    if not isinstance(tmp_dir, (str, os.PathLike)):
        raise TypeError(f"tmp_dir must be a path or None, got {type(tmp_dir).__name__}")
    tmp_root = os.fspath(tmp_dir)
    if not os.path.isdir(tmp_root):
        raise ValueError(f"tmp_dir must be an existing directory, got {tmp_root!r}")
    return tmp_root


def _check(
    src: Any,
    dst: Any,
    *,
    record_size: Any,
    lines: Any,
    memory: Any,
    seed: Any,
    tmp_dir: Any,
    progress: Any,
    shards: Any,
) -> _Settings:
    """Check every argument, in the documented order, before anything is created or changed."""
    record_size = _check_kind(record_size, lines)
    budget = parse_memory(memory)
    _safety.check_memory(budget, memory)
    seed = _fresh_seed() if seed is None else check_seed("seed", seed)
    progress = check_bool("progress", progress)
    shards = positive("shards", shards)
    _safety.check_open_files(shards)
    src_name, dst_name = _check_names(src, dst, shards)
    # Check the source before anything is written.
    stream_src, size = _check_source(src_name, record_size)
    out_dir, finals, device = _check_destination(dst_name, shards)
    tmp_root = _check_tmp_dir(tmp_dir, out_dir, dst_name == "-" or device)
    return _Settings(
        src=src_name, dst=dst_name, record_size=record_size, memory=memory, budget=budget,
        seed=seed, progress=progress, shards=shards, stream_src=stream_src, size=size,
        out_dir=out_dir, finals=finals, device=device, tmp_root=tmp_root,
    )  # fmt: skip


# --------------------------------------------------------------------------- resolve


class _Held:
    """What a call has made so far and must undo: the bar, writer, open files, temporaries."""

    def __init__(self, settings: _Settings) -> None:
        self.device = settings.device
        self.bar = Progress(2 * settings.size, label="shuffle", enabled=settings.progress)
        self.work_dir: str | None = None
        self.targets: list[Any] = []
        self.writer: _passes.Writer | None = None
        self.shuffler: _passes.Shuffler | None = None
        self.committed = False

    def release(self) -> None:
        """Stop the writer, close every file, remove temporaries (outputs too unless committed)."""
        if self.writer is not None:
            self.writer.close()
        if self.shuffler is not None:
            self.shuffler.close_files()
        self.bar.close()
        for target in self.targets:
            if not self.committed:
                target.discard()
            if self.device:
                target.close()
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)


@dataclass(frozen=True)
class _Job:
    """Everything the run needs: the input file to read, the engine, the sink and the passes."""

    src_path: str
    size: int
    engine: _engines.Engine
    sink: _passes.Sink
    writer: _passes.Writer
    shuffler: _passes.Shuffler
    stale: tuple[str, ...]


def _open_source(s: _Settings, work_dir: str, bar: Progress) -> tuple[str, int]:
    """Return (path, size) of the file to shuffle: ``src``, or its copy in ``work_dir``."""
    if not s.stream_src:
        return s.src, s.size
    stdin = getattr(sys.stdin, "buffer", None)
    if s.from_stdin and stdin is None:
        raise ValueError("src '-' needs a binary standard input (sys.stdin.buffer)")
    source: Any = stdin if s.from_stdin else open(s.src, "rb")
    try:
        path, size = _spool(source, work_dir, bar)
    finally:
        if not s.from_stdin:
            source.close()
    if s.record_size is not None and size % s.record_size:
        raise _trailing_error(size, s.record_size, "standard input" if s.from_stdin else s.src)
    return path, size


def _make_engine(s: _Settings, size: int) -> _engines.Engine:
    """Return the engine for an input of ``size`` bytes, refusing a budget below two records."""
    engine = _engines.make_engine(_engines.choose_engine(s.budget, size), s.record_size, s.budget)
    if s.record_size is not None and engine.cap < 2 * s.record_size:
        raise ValueError(
            f"memory={s.memory!r} is too small for record_size={s.record_size}: a buffer must "
            f"hold at least two records; give memory of at least {-(-16 * s.record_size // 3)}"
        )
    return engine


def _open_targets(s: _Settings, targets: list[Any]) -> None:
    """Append the outputs to ``targets`` as they open (temporary files, or a stream in place)."""
    if s.to_stdout:
        stdout = getattr(sys.stdout, "buffer", None)
        if stdout is None:
            raise ValueError("dst '-' needs a binary standard output (sys.stdout.buffer)")
        targets.append(_StreamTarget(stdout))
    elif s.device:
        targets.append(_StreamTarget(open_in_place(s.finals[0]), s.finals[0]))
    else:
        for path in s.finals:
            targets.append(_FileTarget(path))


def _resolve(s: _Settings, held: _Held) -> _Job:
    """Make what the run needs, recording each piece in ``held`` as soon as it exists.

    Removes earlier runs' stale temporaries, creates the bucket folder, copies a streamed input
    there, picks the engine and opens the outputs under their temporary names.
    """
    # Temporary files of earlier runs that were killed (their process is gone) are removed first.
    stale = tuple(_safety.remove_stale([d for d in dict.fromkeys([s.out_dir, s.tmp_root]) if d]))
    held.work_dir = _make_work_dir(s.tmp_root)
    src_path, size = _open_source(s, held.work_dir, held.bar)
    engine = _make_engine(s, size)
    _open_targets(s, held.targets)
    sink = _passes.Sink(held.targets, s.record_size)
    held.writer = _passes.Writer()
    seeds = _rng.seed_sequence(s.seed, 0, _rng.FILE_SHUFFLE)
    held.shuffler = _passes.Shuffler(engine, held.work_dir, seeds, held.writer, held.bar)
    return _Job(src_path, size, engine, sink, held.writer, held.shuffler, stale)


# --------------------------------------------------------------------------- run and commit


def _run(job: _Job) -> int:
    """Run the shuffle passes into the outputs' temporary files; return the records written."""
    records = job.shuffler.run(job.src_path, job.size, job.sink)
    job.writer.drain()
    return records


class PartialCommitError(OSError):
    """Renaming the shards into place failed after some of them were replaced."""


def _shards(paths: list[str], lo: int, hi: int) -> str:
    """``shard 2 ('a.00002-of-00004')`` or ``shards 0-1 ('a.00000-of-00004' to ...)``."""
    if hi - lo == 1:
        return f"shard {lo} ({paths[lo]!r})"
    return f"shards {lo}-{hi - 1} ({paths[lo]!r} to {paths[hi - 1]!r})"


def _rename_all(s: _Settings, files: list[_FileTarget]) -> None:
    """Rename the finished outputs into place, in shard order.

    A failure before the first rename leaves every output as it was (the caller's message says
    so); one after it raises :class:`PartialCommitError`, which says which shards were replaced.
    """
    done = 0
    try:
        for target in files:
            target.rename()
            done += 1
    except OSError as exc:
        if done == 0:
            raise
        paths = [t.final for t in files]
        code = exc.errno if exc.errno is not None else errno.EIO
        where = f": {exc.filename!r}" if exc.filename else ""
        raise PartialCommitError(
            code,
            f"{exc.strerror or exc}{where}, while renaming the finished shards of {s.dst!r} into "
            f"place; {_shards(paths, 0, done)} now hold this run's output, but "
            f"{_shards(paths, done, len(paths))} were not replaced (they hold what they held "
            f"before, or do not exist): the shards are inconsistent, run the shuffle again; "
            f"temporary files were removed",
        ) from exc


def _commit(s: _Settings, held: _Held, signals: _safety.Signals) -> None:
    """Flush every output to disk, then rename them all into place, then sync the folder.

    Every file is flushed (fsync) before the first rename, so a failure to flush leaves every
    output as it was; the renames then follow one another with SIGINT, SIGTERM and SIGHUP held
    back, so that no signal stops them half way.
    """
    files = [t for t in held.targets if isinstance(t, _FileTarget)]
    for target in held.targets:
        if not isinstance(target, _FileTarget):
            target.commit()  # standard output or a device: written in place, flushed here
    for target in files:
        target.finish()
    signals.check()
    try:
        with signals.deferred():
            _rename_all(s, files)
            held.committed = True
    finally:
        if held.committed and files:
            _fsync_dir(s.out_dir)


def _explained(exc: OSError, s: _Settings) -> OSError:
    """Return ``exc`` re-made to say the file it names and what became of ``dst``."""
    if s.to_stdout or s.device:
        kept = f"{'standard output' if s.to_stdout else s.dst} may hold part of the output"
    else:
        kept = (
            f"the {s.shards} shards of {s.dst!r} were left unchanged"
            if s.shards > 1
            else f"{s.dst!r} was left unchanged"
        )
    code = exc.errno if exc.errno is not None else errno.EIO
    where = f": {exc.filename!r}" if exc.filename else ""
    return type(exc)(code, f"{exc.strerror or exc}{where}; {kept} and temporary files were removed")


def _report(s: _Settings, job: _Job, records: int, started: float) -> ShuffleResult:
    """Warn of an added final newline and return the :class:`ShuffleResult` of a finished call."""
    if job.shuffler.added_newline:
        where = "standard input" if s.from_stdin else repr(s.src)
        warnings.warn(
            f"the last line of {where} had no newline; one was added to the output",
            UserWarning,
            stacklevel=3,
        )
    return ShuffleResult(
        seed=s.seed,
        records=records,
        bytes=job.sink.bytes,
        buckets=job.shuffler.buckets,
        seconds=time.perf_counter() - started,
        outputs=("-",) if s.to_stdout else s.finals,
        engine=job.engine.name,
        depth=job.shuffler.depth,
        stale_removed=job.stale,
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
    complete; with shards, every shard is flushed before the first is renamed, and the renames
    follow one another with SIGINT, SIGTERM and SIGHUP held back until they are done. ``src`` is
    only read (``src == dst`` works), through ``read`` calls, so a ``src`` cut short meanwhile
    is an ``OSError`` naming it. A symbolic link ``dst`` is followed
    (the file it points to is replaced); an existing device or pipe (``/dev/null``, a FIFO) is
    written in place. Bucket files live in a ``.padless-shuffle-*`` directory in ``tmp_dir``;
    they and the temporary output are removed on success, on error, on KeyboardInterrupt, and
    on SIGTERM and SIGHUP (when their handler is the default one and the call runs in the main
    thread: the process then still ends by that signal, as it would have). The temporary names
    carry the host, the boot, the PID namespace and the process id: a later run in the same
    PID namespace removes those whose process is gone (killed by SIGKILL, say) and reports them
    in ``stale_removed``; never other users', other hosts', other PID namespaces' (another
    container on the host) or live processes' files. A write failure (a full disk, say) raises
    ``OSError`` naming the file that could not be written.

    Memory: the call's peak resident size above the process's size when the call starts stays
    within ``memory`` (for budgets of at least 16M; below that 1-2 MB of fixed costs may pass
    it). That counts all the call adds: the compiled kernels (about 0.3 MB, loaded by the first
    call), buffers, the mapped windows of the files, the writer thread. (The ``padless shuffle``
    command counts the whole process: ``--memory`` also covers the interpreter, numpy and
    padless.) An input fits when it is at most about 0.97 times ``memory`` less 70 MB (0.7 times
    ``memory`` below 256M), and in memory it then takes about its own size plus 40 MB (two
    output pieces and a mapped window; less with smaller budgets). ``memory`` larger than the
    machine's memory is refused.

    Cost: in memory, one read of the input and one write of the output; through buckets, about
    two reads and two writes; then the final flush of the output to disk. On a shared, loaded
    2-vCPU VM (load average 2-5, ``benchmarks/bench_shuffle.py``), the ``padless shuffle``
    command, its whole process counted (about 0.2 s of it the interpreter and the imports),
    shuffled 550 MiB of lines that fit at 1.4 times GNU ``shuf``'s speed (medians of 8 rounds;
    1.6-2.7 times in the best runs), 512 MiB of 16-byte records at about 0.2 times ``cp``'s, and
    lines through buckets (384M) at 0.7-1.5 times shuf's. Temporary disk: about the input size in
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
            Only if renaming the shards into place fails after the first was renamed (a file
            system error between renames in one folder), ``PartialCommitError``, an
            ``OSError`` whose message says which shards were replaced and which were not.

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
    settings = _check(
        src, dst, record_size=record_size, lines=lines, memory=memory, seed=seed,
        tmp_dir=tmp_dir, progress=progress, shards=shards,
    )  # fmt: skip
    # SIGTERM and SIGHUP clean up like Ctrl-C does, then end the process as they would have.
    with _safety.Signals() as signals:
        held = _Held(settings)
        try:
            job = _resolve(settings, held)
            records = _run(job)
            signals.check()  # a signal swallowed by a C callback still stops the run here
            _commit(settings, held, signals)
        except PartialCommitError:
            raise  # already says what became of each shard
        except OSError as exc:
            raise _explained(exc, settings) from exc
        finally:
            held.release()
        return _report(settings, job, records, started)
