"""torchdata's StatefulDataLoader with a padless sampler as its batch_sampler, 2 workers: it saves the
sampler state of the batches the loop received and resumes exactly, for every sampler."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torchdata")

from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

from padless import (  # noqa: E402
    BucketSampler,
    ExactLengthSampler,
    MixtureSampler,
    PackingSampler,
    TokenBudgetSampler,
)

LENGTHS = np.minimum(np.random.default_rng(5).lognormal(3.0, 0.8, 400).astype(np.int64) + 1, 120)

SAMPLERS = {
    "budget": lambda **kw: TokenBudgetSampler(LENGTHS, max_tokens=400, **kw),
    "exact": lambda **kw: ExactLengthSampler(LENGTHS, max_tokens=400, **kw),
    "buckets": lambda **kw: BucketSampler(LENGTHS, num_buckets=6, max_tokens=400, **kw),
    "packing": lambda **kw: PackingSampler(LENGTHS, capacity=128, rows_per_batch=3, **kw),
    "mixture": lambda **kw: MixtureSampler(
        {
            "a": TokenBudgetSampler(LENGTHS[:250], max_tokens=400),
            "b": TokenBudgetSampler(LENGTHS[250:], max_tokens=300),
        },
        temperature=2.0,
        **kw,
    ),
}


class Echo:
    """A map-style dataset whose items are their indices."""

    def __len__(self) -> int:
        return len(LENGTHS)

    def __getitem__(self, i: int) -> int:
        return i


def as_list(batch: list[int]) -> list[int]:
    return list(batch)


def loader(sampler, workers: int = 2) -> StatefulDataLoader:
    return StatefulDataLoader(
        Echo(),
        batch_sampler=sampler,
        num_workers=workers,
        collate_fn=as_list,
        prefetch_factor=3 if workers else None,
    )


# every sampler alone, and balanced on rank 1 of 2 (a mixture has no balance option)
CASES = [(name, False, 1) for name in SAMPLERS]
CASES += [(name, name != "mixture", 2) for name in SAMPLERS]


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.parametrize(("name", "balance", "world"), CASES)
def test_stateful_dataloader_resumes_exactly(name, balance, world):
    kw = {"seed": 3, "rank": world - 1, "world_size": world}
    if balance:
        kw["balance"] = True
    make = SAMPLERS[name]
    ref_sampler = make(**kw)
    ref = {}
    for epoch in (1, 2):
        ref_sampler.set_epoch(epoch)
        ref[epoch] = list(loader(ref_sampler, workers=0))
    n = len(ref[1])
    assert n >= 6
    marks = sorted({1, n // 2, n})  # positions, including the epoch's very end
    sampler = make(**kw)
    sampler.set_epoch(1)
    dl = loader(sampler)
    states, got = {}, []
    for batch in dl:  # the workers run ahead of this loop
        got.append(batch)
        if len(got) in marks:
            states[len(got)] = dl.state_dict()
    assert got == ref[1]
    for k, state in states.items():
        fresh = make(**kw)  # a new process: nothing but the saved state
        dl = loader(fresh)
        dl.load_state_dict(state)
        rest = list(dl)
        assert got[:k] + rest == ref[1], (name, k)
        fresh.set_epoch(2)
        assert list(dl) == ref[2], (name, k)


# the docs example runs in tests/test_docs_budget.py, which also checks every batch's budget


def _epochs(make, first, last):
    out = {}
    for epoch in range(first, last + 1):
        ref = make()
        ref.set_epoch(epoch)
        out[epoch] = list(loader(ref, workers=0))
    return out


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_saved_after_an_epoch_resumes_with_the_next_whichever_epoch_the_loop_saved(workers):
    """torchdata loads its state when iterated, after the loop's set_epoch, and iterates the
    sampler once more at once when the state was saved after its iterator ended. On the old code
    a loop resumed from the saved epoch repeated it; one resumed from the next epoch trained the
    finished epoch's batches in its place."""
    make = SAMPLERS["budget"]
    ref = _epochs(lambda: make(seed=3), 0, 2)
    sampler = make(seed=3)
    dl = loader(sampler, workers)
    sampler.set_epoch(0)
    assert list(dl) == ref[0]
    finished = dl.state_dict()  # after the loop: the iterator has ended
    for start in (0, 1):  # the epoch the loop was in, or the one after it
        fresh = make(seed=3)
        dl = loader(fresh, workers)
        dl.load_state_dict(finished)
        got = {}
        for epoch in range(start, 3):
            fresh.set_epoch(epoch)
            got[epoch] = list(dl)
        assert got == {**({0: []} if start == 0 else {}), 1: ref[1], 2: ref[2]}, start


def test_a_loaded_state_refuses_an_epoch_that_skips_or_repeats():
    make = SAMPLERS["budget"]
    sampler = make(seed=3)
    sampler.set_epoch(1)
    it = iter(sampler)
    for _ in range(3):
        next(it)
    mid = sampler.state_dict()  # epoch 1, 3 batches in
    for wrong in (0, 2):
        fresh = make(seed=3)
        fresh.load_state_dict(mid)
        with pytest.raises(
            ValueError, match=rf"set_epoch\({wrong}\) after loading a state of epoch 1"
        ):
            fresh.set_epoch(wrong)
        assert fresh.state_dict()["position"] == 3  # refused: nothing changed
        fresh = make(seed=3)
        fresh.set_epoch(wrong)  # the order torchdata's loader takes
        with pytest.raises(
            ValueError, match=rf"state is of epoch 1 at position 3, but set_epoch\({wrong}\)"
        ):
            fresh.load_state_dict(mid)
        assert fresh.epoch == wrong and fresh.state_dict()["position"] == 0
    fresh = make(seed=3)
    fresh.load_state_dict(mid)
    fresh.set_epoch(1)  # its own epoch keeps the position
    assert len(list(fresh)) == len(make(seed=3)) - 3
