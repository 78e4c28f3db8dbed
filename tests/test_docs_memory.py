"""docs/memory.md's example runs as written, and what it builds keeps its memory limit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).parent.parent / "docs" / "memory.md"


def test_memory_example_probes_saves_and_plans_within_the_limit(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import padless

    code = re.search(r"<!-- example: memory -->\n```python\n(.*?)```", DOC.read_text(), re.S)
    assert code is not None
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: more threads on a busy machine only wait
    try:
        scope: dict = {"__name__": "docs_example_memory"}
        exec(compile(code.group(1), "docs/memory.md:memory", "exec"), scope)
    finally:
        torch.set_num_threads(threads)
    memory, limit = scope["memory"], padless.core.memory.as_bytes(scope["limit"])
    assert padless.MemoryModel.load(tmp_path / "memory.json") == memory
    assert memory.device.startswith("cpu") and len(memory.points) >= 10
    assert [lens for _, lens in scope["probe"].largest] == [32, 64, 128, 256]
    for rows, length in scope["shapes"].shapes:
        assert memory.predict(rows, length) <= limit < memory.predict(rows + 1, length)
    for size, longest in zip(scope["sizes"], [64, 128, 256, 512], strict=True):
        most = memory.batch_size(longest, limit)
        assert size == (most if most < 8 else most // 8 * 8) > 0  # multiples of 8 where 8 fit
    for spec in (scope["budget"], scope["buckets"]):
        plan = spec.plan(scope["lengths"])
        assert len(plan) > 1 and sorted(plan.indices.tolist()) == list(range(len(scope["lengths"])))
