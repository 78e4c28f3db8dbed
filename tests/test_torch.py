"""padless.torch: collate, DataLoader resume through workers, and a real DDP run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from padless import TokenBudgetSampler
from padless.torch import StatefulLoader, collate_padded, dist_kwargs


def test_collate_padded_rounds_width_and_masks():
    out = collate_padded(9, multiple_of=8)([[1, 2, 3], np.array([4]), torch.tensor([5, 6])])
    assert out["input_ids"].shape == (3, 8)
    assert out["input_ids"][1].tolist() == [4] + [9] * 7
    assert out["attention_mask"].sum(1).tolist() == [3, 1, 2]
    assert out["lengths"].tolist() == [3, 1, 2]
    assert out["input_ids"].dtype == torch.long


def test_collate_padded_fields():
    collate = collate_padded(0, fields=("source", "target"))
    out = collate([{"source": [1, 2], "target": [3]}, ([4], [5, 6, 7])])
    assert out["source"].tolist() == [[1, 2], [4, 0]]
    assert out["target"].tolist() == [[3, 0, 0], [5, 6, 7]]
    assert out["target_mask"].tolist() == [[1, 0, 0], [1, 1, 1]]


def test_collate_padded_errors():
    with pytest.raises(ValueError, match="multiple_of must be a positive int, got 0"):
        collate_padded(0, multiple_of=0)
    with pytest.raises(TypeError, match="integer token ids"):
        collate_padded(0)([[1.5, 2.0]])
    with pytest.raises(ValueError, match="1-D token sequence"):
        collate_padded(0)([[[1, 2]]])


def test_dist_kwargs_without_process_group():
    assert dist_kwargs() == {"rank": 0, "world_size": 1}


class Echo(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def _loader(lengths, workers):
    sampler = TokenBudgetSampler(lengths, max_tokens=60, seed=2)
    return StatefulLoader(
        DataLoader(
            Echo(len(lengths)),
            batch_sampler=sampler,
            num_workers=workers,
            collate_fn=lambda xs: list(xs),
            prefetch_factor=4 if workers else None,
        )
    )


def test_resume_through_dataloader_with_workers():
    lengths = np.random.default_rng(0).integers(1, 20, 300)
    full = list(_loader(lengths, 0))
    loader = _loader(lengths, 2)
    got = []
    for batch in loader:
        got.append(batch)
        if len(got) == 7:
            state = loader.state_dict()  # workers have prefetched well past 7
            break
    assert loader.sampler._yielded > 7
    resumed = _loader(lengths, 2)
    resumed.load_state_dict(state)
    assert got + list(resumed) == full


@pytest.mark.parametrize("drop_last", [False, True])
def test_ddp_two_processes_equal_steps(tmp_path, drop_last):
    script = Path(__file__).with_name("_ddp_train.py")
    init = tmp_path / "init"
    proc = subprocess.run(
        [sys.executable, str(script), "2", "1" if drop_last else "0", str(init)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    rows = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("init.rank*.json"))]
    assert sorted(r["rank"] for r in rows) == [0, 1]
    steps = {r["steps"] for r in rows}
    assert len(steps) == 1 and steps == {rows[0]["len"]}
    assert rows[0]["sum"] == 2 * rows[0]["steps"]
    assert rows[0]["steps"] > 0


def test_collate_padded_pickles_for_spawned_workers():
    import pickle

    collate = pickle.loads(pickle.dumps(collate_padded(3, multiple_of=2, fields=["src"])))
    assert collate([{"src": [1]}])["src"].tolist() == [[1, 3]]


def test_stateful_loader_state_at_the_start_of_the_next_epoch():
    """Issue 13.2: a checkpoint after set_epoch(next), before the first batch, is that epoch's start."""
    from padless import TokenBudgetSampler
    from padless.torch import StatefulLoader

    sampler = TokenBudgetSampler(np.arange(1, 40), max_tokens=60, seed=0)
    loader = StatefulLoader(DataLoader(range(39), batch_sampler=sampler))
    assert len(list(loader)) == len(sampler)
    loader.set_epoch(1)
    state = loader.state_dict()
    assert (state["epoch"], state["position"]) == (1, 0)
    again = StatefulLoader(
        DataLoader(range(39), batch_sampler=TokenBudgetSampler(np.arange(1, 40), max_tokens=60))
    )
    again.load_state_dict(state)
    sampler.set_epoch(1)
    assert [b.tolist() for b in again] == [b.tolist() for b in loader]


