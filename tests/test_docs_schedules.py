"""The README's section "Schedules over the run" runs as written, on a tiny model: one optimizer
step per step of the ramp, and the stream, the mixture and the decomposition serve what the
section says."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

import padless

README = Path(__file__).parent.parent / "docs" / "training.md"


class Tiny(torch.nn.Module):
    """An embedding: the smallest model the loop can train."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(64, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed(ids % 64)


def test_the_schedules_section_runs_and_trains_on_the_ramp():
    text = README.read_text()
    at = text.index("\n## Schedules over the run\n")
    code = re.search(r"```python\n(.*?)```", text[at:], re.S).group(1)
    lengths = np.random.default_rng(4).integers(1, 400, 3000)
    dataset = [[int(n) % 60 + 1] * int(n) for n in lengths]
    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    steps: list[int] = []
    step = optimizer.step

    def counted_step(*a, **k):
        steps.append(1)
        return step(*a, **k)

    optimizer.step = counted_step  # counts the optimizer steps the loop takes
    scope = {
        "__name__": "readme_schedules",
        "DataLoader": DataLoader,
        "lengths": lengths,
        "dataset": dataset,
        "model": model,
        "optimizer": optimizer,
        "epochs": 1,
        "rank": 0,
        "world_size": 1,
        "tokens": np.random.default_rng(5).integers(0, 50_000, 400_000).astype(np.uint16),
        "web": padless.TokenBudgetSampler(lengths[:2000], max_tokens=4096, seed=1),
        "curated": padless.TokenBudgetSampler(lengths[2000:], max_tokens=4096, seed=2),
    }
    exec(compile(code, "docs/training.md:Schedules over the run", "exec"), scope)
    sampler = scope["sampler"]
    assert len(steps) == len(sampler.step_sizes())  # one optimizer step per ramp step
    assert sampler.step_sizes()[0] == 8 and sampler.step_sizes().sum() == len(sampler)
    assert tuple(scope["x"].shape) == (128, 256)  # the warm-up's first length, 32k tokens
    batches = list(scope["stream"])  # an epoch of 12 steps: all before the first change (100)
    assert len(batches) == 12 and {tuple(x.shape) for x, _ in batches} == {(128, 256)}
    assert scope["stream"].num_steps_at(300) == 2048
    (phase,) = scope["mix"].stats()["phases"]  # one epoch, all before the annealing at 9000
    web = phase["corpora"]["web"]
    assert abs(web["share"] - 0.9) * phase["batches"] <= 1  # drawn per phase: within a batch
    # the decomposition's loader serves dense pieces: every batch one length, no padding
    for batch in scope["loader"]:
        assert bool(batch["attention_mask"].all())


def test_the_trainer_recipe_follows_the_ramp_and_the_warm_up(tmp_path, monkeypatch):
    from padless.hf import PaddingFreeCollator
    from padless.planners.packing import ScheduledPiece
    from tests import _hf_train as hft

    # the block is named (<!-- example: trainer-ramp -->): the snippet test leaves it to this one
    text = README.read_text()
    code = re.search(r"<!-- example: trainer-ramp -->\n```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    received: list[tuple[int, int]] = []  # (tokens, longest sequence) of every micro-batch
    collate = PaddingFreeCollator.__call__

    def recorded(self, features):
        out = collate(self, features)
        if isinstance(features[0], ScheduledPiece):  # not the trainer's check_packed probe
            received.append((out["input_ids"].numel(), int(out["position_ids"].max()) + 1))
        return out

    monkeypatch.setattr(PaddingFreeCollator, "__call__", recorded)
    rs = np.random.default_rng(6)
    lengths = rs.integers(300, 900, 120)  # 2 to 4 documents per planned row of 2048
    dataset = [{"input_ids": rs.integers(1, hft.VOCAB, int(n)).tolist()} for n in lengths]
    scope = {
        "__name__": "readme_trainer",
        "padless": padless,
        "Schedule": padless.Schedule,
        "lengths": lengths,
        "rows": dataset,
        "llm": hft.tiny_model(),
    }
    torch.set_num_threads(1)
    exec(compile(code, "docs/training.md:Schedules over the run (trainer)", "exec"), scope)
    sampler, trainer = scope["sampler"], scope["trainer"]
    sampler.set_epoch(0)
    assert trainer.state.global_step == sampler.step_sizes().size > 1
    assert sampler.step_sizes()[0] == 4
    assert trainer.lr_scheduler.get_last_lr()[0] < 3e-4  # warmed up, then annealing
    # every step is in the warm-up's first phase: sequences of at most 512 tokens reach the
    # model (documents of 300 to 900 cut where they must be), and every token once
    assert len(received) == len(sampler) and max(n for _, n in received) == 512
    assert sum(t for t, _ in received) == int(lengths.sum())
