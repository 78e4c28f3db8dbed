"""``sampler.skip``: the skipped steps are never trained, every other batch is, in its order; the
skip is recorded in the state, so resumes (from before it or after it, at another world size)
keep it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import padless

LENGTHS = np.random.default_rng(11).integers(1, 120, 400)


def _token_budget(**kw):
    return padless.TokenBudgetSampler(LENGTHS, max_tokens=400, seed=5, **kw)


def _packing(**kw):
    return padless.PackingSampler(LENGTHS, capacity=256, rows_per_batch=2, seed=5, **kw)


def _lm(**kw):
    return padless.LMStream(np.arange(4000), batch_size=2, num_steps=16, seed=5, **kw)


MAKERS = [_token_budget, _packing, _lm]


def _key(batch):
    if isinstance(batch, tuple):  # LM streams: (x, y) arrays
        return batch[0].tobytes()
    return tuple(int(i) for i in batch)


def _ranks(make, world, skips=(), **kw):
    """Each rank's batches of epoch 0, with ``skips`` (steps pairs) recorded first."""
    out = []
    for rank in range(world):
        s = make(rank=rank, world_size=world, **kw)
        for pair in skips:
            s.skip(steps=pair)
        out.append([_key(b) for b in s])
    return out


@pytest.mark.parametrize("make", MAKERS, ids=lambda m: m.__name__)
@settings(max_examples=8, deadline=None)
@given(world=st.integers(1, 3), data=st.data())
def test_skipped_steps_are_left_out_and_nothing_else(make, world, data):
    full = _ranks(make, world)
    steps = len(full[0])
    a = data.draw(st.integers(0, max(steps - 1, 0)))
    b = data.draw(st.integers(a + 1, steps + 2))
    got = _ranks(make, world, skips=[(a, b)])
    named = {k for r in full for k in r[a:b]} - {k for r in full for k in r[:a] + r[b:]}
    repeats = make(world_size=world).repeated > 0  # the last step repeats the first batches
    for rank in range(world):
        want = full[rank][:a] + full[rank][b:]
        if repeats and b < steps:  # ... the first not skipped
            assert got[rank][:-1] == want[:-1]
        else:
            assert got[rank] == want
        assert not set(got[rank]) & named  # a skipped batch is not trained, not even repeated
    s = make(rank=0, world_size=world)
    s.skip(steps=(a, b))
    assert len(s) == len(got[0])  # equal steps on every rank, len() without the skipped


@pytest.mark.parametrize("make", MAKERS, ids=lambda m: m.__name__)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_resume_at_every_step_keeps_the_skip(make, data):
    world = data.draw(st.integers(1, 2))
    a = data.draw(st.integers(1, 4))
    b = a + data.draw(st.integers(1, 3))
    want = _ranks(make, world, skips=[(a, b)])
    for rank in range(world):
        s = make(rank=rank, world_size=world)
        s.skip(steps=(a, b))
        it = iter(s)
        received = []
        cut = data.draw(st.integers(0, len(want[rank])))
        for _ in range(cut):
            received.append(_key(next(it)))
        state = s.state_dict()
        again = make(rank=rank, world_size=world)
        again.load_state_dict(state)  # the skip comes with the state
        rest = [_key(x) for x in again]
        assert received + rest == want[rank]


def test_spike_recovery_loads_an_older_checkpoint_and_skips_ahead():
    """Checkpoint at step 3; a spike at step 7: load step 3, skip steps 6-8, train on."""
    full = [_key(b) for b in _token_budget()]
    s = _token_budget()
    it = iter(s)
    for _ in range(3):
        next(it)
    older = s.state_dict()
    resumed = _token_budget()
    resumed.load_state_dict(older)
    resumed.skip(steps=(6, 9))
    it = iter(resumed)
    got = [_key(next(it)) for _ in range(5)]
    assert got == full[3:6] + full[9:11]
    later = resumed.state_dict()  # saved after the skip: it keeps it
    assert later["skips"] == [[0, 6, 9]]
    again = _token_budget()
    again.load_state_dict(older | {"skips": later["skips"]})  # an older state told the skip
    assert [_key(b) for b in again] == full[3:6] + full[9:]


def _dealt(glob, positions, world, rank, drop_last=False):
    """What a rank gets from global positions dealt in turn (the tail policy at the end)."""
    steps = len(positions) // world if drop_last else -(-len(positions) // world)
    total = len(glob)
    padded = list(positions) + [total + k for k in range(steps * world - len(positions))]
    return [glob[p if p < total else (p - total) % total] for p in padded[rank::world][:steps]]


def test_skip_the_next_batches_leaves_out_exactly_them_while_iterating():
    world = 2
    glob = [_key(b) for b in _token_budget()]  # the epoch's batches in global order
    samplers = [_token_budget(rank=r, world_size=world) for r in range(world)]
    for rank, s in enumerate(samplers):
        it = iter(s)
        first = [_key(next(it)) for _ in range(2)]  # positions 0 to 3 consumed
        s.skip(3)  # global batches 4, 5 and 6: not a whole number of steps
        rest = [_key(b) for b in it]
        assert first == [glob[rank], glob[2 + rank]]
        assert rest == _dealt(glob, range(7, len(glob)), world, rank)
        assert s.state_dict()["skips"] == [[0, 4, 7]]
        assert len(rest) == len(_dealt(glob, range(7, len(glob)), world, 0))  # equal steps