class _Batches(torch.utils.data.Dataset):
    """A dataset indexed by a whole batch (lhotse's K2SpeechRecognitionDataset takes a CutSet)."""

    def __len__(self) -> int:
        return 39

    def __getitem__(self, batch):
        return torch.as_tensor(list(batch))


def test_stateful_loader_of_a_sampler_of_whole_batches_with_workers():
    """DataLoader(dataset, sampler=padless sampler, batch_size=None), as the speech guide
    builds it around a CutSampler: the sampler's own state with 2 workers counted their
    prefetch (a resume lost 4 of 28 batches) and StatefulLoader, the warning's advice, refused
    the loader (no batch_sampler); it counts what the loop received."""
    from padless import TokenBudgetSampler
    from padless.torch import StatefulLoader

    def loader():
        sampler = TokenBudgetSampler(np.arange(1, 40), max_tokens=60, seed=0)
        return StatefulLoader(
            DataLoader(_Batches(), sampler=sampler, batch_size=None, num_workers=2)
        )

    full = [b.tolist() for b in loader()]
    first, got = loader(), []
    for batch in first:
        got.append(batch.tolist())
        if len(got) == 3:
            state = first.state_dict()
            break
    assert state["position"] == 3
    again = loader()
    again.load_state_dict(state)
    assert got + [b.tolist() for b in again] == full
    with pytest.raises(TypeError, match="or loader.sampler with batch_size=None"):
        StatefulLoader(DataLoader(_Batches(), batch_size=None))


# --------------------------------------------------------------------------- budget includes the collate


def test_collate_takes_the_width_multiple_from_the_plan():
    from padless import BatchPlan, FixedShapes, PackingSampler, PlanSampler, TokenBudget
    from padless.torch import collate_for

    lens = [3, 9, 17, 5]
    data = [torch.arange(1, n + 1) for n in lens]
    sampler = TokenBudgetSampler(lens, max_tokens=64, pad_to_multiple_of=8)
    for collate in (
        collate_for(sampler, pad_id=0),
        collate_for(sampler, pad_id=0, multiple_of=8),  # the plan's own multiple, said again
        collate_padded(0, plan=sampler),
        collate_padded(0, plan=sampler.spec),
        collate_padded(0, plan=sampler.epoch_plan(0)[0]),
        collate_for(
            PlanSampler(lens, TokenBudget(max_tokens=64, pad_to_multiple_of=8), window=2), pad_id=0
        ),
    ):
        assert collate.multiple_of == 8
        assert collate([data[0], data[2]])["input_ids"].shape == (2, 24)
    assert collate_padded(0, plan=TokenBudgetSampler(lens, max_tokens=64)).multiple_of == 1
    assert collate_padded(0, plan=BatchPlan([0, 1], [0, 2])).multiple_of == 1
    # a collate that rounds to another multiple than the plan's is refused, naming both
    unrounded = TokenBudgetSampler(lens, max_tokens=64)
    with pytest.raises(ValueError, match=r"multiple_of=8 is not the plan's pad_to_multiple_of=1"):
        collate_padded(0, multiple_of=8, plan=unrounded)
    with pytest.raises(ValueError, match=r"multiple_of=8 is not the plan's pad_to_multiple_of=1"):
        collate_for(unrounded, pad_id=0, multiple_of=8)
    with pytest.raises(ValueError, match=r"multiple_of=4 is not the plan's pad_to_multiple_of=8"):
        collate_for(sampler, pad_id=0, multiple_of=4)
    with pytest.raises(ValueError, match="multiple_of must be a positive int"):
        collate_padded(0, multiple_of=0, plan=sampler)
    with pytest.raises(TypeError, match="plan must be a padless sampler"):
        collate_padded(0, plan=[3, 4])
    with pytest.raises(ValueError, match="collate_packed"):
        collate_padded(0, plan=PackingSampler(lens, capacity=32))
    shaped = collate_padded(0, plan=FixedShapes(shapes=[(2, 32), (1, 64)]))
    assert shaped([data[0], data[1]])["input_ids"].shape == (2, 32)


