"""Temporary files of the writes that put a file in place (``write_exactly``: ``plan -o``,
caches, plots; ``write_indexed``): removed on SIGTERM, and by the next write into the folder
once a writer killed by SIGKILL is gone (they were left behind: an 80 MB ``.bin`` per kill)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import padless
from padless.core._output import write_exactly
from padless.core._temporary import OUTPUT_PATTERN

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

# a child that writes ``what`` at the path given, stalls half way (its temporary file exists)
# and waits to be signalled
CHILD = r"""
import sys, time, numpy as np, padless
from padless.core._output import write_exactly
what, path = sys.argv[1], sys.argv[2]
def stall():
    print("writing", flush=True)
    time.sleep(60)
if what == "exactly":
    def write(stream):
        stream.write(b"x" * (1 << 20))
        stream.flush()
        stall()
    write_exactly(path, write)
else:
    def documents():
        for _ in range(8):
            yield np.ones(1 << 17, np.uint16)
        stall()
    padless.write_indexed(documents(), path, dtype=np.uint16)
"""


def _temporaries(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if OUTPUT_PATTERN.fullmatch(n))


def _killed(folder: Path, what: str, target: Path, signum: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, what, str(target)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"writing\n"
    deadline = time.monotonic() + 30
    while not _temporaries(folder) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _temporaries(folder)  # the write is under way
    proc.send_signal(signum)
    proc.communicate(timeout=60)
    assert proc.returncode == -signum
    return proc


@pytest.mark.parametrize("what", ["exactly", "indexed"])
def test_sigterm_removes_the_temporary_and_ends_the_process_by_it(tmp_path, what):
    target = tmp_path / ("out.npz" if what == "exactly" else "corpus")
    _killed(tmp_path, what, target, signal.SIGTERM)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("what", ["exactly", "indexed"])
def test_the_next_write_removes_what_a_killed_writer_left(tmp_path, what):
    target = tmp_path / ("out.npz" if what == "exactly" else "corpus")
    _killed(tmp_path, what, target, signal.SIGKILL)
    left = _temporaries(tmp_path)
    assert left  # SIGKILL cannot be handled
    if what == "exactly":
        write_exactly(tmp_path / "other.json", lambda stream: stream.write(b"{}"))
        assert sorted(os.listdir(tmp_path)) == ["other.json"]
    else:
        padless.write_indexed([[1, 2]], tmp_path / "other", dtype=np.uint16)
        assert sorted(os.listdir(tmp_path)) == ["other.bin", "other.idx"]


def test_a_live_writers_temporary_is_left_alone(tmp_path):
    """This process's own temporary (its writer runs) survives another write's clean-up."""
    from padless.core._temporary import create_temporary

    mine = create_temporary(str(tmp_path), "busy.bin")
    write_exactly(tmp_path / "other.json", lambda stream: stream.write(b"{}"))
    assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(mine), "other.json"])
