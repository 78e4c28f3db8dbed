"""The shuffle's commit, clean-up and source checks under failures, signals and other processes.

Shards are all flushed before the first rename and renamed with signals held back; a failure part
way says which shards were replaced. Temporaries of a live shuffle in another PID namespace are
left alone. The indexed shuffle removes its temporaries on SIGTERM. A source cut short while it
is shuffled is an ``OSError`` naming it, not a SIGBUS.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from padless.shuffle import _api, _passes, _safety, shard_paths, shuffle_file


def _records(path: Path, n: int) -> None:
    np.arange(n, dtype=np.int64).repeat(2).tofile(path)  # n records of 16 bytes


def _first_run(tmp_path: Path, shards: int = 4) -> tuple[Path, Path, list[bytes]]:
    """A source, and a complete earlier shuffle of it into ``shards`` files."""
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    _records(src, 4000)
    shuffle_file(src, dst, record_size=16, seed=1, shards=shards)
    return src, dst, [Path(p).read_bytes() for p in shard_paths(dst, shards)]


def _shards(dst: Path, shards: int = 4) -> list[bytes]:
    return [Path(p).read_bytes() for p in shard_paths(dst, shards)]


def _temporaries(folder: Path) -> list[str]:
    return [n for n in os.listdir(folder) if "padless" in n]


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


# --------------------------------------------------------------------------- shard commit


def test_a_failed_flush_leaves_every_old_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The third shard's fsync fails: no shard has been renamed yet, and the message says so."""
    src, dst, before = _first_run(tmp_path)
    real = os.fsync
    calls = {"n": 0}

    def failing(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(_api.os, "fsync", failing)
    with pytest.raises(OSError) as info:
        shuffle_file(src, dst, record_size=16, seed=2, shards=4)
    assert _shards(dst) == before
    assert _temporaries(tmp_path) == []
    message = str(info.value)
    assert "Input/output error while flushing the output to disk" in message
    assert ".out.bin.00002-of-00004." in message  # the file that could not be flushed
    assert "the 4 shards of" in message and "were left unchanged" in message


def test_a_failed_rename_part_way_says_which_shards_were_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst, before = _first_run(tmp_path)
    real = os.replace
    calls = {"n": 0}

    def failing(a: str, b: str) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.EIO, "Input/output error", b)
        real(a, b)

    monkeypatch.setattr(_api.os, "replace", failing)
    with pytest.raises(_api.PartialCommitError) as info:
        shuffle_file(src, dst, record_size=16, seed=2, shards=4)
    message = str(info.value)
    paths = shard_paths(dst, 4)
    assert isinstance(info.value, OSError) and info.value.errno == errno.EIO
    assert f"shards 0-1 ({paths[0]!r} to {paths[1]!r}) now hold this run's output" in message
    assert f"shards 2-3 ({paths[2]!r} to {paths[3]!r}) were not replaced" in message
    assert "inconsistent" in message and "unchanged" not in message
    after = _shards(dst)
    assert after[:2] != before[:2] and after[2:] == before[2:]  # what the message says
    assert _temporaries(tmp_path) == []


