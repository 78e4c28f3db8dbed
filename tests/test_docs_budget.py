"""Every documented recipe that pairs a budget with a collate keeps the budget in the tensors.

Each recipe of README.md and docs/ that builds a padless sampler with a token budget and a
collate runs here as written (on a small dataset where it needs one), and every batch it
collates is checked: rows × width <= the budget, for each padded tensor. A collate that rounds
the width after planning (``collate_padded(pad_id, multiple_of=8)`` beside a plan that does
not round) fails these tests.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(Path(__file__).parent))


def block_after(doc: str, heading: str) -> str:
    """The first ```python block after the line ``heading`` of ``doc`` (a path from the root)."""
    text = "\n" + (ROOT / doc).read_text()
    at = text.find(f"\n{heading}\n")
    if at < 0:
        raise LookupError(f"no heading {heading!r} in {doc}")
    found = re.search(r"```python\n(.*?)```", text[at:], re.S)
    if found is None:
        raise LookupError(f"no python block after {heading!r} in {doc}")
    return found.group(1)


def run(code: str, where: str, scope: dict) -> dict:
    exec(compile(code, where, "exec"), scope)
    return scope


def within_budget(batch: dict, budget: int) -> tuple[int, int]:
    """The (rows, width) of the batch's token tensor, after checking every padded tensor."""
    shapes = [
        tuple(v.shape) for k, v in batch.items() if k == "input_ids" or k in ("source", "target")
    ]
    assert shapes, sorted(batch)
    for rows, width in shapes:
        assert rows * width <= budget, f"a batch of {rows} × {width} = {rows * width} > {budget}"
    return shapes[0]


def small_dataset(n: int = 600, high: int = 300, seed: int = 0) -> tuple[list, list[int]]:
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, high, (n,), generator=g)
    dataset = [torch.randint(1, 100, (int(k),), generator=g) for k in sizes]
    return dataset, [len(x) for x in dataset]


def test_readme_dataloader_recipe_keeps_the_budget():
    dataset, lengths = small_dataset()
    code = block_after("docs/usage.md", "## With a PyTorch DataLoader")
    scope = run(
        code,
        "docs/usage.md:With a PyTorch DataLoader",
        {
            "dataset": dataset,
            "lengths": lengths,
            "pad_id": 0,
            "start_epoch": 0,
            "epochs": 1,
            "train_step": lambda batch: None,
        },
    )
    sampler, loader = scope["sampler"], scope["loader"]
    budget = int(sampler.max_tokens)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        seen = []
        for batch in loader:
            within_budget(batch, budget)
            seen.append(int(batch["attention_mask"].sum()))
        assert sum(seen) == sum(lengths)  # every item, once


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
def test_torchdata_example_keeps_the_budget(tmp_path):
    from _docs import run_example

    scope = run_example("torchdata", tmp_path)
    assert scope["checkpoint"]["epoch"] == 1
    sampler, loader = scope["make_loader"]()  # the example's own loader: two workers
    sampler.set_epoch(1)
    shapes = [within_budget(batch, 1024) for batch in loader]
    assert len(shapes) == len(sampler)
    assert sum(r for r, _ in shapes) == len(scope["lengths"])


@pytest.mark.parametrize(
    ("doc", "heading"),
    [("docs/data.md", "## Large corpora"), ("docs/large_corpora.md", "### Large corpora")],
)
def test_large_corpora_recipe_keeps_the_budget(doc, heading, tmp_path, monkeypatch):
    from torch.utils.data import DataLoader

    dataset, lengths = small_dataset(n=3000, high=600, seed=1)
    np.save(tmp_path / "lengths.npy", np.asarray(lengths, dtype=np.int32))
    monkeypatch.chdir(tmp_path)
    code = block_after(doc, heading)
    scope = {
        "DataLoader": DataLoader,
        "dataset": dataset,
        "items": dataset,
        "rank": 0,
        "world_size": 1,
    }
    run(code, f"{doc}:Large corpora", scope)
    sampler, loader = scope["sampler"], scope["loader"]
    budget = int(sampler.max_tokens)
    rows = sum(within_budget(batch, budget)[0] for batch in loader)
    assert rows == len(lengths)


def test_readme_static_shapes_recipe_keeps_the_budget():
    from torch.utils.data import DataLoader

    import padless

    lengths = padless.builtin_corpus()[:4000]
    dataset = [torch.ones(int(n), dtype=torch.long) for n in lengths]
    code = block_after("docs/usage.md", "## Static shapes (torch.compile, XLA)")
    scope = run(
        code,
        "docs/usage.md:Static shapes",
        {"padless": padless, "lengths": lengths, "dataset": dataset, "DataLoader": DataLoader},
    )
    budget = 4096  # shape_set(..., max_tokens=4096): every shape holds at most 4096 slots
    assert "max_tokens=4096" in code
    rows = 0
    for batch in scope["loader"]:
        within_budget(batch, budget)
        rows += int((batch["lengths"] > 0).sum())
    assert rows == len(lengths)
