"""Run a command in its own process group and kill the whole group on timeout (for launcher tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def run_group(cmd: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    """Run cmd in its own process group; on timeout kill that whole group (workers included)."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **kw,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{cmd} timed out after {timeout} s:\n{out[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, None)


def torchrun(script: str, out: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node 2 tests/<script> <out>`` on CPU (gloo)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(HERE.parent / "src"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    proc = run_group([*cmd, str(HERE / script), str(out)], timeout, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return proc