@pytest.mark.parametrize("drop_last", [False, True])
def test_a_skip_survives_an_elastic_resume_exactly(drop_last):
    glob = [_key(b) for b in _token_budget(drop_last=drop_last)]
    s = _token_budget(world_size=2, rank=0, drop_last=drop_last)
    s.skip(steps=(2, 4))  # global positions 4 to 7
    it = iter(s)
    next(it)
    state = s.state_dict(consumed=1)  # position 2
    rest = [p for p in range(2, len(glob)) if not 4 <= p < 8]
    for rank in range(4):
        wide = _token_budget(world_size=4, rank=rank, drop_last=drop_last)
        wide.load_state_dict(state)
        assert [_key(b) for b in wide] == _dealt(glob, rest, 4, rank, drop_last)


def test_loss_tokens_follow_the_skip():
    s = _token_budget()
    every = list(s)
    s.skip(steps=(0, 2))
    total, mine = s.loss_tokens(0, accumulation=1, targets="all")
    assert total == sum(int(LENGTHS[i]) for i in every[2])


def test_bad_skips_are_refused():
    s = _token_budget()
    with pytest.raises(TypeError, match="batches .* or steps"):
        s.skip()
    with pytest.raises(TypeError, match="batches .* or steps"):
        s.skip(2, steps=(0, 1))
    with pytest.raises(ValueError, match="batches"):
        s.skip(0)
    with pytest.raises(ValueError, match="first < end"):
        s.skip(steps=(3, 3))
    with pytest.raises(TypeError, match="steps must be a pair"):
        s.skip(steps=5)
    state = s.state_dict()
    for bad in ([[0, 5, 5]], [[0, -1, 3]], [[0, 1]], "x", [[True, 0, 2]]):
        with pytest.raises(ValueError, match="skips"):
            _token_budget().load_state_dict(state | {"skips": bad})


def test_the_readme_recipe_runs_as_written():
    import re
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "training.md").read_text()
    at = text.index("After a loss spike, skip the batches around it")
    code = re.search(r"```python\n(.*?)```", text[at:], re.S).group(1)
    lengths = np.random.default_rng(3).integers(1, 40, 200_000)
    before = padless.TokenBudgetSampler(lengths, max_tokens=64, seed=1)
    it = iter(before)
    for _ in range(1000):
        next(it)
    sampler = padless.TokenBudgetSampler(lengths, max_tokens=64, seed=1)
    scope = {"sampler": sampler, "checkpoint_before_the_spike": {"sampler": before.state_dict()}}
    exec(compile(code, "docs/training.md:skip", "exec"), scope)
    full = padless.TokenBudgetSampler(lengths, max_tokens=64, seed=1)
    every = [tuple(b) for b in full]
    got = [tuple(b) for b in sampler]
    assert got == every[1000:1200] + every[1260:]


# ---------------------------------------------------------------- a pending skip, resumed otherwise
def _mixture(**kw):
    rng = np.random.default_rng(4)
    corpora = {
        name: padless.TokenBudgetSampler(rng.integers(1, 20, n), max_tokens=40, seed=i)
        for i, (name, n) in enumerate([("a", 300), ("b", 200)])
    }
    weights = {"a": padless.Schedule.piecewise([0, 20], [0.8, 0.2]), "b": 0.3}
    return padless.MixtureSampler(corpora, weights=weights, num_batches=120, seed=5, **kw)


BALANCED = {
    "token_budget": lambda **kw: _token_budget(balance=True, **kw),
    "packing": lambda **kw: _packing(balance=True, **kw),
    "windowed": lambda **kw: _token_budget(balance=True, window=120, **kw),
    "histogram": lambda **kw: _token_budget(balance=True, window="histogram", **kw),
    "mixture_schedule": _mixture,
    "lm_stream": _lm,
}


def _every_rank(make, world, state=None, skips=()):
    """All ranks' batches (keys) of the rest of epoch 0, each rank loaded from ``state``."""
    out = []
    for rank in range(world):
        s = make(rank=rank, world_size=world)
        if state is not None:
            s.load_state_dict(state)
        for pair in skips:
            s.skip(steps=pair)
        out.append([_key(b) for b in s])
    assert len({len(r) for r in out}) == 1  # equal steps on every rank
    return out


def _saved_at(make, world, step, skip):
    s = make(rank=0, world_size=world)
    s.skip(steps=skip)
    it = iter(s)
    for _ in range(step):
        next(it)
    return s.state_dict(consumed=step)


