"""Batch-size ramps (issue 28): ``PlanSampler(batches_per_step=...)`` cuts the epoch's micro-batches
into optimizer steps that follow a schedule of the global step; the plan does not change, every
rank gets the same cut, the global step continues across epochs, a resume (mid-step too) keeps the
cut of the rest, and ``loss_tokens`` counts each optimizer step's micro-batches."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import padless
from padless import PlanSampler, Schedule

LENGTHS = np.random.default_rng(28).integers(1, 120, 300)


def Piecewise(starts, values):  # noqa: N802 - reads as the schedule kind
    return Schedule.piecewise(starts, values)


def Linear(start, end, over, multiple_of):  # noqa: N802
    return Schedule.linear(start, end, steps=over, multiple_of=multiple_of)


def _spec(name):
    if name == "packing":
        return padless.Packing(capacity=256, rows_per_batch=2)
    return padless.TokenBudget(max_tokens=400)


def _make(schedule, *, rank=0, world=1, spec="budget", **kw):
    return PlanSampler(
        LENGTHS, _spec(spec), seed=3, rank=rank, world_size=world, batches_per_step=schedule, **kw
    )


@st.composite
def schedules(draw, world):
    if draw(st.booleans()):
        return Linear(world, 6 * world, draw(st.integers(1, 12)), world)
    n = draw(st.integers(1, 4))
    starts = [0, *sorted(draw(st.sets(st.integers(1, 20), min_size=n - 1, max_size=n - 1)))]
    values = [world * draw(st.integers(1, 5)) for _ in range(n)]
    return Piecewise(starts, values)


def _keys(groups):
    return [[tuple(b) for b in g] for g in groups]


@settings(max_examples=20, deadline=None)
@given(
    world=st.integers(1, 3),
    spec=st.sampled_from(["budget", "packing"]),
    drop_last=st.booleans(),
    balance=st.booleans(),
    skip=st.booleans(),
    data=st.data(),
)
def test_the_cut_follows_the_schedule_on_every_rank(world, spec, drop_last, balance, skip, data):
    schedule = data.draw(schedules(world))
    kw = {"spec": spec, "drop_last": drop_last, "balance": balance}
    samplers = [_make(schedule, rank=r, world=world, **kw) for r in range(world)]
    if skip:
        for s in samplers:
            s.skip(steps=(2, 5))
    sizes = [s.step_sizes() for s in samplers]
    for s, got in zip(samplers, sizes, strict=True):
        assert got.dtype == np.int64 and got.sum() == len(s)  # every yielded batch, skips not
        assert got.tolist() == sizes[0].tolist()  # the same cut on every rank
        groups = list(s.steps(s))
        assert [len(g) for g in groups] == got.tolist()
        assert [b for g in groups for b in g] == list(s)  # grouping only, nothing changed
    want = schedule.values(np.arange(sizes[0].size)) // world
    assert (sizes[0][:-1] == want[:-1]).all() and 0 < sizes[0][-1] <= want[-1]
    assert samplers[0].optimizer_steps() == sizes[0].size
    assert samplers[0].stats()["optimizer_steps"] == sizes[0].size


@pytest.mark.parametrize(
    "kw",
    [{"shuffle": True}, {"shuffle": False}, {"window": 64}],
    ids=["shuffle", "fixed", "window"],
)
def test_the_global_step_continues_across_epochs(kw):
    schedule = Linear(2, 16, 30, 2)
    s = _make(schedule, world=2, **kw)
    first = 0
    for epoch in range(4):
        s.set_epoch(epoch)
        assert s.first_step() == first
        sizes = s.step_sizes()
        want = schedule.values(first + np.arange(sizes.size)) // 2
        assert (sizes[:-1] == want[:-1]).all() and sizes[-1] <= want[-1]
        first += sizes.size
    fresh = _make(schedule, world=2, **kw)
    assert fresh.first_step(4) == first  # computed without running the epochs
    assert fresh.first_step(2) == s.first_step(2)


@settings(max_examples=10, deadline=None)
@given(world=st.integers(1, 3), skip=st.booleans(), balance=st.booleans(), data=st.data())
def test_a_state_saved_at_any_micro_batch_resumes_with_the_same_cut(world, skip, balance, data):
    schedule = data.draw(schedules(world))
    epoch = data.draw(st.integers(0, 1))

    def make(rank):
        s = _make(schedule, rank=rank, world=world, balance=balance)
        s.set_epoch(epoch)
        if skip:
            s.skip(steps=(1, 3))
        return s

    rank = data.draw(st.integers(0, world - 1))
    whole = _keys(make(rank).steps(make(rank)))
    flat = [b for g in whole for b in g]
    cut = data.draw(st.integers(0, len(flat)))
    s = make(rank)
    it = iter(s)
    for _ in range(cut):
        next(it)
    state = s.state_dict()
    # the uninterrupted run's tail: the rest of the step the state is inside, then the steps
    ends = np.cumsum([len(g) for g in whole])
    k = int(np.searchsorted(ends, cut, side="right"))
    tail = ([flat[cut : ends[k]]] if k < len(whole) else []) + whole[k + 1 :]
    tail = [g for g in tail if g]
    resumed = _make(schedule, rank=rank, world=world, balance=balance)
    resumed.load_state_dict(state)
    assert resumed.optimizer_steps() == len(tail)
    assert _keys(resumed.steps(resumed)) == tail
    assert resumed.first_step() == make(rank).first_step()


def test_an_elastic_resume_at_a_step_boundary_keeps_the_global_steps():
    schedule = Piecewise([0, 3], [4, 8])
    whole = _make(schedule, world=2).step_sizes() * 2  # global batches per step at world 2
    s = _make(schedule, world=2)
    it = iter(s)
    for _ in range(int(whole[:4].sum()) // 2):  # four optimizer steps at world 2
        next(it)
    resumed = _make(schedule, world=4)
    resumed.load_state_dict(s.state_dict())
    assert (resumed._cut(resumed._iteration_start())[0], resumed.optimizer_steps()) == (
        4,
        whole.size - 4,
    )
    rest = resumed._cut(resumed._iteration_start())[1] * 4
    assert rest[:-1].tolist() == whole[4:-1].tolist()  # the tail's repeats differ by world size


def _targets(batch):
    return int(sum(max(int(LENGTHS[i]) - 1, 0) for i in batch))


@pytest.mark.parametrize("resume_at", [None, 3])
def test_loss_tokens_count_each_optimizer_steps_micro_batches(resume_at):
    schedule, world = Piecewise([0, 2, 5], [2, 6, 4]), 2
    state = None
    if resume_at is not None:
        s = _make(schedule, world=world)
        it = iter(s)
        for _ in range(resume_at):
            next(it)
        state = s.state_dict()
    ranks = []
    for r in range(world):
        s = _make(schedule, rank=r, world=world)
        if state is not None:
            s.load_state_dict(state)
        ranks.append((s, [[_targets(b) for b in g] for g in s.steps(s)]))
    steps = len(ranks[0][1])
    assert steps == ranks[0][0].optimizer_steps() > 3
    for k in range(steps):
        total = sum(sum(groups[k]) for _, groups in ranks)
        for s, groups in ranks:
            assert s.loss_tokens(k) == (total, groups[k])
    s = ranks[0][0]
    first = s._cut(s._iteration_start())[0]
    per_rank = schedule.value(first + 1) // world
    assert s.loss_tokens(1, accumulation=per_rank) == s.loss_tokens(1)
    with pytest.raises(ValueError, match=f"accumulation={per_rank + 1} does not match"):
        s.loss_tokens(1, accumulation=per_rank + 1)
    with pytest.raises(ValueError, match=f"step must be < {steps}"):
        s.loss_tokens(steps)


def test_tokens_per_step_rounds_up_to_whole_steps_of_every_rank():
    s = PlanSampler(
        LENGTHS, padless.TokenBudget(max_tokens=400), world_size=2, tokens_per_step=1000
    )
    assert s.step_sizes()[:-1].tolist() == [2] * (s.step_sizes().size - 1)  # ceil(2.5) -> 4
    with pytest.raises(ValueError, match="tokens_per_step needs a spec with a token budget"):
        PlanSampler(LENGTHS, padless.Packing(capacity=256), tokens_per_step=1000)
    with pytest.raises(TypeError, match="not both"):
        _make(4, tokens_per_step=1000)


def test_errors_name_the_step_the_value_and_the_rule():
    with pytest.raises(ValueError, match="batches_per_step at step 0 is 6, not a multiple of "):
        _make(6, world=4)
    with pytest.raises(ValueError, match="batches_per_step at step 0 is 0, not a positive int"):
        _make(0)
    with pytest.raises(TypeError, match="batches_per_step must be an int"):
        _make(2.5)
    s = _make(Piecewise([0, 3], [4, 6]), world=4)  # step 0 is fine, step 3 is not
    with pytest.raises(
        ValueError, match="batches_per_step at step 3 is 6, not a multiple of world_size=4"
    ):
        s.step_sizes()
    with pytest.raises(ValueError, match="at step 2 is 0, not a positive int"):
        _make(Piecewise([0, 2], [1, 0])).step_sizes()
    plain = _make(None)
    for call in (
        plain.step_sizes,
        plain.optimizer_steps,
        plain.first_step,
        lambda: plain.steps([]),
    ):
        with pytest.raises(ValueError, match="needs optimizer steps: pass batches_per_step="):
            call()
    assert plain.loss_tokens(0, accumulation=2) == _make(None).loss_tokens(0, accumulation=2)
    with pytest.raises(ValueError, match="more than the"):
        list(_make(4).steps([[0]] * (len(_make(4)) + 1)))


def test_the_schedule_is_in_the_fingerprint():
    s = _make(Piecewise([0, 5], [2, 4]))
    next(iter(s))
    state = s.state_dict()
    same = _make(Piecewise([0, 5], [2, 4]))
    same.load_state_dict(state)
    assert "batches_per_step" not in state  # the state holds nothing else
    for other in (_make(Piecewise([0, 6], [2, 4])), _make(None)):
        other.load_state_dict(state)  # a schedule may change during a run: the epoch goes on
        assert other.state_dict()["changes"][0]["settings"]["config"]["batches_per_step"]
    plain = _make(None)
    assert (
        plain._fingerprint_now() == PlanSampler(LENGTHS, _spec("budget"), seed=3)._fingerprint_now()
    )  # without a schedule, fingerprints are as before