def test_sigint_during_the_renames_is_held_until_they_are_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C between two renames: every shard is renamed, then KeyboardInterrupt is raised."""
    src, dst, before = _first_run(tmp_path)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shuffle_file(src, fresh / "out.bin", record_size=16, seed=2, shards=4)
    expected = _shards(fresh / "out.bin")
    real = os.replace
    calls = {"n": 0}

    def interrupted(a: str, b: str) -> None:
        real(a, b)
        calls["n"] += 1
        if calls["n"] == 2:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(_api.os, "replace", interrupted)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        shuffle_file(src, dst, record_size=16, seed=2, shards=4)
    assert calls["n"] == 4
    assert _shards(dst) == expected != before
    assert _temporaries(tmp_path) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigterm_during_the_renames_is_held_until_they_are_done(tmp_path: Path) -> None:
    """SIGTERM between two renames (a real signal, in a child): all shards new, then it ends."""
    src, dst, _ = _first_run(tmp_path)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shuffle_file(src, fresh / "out.bin", record_size=16, seed=2, shards=4)
    expected = _shards(fresh / "out.bin")
    child = _run(
        """
        import os, signal
        from padless.shuffle import _api, shuffle_file
        real, calls = os.replace, []
        def replace(a, b):
            real(a, b)
            calls.append(b)
            if len(calls) == 2:
                os.kill(os.getpid(), signal.SIGTERM)
        _api.os.replace = replace
        shuffle_file("in.bin", "out.bin", record_size=16, seed=2, shards=4)
        print("not ended by the signal")
        """,
        tmp_path,
    )
    assert child.returncode == -signal.SIGTERM, child.stdout + child.stderr
    assert _shards(dst) == expected
    assert _temporaries(tmp_path) == []


# --------------------------------------------------------------------------- PID namespaces


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "true"],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def test_owner_in_another_pid_namespace_is_never_judged_by_its_pid() -> None:
    """A pid that no process has here may be a live process in another namespace."""
    dead = 2**22 + 12345  # above Linux's pid_max: no process has it here
    mine = f"{_safety.HOST}-{_safety.BOOT}-n{_safety.PIDNS}-{dead}-0123abcd"
    other = f"{_safety.HOST}-{_safety.BOOT}-n{_safety.PIDNS}0-{dead}-0123abcd"
    assert _safety.owner_gone(f".padless-shuffle-{mine}")
    assert not _safety.owner_gone(f".padless-shuffle-{other}")
    assert not _safety.owner_gone(f".out.bin.{other}.padless-tmp")


@pytest.mark.skipif(not _can_unshare(), reason="needs unshare --pid (root or user namespaces)")
def test_a_shuffle_in_another_pid_namespace_keeps_a_live_run_s_folder(tmp_path: Path) -> None:
    """A container on this host (same host name, a shared folder) must not remove the bucket
    folder of this live process: in its namespace this process's pid is nobody's."""
    live = tmp_path / _safety.folder_name()  # named by this process, which runs
    live.mkdir()
    (live / "bucket-0-0-0").write_bytes(b"x\n")
    (tmp_path / "small.txt").write_bytes(b"x\ny\n")
    code = (
        "from padless.shuffle import shuffle_file; "
        "print(shuffle_file('small.txt', 'out.txt', lines=True, seed=1).stale_removed)"
    )
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "()"
    assert (live / "bucket-0-0-0").read_bytes() == b"x\n"


# --------------------------------------------------------------------------- indexed: SIGTERM


def test_indexed_shuffle_removes_its_temporaries_on_sigterm(tmp_path: Path) -> None:
    """SIGTERM part way: the partial .bin is removed, the earlier pair kept, the process ends
    by the signal."""
    from padless.io.indexed import write_indexed

    rng = np.random.default_rng(0)
    docs = [rng.integers(1, 500, int(n)) for n in rng.integers(1, 50, 400)]
    write_indexed(docs, str(tmp_path / "corpus"), dtype=np.uint16)
    (tmp_path / "out.idx").write_bytes(b"earlier idx")
    (tmp_path / "out.bin").write_bytes(b"earlier bin")
    child = _run(
        """
        import os, signal
        from padless.shuffle import _indexed
        _indexed.GATHER_TOKENS = 500  # many steps
        real, calls = _indexed._gather, []
        def gather(*args):
            real(*args)
            calls.append(1)
            if len(calls) == 3:
                os.kill(os.getpid(), signal.SIGTERM)
        _indexed._gather = gather
        _indexed.shuffle_indexed("corpus", "out", seed=1)
        print("not ended by the signal")
        """,
        tmp_path,
    )
    assert child.returncode == -signal.SIGTERM, child.stdout + child.stderr
    assert sorted(os.listdir(tmp_path)) == ["corpus.bin", "corpus.idx", "out.bin", "out.idx"]
    assert (tmp_path / "out.idx").read_bytes() == b"earlier idx"
    assert (tmp_path / "out.bin").read_bytes() == b"earlier bin"


# --------------------------------------------------------------------------- source cut short


@pytest.mark.parametrize("memory", ["16M", "2M"])  # in memory; through buckets (pass 1)
def test_a_source_cut_while_shuffled_is_an_error_naming_it(tmp_path: Path, memory: str) -> None:
    """The source is cut to 1000 bytes after its second window: an OSError naming it, the
    output left as it was, no temporaries (the process was killed by SIGBUS when the windows
    were mapped)."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 120, 80_000)
    text = b"".join(b"a" * int(n) + b"\n" for n in lengths)  # about 4.8 MB of lines
    (tmp_path / "victim.txt").write_bytes(text)
    (tmp_path / "out.txt").write_bytes(b"keep me")
    child = _run(
        f"""
        import os
        from padless.shuffle import _passes, shuffle_file
        real, calls = _passes._last_newline, []
        def last_newline(*args):
            calls.append(1)
            if len(calls) == 2:
                os.truncate("victim.txt", 1000)
            return real(*args)
        _passes._last_newline = last_newline
        try:
            shuffle_file("victim.txt", "out.txt", lines=True, memory={memory!r}, seed=1)
        except OSError as exc:
            print("OSError", exc)
        print("windows", len(calls))
        """,
        tmp_path,
    )
    assert child.returncode == 0, f"rc {child.returncode}: {child.stderr}"
    assert "OSError [Errno 5] victim.txt ended early: it changed while being shuffled" in (
        child.stdout
    )
    assert "'out.txt' was left unchanged" in child.stdout
    assert (tmp_path / "out.txt").read_bytes() == b"keep me"
    assert sorted(os.listdir(tmp_path)) == ["out.txt", "victim.txt"]


def test_a_bucket_file_cut_short_is_named_before_it_is_mapped(tmp_path: Path) -> None:
    path = tmp_path / "bucket-0-0-0"
    path.write_bytes(b"x" * 100)
    with open(path, "rb", buffering=0) as f:
        with pytest.raises(OSError, match=r"bucket-0-0-0 ended early: .*\(100 bytes, 4096"):
            _passes._map(f, 0, 4096, str(path))
        mapping = _passes._map(f, 0, 100, str(path))
        assert mapping[:3] == b"xxx"
        mapping.close()