def _same_batch(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(b[key])), key


@pytest.mark.parametrize(
    ("strategy", "settings", "given"),
    [
        ("TokenBudget", {"max_tokens": 40, "pad_to_multiple_of": 8}, "plan"),
        ("Packing", {"capacity": 24, "max_per_row": 3}, "max_per_row"),
        ("FixedShapes", {"shapes": [(4, 16), (2, 32)], "pad_batches": False}, "shapes"),
    ],
)
def test_collate_for_is_the_samplers_collate(strategy, settings, given):
    """collate_for(sampler) and collate_for(spec) build the same collate, from spec.collate_form();
    a setting the source gives may not be passed again."""
    import padless
    from padless.torch import collate_for

    spec = getattr(padless, strategy)(**settings)
    lens = [3, 9, 17, 5, 12, 7, 2, 20]
    data = [torch.arange(1, n + 1) for n in lens]
    sampler = padless.PlanSampler(lens, spec, seed=1)
    for batch in sampler:
        want = collate_for(sampler, pad_id=0)([data[i] for i in batch])
        for source in (sampler, spec):
            _same_batch(collate_for(source, pad_id=0)([data[i] for i in batch]), want)
    with pytest.raises((TypeError, ValueError), match=f"{given} must not be passed"):
        collate_for(sampler, pad_id=0, **{given: 3})
    with pytest.raises(TypeError, match="source must be a padless sampler"):
        collate_for([3, 4], pad_id=0)


def test_collate_for_a_stream_is_the_stream_collate():
    from padless import Packing, StreamBatcher
    from padless.torch import StreamDataset, collate_for
    from padless.torch._streams import stream_collate

    docs = [list(range(1, n + 1)) for n in (3, 9, 5, 12, 7, 2)]
    batcher = StreamBatcher(docs, Packing(capacity=16), buffer=4)
    dataset = StreamDataset(docs, Packing(capacity=16), buffer=4)
    for batch in batcher:
        want = stream_collate(batcher.spec)(batch)
        _same_batch(collate_for(batcher)(batch), want)
        _same_batch(collate_for(dataset)(batch), want)


@pytest.mark.parametrize("fields", [None, ("source", "target")])
def test_every_collated_batch_is_within_its_budget(fields):
    from padless import Buckets, ExactLength, PlanSampler, TokenBudget
    from padless.torch import collate_for

    rng = np.random.default_rng(4)
    n = 400
    if fields is None:
        lens = rng.integers(1, 80, n)
        data = [torch.ones(int(k), dtype=torch.long) for k in lens]
    else:
        lens = rng.integers(1, 60, (n, 2))
        data = [
            {f: torch.ones(int(k), dtype=torch.long) for f, k in zip(fields, row, strict=True)}
            for row in lens
        ]
    for m in (3, 8, 64):
        for spec in (
            TokenBudget(max_tokens=1000, pad_to_multiple_of=m),
            TokenBudget(max_tokens=1000, multiple_of=8, pad_to_multiple_of=m),
            Buckets(num_buckets=3, max_tokens=1000, pad_to_multiple_of=m),
            ExactLength(max_tokens=1000, leftovers="merge", pad_to_multiple_of=m),
        ):
            sampler = PlanSampler(lens, spec, seed=m)
            collate = collate_for(sampler, pad_id=0, fields=fields)
            seen = 0
            for batch in sampler:
                out = collate([data[i] for i in batch])
                for name in fields or ("input_ids",):
                    rows, width = out[name].shape
                    assert width % m == 0 and rows * width <= 1000, (spec, m, rows, width)
                seen += len(batch)
            assert seen == n
