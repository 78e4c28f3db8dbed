"""docs/post_training.md runs as written: its python blocks, in order, in one fresh process
with a temporary directory as its working directory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

PAGE = Path(__file__).resolve().parent.parent / "docs" / "post_training.md"


def test_post_training_page_runs_as_written(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) >= 4
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "StepPlan(world_size=8" in done.stdout
