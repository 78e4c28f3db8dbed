"""Packing with a capacity schedule (a sequence-length warm-up for packed rows, issue 28).

The plan packs at the schedule's largest capacity; a batch of a step at capacity ``C`` is
delivered as ``C_max / C`` rows of ``C`` per planned row. These tests run the real DataLoader and
collate and check what a model would receive: every token of the epoch exactly once, rows of the
step's capacity, targets as ``loss_tokens`` counts them, resume equal to no interruption.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import padless
from padless import Packing, Schedule
from padless.planners.packing import (
    PieceDataset,
    ScheduledPiece,
    layout_row,
    scheduled_stride,
    unwrap_scheduled,
)

LENGTHS = np.random.default_rng(3).lognormal(4.0, 0.9, 300).astype(np.int64).clip(1, 700)
WARMUP = Schedule.piecewise([0, 3, 7], [64, 128, 256])
BASE = 1_000  # token t of document i is i * BASE + t: every token of the corpus is unique
PAD = -1


def _corpus(lengths: np.ndarray) -> list[list[int]]:
    return [list(range(i * BASE, i * BASE + n)) for i, n in enumerate(lengths.tolist())]


def _sampler(**options) -> padless.PlanSampler:
    options.setdefault("seed", 5)
    spec = Packing(capacity=WARMUP, rows_per_batch=2, oversize="split")
    return padless.PlanSampler(LENGTHS, spec, **options)


def _loader(sampler: padless.PlanSampler) -> DataLoader:
    from padless.torch import collate_for

    dataset = PieceDataset(_corpus(LENGTHS), capacity=sampler.spec.row_capacity, scheduled=True)
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate_for(sampler, pad_id=PAD))


def _real_tokens(batch: dict) -> list[int]:
    ids = batch["input_ids"]
    return ids[ids != PAD].tolist()


# ------------------------------------------------------------------------------ the spec


@pytest.mark.parametrize(
    ("capacity", "error", "match"),
    [
        (Schedule.piecewise([0, 10], [96, 256]), ValueError, r"capacity at step 0 is 96, which"),
        (Schedule.linear(0.5, 1.0, steps=10), TypeError, "integer schedule"),
        (Schedule.piecewise([0, 10], [0, 256]), ValueError, r"capacity at step 0 must be"),
        (Schedule.piecewise([0, 5], [1 << 27, 1 << 29]), ValueError, r"at step 5 must be <="),
    ],
)
def test_bad_capacity_schedules_are_refused_naming_the_step(capacity, error, match):
    with pytest.raises(error, match=match):
        Packing(capacity=capacity)


def test_a_capacity_schedule_is_a_setting_like_any_other():
    spec = Packing(capacity=WARMUP, rows_per_batch=2)
    assert spec.row_capacity == 256 and spec.capacity_schedule == WARMUP
    assert Packing(**spec.as_dict()) == spec
    assert spec.as_dict()["capacity"] == WARMUP.as_dict()
    assert Packing(capacity=Schedule.constant(512)).capacity == 512  # a constant is its int
    assert spec.plan(LENGTHS[LENGTHS <= 256]).capacity == 256  # planned at the largest


def test_forms_that_cannot_follow_the_step_refuse_it():
    spec = Packing(capacity=WARMUP)
    with pytest.raises(ValueError, match="context_parallel must be 1 with a capacity schedule"):
        Packing(capacity=WARMUP, context_parallel=2)
    with pytest.raises(ValueError, match="window must be None with capacity="):
        padless.PlanSampler(LENGTHS.clip(1, 256), spec, window=100)
    with pytest.raises(ValueError, match="histogram form"):
        padless.PlanSampler(LENGTHS.clip(1, 256), spec, window="histogram")
    with pytest.raises(ValueError, match="no stream form"):
        padless.StreamBatcher([[1, 2]], spec)


# ------------------------------------------------------------------------------ the layout


def _first_fit_whole(sizes: list[int], capacity: int, parts: int) -> bool:
    """Whether first fit decreasing places every sequence whole (the plain reference)."""
    room = [capacity] * parts
    for n in sorted(sizes, reverse=True):
        r = next((r for r in range(parts) if room[r] >= n), None)
        if r is None:
            return False
        room[r] -= n
    return True


@given(
    st.integers(1, 40),
    st.integers(1, 8),
    st.lists(st.integers(0, 200), min_size=0, max_size=30),
)
# found by make fuzz: the second sequence's head went to row 2 and its tail to row 1
@example(capacity=2, parts=3, raw=[3, 3])
def test_layout_row_keeps_every_token_and_cuts_only_where_it_must(capacity, parts, raw):
    sizes, total = [], 0
    for n in raw:  # a planned row: at most capacity · parts tokens
        if total + n <= capacity * parts:
            sizes.append(n)
            total += n
    rows = layout_row(sizes, capacity, parts)
    assert len(rows) == parts
    assert all(sum(b - a for _, a, b in row) <= capacity for row in rows)
    pieces: dict[int, list[tuple[int, int]]] = {}
    for row in rows:
        for i, a, b in row:
            pieces.setdefault(i, []).append((a, b))
    for i, n in enumerate(sizes):  # each sequence's pieces cover it once, in document order
        spans = pieces[i]
        assert spans[0][0] == 0 and spans[-1][1] == n
        assert all(spans[k][1] == spans[k + 1][0] for k in range(len(spans) - 1))
    cuts = sum(len(v) - 1 for v in pieces.values())
    assert cuts <= parts - 1  # every cut fills a row
    if _first_fit_whole(sizes, capacity, parts):
        assert cuts == 0


def test_layout_row_refuses_a_row_over_its_parts():
    with pytest.raises(ValueError, match="more than parts · capacity"):
        layout_row([5, 5], capacity=4, parts=2)


def test_scheduled_pieces_and_their_codes():
    ds = PieceDataset([[1, 2, 3, 4, 5], [6]], capacity=4, scheduled=True)
    stride = scheduled_stride(2, 4)
    assert ds[0] == [1, 2, 3, 4] and ds[2] == [5]  # f = 1: the plan's codes, unwrapped
    assert ds[0 + stride] == ScheduledPiece([1, 2, 3, 4], 2, 4)
    assert ds[1 + 3 * stride] == ScheduledPiece([6], 1, 4)
    with pytest.raises(IndexError, match="does not divide capacity=4"):
        ds[1 + 2 * stride]
    with pytest.raises(ValueError, match="one capacity"):
        unwrap_scheduled([ScheduledPiece([1], 2, 4), [3]])


# ------------------------------------------------------------------------------ delivery


def test_every_token_once_in_rows_of_the_steps_capacity():
    """Two ranks through DataLoaders: every step's batches have the step's capacity on both
    ranks, ``rows_per_batch · f`` rows each; the epoch delivers every token exactly once;
    targets are what loss_tokens counts."""
    ranks = [_sampler(world_size=2, rank=r) for r in (0, 1)]
    received: list[int] = []
    for step, batches in enumerate(zip(*(_loader(s) for s in ranks), strict=True)):
        capacity = int(WARMUP.value(step))
        expected_total = ranks[0].loss_tokens(step)[0]
        targets = 0
        for sampler, batch in zip(ranks, batches, strict=True):
            assert batch["input_ids"].shape == (2 * 256 // capacity, capacity)
            assert batch["max_seqlen"] <= capacity
            targets += int((batch["labels"] != -100).sum())
            assert sampler.loss_tokens(step)[1] == [int((batch["labels"] != -100).sum())]
            received.extend(_real_tokens(batch))
        assert targets == expected_total
    assert ranks[0].repeated == 0  # an even number of batches: no tail repeats
    assert sorted(received) == sorted(t for doc in _corpus(LENGTHS) for t in doc)


def test_documents_shorter_than_the_capacity_stay_whole_where_they_fit():
    """At 64 tokens, a planned row of six 40-token documents (240 of 256 tokens) becomes 4 rows
    holding one whole document each, the other two cut into the rooms left (24 + 16 tokens);
    cutting the row every 64 tokens would leave 3 whole. The plan's last row holds 2, both
    whole: 33 · 4 + 2 whole documents of 200."""
    from padless.torch import collate_for

    lengths = np.full(200, 40)
    spec = Packing(capacity=Schedule.piecewise([0, 1000], [64, 256]), rows_per_batch=1)
    sampler = padless.PlanSampler(lengths, spec, seed=0)
    dataset = PieceDataset(_corpus(lengths), capacity=256, scheduled=True)
    collate = collate_for(sampler, pad_id=PAD)
    whole = pieces = 0
    for batch in sampler:
        out = collate([dataset[c] for c in batch])
        flat = out["input_ids"].reshape(-1)
        for seg in torch.split(flat, torch.diff(out["cu_seqlens"].long()).tolist()):
            if seg.numel() and int(seg[0]) != PAD:
                whole += int(seg.numel() == 40)
                pieces += int(seg.numel() < 40)
    assert (whole, pieces) == (134, 2 * 66)


def test_resume_mid_warm_up_equals_no_interruption():
    ref = list(_sampler())
    for at in (1, 3, 5, 8):
        first = _sampler()
        it = iter(first)
        head = [next(it) for _ in range(at)]
        state = first.state_dict()
        second = _sampler()
        second.load_state_dict(state)
        assert head + list(second) == ref


def test_a_batch_size_ramp_and_a_warm_up_share_the_optimizer_step():
    """With batches_per_step, every micro-batch of an optimizer step has that step's capacity,
    and the sampler's steps() groups them."""
    ramp = Schedule.piecewise([0, 2], [2, 4])
    sampler = _sampler(batches_per_step=ramp)
    stride = scheduled_stride(len(LENGTHS), 256)
    first = sampler.first_step()
    for k, group in enumerate(sampler.steps(sampler)):
        factor = 256 // int(WARMUP.value(first + k))
        assert {max(batch) // stride + 1 for batch in group} <= {factor}
        assert all(min(batch) >= (factor - 1) * stride for batch in group)
    assert sampler.global_step(0) == 0 and sampler.global_step(2) == 1


def test_global_step_counts_earlier_epochs():
    sampler = _sampler(world_size=2)
    steps = len(sampler)
    sampler.set_epoch(1)
    assert sampler.global_step(0) == steps
    with pytest.raises(ValueError, match="micro must be <"):
        sampler.global_step(10**6)


def test_an_elastic_resume_mid_warm_up_delivers_the_rest_once():
    """Saved at world size 1 inside the warm-up, resumed on 3 ranks: the rest of the epoch is
    delivered once, each step at its capacity on every rank."""
    first = _sampler()
    it = iter(first)
    head = [next(it) for _ in range(4)]
    state = first.state_dict()
    ranks = [_sampler(world_size=3, rank=r) for r in range(3)]
    for s in ranks:
        s.load_state_dict(state)
    stride = scheduled_stride(len(LENGTHS), 256)
    rest = []
    for step in zip(*ranks, strict=True):
        factors = {max(b) // stride for b in step}
        assert len(factors) == 1  # one capacity per step on every rank
        rest.extend(step)
    delivered = [c % stride for b in head + rest for c in b]
    plan = first.epoch_plan(0)[0]
    assert sorted(set(delivered)) == sorted(plan.codes.tolist())


def test_flat_layouts_cut_the_same_pieces():
    """collate_packed(flatten=True) and PaddingFreeCollator() (a flat row, any capacity) deliver
    the 2-D layout's sequences without its padding; a 2-D collate of another capacity is
    refused."""
    from padless.hf import PaddingFreeCollator
    from padless.torch import collate_for, collate_packed

    sampler = _sampler()
    dataset = sampler.pieces(_corpus(LENGTHS))
    batch = [dataset[c] for c in next(iter(sampler))]  # step 0: rows of 64
    rows = collate_for(sampler, pad_id=PAD)(batch)
    flat = collate_packed(256, flatten=True)(batch)
    keep = rows["input_ids"].reshape(-1) != PAD
    assert flat["input_ids"].reshape(-1).tolist() == rows["input_ids"].reshape(-1)[keep].tolist()
    assert flat["max_seqlen"] <= 64
    features = [piece.with_item({"input_ids": piece.item}) for piece in batch]
    hf = PaddingFreeCollator()(features)
    assert hf["input_ids"].tolist() == flat["input_ids"].tolist()
    assert int(hf["position_ids"].max()) < 64
    with pytest.raises(ValueError, match="the collate's capacity must be 256"):
        collate_packed(128)(batch)


def test_the_docs_example_runs():
    import re
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "schedules.md").read_text()
    code = re.search(r"<!-- example: packing-warmup -->\n```python\n(.*?)```", text, re.S)
    assert code is not None
    exec(compile(code.group(1), "docs/schedules.md: packing warm-up", "exec"), {"__name__": "doc"})


def test_each_batch_is_tagged_with_its_steps_capacity_across_epochs():
    """A warm-up that ends inside epoch 1, over three epochs at world size 2: every batch's tag
    is the capacity of its global step (global_step counts the earlier epochs exactly)."""
    steps = len(_sampler(world_size=2))
    schedule = Schedule.piecewise([0, steps // 2, steps + steps // 2], [64, 128, 256])
    spec = Packing(capacity=schedule, rows_per_batch=2, oversize="split")
    stride = scheduled_stride(len(LENGTHS), 256)
    for rank in (0, 1):
        sampler = padless.PlanSampler(LENGTHS, spec, seed=5, world_size=2, rank=rank)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            for k, batch in enumerate(sampler):
                factor = 256 // int(schedule.value(sampler.global_step(k)))
                assert {c // stride + 1 for c in batch} == {factor}, (epoch, k)


def test_a_warm_up_changed_mid_epoch_delivers_the_rest_once():
    """A state saved inside the warm-up, loaded under another schedule of the same largest
    capacity: the rest of the epoch follows the new schedule, every planned piece once; a new
    largest capacity with pieces of a long document partly delivered is refused."""
    first = _sampler()
    it = iter(first)
    head = [next(it) for _ in range(4)]
    state = first.state_dict()
    later = Schedule.piecewise([0, 10], [128, 256])
    spec = Packing(capacity=later, rows_per_batch=2, oversize="split")
    second = padless.PlanSampler(LENGTHS, spec, seed=5)
    second.load_state_dict(state)
    rest = list(second)
    stride = scheduled_stride(len(LENGTHS), 256)
    for k, batch in enumerate(rest):
        assert {c // stride + 1 for c in batch} == {256 // int(later.value(4 + k))}
    delivered = sorted(c % stride for batch in head + rest for c in batch)
    assert delivered == sorted(_sampler().epoch_plan(0)[0].codes.tolist())
    wider = Packing(capacity=Schedule.piecewise([0, 10], [128, 512]), oversize="split")
    third = padless.PlanSampler(LENGTHS, wider, seed=5)
    assert any(c % stride >= len(LENGTHS) for b in head for c in b)  # pieces past the first
    with pytest.raises(ValueError, match="capacity"):
        third.load_state_dict(state)
