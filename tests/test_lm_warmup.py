"""LMStream's sequence-length warm-up: num_steps as a Schedule of the global optimizer step."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from padless import Schedule
from padless.streams.lm import LMStream

WARM = Schedule.piecewise([0, 3, 7], [4, 8, 16])  # T_max = 16


def positions(n: int) -> np.ndarray:
    """A corpus whose token at position i is i, so batches show where they were cut."""
    return np.arange(n, dtype=np.int64)


def ranks(n: int, world_size: int, **kw) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    return [
        list(LMStream(positions(n), rank=r, world_size=world_size, **kw)) for r in range(world_size)
    ]


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(xa, xb) and np.array_equal(ya, yb)
        for (xa, ya), (xb, yb) in zip(a, b, strict=True)
    )


def test_shapes_follow_the_schedule_with_constant_tokens_per_batch():
    stream = LMStream(positions(1000), num_steps=WARM, tokens_per_batch=32, seed=3)
    assert (stream.batch_size, stream.num_steps, stream.tokens_per_batch) == (2, 16, 32)
    batches = list(stream)
    assert len(batches) == len(stream) == (999 - stream.offset) // 16 // 2
    for step, (x, y) in enumerate(batches):
        t = WARM.value(step)
        assert x.shape == y.shape == (32 // t, t) and stream.num_steps_at(step) == t
        np.testing.assert_array_equal(y, x + 1)
        chunks = x.reshape(2, 16)  # a chunk's rows, in order: consecutive tokens
        np.testing.assert_array_equal(chunks, chunks[:, :1] + np.arange(16))
        assert ((chunks[:, 0] - stream.offset) % 16 == 0).all()
    phases = stream.stats()["phases"]
    assert [p["num_steps"] for p in phases] == [4, 8, 16]
    assert [p["steps"] for p in phases] == [3, 4, len(batches) - 7]


def test_the_chunks_are_those_of_the_constant_longest_length():
    kw = dict(batch_size=3, seed=5, world_size=2, drop_last=False)
    for epoch in range(2):
        warm = [LMStream(positions(777), num_steps=WARM, rank=r, **kw) for r in range(2)]
        flat = [LMStream(positions(777), num_steps=16, rank=r, **kw) for r in range(2)]
        for w, f in zip(warm, flat, strict=True):
            w.set_epoch(epoch)
            f.set_epoch(epoch)
            got = [(x.reshape(-1, 16), y.reshape(-1, 16)) for x, y in w]
            assert same(got, list(f))


def test_a_constant_schedule_is_the_plain_int():
    a = LMStream(positions(500), batch_size=2, num_steps=Schedule.constant(8), seed=1)
    b = LMStream(positions(500), batch_size=2, num_steps=8, seed=1)
    c = LMStream(positions(500), tokens_per_batch=16, num_steps=8, seed=1)
    assert same(list(a), list(b)) and same(list(c), list(b))
    assert a.num_steps_schedule is None and a.state_dict() == b.state_dict() == c.state_dict()
    assert "phases" not in b.stats()


@pytest.mark.parametrize("world_size", [1, 3])
def test_every_target_once_per_epoch_whatever_the_schedule(world_size):
    for drop_last in (True, False):
        kw = dict(num_steps=WARM, batch_size=2, seed=7, drop_last=drop_last)
        probe = LMStream(positions(1201), **kw)
        o, units = probe.offset, (1200 - probe.offset) // 16
        got = ranks(1201, world_size, **kw)
        slots = [got[j % world_size][j // world_size] for j in range(len(got[0]) * world_size)]
        kept = units // 2 if drop_last else -(-units // 2)  # global batches before repeats
        ys = np.concatenate([y.ravel() for _, y in slots[:kept]])
        counts = np.bincount(ys, minlength=1201)
        if drop_last:
            assert counts.max() == 1 and counts.sum() == len(slots) * 32
        else:  # every token of (o, o + units·16] a target exactly once
            np.testing.assert_array_equal(
                np.flatnonzero(counts), np.arange(o + 1, o + 1 + units * 16)
            )
            assert counts.max() == 1


def test_ranks_get_equal_steps_and_the_same_length_at_the_same_step():
    for drop_last in (True, False):
        kw = dict(num_steps=WARM, batch_size=1, seed=2, drop_last=drop_last)
        got = ranks(16 * 23 + 5, 4, **kw)  # 22 or 23 chunks: a short last step
        assert len({len(b) for b in got}) == 1
        for step in range(len(got[0])):
            shapes = {got[r][step][0].shape[1] for r in range(4)}
            assert shapes == {WARM.value(step)}


def test_the_step_counts_on_across_epochs_and_skips():
    kw = dict(num_steps=Schedule.piecewise([0, 30, 40], [4, 8, 16]), batch_size=1, seed=4)
    stream = LMStream(positions(16 * 25 + 3), world_size=2, **kw)
    lengths = []
    for epoch in range(4):
        stream.set_epoch(epoch)
        assert stream.first_step() == len(lengths)
        lengths += [x.shape[1] for x, _ in stream]
    assert lengths == [kw["num_steps"].value(s) for s in range(len(lengths))]
    stream.set_epoch(0)
    stream.skip(steps=(1, 3))  # skipped batches are not trained: the next step takes step 1
    assert [x.shape[1] for x, _ in stream] == [4] * len(stream)
    assert stream.first_step(1) == len(stream)


@st.composite
def cases(draw):
    t_max = draw(st.sampled_from([4, 8, 16]))
    lengths = sorted(draw(st.lists(st.sampled_from([1, 2, 4, 8, 16]), min_size=1, max_size=3)))
    lengths = [t for t in lengths if t <= t_max] + [t_max]
    breaks = sorted(
        draw(st.sets(st.integers(1, 12), min_size=len(lengths) - 1, max_size=len(lengths) - 1))
    )
    schedule = Schedule.piecewise([0, *breaks], lengths)
    kw = dict(
        num_steps=schedule,
        batch_size=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**32)),
        world_size=draw(st.integers(1, 3)),
        drop_last=draw(st.booleans()),
    )
    n = LMStream(positions(10**5), **kw).min_tokens + draw(st.integers(0, 400))
    return n, kw, draw(st.integers(0, 2)), draw(st.integers(0, 40))


@settings(max_examples=15, deadline=None)
@given(cases())
def test_resume_at_a_random_step_equals_the_uninterrupted_run(case):
    n, kw, epoch, stop = case
    for rank in range(kw["world_size"]):
        whole = LMStream(positions(n), rank=rank, **kw)
        whole.set_epoch(epoch)
        every = list(whole)
        stop = min(stop, len(every))
        first = LMStream(positions(n), rank=rank, **kw)
        first.set_epoch(epoch)
        it = iter(first)
        head = [next(it) for _ in range(stop)]
        state = first.state_dict()
        resumed = LMStream(positions(n), rank=rank, **kw)
        resumed.load_state_dict(state)
        assert len(resumed) == len(every) - stop
        assert same(head + list(resumed), every)


def test_the_schedule_is_in_the_fingerprint():
    a = LMStream(positions(600), num_steps=WARM, batch_size=2)
    b = LMStream(positions(600), num_steps=Schedule.piecewise([0, 4], [8, 16]), batch_size=2)
    assert (
        a.state_dict()["fingerprint"].split("-")[0] == b.state_dict()["fingerprint"].split("-")[0]
    )
    with pytest.raises(ValueError, match="the settings differ"):
        b.load_state_dict(a.state_dict())
    assert "Schedule.piecewise" in repr(a)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            dict(num_steps=Schedule.piecewise([0, 5], [3, 8]), batch_size=1),
            ValueError,
            "num_steps at step 0 is 3, which does not divide the longest num_steps 8",
        ),
        (
            dict(num_steps=Schedule.linear(256, 1024, steps=4, multiple_of=256), batch_size=1),
            ValueError,
            "num_steps at step 3 is 768, which does not divide",
        ),
        (
            dict(num_steps=Schedule.piecewise([0, 2], [0, 8]), batch_size=1),
            ValueError,
            "num_steps at step 0 is 0, not a positive int",
        ),
        (
            dict(num_steps=WARM, tokens_per_batch=40),
            ValueError,
            "tokens_per_batch must be a multiple of the longest num_steps 16 .*, got 40",
        ),
        (dict(num_steps=WARM), TypeError, "batch_size .* or tokens_per_batch"),
        (dict(num_steps=8, batch_size=2, tokens_per_batch=16), TypeError, "one of them"),
        (dict(num_steps=WARM, batch_size=1, mode="sequential"), ValueError, "needs mode='random'"),
        (dict(num_steps=Schedule.linear(0.5, 1.0, 4), batch_size=1), TypeError, "integer schedule"),
        (dict(num_steps="8", batch_size=1), TypeError, "num_steps must be a number, a Schedule"),
    ],
)
def test_errors_name_the_parameter_the_rule_and_the_value(kwargs, error, message):
    with pytest.raises(error, match=message):
        LMStream(positions(10**4), **kwargs)


def test_a_schedule_dict_is_a_schedule_and_lm_tensors_follow_it():
    stream = LMStream(positions(400), num_steps=WARM.as_dict(), batch_size=1)
    assert stream.num_steps_schedule == WARM
    torch_api = pytest.importorskip("padless.torch")
    shapes = [tuple(x.shape) for x, _ in torch_api.lm_tensors(stream)]
    assert shapes[:8] == [(4, 4)] * 3 + [(2, 8)] * 4 + [(1, 16)]


def test_an_elastic_resume_counts_the_epoch_at_the_new_world_size():
    kw = dict(num_steps=WARM, batch_size=1, seed=9, drop_last=True)
    before = [LMStream(positions(16 * 40 + 1), rank=r, world_size=2, **kw) for r in range(2)]
    its = [iter(s) for s in before]
    head = [next(it) for _ in range(3) for it in its]  # 3 steps on 2 ranks: 6 global batches
    after = LMStream(positions(16 * 40 + 1), world_size=1, **kw)
    after.load_state_dict(before[0].state_dict())
    rest = list(after)
    assert [x.shape[1] for x, _ in rest] == [WARM.value(6 + i) for i in range(len(rest))]
    ys = np.concatenate([y.ravel() for _, y in head + rest])
    assert np.unique(ys).size == ys.size == 16 * len(head + rest)
