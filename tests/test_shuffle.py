"""Tests of padless.shuffle: permutation, uniformity, determinism, safety, memory, kernels."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from padless.shuffle import _engines, _passes, parse_memory, shard_paths, shuffle_file

ENGINES = ["numpy", "compiled"]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Force one engine whatever the budget and the input size."""
    name = str(request.param)
    monkeypatch.setattr(_engines, "choose_engine", lambda budget, size: name)
    return name


def rand_bytes(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def records(data: bytes, r: int) -> list[bytes]:
    return sorted(data[i : i + r] for i in range(0, len(data), r))


def make_lines(n: int, seed: int = 0, max_len: int = 120) -> list[bytes]:
    """Lines of random bytes, 0x00 and 0xFF included, some with CRLF endings."""
    rng = np.random.default_rng(seed)
    out = []
    for i, length in enumerate(rng.integers(0, max_len, n)):
        body = rng.integers(0, 256, int(length), dtype=np.uint8).tobytes().replace(b"\n", b"\xff")
        out.append(body + (b"\r\n" if i % 7 == 0 else b"\n"))
    return out


def split_lines(data: bytes) -> list[bytes]:
    """Lines with their newline, split on b"\\n" only (``bytes.splitlines`` also splits on \\r)."""
    assert data.endswith(b"\n") or not data
    return sorted(part + b"\n" for part in data.split(b"\n")[:-1])


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def names(*folders: Path) -> set[str]:
    return {f"{d}/{p}" for d in folders for p in os.listdir(d)}


# --------------------------------------------------------------------------- permutation


@pytest.mark.parametrize("record_size, n", [(16, 1), (16, 5000), (16, 200_000), (3, 150_000)])
def test_records_are_permuted(tmp_path: Path, engine: str, record_size: int, n: int) -> None:
    data = rand_bytes(record_size * n, seed=n)
    src = write(tmp_path / "in.bin", data)
    res = shuffle_file(src, tmp_path / "out.bin", record_size=record_size, memory="1M", seed=3)
    out = (tmp_path / "out.bin").read_bytes()
    assert records(out, record_size) == records(data, record_size)
    assert res.records == n and res.bytes == len(data) and res.engine == engine
    if n > 1000:
        assert out != data
    if n * record_size > 1 << 20:
        assert res.buckets >= 2
    assert sorted(os.listdir(tmp_path)) == ["in.bin", "out.bin"]


@pytest.mark.parametrize("n", [1, 3000, 60_000])
def test_lines_are_permuted_with_any_bytes(tmp_path: Path, engine: str, n: int) -> None:
    lines = make_lines(n, seed=n)
    data = b"".join(lines)
    assert b"\x00" in data and b"\xff" in data or n == 1
    src = write(tmp_path / "in.txt", data)
    res = shuffle_file(src, tmp_path / "out.txt", lines=True, memory="1M", seed=5)
    out = (tmp_path / "out.txt").read_bytes()
    assert split_lines(out) == split_lines(data) == sorted(lines)  # CRLF kept, \r untouched
    assert res.records == n and len(out) == len(data)
    if n > 100:
        assert out != data
    if len(data) > 1 << 20:
        assert res.buckets >= 2


def test_crlf_and_bare_cr_kept(tmp_path: Path, engine: str) -> None:
    data = b"a\r\nb\rc\n\r\n\n\x00\xff\r\n"
    src = write(tmp_path / "in.txt", data)
    shuffle_file(src, tmp_path / "out.txt", lines=True, seed=1)
    out = (tmp_path / "out.txt").read_bytes()
    assert sorted(out.split(b"\n")) == sorted(data.split(b"\n"))
    assert out.count(b"\r\n") == data.count(b"\r\n")


@pytest.mark.parametrize("kind", ["records", "lines"])
def test_empty_file(tmp_path: Path, engine: str, kind: str) -> None:
    src = write(tmp_path / "in", b"")
    kw: dict = {"record_size": 8} if kind == "records" else {"lines": True}
    res = shuffle_file(src, tmp_path / "out", seed=0, **kw)
    assert (tmp_path / "out").read_bytes() == b""
    assert res.records == 0 and res.bytes == 0


def test_last_line_without_newline_gets_one(tmp_path: Path, engine: str) -> None:
    src = write(tmp_path / "in.txt", b"x\ny\nlast")
    with pytest.warns(UserWarning, match="no newline"):
        res = shuffle_file(src, tmp_path / "out.txt", lines=True, seed=2)
    out = (tmp_path / "out.txt").read_bytes()
    assert sorted(out.split(b"\n")[:-1]) == [b"last", b"x", b"y"] and out.endswith(b"\n")
    assert res.bytes == 9 and (tmp_path / "in.txt").read_bytes() == b"x\ny\nlast"


def test_last_line_without_newline_through_buckets(tmp_path: Path, engine: str) -> None:
    lines = make_lines(30_000, seed=4)
    data = b"".join(lines) + b"tail-without-newline"
    src = write(tmp_path / "in.txt", data)
    with pytest.warns(UserWarning, match="no newline"):
        res = shuffle_file(src, tmp_path / "out.txt", lines=True, memory="1M", seed=2)
    out = (tmp_path / "out.txt").read_bytes()
    assert res.buckets >= 2
    assert sorted(out.split(b"\n")) == sorted((data + b"\n").split(b"\n"))


def test_no_warning_when_newline_present(tmp_path: Path) -> None:
    src = write(tmp_path / "in.txt", b"a\nb\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shuffle_file(src, tmp_path / "out.txt", lines=True, seed=0)


def test_lines_longer_than_a_chunk(tmp_path: Path, engine: str) -> None:
    # With memory=1M a chunk is well under 1 MB: these lines are streamed to their buckets.
    rng = np.random.default_rng(9)
    giants = [b"G" * 1_500_000 + b"\n", b"H" * 700_000 + b"\n"]
    small = make_lines(2000, seed=9)
    parts = small[:1000] + [giants[0]] + small[1000:] + [giants[1]]
    data = b"".join(parts) + b"I" * 900_000  # and one at the end, without newline
    src = write(tmp_path / "in.txt", data)
    with pytest.warns(UserWarning, match="no newline"):
        res = shuffle_file(
            src, tmp_path / "out.txt", lines=True, memory="1M", seed=int(rng.integers(99))
        )
    out = (tmp_path / "out.txt").read_bytes()
    assert sorted(out.split(b"\n")) == sorted((data + b"\n").split(b"\n"))
    assert res.records == 2003


def test_many_empty_lines(tmp_path: Path, engine: str) -> None:
    data = b"\n" * 400_000 + b"x\n"
    src = write(tmp_path / "in.txt", data)
    res = shuffle_file(src, tmp_path / "out.txt", lines=True, memory="1M", seed=1)
    out = (tmp_path / "out.txt").read_bytes()
    assert len(out) == len(data) and out.count(b"\n") == 400_001 and out != data
    assert res.records == 400_001


def test_recursion_when_a_bucket_outgrows_memory(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_passes, "MAX_BUCKETS", 2)
    data = rand_bytes(16 * 250_000, seed=1)
    src = write(tmp_path / "in.bin", data)
    res = shuffle_file(src, tmp_path / "out.bin", record_size=16, memory="1M", seed=4)
    assert res.depth >= 1
    assert records((tmp_path / "out.bin").read_bytes(), 16) == records(data, 16)
    lines = make_lines(40_000, seed=2)
    src = write(tmp_path / "in.txt", b"".join(lines))
    res = shuffle_file(src, tmp_path / "out.txt", lines=True, memory="1M", seed=4)
    assert res.depth >= 1
    assert split_lines((tmp_path / "out.txt").read_bytes()) == sorted(lines)
    assert sorted(os.listdir(tmp_path)) == ["in.bin", "in.txt", "out.bin", "out.txt"]


# --------------------------------------------------------------------------- uniformity


def _perm_counts(positions: list[tuple[int, ...]]) -> np.ndarray:
    table: dict[tuple[int, ...], int] = {}
    for p in positions:
        table[p] = table.get(p, 0) + 1
    return np.array(list(table.values()))


# (engine, path) -> (memory, record size): four records that go through bucket files, or that
# the budget holds whole (the compiled engine then also spreads them over tiny sub-buckets).
_FOUR = {
    ("numpy", "buckets"): ("1M", 32 * 1024),
    ("compiled", "buckets"): ("1M", 256 * 1024),
    ("numpy", "memory"): ("64M", 1024),
    ("compiled", "memory"): ("64M", 1024),
}


@pytest.mark.parametrize("path", ["memory", "buckets"])
@pytest.mark.parametrize("kind", ["records", "lines"])
@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_every_permutation_of_four_equally_likely(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch, path: str, kind: str
) -> None:
    """All 24 orders of four records (or lines) come out equally often, over many seeds."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # durability is not what is tested here
    monkeypatch.setattr(_engines, "SUB_BYTES", 16)  # compiled, in memory: one sub-bucket per item
    memory, r = _FOUR[engine, path]
    if kind == "lines":
        blocks = [bytes([65 + i]) * (r - 1) + b"\n" for i in range(4)]
        kw: dict = {"lines": True}
    else:
        blocks = [bytes([i]) * r for i in range(4)]
        kw = {"record_size": r}
    src = write(tmp_path / "in.bin", b"".join(blocks))
    dst = tmp_path / "out.bin"
    trials = 240  # ten per order on average
    seen = []
    for seed in range(trials):
        res = shuffle_file(src, dst, memory=memory, seed=seed, **kw)
        assert (res.buckets >= 2) == (path == "buckets") and res.engine == engine
        with open(dst, "rb") as f:
            seen.append(_firsts(f, r))
    counts = _perm_counts(seen)
    assert len(counts) == 24
    assert stats.chisquare(counts).pvalue > 0.001


def _firsts(f, r: int) -> tuple[int, ...]:
    out = []
    for _ in range(4):
        out.append(f.read(r)[0])
    return tuple(out)


def test_positions_independent_of_input_order(tmp_path: Path, engine: str) -> None:
    """χ² on the (input decile × output decile) table and Spearman ρ, through buckets."""
    n = 100_000
    ids = np.arange(n, dtype=np.int64)
    src = write(tmp_path / "in.bin", ids.tobytes())
    res = shuffle_file(src, tmp_path / "out.bin", record_size=8, memory="1M", seed=11)
    assert res.buckets >= 2
    out = np.fromfile(tmp_path / "out.bin", dtype=np.int64)
    table = np.zeros((10, 10), np.int64)
    np.add.at(table, (out * 10 // n, np.arange(n) * 10 // n), 1)
    assert stats.chi2_contingency(table).pvalue > 0.01
    assert abs(stats.spearmanr(out, np.arange(n)).statistic) < 0.02


# --------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("kind", ["records", "lines"])
def test_same_seed_same_bytes(tmp_path: Path, engine: str, kind: str) -> None:
    if kind == "records":
        data, kw = rand_bytes(16 * 100_000, seed=2), {"record_size": 16}
    else:
        data, kw = b"".join(make_lines(20_000, seed=2)), {"lines": True}
    src = write(tmp_path / "in", data)
    a = shuffle_file(src, tmp_path / "a", memory="1M", seed=42, **kw)
    shuffle_file(src, tmp_path / "b", memory="1M", seed=42, **kw)
    shuffle_file(src, tmp_path / "c", memory="1M", seed=43, **kw)
    assert a.buckets >= 2
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    assert (tmp_path / "a").read_bytes() != (tmp_path / "c").read_bytes()


def test_fresh_seed_is_reported_and_reproduces(tmp_path: Path) -> None:
    src = write(tmp_path / "in.bin", rand_bytes(8 * 5000))
    first = shuffle_file(src, tmp_path / "a", record_size=8)
    second = shuffle_file(src, tmp_path / "b", record_size=8)
    assert isinstance(first.seed, int) and first.seed >= 0 and first.seed != second.seed
    again = shuffle_file(src, tmp_path / "c", record_size=8, seed=first.seed)
    assert again.seed == first.seed
    assert (tmp_path / "a").read_bytes() == (tmp_path / "c").read_bytes()


# --------------------------------------------------------------------------- safety


def test_src_equal_dst(tmp_path: Path, engine: str) -> None:
    data = rand_bytes(16 * 100_000, seed=5)
    path = write(tmp_path / "data.bin", data)
    res = shuffle_file(path, path, record_size=16, memory="1M", seed=1)
    out = path.read_bytes()
    assert res.buckets >= 2 and out != data and records(out, 16) == records(data, 16)
    assert os.listdir(tmp_path) == ["data.bin"]


def test_src_is_never_modified(tmp_path: Path) -> None:
    data = b"".join(make_lines(5000, seed=1))
    src = write(tmp_path / "in.txt", data)
    os.chmod(src, 0o444)
    before = os.stat(src)
    shuffle_file(src, tmp_path / "out.txt", lines=True, memory="1M", seed=1)
    after = os.stat(src)
    assert src.read_bytes() == data
    assert (before.st_mtime_ns, before.st_size, before.st_ino) == (
        after.st_mtime_ns,
        after.st_size,
        after.st_ino,
    )


def test_existing_dst_keeps_its_permissions(tmp_path: Path) -> None:
    src = write(tmp_path / "in.bin", rand_bytes(800))
    dst = write(tmp_path / "out.bin", b"old")
    os.chmod(dst, 0o640)
    shuffle_file(src, dst, record_size=8, seed=0)
    assert (os.stat(dst).st_mode & 0o777) == 0o640 and len(dst.read_bytes()) == 800


def test_trailing_bytes_refused_before_writing(tmp_path: Path) -> None:
    src = write(tmp_path / "in.bin", b"x" * 1003)
    dst = write(tmp_path / "out.bin", b"previous")
    with pytest.raises(ValueError, match=r"record_size=16.*1003 bytes.*62 records and 11 trailing"):
        shuffle_file(src, dst, record_size=16, seed=0)
    assert dst.read_bytes() == b"previous" and sorted(os.listdir(tmp_path)) == ["in.bin", "out.bin"]


class _Failing:
    """Replacement for ``_passes._write_all`` that fails after ``allowed`` calls."""

    def __init__(self, allowed: int, exc: BaseException) -> None:
        self.allowed = allowed
        self.calls = 0
        self.exc = exc
        self.real = _passes._write_all

    def __call__(self, fd: int, data: object) -> None:
        self.calls += 1
        if self.calls > self.allowed:
            raise self.exc
        self.real(fd, data)


@pytest.mark.parametrize(
    "memory, allowed",
    [("1M", 0), ("1M", 3), ("1M", 40), ("1M", 10_000), ("64M", 0), ("64M", 10_000)],
)
def test_full_disk_leaves_nothing_behind(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch, memory: str, allowed: int
) -> None:
    """ENOSPC in pass 1 (bucket files) or pass 2 (the output), or writing the output of the
    in-memory path (64M): a clear error, dst untouched."""
    data = rand_bytes(16 * 120_000, seed=3)
    src = write(tmp_path / "in.bin", data)
    dst = write(tmp_path / "out.bin", b"keep me")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    failing = _Failing(allowed, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    monkeypatch.setattr(_passes, "_write_all", failing)
    threads = threading.active_count()
    if allowed < 10_000:
        with pytest.raises(OSError, match="No space left on device") as info:
            shuffle_file(src, dst, record_size=16, memory=memory, seed=0, tmp_dir=tmp)
        assert info.value.errno == errno.ENOSPC
        assert "left unchanged" in str(info.value) and "temporary files were removed" in str(
            info.value
        )
        assert dst.read_bytes() == b"keep me"
    else:
        res = shuffle_file(src, dst, record_size=16, memory=memory, seed=0, tmp_dir=tmp)
        assert records(dst.read_bytes(), 16) == records(data, 16)
        assert (res.buckets == 0) == (memory == "64M")
    assert src.read_bytes() == data
    assert names(tmp_path, tmp) == {f"{tmp_path}/in.bin", f"{tmp_path}/out.bin", f"{tmp_path}/tmp"}
    assert threading.active_count() == threads


def test_failure_in_output_write_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = write(tmp_path / "in.bin", rand_bytes(16 * 1000))
    failing = _Failing(0, OSError(errno.EIO, "Input/output error"))
    monkeypatch.setattr(_passes, "_write_all", failing)
    with pytest.raises(OSError, match=r"Input/output error while writing output .*out\.bin"):
        shuffle_file(src, tmp_path / "out.bin", record_size=16, seed=0)
    assert os.listdir(tmp_path) == ["in.bin"]


@pytest.mark.parametrize(
    "path, where",
    [("buckets", "pass1"), ("buckets", "pass2"), ("buckets", "write")]
    + [("memory", "permute"), ("memory", "pieces"), ("memory", "write")],
)
def test_interrupt_leaves_nothing_behind(
    tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch, path: str, where: str
) -> None:
    """Ctrl-C anywhere, through buckets or in memory: dst untouched, no temporary file left.

    (SIGTERM and SIGHUP take the same way out: see the command's tests, with real signals.)
    """
    data = rand_bytes(16 * 120_000, seed=6)
    src = write(tmp_path / "in.bin", data)
    dst = write(tmp_path / "out.bin", b"keep me")
    calls = {"n": 0}
    # Through buckets: the second call (the second bucket of pass 2); in memory: the first.
    nth = 2 if path == "buckets" else 1
    if where == "write":
        monkeypatch.setattr(
            _passes, "_write_all", _Failing(20 if path == "buckets" else 0, KeyboardInterrupt())
        )
    else:
        compiled = engine == "compiled"
        cls = _engines.CompiledEngine if compiled else _engines.NumpyEngine
        target = {"pass1": "scatter", "pass2": "permute", "permute": "permute"}.get(where, "")
        if compiled and target == "permute":
            target = "permute_stream"  # the compiled engine streams from the file
        if where == "pieces":  # compiled: while output pieces are being filled; numpy: the same
            cls, target = (_engines._Pieces, "flush") if compiled else (cls, "permute")
        real = getattr(cls, target)

        def interrupted(self, *args, **kwargs):
            calls["n"] += 1
            if calls["n"] == nth:
                raise KeyboardInterrupt
            return real(self, *args, **kwargs)

        monkeypatch.setattr(cls, target, interrupted)
    threads = threading.active_count()
    with pytest.raises(KeyboardInterrupt):
        shuffle_file(src, dst, record_size=16, memory="1M" if path == "buckets" else "64M", seed=0)
    assert calls["n"] >= nth or where == "write"
    assert dst.read_bytes() == b"keep me" and src.read_bytes() == data
    assert sorted(os.listdir(tmp_path)) == ["in.bin", "out.bin"]
    assert threading.active_count() == threads


# --------------------------------------------------------------------------- temporary files


def _tag(host: str, boot: str, pid: int, ns: str | None = "") -> str:
    """A tag of this module's format; ``ns``: "" this process's namespace, None the old format."""
    from padless.shuffle import _safety

    if ns is None:
        return f"{host}-{boot}-{pid}-0123abcd"
    return f"{host}-{boot}-n{ns or _safety.PIDNS}-{pid}-0123abcd"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_temporaries_of_dead_owners_are_removed(tmp_path: Path) -> None:
    """A run removes its own kind of leftovers whose process is gone, and nothing else."""
    from padless.shuffle import _safety

    host, boot, dead, me = _safety.HOST, _safety.BOOT, _dead_pid(), os.getpid()
    other_host = "0" * 8 if host != "0" * 8 else "1" * 8
    other_boot = "0" * 8 if boot != "0" * 8 else "1" * 8
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    gone = [
        tmp_path / f".out.bin.{_tag(host, boot, dead)}.padless-tmp",  # an output being written
        tmp_path / f".other.txt.{_tag(host, boot, dead)}.padless-tmp",
        tmp / f".padless-shuffle-{_tag(host, boot, dead)}",  # a folder of bucket files
        tmp_path / f".padless-shuffle-{_tag(host, other_boot, me)}",  # before a restart
    ]
    other_ns = "1" if _safety.PIDNS != "1" else "2"
    kept = [
        tmp_path / f".out.bin.{_tag(host, boot, me)}.padless-tmp",  # its owner runs
        tmp_path / f".out.bin.{_tag(other_host, boot, dead)}.padless-tmp",  # another host's
        # another PID namespace's (a container on this host): its pid means nothing here
        tmp_path / f".out.bin.{_tag(host, boot, dead, other_ns)}.padless-tmp",
        tmp / f".padless-shuffle-{_tag(host, boot, dead, other_ns)}",
        tmp / f".padless-shuffle-{_tag(host, boot, me)}",
        tmp_path / ".out.bin.0123abcd.padless-tmp",  # not this pattern
        tmp_path / f"out.bin.{_tag(host, boot, dead)}.padless-tmp",  # not hidden
        tmp_path / f".out.bin.{_tag(host, boot, dead)}.padless-tmp.bak",
        tmp_path / f".padless-shuffle-{_tag(host, boot, dead)}x",
    ]
    # The namespace unknown (the older format, or a process that could not read it): kept
    # where PID namespaces exist.
    unknown = [
        tmp_path / f".out.bin.{_tag(host, boot, dead, None)}.padless-tmp",
        tmp / f".padless-shuffle-{_tag(host, boot, dead, '0')}",
    ]
    (kept if _safety.HAS_PID_NAMESPACES else gone).extend(unknown)
    for path in gone + kept:
        if "padless-shuffle" in path.name:
            path.mkdir()
            (path / "bucket-0-0-0").write_bytes(b"x")
        else:
            path.write_bytes(b"partial")
    # A link with a stale folder's name is not followed nor removed.
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep").write_bytes(b"k")
    link = tmp / f".padless-shuffle-{_tag(host, boot, dead + 1 if dead < 2**22 else 1)}"
    link.symlink_to(target)
    src = write(tmp_path / "in.txt", b"a\nb\n")
    res = shuffle_file(src, tmp_path / "out.bin", lines=True, seed=0, tmp_dir=tmp)
    assert sorted(res.stale_removed) == sorted(str(p) for p in gone)
    assert not any(os.path.lexists(p) for p in gone)
    assert all(p.exists() for p in kept) and link.is_symlink() and (target / "keep").exists()
    again = shuffle_file(src, tmp_path / "out.bin", lines=True, seed=0, tmp_dir=tmp)
    assert again.stale_removed == ()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_stale_temporaries_of_other_users_are_kept(tmp_path: Path) -> None:
    from padless.shuffle import _safety

    path = tmp_path / f".out.bin.{_tag(_safety.HOST, _safety.BOOT, _dead_pid())}.padless-tmp"
    path.write_bytes(b"theirs")
    os.chown(path, 54321, 54321)
    src = write(tmp_path / "in.txt", b"a\n")
    res = shuffle_file(src, tmp_path / "out.bin", lines=True, seed=0)
    assert res.stale_removed == () and path.read_bytes() == b"theirs"


def test_temporary_names_name_their_owner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While it runs, the output and the bucket folder carry this host, boot, PID namespace and
    process."""
    from padless.shuffle import _safety

    seen: set[str] = set()
    real = _passes._write_all

    def spy(fd: int, data: object) -> None:
        seen.update(os.listdir(tmp_path))
        real(fd, data)

    monkeypatch.setattr(_passes, "_write_all", spy)
    src = write(tmp_path / "in.bin", rand_bytes(16 * 120_000, seed=1))
    shuffle_file(src, tmp_path / "out.bin", record_size=16, memory="1M", seed=0)
    tag = f"{_safety.HOST}-{_safety.BOOT}-n{_safety.PIDNS}-{os.getpid()}-"
    temps = {n for n in seen if n not in ("in.bin", "out.bin")}
    assert any(n.startswith(f".out.bin.{tag}") and n.endswith(".padless-tmp") for n in temps)
    assert any(n.startswith(f".padless-shuffle-{tag}") for n in temps)
    assert all(_safety.OUTPUT_PATTERN.fullmatch(n) or _safety.FOLDER_PATTERN.fullmatch(n)
               for n in temps)  # fmt: skip


# --------------------------------------------------------------------------- shards


@pytest.mark.parametrize("kind", ["records", "lines"])
def test_shards_concatenate_to_the_shuffle(tmp_path: Path, engine: str, kind: str) -> None:
    if kind == "records":
        data, kw = rand_bytes(16 * 100_003, seed=8), {"record_size": 16}
    else:
        data, kw = b"".join(make_lines(20_003, seed=8)), {"lines": True}
    src = write(tmp_path / "in", data)
    whole = shuffle_file(src, tmp_path / "whole", memory="1M", seed=9, **kw)
    res = shuffle_file(src, tmp_path / "part", memory="1M", seed=9, shards=4, **kw)
    paths = shard_paths(tmp_path / "part", 4)
    assert list(res.outputs) == paths and paths[0].endswith("part.00000-of-00004")
    parts = [Path(p).read_bytes() for p in paths]
    assert b"".join(parts) == (tmp_path / "whole").read_bytes()
    sizes = [len(p) // 16 if kind == "records" else p.count(b"\n") for p in parts]
    assert sum(sizes) == whole.records and max(sizes) - min(sizes) <= 1


def test_more_shards_than_records(tmp_path: Path) -> None:
    src = write(tmp_path / "in.txt", b"a\nb\n")
    shuffle_file(src, tmp_path / "o", lines=True, seed=0, shards=3)
    parts = [Path(p).read_bytes() for p in shard_paths(tmp_path / "o", 3)]
    assert sorted(parts) == [b"", b"a\n", b"b\n"]


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    "kwargs, exc, pattern",
    [
        ({}, ValueError, "record_size .* or lines=True, got neither"),
        ({"record_size": 8, "lines": True}, ValueError, "either record_size or lines=True"),
        ({"record_size": 0}, ValueError, "record_size must be a positive int, got 0"),
        ({"record_size": 2.0}, TypeError, "record_size must be an int"),
        ({"lines": 1}, TypeError, "lines must be a bool"),
        ({"lines": True, "memory": "lots"}, ValueError, "memory must be a size .* got 'lots'"),
        ({"lines": True, "memory": 1000}, ValueError, "memory must be at least 1M"),
        ({"lines": True, "memory": 1.5}, TypeError, "memory must be an int"),
        ({"lines": True, "seed": -1}, ValueError, "seed must be a non-negative int, got -1"),
        ({"lines": True, "seed": True}, TypeError, "seed must be an int"),
        ({"lines": True, "shards": 0}, ValueError, "shards must be a positive int, got 0"),
        ({"lines": True, "tmp_dir": "/no/such/dir"}, ValueError, "tmp_dir must be an existing"),
        ({"lines": True, "progress": "yes"}, TypeError, "progress must be a bool"),
        ({"record_size": 1 << 20, "memory": "1M"}, ValueError, "too small for record_size"),
        ({"lines": True, "memory": "1000T"}, ValueError, r"memory='1000T' \(1000\.0T\) is more "),
        ({"lines": True, "memory": 1 << 60}, ValueError, "is more than this machine's memory"),
        ({"lines": True, "memory": "9" * 400}, ValueError, "is more than this machine's memory"),
    ],
)
def test_bad_arguments(tmp_path: Path, kwargs: dict, exc: type, pattern: str) -> None:
    src = write(tmp_path / "in", b"")
    with pytest.raises(exc, match=pattern):
        shuffle_file(src, tmp_path / "out", **kwargs)
    assert os.listdir(tmp_path) == ["in"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX open-files limit")
def test_shards_beyond_the_open_files_limit(tmp_path: Path) -> None:
    """A clear error before anything is written (it failed with 'Too many open files')."""
    script = textwrap.dedent(
        """
        import os, resource, sys
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        from padless.shuffle import shuffle_file
        src, dst = sys.argv[1:3]
        for shards in (10**6, 300):
            try:
                shuffle_file(src, dst, lines=True, seed=0, shards=shards)
            except ValueError as exc:
                print(exc)
        shuffle_file(src, dst, lines=True, seed=0, shards=100)
        print(sorted(os.listdir(os.path.dirname(dst)))[:2], len(os.listdir(os.path.dirname(dst))))
        """
    )
    src = write(tmp_path / "in.txt", b"a\nb\nc\n")
    out = subprocess.run(
        [sys.executable, "-c", script, str(src), str(tmp_path / "o")],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert out[0].startswith("shards=1000000 needs 1000000 output files open at once")
    assert "limit 256, hard limit 256" in out[0] and "ulimit -n" in out[0]
    assert out[1].startswith("shards=300 needs 300 output files")
    assert out[2] == "['in.txt', 'o.00000-of-00100'] 101"


def test_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        shuffle_file(tmp_path / "missing", tmp_path / "out", lines=True)
    with pytest.raises(IsADirectoryError):
        shuffle_file(tmp_path, tmp_path / "out", lines=True)
    src = write(tmp_path / "in", b"a\n")
    with pytest.raises(FileNotFoundError, match="directory of dst does not exist"):
        shuffle_file(src, tmp_path / "no" / "out", lines=True)
    with pytest.raises(ValueError, match="shards must be 1 when dst is '-'"):
        shuffle_file(src, "-", lines=True, shards=2)
    with pytest.raises(TypeError, match="src must be a path"):
        shuffle_file(3, tmp_path / "out", lines=True)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == ["in"]


@pytest.mark.parametrize(
    "text, expected",
    [("1M", 1 << 20), ("512M", 512 << 20), ("1.5G", 3 << 29), ("2gib", 2 << 30), ("4 MB", 4 << 20)],
)
def test_parse_memory(text: str, expected: int) -> None:
    assert parse_memory(text) == expected


def test_engine_choice() -> None:
    """The compiled engine serves every budget and input ("numba", its former name, is gone)."""
    for budget, size in [
        (512 << 20, 2 << 30),
        (64 << 20, 2 << 30),
        (1 << 30, 1 << 20),
        (1 << 20, 0),
    ]:
        assert _engines.choose_engine(budget, size) == "compiled"
    engine = _engines.make_engine("compiled", 16, 64 << 20)
    assert isinstance(engine, _engines.CompiledEngine) and engine.name == "compiled"
    with pytest.raises(ValueError, match="former name: it is now 'compiled'"):
        _engines.make_engine("numba", 16, 64 << 20)
    assert isinstance(_engines.make_engine("numpy", None, 64 << 20), _engines.NumpyEngine)
    with pytest.raises(ValueError, match="engine must be one of 'compiled', 'numpy'"):
        _engines.make_engine("numbra", 16, 64 << 20)


def test_kernels_are_compiled_and_have_references() -> None:
    """Every kernel of the shuffle calls padless._core and has a plain-Python reference twin."""
    import inspect

    from padless import _core
    from padless.shuffle import _kernels as k

    kernels = [
        name for name, f in vars(k).items()
        if inspect.isfunction(f) and not name.startswith("_") and not name.endswith("_reference")
    ]  # fmt: skip
    assert len(kernels) == 9
    for name in kernels:
        assert hasattr(k, f"{name}_reference") and hasattr(_core, name), name
        assert f"_core.{name}(" in inspect.getsource(getattr(k, name)), name
    assert "numba" not in inspect.getsource(k)


# --------------------------------------------------------------------------- memory budget

_RSS_SCRIPT = textwrap.dedent(
    """
    import sys
    def status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    import padless
    from padless.shuffle import _engines, shuffle_file
    kind, src, dst, memory, engine = sys.argv[1:6]
    if engine != "auto":
        _engines.choose_engine = lambda budget, size: engine
    kw = {"lines": True} if kind == "lines" else {"record_size": int(kind)}
    try:  # start the peak (VmHWM) afresh at the resident size now
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    entry = status("VmRSS")
    res = shuffle_file(src, dst, memory=memory, seed=1, **kw)
    print(status("VmHWM") - entry, res.engine, res.buckets)
    """
)


def _peak_above_entry(*args: str) -> tuple[int, str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, *args], capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[0]), out[1], int(out[2])


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
@pytest.mark.parametrize("engine", ["auto", "numpy"])
def test_memory_budget_small(tmp_path: Path, engine: str) -> None:
    """16 MB budget, both engines: the call's peak stays within it (numpy's was once 1.5 times
    over), the extension's own memory counted (it is loaded by the call)."""
    budget = 16 << 20
    expected = "compiled" if engine == "auto" else engine
    src = tmp_path / "rec.bin"
    rng = np.random.default_rng(0)
    rng.integers(0, 1 << 62, 6 << 20, dtype=np.int64).tofile(src)
    peak, name, buckets = _peak_above_entry("16", str(src), str(tmp_path / "o"), "16M", engine)
    assert name == expected and buckets >= 3
    assert peak <= budget, peak
    lines = tmp_path / "lines.txt"
    lengths = np.clip(rng.lognormal(np.log(60), 0.7, 700_000), 1, 2000).astype(np.int64)
    body = rng.integers(97, 123, int(lengths.sum()), dtype=np.uint8)
    body[np.cumsum(lengths) - 1] = 10
    body.tofile(lines)
    peak, name, buckets = _peak_above_entry("lines", str(lines), str(tmp_path / "o"), "16M", engine)
    assert name == expected and buckets >= 3
    assert peak <= budget, peak


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
@pytest.mark.parametrize("memory, path", [("128M", "buckets"), ("256M", "memory")])
def test_memory_budget_compiled(tmp_path: Path, memory: str, path: str) -> None:
    """Compiled engine, 140 MB through buckets (128M) or in memory (256M): within the budget."""
    src = tmp_path / "rec.bin"
    np.random.default_rng(0).integers(0, 1 << 62, 17_500_000, dtype=np.int64).tofile(src)
    peak, engine, buckets = _peak_above_entry("16", str(src), str(tmp_path / "o"), memory, "auto")
    assert engine == "compiled" and (buckets >= 2) == (path == "buckets")
    assert peak <= parse_memory(memory), peak


# --------------------------------------------------------------------------- kernels


def test_kernels_match_references() -> None:
    """Every compiled kernel equals its plain-Python reference, byte for byte and draw for draw."""
    from padless._kernels import SplitMix
    from padless.shuffle import _kernels as k

    rng = np.random.default_rng(0)
    for dtype, width, n, num in [
        (np.uint64, 2, 500, 7),
        (np.uint8, 3, 400, 5),
        (np.uint32, 1, 300, 1),
    ]:
        src = rng.integers(0, 200, n * width + 10).astype(dtype)
        dst, ref = np.zeros_like(src), np.zeros_like(src)
        starts, counts = np.empty(num + 1, np.int64), np.empty(num, np.int64)
        starts_r, counts_r = np.empty(num + 1, np.int64), np.empty(num, np.int64)
        k.scatter_records(src, 5, 5 + n * width, width, num, np.uint64(99), dst, 3, starts, counts)
        k.scatter_records_reference(
            src, 5, 5 + n * width, width, num, 99, ref, 3, starts_r, counts_r
        )
        assert np.array_equal(dst, ref) and np.array_equal(starts, starts_r)
        assert np.array_equal(counts, counts_r) and counts.sum() == n
        # shuffle_indices + gather_records: a sub-bucket in a random order, cut at a limit.
        state, gen = np.array([12345], np.uint64), SplitMix(12345)
        perm = np.empty(n + 1, np.int32)
        k.shuffle_indices(n, state, perm)
        perm_r = k.shuffle_indices_reference(n, gen)
        assert perm[:n].tolist() == perm_r and sorted(perm_r) == list(range(n))
        assert int(state[0]) == gen.state
        out, out_r = np.zeros_like(src), np.zeros_like(src)
        limit = (n // 3) * width + 1  # not a whole number of records
        got = k.gather_records(src, width, 5, perm, 2, n, out, 1, limit)
        want = k.gather_records_reference(src, width, 5, perm_r, 2, n, out_r, 1, limit)
        assert tuple(int(x) for x in got) == want and np.array_equal(out, out_r)
    text = b"".join(make_lines(300, seed=1)) + b"\n"
    # The kernels of lines: scatter window by window (with few length slots, so a window
    # takes several calls), order each sub-bucket, gather in that order. The buffer's length is
    # not a multiple of 8: the newline search ends byte by byte.
    odd = np.zeros(len(text) + 5, np.uint8)
    odd[: len(text)] = np.frombuffer(text, np.uint8)
    words = odd[: len(odd) & ~7].view(np.uint64)
    num = 5
    big, big_r = np.zeros(len(text) + 64, np.uint8), np.zeros(len(text) + 64, np.uint8)
    counts, counts_r = np.zeros(num, np.int64), np.zeros(num, np.int64)
    state, gen = np.array([77], np.uint64), SplitMix(77)
    lengths = np.empty(40, np.uint32)
    rows, rows_r = [], []
    pos = pos_r = 0
    at = 0
    while pos < len(text):
        row, row_r = np.empty(num + 1, np.int64), np.empty(num + 1, np.int64)
        end = k.scatter_window_lines(
            odd, words, pos, len(text), num, state, lengths, big, at, row, counts
        )
        end_r = k.scatter_window_lines_reference(
            odd, pos_r, len(text), num, gen, 40, big_r, at, row_r, counts_r
        )
        assert end == end_r and np.array_equal(row, row_r)
        rows.append(row)
        rows_r.append(row_r)
        at += end - pos
        pos = pos_r = int(end)
    assert len(rows) >= 8 and np.array_equal(big, big_r) and np.array_equal(counts, counts_r)
    assert int(state[0]) == gen.state and counts.sum() == 301
    bounds = np.array(rows)
    big_words = big.view(np.uint64)
    state, gen = np.array([9], np.uint64), SplitMix(9)
    out, out_r = np.zeros_like(big), np.zeros_like(big)
    at = at_r = 0
    for s in range(num):
        items = np.empty(int(counts[s]) + 1, np.uint64)
        m = k.order_lines(big, big_words, bounds, s, state, items)
        ref_items = k.order_lines_reference(big, bounds, s, gen)
        assert items[:m].tolist() == ref_items and int(state[0]) == gen.state
        limit = at + 500
        got = k.gather_lines(big, big_words, items, 0, m, out, at, limit)
        want = k.gather_lines_reference(big, ref_items, 0, m, out_r, at_r, limit)
        assert tuple(int(x) for x in got) == want
        at, at_r = int(got[1]), want[1]
    assert np.array_equal(out, out_r)
    state, gen = np.array([3], np.uint64), SplitMix(3)
    draws = [int(k.draw_below(state, b)) for b in (1, 2, 7, 1000, 2**31)]
    assert draws == [k.draw_below_reference(gen, b) for b in (1, 2, 7, 1000, 2**31)]


def test_progress_bar_draws_only_on_a_tty() -> None:
    import io

    from padless.core._progress import Progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    quiet, loud = io.StringIO(), Tty()
    for stream in (quiet, loud):
        bar = Progress(2_000_000, label="t", stream=stream, min_interval=0.0)
        bar.update(1_000_000)
        bar.add_total(1_000_000)
        bar.close()
        assert bar.done == 1_000_000 and bar.total == 3_000_000
    assert quiet.getvalue() == ""
    assert "50.0%" in loud.getvalue() and "MB/s" in loud.getvalue()
    assert loud.getvalue().endswith("\r")


# --------------------------------------------------------------------------- odd paths


def test_dst_symlink_is_followed(tmp_path: Path) -> None:
    target = write(tmp_path / "data.txt", b"a\nb\nc\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target.name)
    shuffle_file(link, link, lines=True, seed=0)
    assert link.is_symlink() and split_lines(target.read_bytes()) == [b"a\n", b"b\n", b"c\n"]
    assert sorted(os.listdir(tmp_path)) == ["data.txt", "link.txt"]


@pytest.mark.parametrize("memory", ["64M", "1M"])
def test_dst_may_be_src_itself(tmp_path: Path, memory: str) -> None:
    """docs/data.md: ``src`` is only read, ``dst`` may name it (replaced once complete); the
    result is the shuffle of a copy into another file, in one pass and in buckets."""
    data = np.arange(100_000, dtype=np.int64).tobytes()
    src, copy = write(tmp_path / "in.bin", data), write(tmp_path / "copy.bin", data)
    other = shuffle_file(copy, tmp_path / "other.bin", record_size=8, memory=memory, seed=4)
    res = shuffle_file(src, src, record_size=8, memory=memory, seed=4)
    assert res.buckets == other.buckets and (res.buckets >= 2) == (memory == "1M")
    assert src.read_bytes() == (tmp_path / "other.bin").read_bytes() != data
    assert sorted(os.listdir(tmp_path)) == ["copy.bin", "in.bin", "other.bin"]


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="needs /dev/null")
def test_device_dst_is_written_in_place(tmp_path: Path) -> None:
    src = write(tmp_path / "in.txt", b"a\nb\n")
    res = shuffle_file(src, "/dev/null", lines=True, seed=0)
    assert res.bytes == 4 and not os.path.isfile("/dev/null")
    assert os.listdir(tmp_path) == ["in.txt"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("extra", [b"", b"xyz"])
def test_pipe_source_is_spooled(tmp_path: Path, extra: bytes) -> None:
    data = np.arange(150_000, dtype=np.int64).tobytes() + extra
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(data)

    thread = threading.Thread(target=feed)
    thread.start()
    try:
        if extra:
            with pytest.raises(ValueError, match="1200003 bytes .*3 trailing bytes"):
                shuffle_file(fifo, tmp_path / "out", record_size=8, memory="1M", seed=0)
        else:
            res = shuffle_file(fifo, tmp_path / "out", record_size=8, memory="1M", seed=0)
            out = np.fromfile(tmp_path / "out", np.int64)
            assert res.buckets >= 2 and sorted(out) == list(range(150_000))
    finally:
        thread.join()
    assert sorted(os.listdir(tmp_path)) == (["pipe"] if extra else ["out", "pipe"])


def test_place_records_in_windows_equals_one_scatter() -> None:
    """count_labels + place_records over windows == scatter_records on the whole region."""
    from padless._kernels import SplitMix
    from padless.shuffle import _kernels as k

    rng = np.random.default_rng(3)
    src = rng.integers(0, 1 << 60, 2 * 3000, dtype=np.uint64)
    counts, counts_r = np.empty(7, np.int64), np.empty(7, np.int64)
    k.count_labels(3000, 7, np.uint64(21), counts)
    k.count_labels_reference(3000, 7, 21, counts_r)
    assert np.array_equal(counts, counts_r) and counts.sum() == 3000
    starts = np.concatenate([[0], np.cumsum(counts * 2)])
    placed, placed_r = np.zeros_like(src), np.zeros_like(src)
    fill, fill_r = starts[:-1].copy(), starts[:-1].copy()
    state, gen = np.array([21], np.uint64), SplitMix(21)
    for lo, hi in [(0, 1000), (1000, 4002), (4002, 6000)]:  # windows of whole records
        k.place_records(src, lo, hi, 2, 7, state, placed, fill)
        k.place_records_reference(src, lo, hi, 2, 7, gen, placed_r, fill_r)
    whole, s2, c2 = np.zeros_like(src), np.empty(8, np.int64), np.empty(7, np.int64)
    k.scatter_records(src, 0, 6000, 2, 7, np.uint64(21), whole, 0, s2, c2)
    assert np.array_equal(placed, placed_r) and np.array_equal(placed, whole)


@pytest.mark.parametrize("kind", ["records", "lines"])
def test_in_memory_output_does_not_depend_on_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Compiled, in memory: whatever the window size, mapped or read, the same bytes out.

    Small windows make lines longer than a window arrive as single reads; the small output
    pieces make lines (and records) longer than a piece go out straight from the big buffer.
    """
    monkeypatch.setattr(_engines, "choose_engine", lambda budget, size: "compiled")
    monkeypatch.setattr(_engines, "PIECE_BYTES", 65536)
    if kind == "records":
        data, kw = rand_bytes(24 * 30_001, seed=4), {"record_size": 24}
    else:
        parts = make_lines(20_000, seed=4, max_len=300)
        parts[5] = b"L" * 200_000 + b"\n"  # longer than a small window and a small piece
        parts[9000] = b"M" * 70_000 + b"\n"
        data, kw = b"".join(parts) + b"no newline at the end", {"lines": True}
    src = write(tmp_path / "in", data)
    outs = []
    for window, mapped in [(16 << 20, True), (65536, True), (4096, False), (65536, False)]:
        monkeypatch.setattr(_engines, "WINDOW_BYTES", window)
        monkeypatch.setattr(_passes, "USE_MMAP", mapped)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = shuffle_file(src, tmp_path / "out", memory="64M", seed=8, **kw)
        assert res.buckets == 0 and res.engine == "compiled"
        assert len(caught) == (kind == "lines")
        outs.append((tmp_path / "out").read_bytes())
    assert all(out == outs[0] for out in outs)
    if kind == "records":
        assert records(outs[0], 24) == records(data, 24) and outs[0] != data
    else:
        assert split_lines(outs[0]) == split_lines(data + b"\n")


# --------------------------------------------------------------------------- properties


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # the fixture is constant
@given(data=st.binary(max_size=3000), seed=st.integers(0, 2**63 - 1))
def test_any_bytes_as_lines_property(tmp_path_factory, engine: str, data: bytes, seed: int) -> None:
    folder = tmp_path_factory.mktemp("p")
    src = write(folder / "in", data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = shuffle_file(src, folder / "out", lines=True, seed=seed)
        again = shuffle_file(src, folder / "again", lines=True, seed=seed)
    expected = data if data.endswith(b"\n") or not data else data + b"\n"
    out = (folder / "out").read_bytes()
    assert split_lines(out) == split_lines(expected) and res.records == expected.count(b"\n")
    assert len(caught) == 2 * (expected != data)
    assert (folder / "again").read_bytes() == out and again.seed == seed


@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=8),
    total=st.integers(0, 200),
    record_size=st.sampled_from([None, 1, 3]),
)
def test_sink_shares_property(sizes: list[int], total: int, record_size: int | None) -> None:
    """Shards get total*(i+1)//n - total*i//n records, wherever the pieces are cut."""

    class Collect:
        def __init__(self) -> None:
            self.data = b""
            self.name = "t"

        def write(self, data: np.ndarray) -> None:
            self.data += bytes(data)

    n = len(sizes)
    targets = [Collect() for _ in range(n)]
    sink = _passes.Sink(targets, record_size)
    sink.begin(total)
    rec = (
        (lambda i: b"%02d\n" % (i % 100))
        if record_size is None
        else (lambda i: bytes([i % 251]) * record_size)
    )
    stream = b"".join(rec(i) for i in range(total))
    # Pieces from the engines hold whole records; lines may be cut anywhere.
    unit = 3 if record_size is None else record_size
    gen = np.random.default_rng(len(stream))
    if record_size is None:
        cuts = gen.integers(0, len(stream) + 1, 3)
    else:
        cuts = gen.integers(0, total + 1, 3) * record_size
    for a, b in zip([0, *sorted(cuts)], [*sorted(cuts), len(stream)], strict=True):
        sink.write(np.frombuffer(stream[a:b], np.uint8))
    assert b"".join(t.data for t in targets) == stream
    assert [len(t.data) // unit for t in targets] == [
        total * (i + 1) // n - total * i // n for i in range(n)
    ]


@pytest.mark.parametrize("kind", ["records", "lines"])
def test_output_does_not_depend_on_mapping(
    tmp_path: Path, engine: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mapped windows and plain reads cut the input at the same places: same bytes out."""
    if kind == "records":
        data, kw = rand_bytes(12 * 150_001, seed=1), {"record_size": 12}
    else:
        data, kw = b"".join(make_lines(30_001, seed=1)), {"lines": True}
    src = write(tmp_path / "in", data)
    mapped = shuffle_file(src, tmp_path / "a", memory="1M", seed=5, **kw)
    monkeypatch.setattr(_passes, "USE_MMAP", False)
    shuffle_file(src, tmp_path / "b", memory="1M", seed=5, **kw)
    assert mapped.buckets >= 2
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_a_signal_swallowed_by_a_c_callback_still_stops_before_the_rename():
    """SIGTERM landing inside a callback from C (a ``__del__``, a weakref callback) raises where
    the exception is ignored; the run must still stop before anything irreversible
    (``Signals.check``)."""
    import signal

    from padless.shuffle import _safety

    # a handler of our own keeps the block from re-delivering the signal to this test process
    previous = signal.signal(signal.SIGTERM, lambda *args: None)
    try:
        with pytest.raises(_safety.Terminated, match="SIGTERM"):
            with _safety.Signals() as signals:
                signals.check()  # nothing received: goes on
                signals.received = signal.SIGTERM  # what the swallowed handler left behind
                signals.check()
    finally:
        signal.signal(signal.SIGTERM, previous)
