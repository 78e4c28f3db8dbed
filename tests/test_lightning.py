"""padless.lightning: LightningBatches alone, and a real 2-process Lightning DDP run (torchrun, gloo)
with torchdata's StatefulDataLoader and padless.torch.StatefulLoader, resumed from checkpoints."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from padless import PackingSampler, TokenBudgetSampler
from padless.lightning import LightningBatches

HERE = Path(__file__).parent


def test_len_is_the_whole_epoch_after_a_mid_epoch_load():
    lengths = np.random.default_rng(1).integers(1, 40, 300)
    sampler = TokenBudgetSampler(lengths, max_tokens=200, seed=2, world_size=2, rank=1)
    batches = LightningBatches(sampler)
    whole = len(batches)
    batches.set_epoch(3)
    epoch3 = [list(b) for b in batches]
    state = {**batches.state_dict(), "position": 6}  # 3 steps of 2 processes trained
    fresh = LightningBatches(
        TokenBudgetSampler(lengths, max_tokens=200, seed=2, world_size=2, rank=1)
    )
    fresh.load_state_dict(state)
    assert len(fresh) == whole == len(epoch3)
    assert fresh.padless_sampler.epoch == 3
    assert [list(b) for b in fresh] == epoch3[3:]
    assert len(fresh) == whole  # still the whole epoch once the iteration has begun


def test_set_epoch_reaches_the_sampler_through_batch_sampler_sampler():
    sampler = PackingSampler(np.arange(1, 60), capacity=64, seed=0)
    batches = LightningBatches(sampler)
    assert batches.sampler is batches  # where Lightning and accelerate call set_epoch
    first = [list(b) for b in batches]
    batches.sampler.set_epoch(1)
    assert sampler.epoch == 1
    assert [list(b) for b in batches] != first


def test_refuses_what_is_not_a_padless_sampler_and_foreign_states():
    with pytest.raises(TypeError, match="must be a padless sampler"):
        LightningBatches([[0, 1], [2]])
    lengths = np.arange(1, 50)
    batches = LightningBatches(TokenBudgetSampler(lengths, max_tokens=100, seed=0))
    other = TokenBudgetSampler(lengths, max_tokens=120, seed=0).state_dict()
    with pytest.raises(ValueError, match="settings differ"):
        batches.load_state_dict(other)


def test_ddp_two_processes_resume_exactly(tmp_path):
    pytest.importorskip("lightning")
    pytest.importorskip("torchdata")
    sys.path.insert(0, str(HERE))
    from _procs import torchrun

    torchrun("_lightning_train.py", tmp_path)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["repeated"] == 0  # so every index is seen exactly once per epoch
    for res in ranks:
        assert [x["index"] for x in res["full"]] == res["bare"]  # set_epoch reached the sampler
        step = int(next(iter(res["torch_resumed"])))
        assert [x["index"] for x in res["torch_first"]] == res["bare"][:step]
        epochs = [[x["index"] for x in res["full"] if x["epoch"] == e] for e in (0, 1)]
        assert epochs[0] != epochs[1]
        for loader in ("resumed", "torch_resumed"):  # torchdata's and padless.torch's loader
            for mark, record in res[loader].items():
                tail = [x["index"] for x in res["full"] if x["step"] >= int(mark)]
                assert [x["index"] for x in record] == tail, (loader, mark)
    a, b = ranks[0]["full"], ranks[1]["full"]
    assert len(a) == len(b)
    for epoch in (0, 1):
        mine = [tuple(x["index"]) for x in a if x["epoch"] == epoch]
        theirs = [tuple(x["index"]) for x in b if x["epoch"] == epoch]
        assert not set(mine) & set(theirs)
        assert sorted(i for batch in mine + theirs for i in batch) == list(range(ranks[0]["n"]))


def test_docs_example(tmp_path):
    pytest.importorskip("lightning")
    pytest.importorskip("torchdata")
    sys.path.insert(0, str(HERE))
    from _docs import run_example

    run_example("lightning", tmp_path)
    assert (tmp_path / "ckpt" / "step=5.ckpt").exists()
