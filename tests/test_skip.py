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
    for rank in range(world):
        assert got[rank] == full[rank][:a] + full[rank][b:]
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

    text = (Path(__file__).parent.parent / "README.md").read_text()
    at = text.index("After a loss spike, skip the batches around it")
    code = re.search(r"```python\n(.*?)```", text[at:], re.S).group(1)
    lengths = np.random.default_rng(3).integers(1, 40, 200_000)
    before = padless.TokenBudgetSampler(lengths, max_tokens=64, seed=1)
    it = iter(before)
    for _ in range(1000):
        next(it)
    sampler = padless.TokenBudgetSampler(lengths, max_tokens=64, seed=1)
    scope = {"sampler": sampler, "checkpoint_before_the_spike": {"sampler": before.state_dict()}}
    exec(compile(code, "README.md:skip", "exec"), scope)
    full = padless.TokenBudgetSampler(lengths, max_tokens=64, seed=1)
    every = [tuple(b) for b in full]
    got = [tuple(b) for b in sampler]
    assert got == every[1000:1200] + every[1260:]
