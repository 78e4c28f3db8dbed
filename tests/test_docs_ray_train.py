"""docs/ray.md's Ray Train recipe (``<!-- example: ray-train -->``) runs as written: in a fresh
process (it starts and shuts down its own local Ray of 2 CPUs), on a small Parquet corpus, and
finishes with a reported loss and a checkpoint holding the worker's batcher state."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("ray")
pytest.importorskip("torch")

DOC = Path(__file__).parent.parent / "docs" / "ray.md"


def test_the_ray_train_recipe_runs_on_two_cpus(tmp_path):
    found = re.search(r"<!-- example: ray-train -->\n```python\n(.*?)```", DOC.read_text(), re.S)
    assert found is not None
    rng = np.random.default_rng(5)
    (tmp_path / "corpus").mkdir()
    for f in range(2):
        docs = [rng.integers(1, 1000, int(k)).tolist() for k in rng.integers(1, 300, 1500)]
        pq.write_table(pa.table({"input_ids": docs}), tmp_path / "corpus" / f"{f}.parquet")
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # a Ray the test process runs (tests/test_ray.py) is not ours
    env["PYTHONWARNINGS"] = "ignore::DeprecationWarning"
    child = subprocess.Popen(
        [sys.executable, "-c", found.group(1)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # Ray's processes with it, so a timeout ends them all
    )
    try:
        out, _ = child.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, _ = child.communicate()
        pytest.fail(f"the recipe did not finish in 300 s (hangs?)\n{out[-4000:]}")
    assert child.returncode == 0, out[-6000:]
    assert re.search(r"^loss [0-9.]+$", out, re.M), out[-2000:]
    states = sorted((tmp_path / "ray_results").rglob("batcher-0.json"))
    assert states, "no checkpoint with the batcher's state"
    state = json.loads(states[-1].read_text())
    assert state["kind"] == "StreamBatcher" and state["emitted"] == 101  # saved at step 100
