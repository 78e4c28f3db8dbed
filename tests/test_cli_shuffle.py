"""Tests of ``padless shuffle`` through the installed entry point, in subprocesses."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from padless.shuffle import shuffle_file

PADLESS = shutil.which("padless", path=os.path.dirname(sys.executable)) or "padless"


def padless(*args: str, stdin: bytes | None = None, cwd: Path | None = None):
    return subprocess.run(
        [PADLESS, "shuffle", *args], input=stdin, capture_output=True, cwd=cwd, timeout=120
    )


def lines_file(path: Path, n: int = 2000, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    data = b"".join(
        rng.integers(0, 256, int(k), dtype=np.uint8).tobytes().replace(b"\n", b"\x00") + b"\n"
        for k in rng.integers(0, 80, n)
    )
    path.write_bytes(data)
    return data


def test_records_file_to_file(tmp_path: Path) -> None:
    data = np.arange(10_000, dtype=np.int64).tobytes()
    (tmp_path / "in.bin").write_bytes(data)
    proc = padless("in.bin", "out.bin", "--record-size", "8", "--seed", "5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = np.fromfile(tmp_path / "out.bin", dtype=np.int64)
    assert sorted(out) == list(range(10_000)) and not np.array_equal(out, np.arange(10_000))
    assert b"10,000 records" in proc.stderr and b"seed 5" in proc.stderr
    assert b"reproduce" not in proc.stderr  # the seed was given
    assert proc.stdout == b""


def test_fresh_seed_is_printed_and_reproduces(tmp_path: Path) -> None:
    data = lines_file(tmp_path / "in.txt")
    proc = padless("in.txt", "a.txt", "--lines", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    seed = proc.stderr.split(b"--seed ")[1].split(b")")[0].decode()
    again = padless("in.txt", "b.txt", "--lines", "--seed", seed, cwd=tmp_path)
    assert again.returncode == 0
    assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()
    assert sorted((tmp_path / "a.txt").read_bytes().split(b"\n")) == sorted(data.split(b"\n"))


def test_stdin_to_stdout_matches_the_api(tmp_path: Path) -> None:
    data = lines_file(tmp_path / "in.txt", seed=3)
    proc = padless("-", "-", "--lines", "--seed", "9", "--memory", "64M", stdin=data, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # --memory covers the whole command: the shuffle itself gets 48 MiB less.
    shuffle_file(tmp_path / "in.txt", tmp_path / "api.txt", lines=True, seed=9, memory="16M")
    assert proc.stdout == (tmp_path / "api.txt").read_bytes() != data
    assert sorted(os.listdir(tmp_path)) == ["api.txt", "in.txt"]


def test_missing_final_newline_warns(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_bytes(b"a\nb\nc")
    proc = padless("in.txt", "out.txt", "--lines", "--seed", "0", "-q", cwd=tmp_path)
    assert proc.returncode == 0
    assert b"warning: the last line of 'in.txt' had no newline" in proc.stderr
    assert sorted((tmp_path / "out.txt").read_bytes().split(b"\n")) == [b"", b"a", b"b", b"c"]


def test_quiet_prints_nothing(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_bytes(b"a\nb\n")
    proc = padless("in.txt", "out.txt", "--lines", "-q", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == b"" and proc.stdout == b""


def test_trailing_bytes_exit_2(tmp_path: Path) -> None:
    (tmp_path / "in.bin").write_bytes(b"z" * 35)
    (tmp_path / "out.bin").write_bytes(b"old")
    proc = padless("in.bin", "out.bin", "--record-size", "16", cwd=tmp_path)
    assert proc.returncode == 2
    assert b"padless shuffle: error:" in proc.stderr and b"3 trailing bytes" in proc.stderr
    assert (tmp_path / "out.bin").read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["in.bin", "out.bin"]


def test_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_bytes(b"a\n")
    neither = padless("in.txt", "out.txt", cwd=tmp_path)
    assert neither.returncode == 2 and b"--record-size --lines is required" in neither.stderr
    both = padless("in.txt", "out.txt", "--lines", "--record-size", "4", cwd=tmp_path)
    assert both.returncode == 2 and b"not allowed with" in both.stderr
    memory = padless("in.txt", "out.txt", "--lines", "--memory", "big", cwd=tmp_path)
    assert memory.returncode == 2 and b"--memory must be a size" in memory.stderr
    small = padless("in.txt", "out.txt", "--lines", "--memory", "32M", cwd=tmp_path)
    assert small.returncode == 2 and b"--memory must be at least 64M" in small.stderr
    huge = padless("in.txt", "out.txt", "--lines", "--memory", "1000T", cwd=tmp_path)
    assert huge.returncode == 2 and b"Traceback" not in huge.stderr
    assert b"--memory='1000T' (1000.0T) is more than this machine's memory" in huge.stderr
    missing = padless("nope.txt", "out.txt", "--lines", cwd=tmp_path)
    assert missing.returncode == 2 and b"No such file" in missing.stderr
    assert os.listdir(tmp_path) == ["in.txt"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_device_on_stdout(tmp_path: Path) -> None:
    lines_file(tmp_path / "in.txt")
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [PADLESS, "shuffle", "in.txt", "-", "--lines", "--tmp-dir", str(tmp_path)],
            stdout=full,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
            timeout=120,
        )
    assert proc.returncode == 2
    assert b"No space left on device while writing standard output" in proc.stderr
    assert os.listdir(tmp_path) == ["in.txt"]


def test_shards(tmp_path: Path) -> None:
    data = lines_file(tmp_path / "in.txt", n=1001)
    proc = padless("in.txt", "out.txt", "--lines", "--shards", "3", "--seed", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    parts = [(tmp_path / f"out.txt.{i:05d}-of-00003").read_bytes() for i in range(3)]
    assert [p.count(b"\n") for p in parts] == [333, 334, 334]
    assert sorted(b"".join(parts).split(b"\n")) == sorted(data.split(b"\n"))
    assert b"3 shards" in proc.stderr


def _start(tmp_path: Path, *extra: str, size: int = 8 << 20) -> tuple[subprocess.Popen, Path]:
    """Start a shuffle of ``size`` 8-byte records in the background; return it and its tmp dir."""
    src = tmp_path / "in.bin"
    if not src.exists():
        np.random.default_rng(0).integers(0, 1 << 62, size, dtype=np.int64).tofile(src)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [PADLESS, "shuffle", str(src), str(tmp_path / "out.bin"), "--record-size", "8"]
        + ["--tmp-dir", str(work), "-q", *extra],
        stderr=subprocess.PIPE,
    )
    return proc, work


def _wait_for(proc: subprocess.Popen, folder: Path, what: str) -> None:
    """Wait until a name containing ``what`` appears in ``folder`` (the run is under way)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if any(what in name for name in os.listdir(folder)):
            time.sleep(0.05)
            return
        time.sleep(0.005)
    raise AssertionError(f"finished (or stalled) before it could be interrupted: {proc.poll()}")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_interrupt_exits_130_and_cleans_up(tmp_path: Path) -> None:
    proc, work = _start(tmp_path, "--memory", "64M")
    _wait_for(proc, work, "padless-shuffle")  # bucket files are being written
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert b"interrupted" in err
    assert os.listdir(work) == [] and sorted(os.listdir(tmp_path)) == ["in.bin", "work"]


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("path", ["buckets", "memory"])
def test_term_and_hangup_clean_up(tmp_path: Path, signame: str, path: str) -> None:
    """SIGTERM (schedulers) and SIGHUP (a closing terminal) leave nothing behind, in any pass.

    The process still ends by the signal (as it would have without padless).
    """
    sig = getattr(signal, signame)
    memory = "64M" if path == "buckets" else "512M"
    proc, work = _start(tmp_path, "--memory", memory, size=12 << 20)
    # buckets: wait for bucket files; memory (no bucket files): for the output being written.
    _wait_for(proc, work if path == "buckets" else tmp_path, "padless-")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -sig, err
    assert os.listdir(work) == [] and sorted(os.listdir(tmp_path)) == ["in.bin", "work"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_rerun_removes_what_a_killed_run_left(tmp_path: Path) -> None:
    """SIGKILL cannot be handled: the next run removes the leftovers (their owner is dead)."""
    proc, work = _start(tmp_path, "--memory", "64M")
    _wait_for(proc, work, "padless-shuffle")
    proc.kill()
    proc.communicate(timeout=60)
    left = os.listdir(work) + [n for n in os.listdir(tmp_path) if n.endswith(".padless-tmp")]
    assert left  # a bucket folder (and maybe the output being written)
    again = padless(
        "in.bin", "out.bin", "--record-size", "8", "--tmp-dir", "work", "--seed", "1", cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr
    said = b" ".join(again.stderr.split())  # the lines wrap at 80 columns wherever they fall
    assert said.count(b"left by an earlier shuffle whose process is gone") == len(left)
    assert os.listdir(work) == [] and sorted(os.listdir(tmp_path)) == ["in.bin", "out.bin", "work"]


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_whole_command_stays_within_memory(tmp_path: Path) -> None:
    """--memory covers the whole process: interpreter, numpy, the extension, buffers.

    240 MB of 16-byte records through bucket files with --memory 256M (the compiled engine).
    """
    src = tmp_path / "in.bin"
    np.random.default_rng(2).integers(0, 1 << 62, 30_000_000, dtype=np.int64).tofile(src)
    budget = 256 << 20
    # Started by a small process that reports its peak (wait4): a child forked straight from
    # this big test process would count this process's pages until it execs.
    spawn = "import os, sys; pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ); "
    spawn += "_, st, ru = os.wait4(pid, 0); print(os.waitstatus_to_exitcode(st), ru.ru_maxrss)"
    argv = [PADLESS, "shuffle", "in.bin", "out.bin", "--record-size", "16", "--memory", "256M"]
    proc = subprocess.run(
        [sys.executable, "-c", spawn, *argv], cwd=tmp_path, capture_output=True, timeout=300
    )
    code, peak_kib = proc.stdout.split()
    assert int(code) == 0, proc.stderr
    assert b"bucket files" in proc.stderr
    peak = int(peak_kib) * 1024  # ru_maxrss is in KiB on Linux
    assert peak <= budget, (peak, proc.stderr)
    assert os.path.getsize(tmp_path / "out.bin") == os.path.getsize(src)
