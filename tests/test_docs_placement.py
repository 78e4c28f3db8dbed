"""docs/placement.md's python blocks run as written, in order, in one fresh process."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).parent.parent / "docs" / "placement.md"


def test_placement_page_runs(tmp_path):
    pytest.importorskip("torch")
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) >= 5
    code = "\n".join(blocks)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "cost.json").exists()
    assert "micro-batches; degrees" in proc.stdout and "bubble" in proc.stdout
