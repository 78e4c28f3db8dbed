"""docs/preference.md runs as written: its python blocks in order, in one fresh process, in a
temporary directory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

DOC = Path(__file__).parent.parent / "docs" / "preference.md"


def test_the_page_runs(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 3
    code = "import torch\ntorch.set_num_threads(1)\n" + "\n".join(blocks)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, timeout=300, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "loss-bearing tokens per batch" in done.stdout