@pytest.mark.parametrize("name", list(BALANCED))
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_a_pending_skip_survives_a_resume_at_another_world_size(name, data):
    """Saved before a skip, resumed at another world size where the rest is ordered anew
    (balanced steps, weight schedules): exactly the skip's batches are left out."""
    make = BALANCED[name]
    world, wider = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4))
    steps = len(make(world_size=world))
    a = data.draw(st.integers(0, steps - 1))
    b = data.draw(st.integers(a + 1, steps + 1))
    whole = {k for r in _every_rank(make, world) for k in r}
    kept = _every_rank(make, world, skips=[(a, b)])
    step = data.draw(st.integers(0, len(kept[0])))
    named = whole - {k for r in kept for k in r}  # the skip's batches, in its order
    delivered = {k for r in kept for k in r[:step]}  # before the state (repeats may show them)
    state = _saved_at(make, world, step, (a, b))
    plain = {k: v for k, v in state.items() if k != "skips"}
    unskipped = [k for r in _every_rank(make, wider, plain) for k in r if k not in delivered]
    resumed = [k for r in _every_rank(make, wider, state) for k in r if k not in delivered]
    assert not set(resumed) & named  # none of the skip's batches is trained
    assert set(resumed) == set(unskipped) - named  # every other batch is
    assert len(resumed) == len(set(resumed)) or name == "mixture_schedule"  # once


def _items(batches):
    return {i for batch in batches for i in batch}


CHANGES = {
    "balance": dict(balance=True),
    "max_tokens": dict(max_tokens=300),
    "both": dict(max_tokens=520, balance=True),
    "batches_per_step": dict(batches_per_step=12),
    "none": {},
}


@settings(max_examples=25, deadline=None)
@given(
    world=st.sampled_from([1, 2, 3]),
    wider=st.sampled_from([1, 2, 3, 4]),
    balance=st.booleans(),
    change=st.sampled_from(list(CHANGES)),
    data=st.data(),
)
def test_a_pending_skip_survives_a_change_of_settings(world, wider, balance, change, data):
    """Any resume — another world size, balance turned on, another budget or ramp — trains
    every item the uninterrupted run trains and none of those the skip left out."""

    def old(**kw):
        return _token_budget(balance=balance, **kw)

    def new(**kw):
        options = {"balance": balance, **CHANGES[change]}
        if "max_tokens" in options:
            return padless.TokenBudgetSampler(LENGTHS, seed=5, **options, **kw)
        return _token_budget(**options, **kw)

    steps = len(old(world_size=world))
    a = data.draw(st.integers(1, steps - 1))
    b = data.draw(st.integers(a + 1, steps + 1))
    ranks = [old(rank=r, world_size=world) for r in range(world)]
    for s in ranks:
        s.skip(steps=(a, b))
    step = data.draw(st.integers(0, len(ranks[0])))
    trained = _items(b for s in ranks for b in s)
    left_out = set(range(LENGTHS.size)) - trained
    before = []
    for s in ranks:
        it = iter(s)
        before += [next(it) for _ in range(step)]
    state = ranks[0].state_dict(consumed=step)
    after = []
    for rank in range(wider):
        s = new(rank=rank, world_size=wider)  # 12 batches per step: a multiple of each
        s.load_state_dict(state)
        after.append(list(s))
    assert len({len(r) for r in after}) == 1
    got = _items(before) | _items(b for r in after for b in r)
    assert got & left_out == set()
    assert got == trained


def test_a_mixture_refuses_a_pending_skip_across_a_change_of_weights():
    m = _mixture()
    m.skip(steps=(30, 40))
    it = iter(m)
    for _ in range(5):
        next(it)
    state = m.state_dict(consumed=5)
    other = padless.MixtureSampler(
        _mixture().samplers, weights={"a": 0.5, "b": 0.5}, num_batches=120, seed=5
    )
    with pytest.raises(ValueError, match="skip of global batches 30 to 39 .* drop the skip"):
        other.load_state_dict(state)
    behind = dict(state, skips=[[0, 0, 1]])  # a skip behind the position goes with it
    other.load_state_dict(behind)


@pytest.mark.parametrize("drop_last", [False, True])
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_the_tail_counts_follow_an_elastic_resume_and_skips(drop_last, data):
    """``repeated`` / ``dropped`` count what the ranks actually get, after an elastic resume
    and with skips (they counted the epoch from 0 at the current world size before)."""
    world, wider = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 5))
    s = _token_budget(world_size=world, drop_last=drop_last)
    total = len(s.epoch_plan(0)[0])
    step = data.draw(st.integers(0, len(s)))
    if data.draw(st.booleans()):
        s.skip(steps=(len(s) // 2, len(s) // 2 + 2))
    it = iter(s)
    for _ in range(step):
        next(it)
    state = s.state_dict(consumed=step)
    ranks = [_token_budget(world_size=wider, rank=r, drop_last=drop_last) for r in range(wider)]
    for r in ranks:
        r.load_state_dict(state)
    got = sum(len(list(r)) for r in ranks)
    at = state["position"]
    skipped = sum(max(0, min(hi, total) - max(lo, at)) for _, lo, hi in state.get("skips", []))
    left = max(total - at, 0) - skipped
    assert got == left + ranks[0].repeated - max(at - total, 0) - ranks[0].dropped
    assert ranks[0].repeated < max(world, wider) and ranks[0].dropped < wider
