"""docs/grain.md runs as written: its ```python blocks, in order, in one fresh process, in a
temporary directory, and print what the page says they print."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("grain")
pytest.importorskip("jax")

DOC = Path(__file__).parent.parent / "docs" / "grain.md"


def test_the_grain_page_runs(tmp_path):
    code = "\n".join(re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S))
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert "'inputs_segment_ids': ((4, 256), 'int32')" in lines[0]
    assert lines[2] == "[7, 7, 7]"  # equal steps per rank
    assert lines[3:6] == ["True", "True", "True"]  # every doc; resume; elastic
    assert lines[7] == "2 compilations for 2 shapes"
    assert lines[8].startswith("(512,)")
