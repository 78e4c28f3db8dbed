"""The GPU benchmark's dry run (benchmarks/gpu/run.sh --dry-run) works, so the script cannot rot
before a GPU runs it: every section reports, the table fits 80 columns, and the four training
strategies took the same number of steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("train", "packed", "to_gpu", "memory", "shapes", "calibrate")


def test_dry_run(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu" / "run.sh"), "--dry-run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = proc.stdout.splitlines()
    assert table and table[0].startswith("padless on a GPU")
    too_wide = [line for line in table if len(line) > 80 and not line.startswith("JSON: ")]
    assert not too_wide, too_wide
    assert any("skipped (needs CUDA): pinned host-to-device copy" in line for line in table)

    report = json.loads((tmp_path / "gpu_bench.json").read_text())
    assert report["dry_run"] is True
    for key in SECTIONS:
        status = report["sections"][key]["status"]
        assert status in ("ok", "skipped: needs CUDA"), (key, status)
    train = report["sections"]["train"]
    steps = {s["steps"] for s in train["strategies"].values()}
    assert len(train["strategies"]) == 4 and steps == {train["steps"]}, train["strategies"]
    for s in train["strategies"].values():
        assert s["tokens_per_s"] > 0 and s["held_out_loss"] == s["held_out_loss"]  # not NaN
    assert all(c["max_logit_diff"] < 0.5 for c in report["sections"]["packed"]["checks"])
    shapes = report["sections"]["shapes"]
    assert shapes["fixed_shapes"]["compiles"] == shapes["expected_compiles"]
    calibrate = report["sections"]["calibrate"]
    assert [h[0] for h in calibrate["heldout"]] == [48, 96]  # the dry run's held-out lengths
    assert all(m > 0 and p > 0 for _, m, p in calibrate["heldout"])
    assert calibrate["max_error"] == max(abs(p - m) / m for _, m, p in calibrate["heldout"])
