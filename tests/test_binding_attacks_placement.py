"""Hostile direct calls into the placement family's binding (csrc/placement.cpp), and the
compiled list scheduler against its plain reference (padless._kernels.placement)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from padless import _core as C
from padless._kernels.placement import (
    cost_table,
    cost_table_reference,
    pipeline,
    pipeline_reference,
    place_items,
    place_items_reference,
    place_rounds,
    place_rounds_reference,
    replay_lanes,
    replay_lanes_reference,
    rounds_tables,
    rounds_tables_reference,
)

ATTACKED: dict[str, str] = {
    "cost_table": "test_cost_table",
    "place_items": "test_place_items",
    "place_rounds": "test_place_rounds",
    "replay_lanes": "test_replay_lanes",
    "pipeline": "test_pipeline",
    "rounds_tables": "test_rounds_tables",
}

I64 = np.int64


def a(*values, dtype=I64) -> np.ndarray:
    return np.array(values, dtype=dtype)


def _items_agree(order, widths, times, tokens, lanes, slots, cap, aligned, limit) -> None:
    """place_items == its reference; where the reference stops, the kernel stops too, and
    only where the whole placement fits with a lane past the limit."""
    n = int(order.size)
    got = place_items(order, widths, times, tokens, lanes, slots, cap, aligned, limit)
    want = place_items_reference(order, widths, times, tokens, lanes, slots, cap, aligned, limit)
    if want is None:
        assert got is None
        full = place_items_reference(order, widths, times, tokens, lanes, slots, cap, aligned)
        assert full is not None and not isinstance(full, int)
        busy = np.zeros(lanes)
        for i in range(n):
            busy[full[2][i][full[2][i] >= 0]] += times[i]
        assert busy.max() > limit
        return
    assert got is not None
    if isinstance(want, int):
        assert got == want
        return
    assert not isinstance(got, int)
    for x, y in zip(got, want, strict=True):
        if n:
            assert np.array_equal(x[..., : y.shape[-1]] if x.ndim == 2 else x, y)


def _tables(items, sizes, work_of):
    """place_rounds' (N, sizes) work and tokens of items (smallest size index from 1, work,
    tokens): work ``work_of(work, size)`` from the item's smallest size on (inf below), tokens
    split over the size."""
    work = np.full((len(items), sizes.size), np.inf)
    tokens = np.zeros((len(items), sizes.size), dtype=I64)
    for i, (lo, t, k) in enumerate(items):
        for j, s in enumerate(sizes.tolist()):
            if j >= lo - 1:
                work[i, j] = work_of(t, s)
            tokens[i, j] = -(-k // s)
    return work, tokens


def _rounds_agree(order, sizes, work, tokens, limits, lanes, cap) -> None:
    """place_rounds == its reference (the same failure, or the same arrays)."""
    got = place_rounds(order, sizes, work, tokens, limits, lanes, cap)
    want = place_rounds_reference(order, sizes, work, tokens, limits, lanes, cap)
    if isinstance(want, int):
        assert got == want
        return
    assert not isinstance(got, int)
    for x, y in zip(got, want, strict=True):
        assert np.array_equal(x, y)


def test_place_items():
    order, w, t, k = a(1, 0), a(1, 2), a(0.5, 1.0, dtype=np.float64), a(3, 4)
    with pytest.raises(ValueError, match=r"place_items: order\[1\] = 1 \(order must be a perm"):
        C.place_items(a(1, 1), w, t, k, 2, 1, 10)
    with pytest.raises(ValueError, match=r"place_items: order\[0\] = 5"):
        C.place_items(a(5, 0), w, t, k, 2, 1, 10)
    with pytest.raises(
        ValueError, match=r"place_items: widths\[1\] = 2 must be in \[1, lanes = 1\]"
    ):
        C.place_items(order, w, t, k, 1, 1, 10)
    with pytest.raises(ValueError, match=r"place_items: times\[0\] = nan must be a finite"):
        C.place_items(order, w, a(np.nan, 1.0, dtype=np.float64), k, 2, 1, 10)
    with pytest.raises(ValueError, match=r"place_items: times\[1\] = -1 must be a finite"):
        C.place_items(order, w, a(1.0, -1.0, dtype=np.float64), k, 2, 1, 10)
    with pytest.raises(ValueError, match=r"place_items: tokens\[0\] = -3 must be in"):
        C.place_items(order, w, t, a(-3, 4), 2, 1, 10)
    with pytest.raises(ValueError, match=r"place_items: times holds 1 entries, widths 2"):
        C.place_items(order, w, a(1.0, dtype=np.float64), k, 2, 1, 10)
    with pytest.raises(ValueError, match=r"place_items: lanes = 0 must be in \[1, 2\*\*20\]"):
        C.place_items(order, w, t, k, 0, 1, 10)
    with pytest.raises(ValueError, match=r"place_items: slots = 2097152 must be in"):
        C.place_items(order, w, t, k, 2, 1 << 21, 10)
    with pytest.raises(ValueError, match=r"place_items: max_tokens = 0 must be in"):
        C.place_items(order, w, t, k, 2, 1, 0)
    with pytest.raises(ValueError, match=r"slots \* lanes = 1099511627776 needs"):
        C.place_items(order, w, t, k, 1 << 20, 1 << 20, 10)
    with pytest.raises(ValueError, match=r"place_items: limit = nan must be >= 0 \(inf: no"):
        C.place_items(order, w, t, k, 2, 1, 10, False, np.nan)
    with pytest.raises(ValueError, match=r"place_items: limit = -1 must be >= 0"):
        C.place_items(order, w, t, k, 2, 1, 10, False, -1.0)
    # valid edges: nothing to place; an item exactly at the budget; one that fits nowhere
    failed, slot, start, lanes, wmax = C.place_items(a(), a(), a(dtype=np.float64), a(), 3, 2, 1)
    assert failed == -1 and slot.size == start.size == lanes.size == 0 and wmax == 1
    failed, slot, start, lanes, wmax = C.place_items(order, w, t, k, 2, 1, 7)
    assert failed == -1 and slot.tolist() == [0, 0] and start.tolist() == [1.0, 0.0]
    assert lanes.reshape(-1, wmax).tolist() == [[0, -1], [0, 1]]
    assert C.place_items(order, w, t, k, 2, 1, 6)[0] == 1  # item 0 finds no room at 6
    assert C.place_items(order, w, t, k, 2, 1, 3)[0] == 0  # item 1 (4 tokens) fits no lane
    # aligned: a width-2 item takes lanes 2-3 (a block), not 1-2, though lane 1 is free first
    busy = C.place_items(a(0, 1), a(1, 2), a(5.0, 1.0, dtype=np.float64), a(1, 1), 4, 1, 9, True)
    assert busy[0] == -1 and busy[3].reshape(-1, busy[4]).tolist() == [[0, -1], [2, 3]]
    # a limit: lane 0 holds 1 + 0.5 s, past 1.2 once item 0 is placed (nothing is left, so the
    # rest fits: stopped, -2); past 0.5 after item 1, item 0 provably fits (room 3 of 3): stopped;
    # a placement that does not fit still fails at its item, whatever the limit
    assert C.place_items(order, w, t, k, 2, 1, 7, False, 1.2)[0] == -2
    assert C.place_items(order, w, t, k, 2, 1, 7, False, 0.5)[0] == -2
    assert C.place_items(order, w, t, k, 2, 1, 7, False, 1.5)[0] == -1
    assert C.place_items(order, w, t, k, 2, 1, 6, False, 0.0)[0] == 1
    assert place_items(order, w, t, k, 2, 1, 7, limit=1.2) is None
    assert place_items_reference(order, w, t, k, 2, 1, 7, limit=1.2) is None


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 4),
    st.integers(1, 12),
    st.lists(
        st.tuples(
            st.integers(1, 6), st.sampled_from([0.0, 0.5, 1.0, 2.5, 7.0]), st.integers(0, 12)
        ),
        max_size=30,
    ),
    st.randoms(use_true_random=False),
    st.booleans(),
    st.sampled_from([np.inf, 0.0, 1.0, 3.0, 8.0, 20.0]),
)
def test_kernel_equals_reference(lanes, slots, cap, items, rnd, aligned, limit):
    items = [(min(w, lanes), t, k) for w, t, k in items]  # ties in times on purpose
    n = len(items)
    widths = np.array([w for w, _, _ in items], dtype=I64)
    times = np.array([t for _, t, _ in items], dtype=np.float64)
    tokens = np.array([k for _, _, k in items], dtype=I64)
    order = np.array(rnd.sample(range(n), n), dtype=I64)
    _items_agree(order, widths, times, tokens, lanes, slots, cap, aligned, limit)


def test_replay_lanes():
    f64 = np.float64
    with pytest.raises(ValueError, match=r"replay_lanes: lanes_of holds 3 entries, not len"):
        C.replay_lanes(a(0, 1, 1), 2, a(1.0, 2.0, dtype=f64), a(0, 0), 2, False)
    with pytest.raises(ValueError, match=r"replay_lanes: lanes_of\[1\] = 2 \(each row"):
        C.replay_lanes(a(0, 2), 2, a(1.0, dtype=f64), a(0), 2, False)
    with pytest.raises(ValueError, match=r"replay_lanes: lanes_of\[0\] = -1 \(each row"):
        C.replay_lanes(a(-1, 0), 2, a(1.0, dtype=f64), a(0), 2, False)
    with pytest.raises(ValueError, match=r"replay_lanes: lanes_of\[2\] = 1 \(each row"):
        C.replay_lanes(a(0, -1, 1), 3, a(1.0, dtype=f64), a(0), 2, False)
    with pytest.raises(ValueError, match=r"replay_lanes: times\[0\] = inf must be a finite"):
        C.replay_lanes(a(0), 1, a(np.inf, dtype=f64), a(0), 1, False)
    with pytest.raises(ValueError, match=r"replay_lanes: slots holds 2 entries, times 1"):
        C.replay_lanes(a(0), 1, a(1.0, dtype=f64), a(0, 0), 1, False)
    with pytest.raises(ValueError, match=r"replay_lanes: width = 0 must be in"):
        C.replay_lanes(a(), 0, a(dtype=f64), a(), 1, False)
    with pytest.raises(ValueError, match=r"replay_lanes: lanes = 0 must be in"):
        C.replay_lanes(a(), 1, a(dtype=f64), a(), 0, False)
    start, free = C.replay_lanes(a(), 1, a(dtype=f64), a(), 3, True)
    assert start.size == 0 and free.tolist() == [0.0, 0.0, 0.0]
    # lane 0 runs 1 s, then a group of both lanes; with a barrier at the slot change both wait
    rows, times = a(0, -1, 0, 1), a(1.0, 2.0, dtype=f64)
    assert C.replay_lanes(rows, 2, times, a(0, 0), 2, False)[1].tolist() == [3.0, 3.0]
    start, free = C.replay_lanes(a(0, -1, 1, -1), 2, times, a(0, 1), 2, True)
    assert start.tolist() == [0.0, 1.0] and free.tolist() == [1.0, 3.0]


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 5),
    st.lists(
        st.tuples(st.sets(st.integers(0, 4), min_size=1, max_size=5), st.floats(0, 9)),
        max_size=20,
    ),
    st.booleans(),
)
def test_replay_equals_reference(lanes, items, barrier):
    rows = [sorted(x for x in group if x < lanes) or [0] for group, _ in items]
    width = max((len(r) for r in rows), default=1)
    lanes_of = np.full((len(rows), width), -1, dtype=I64)
    for i, r in enumerate(rows):
        lanes_of[i, : len(r)] = r
    times = np.array([t for _, t in items], dtype=np.float64)
    slots = np.arange(len(rows), dtype=I64) // 3 if barrier else None
    got = replay_lanes(lanes_of, times, lanes, slots)
    want = replay_lanes_reference(lanes_of, times, lanes, slots)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_place_rounds():
    f64 = np.float64
    order, sizes, lim = a(0, 1), a(1, 2), a(9.0, 9.0, dtype=f64)
    work, tok = a(4.0, 2.0, 1.0, 0.5, dtype=f64), a(4, 2, 2, 1)
    with pytest.raises(ValueError, match=r"place_rounds: order\[1\] = 0 \(order must be a perm"):
        C.place_rounds(a(0, 0), sizes, work, tok, lim, 2, 10)
    with pytest.raises(ValueError, match=r"place_rounds: sizes\[1\] = 1 \(sizes must ascend"):
        C.place_rounds(order, a(1, 1), work, tok, lim, 2, 10)
    with pytest.raises(ValueError, match=r"place_rounds: sizes\[1\] = 2 \(sizes must ascend"):
        C.place_rounds(order, sizes, work, tok, lim, 1, 10)  # larger than the lanes
    with pytest.raises(ValueError, match=r"place_rounds: work holds 3 entries, not len"):
        C.place_rounds(order, sizes, work[:3], tok, lim, 2, 10)
    with pytest.raises(ValueError, match=r"place_rounds: tokens holds 5 entries, not len"):
        C.place_rounds(order, sizes, work, a(1, 1, 1, 1, 1), lim, 2, 10)
    with pytest.raises(ValueError, match=r"place_rounds: work\[2\] = nan must be a number"):
        C.place_rounds(order, sizes, a(4.0, 2.0, np.nan, 0.5, dtype=f64), tok, lim, 2, 10)
    with pytest.raises(ValueError, match=r"place_rounds: work\[0\] = -1 must be a number"):
        C.place_rounds(order, sizes, a(-1.0, 2.0, 1.0, 0.5, dtype=f64), tok, lim, 2, 10)
    with pytest.raises(ValueError, match=r"place_rounds: tokens\[3\] = -1 must be in"):
        C.place_rounds(order, sizes, work, a(4, 2, 2, -1), lim, 2, 10)
    with pytest.raises(ValueError, match=r"place_rounds: limits\[0\] = nan must be a number"):
        C.place_rounds(order, sizes, work, tok, a(np.nan, 1.0, dtype=f64), 2, 10)
    with pytest.raises(ValueError, match=r"place_rounds: limits holds 1 entries, order 2"):
        C.place_rounds(order, sizes, work, tok, lim[:1], 2, 10)
    with pytest.raises(ValueError, match=r"place_rounds: lanes = 0 must be in"):
        C.place_rounds(order, sizes, work, tok, lim, 0, 10)
    with pytest.raises(ValueError, match=r"place_rounds: max_tokens = 0 must be in"):
        C.place_rounds(order, sizes, work, tok, lim, 2, 0)
    with pytest.raises(ValueError, match=r"place_rounds: len\(sizes\) = 0 must be in"):
        C.place_rounds(order, a(), a(dtype=f64), a(), lim, 2, 10)
    # valid edges: nothing to place; an item that fits no group; two rounds
    failed, rnd, first, kidx, start = C.place_rounds(
        a(), sizes, a(dtype=f64), a(), a(dtype=f64), 2, 1
    )
    assert failed == -1 and rnd.size == first.size == kidx.size == start.size == 0
    inf = np.inf
    assert C.place_rounds(order, sizes, a(inf, inf, 1.0, 1.0, dtype=f64), tok, lim, 2, 10)[0] == 0
    assert C.place_rounds(order, sizes, work, tok, lim, 2, 1)[0] == 0  # 4 or 2 tokens > 1
    # item 0 (4 s at size 1) opens lane 0, item 1 opens lane 1 (1 s): one round, both lanes
    failed, rnd, first, kidx, start = C.place_rounds(order, sizes, work, tok, lim, 2, 10)
    assert failed == -1 and rnd.tolist() == [0, 0] and first.tolist() == [0, 1]
    assert kidx.tolist() == [0, 0]
    # a cap of 4 s and one lane: item 1 (1 s) would make 5 s, so it waits for a second round
    one = C.place_rounds(order, a(1), a(4.0, 1.0, dtype=f64), a(1, 1), a(4.0, 4.0, dtype=f64), 1, 9)
    assert one[1].tolist() == [0, 1]
    # an idle lane grows the smallest group to the next size
    grow = C.place_rounds(a(0), sizes, a(1.0, 0.6, dtype=f64), a(2, 1), a(9.0, dtype=f64), 2, 9)
    assert grow[3].tolist() == [1]


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 8),
    st.integers(1, 12),
    st.lists(
        st.tuples(
            st.integers(1, 4), st.sampled_from([0.0, 0.5, 1.0, 2.5, 7.0]), st.integers(0, 12)
        ),
        max_size=25,
    ),
    st.sampled_from([1.0, 1.5, 4.0, np.inf]),
    st.randoms(use_true_random=False),
)
def test_rounds_kernel_equals_reference(lanes, cap, items, slack, rnd):
    sizes = np.array([s for s in (1, 2, 3, 4, 8) if s <= lanes], dtype=I64)
    n = len(items)
    # work that falls with the size, or stays (ties on purpose)
    work, tokens = _tables(items, sizes, lambda t, s: t / s if rnd.random() < 0.7 else t)
    limits = np.array([slack * max(t, 0.5) for _, t, _ in items], dtype=np.float64)
    order = np.array(rnd.sample(range(n), n), dtype=I64)
    _rounds_agree(order, sizes, work, tokens, limits, lanes, cap)


def test_cost_table():
    f64 = np.float64
    coefs = a(1.0, 0.5, 0.1, 0.01, 2.0, 1.0, 0.2, 0.02, 0.001, dtype=f64)
    with pytest.raises(ValueError, match=r"cost_table: kmin holds 1 entries, lengths 2"):
        C.cost_table(a(5, 9), a(1, 2), a(1), coefs)
    with pytest.raises(ValueError, match=r"cost_table: len\(coefs\) = 8 must be 9"):
        C.cost_table(a(5), a(1), a(1), coefs[:8])
    with pytest.raises(ValueError, match=r"cost_table: coefs\[3\] = nan must be a finite"):
        C.cost_table(a(5), a(1), a(1), np.where(np.arange(9) == 3, np.nan, coefs))
    with pytest.raises(ValueError, match=r"cost_table: coefs\[8\] = -1 must be a finite"):
        C.cost_table(a(5), a(1), a(1), np.where(np.arange(9) == 8, -1.0, coefs))
    with pytest.raises(ValueError, match=r"cost_table: ks\[1\] = 0 must be in \[1, 2\*\*20\]"):
        C.cost_table(a(5), a(1, 0), a(1), coefs)
    with pytest.raises(ValueError, match=r"cost_table: lengths\[0\] = -1 must be in"):
        C.cost_table(a(-1), a(1), a(1), coefs)
    with pytest.raises(ValueError, match=r"len\(lengths\) \* len\(ks\) = .* needs"):
        C.cost_table(np.zeros(1 << 20, I64), np.ones(1 << 20, I64), np.zeros(1 << 20, I64), coefs)
    # valid edges: nothing to cost; a row below every degree (all inf, fastest 0)
    with pytest.raises(ValueError, match=r"cost_table: slack = -0.5 must be a finite number"):
        C.cost_table(a(5), a(1), a(1), coefs, -0.5)
    with pytest.raises(ValueError, match=r"cost_table: slack = nan must be a finite number"):
        C.cost_table(a(5), a(1), a(1), coefs, np.nan)
    # valid edges: nothing to cost; a row below every degree (all inf, fastest 0, widest last)
    table, fastest, widest = C.cost_table(a(), a(1, 2), a(), coefs)
    assert table.size == fastest.size == widest.size == 0
    table, fastest, widest = C.cost_table(a(7), a(1, 2), a(3), coefs)
    assert np.isinf(table).all() and fastest.tolist() == [0]
    assert widest.tolist() == [1]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 1e-6, 3e-4, 0.5, 7.0, 1e-9]), min_size=9, max_size=9),
    st.lists(st.integers(0, 1 << 40), max_size=12),
    st.lists(st.integers(1, 300), min_size=1, max_size=9),
    st.randoms(use_true_random=False),
)
def test_cost_table_equals_reference_bit_for_bit(coefs, lens, ks, rnd):
    coefs = np.array(coefs, dtype=np.float64)
    # past 2**52 tokens the kernel takes its other path (the shard divided as numpy does)
    lens = np.array(lens + [0, 1, 2, 1000, (1 << 52) + 1, (1 << 62) - 3], dtype=I64)
    ks = np.array(ks, dtype=I64)
    kmin = np.array([rnd.randint(-2, 320) for _ in range(lens.size)], dtype=I64)
    slack = rnd.choice([0.0, 0.02, 0.5])
    got = cost_table(coefs, lens, ks, kmin, slack)
    want = cost_table_reference(coefs, lens, ks, kmin, slack)
    for x, y in zip(got, want, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y)  # bit for bit: inf where a degree is below kmin


@settings(max_examples=25, deadline=None)
@given(
    st.integers(9, 40),
    st.integers(1, 6),
    st.integers(20, 200),
    st.lists(st.tuples(st.integers(1, 12), st.integers(0, 50), st.integers(1, 20)), max_size=120),
    st.randoms(use_true_random=False),
    st.booleans(),
)
def test_kernel_equals_reference_on_many_lanes(lanes, slots, cap, items, rnd, aligned):
    """Past one block of 8 lanes, with budgets tight enough that lanes fill up: the blocks a
    scan skips and the slots it visits in order of their earliest lane change nothing."""
    items = [(min(w, lanes), t / 4, k) for w, t, k in items]
    n = len(items)
    widths = np.array([w for w, _, _ in items], dtype=I64)
    times = np.array([t for _, t, _ in items], dtype=np.float64)
    tokens = np.array([k for _, _, k in items], dtype=I64)
    order = np.array(rnd.sample(range(n), n), dtype=I64)
    if rnd.random() < 0.5:  # longest first, as the planner asks
        order = np.argsort(-times, kind="stable").astype(I64)
    limit = rnd.choice([np.inf, np.inf, 1.0, 5.0, 20.0, 60.0])  # a bound the place may pass
    _items_agree(order, widths, times, tokens, lanes, slots, cap, aligned, limit)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(4, 24),
    st.integers(4, 30),
    st.lists(
        st.tuples(st.integers(1, 3), st.sampled_from([0.5, 1.0, 2.5, 7.0]), st.integers(1, 30)),
        max_size=80,
    ),
    st.sampled_from([1.0, 1.5, 4.0]),
    st.randoms(use_true_random=False),
)
def test_rounds_kernel_equals_reference_on_many_items(lanes, cap, items, slack, rnd):
    """Many items over many rounds, longest first as the planner orders them: the groups and
    sizes a round skips for want of room change nothing."""
    sizes = np.array([s for s in (1, 2, 4, 8, 16) if s <= lanes], dtype=I64)
    work, tokens = _tables(items, sizes, lambda t, s: t / s + 0.1 * (s - 1))
    limits = np.array([slack * t for _, t, _ in items], dtype=np.float64)
    order = np.argsort([-k for _, _, k in items], kind="stable").astype(I64)
    if rnd.random() < 0.3:
        order = np.array(rnd.sample(range(len(items)), len(items)), dtype=I64)
    _rounds_agree(order, sizes, work, tokens, limits, lanes, cap)


def test_pipeline():
    f64 = np.float64
    f, b, one = a(1.0, 2.0, dtype=f64), a(2.0, 4.0, dtype=f64), a(0, 1)
    with pytest.raises(ValueError, match=r"pipeline: backward holds 1 entries, forward 2"):
        C.pipeline(f, b[:1], 2, 1, one, 1)
    with pytest.raises(ValueError, match=r"pipeline: stages = 0 must be in"):
        C.pipeline(f, b, 0, 1, one, 1)
    with pytest.raises(ValueError, match=r"pipeline: vpp = 0 must be in"):
        C.pipeline(f, b, 2, 0, one, 1)
    with pytest.raises(ValueError, match=r"pipeline: vpp = 65 must be in"):
        C.pipeline(f, b, 2, 65, one, 1)
    with pytest.raises(ValueError, match=r"pipeline: count = -1 must be in"):
        C.pipeline(f, b, 2, 1, one, -1)
    with pytest.raises(ValueError, match=r"pipeline: len\(forward\) = 2 must be a multiple of"):
        C.pipeline(f, b, 3, 2, one, 1)  # interleaved: micro-batches in groups of stages
    with pytest.raises(ValueError, match=r"pipeline: forward\[1\] = nan must be a finite"):
        C.pipeline(a(1.0, np.nan, dtype=f64), b, 2, 1, one, 1)
    with pytest.raises(ValueError, match=r"pipeline: backward\[0\] = -1 must be a finite"):
        C.pipeline(f, a(-1.0, 1.0, dtype=f64), 2, 1, one, 1)
    with pytest.raises(ValueError, match=r"pipeline: forward\[0\] = inf must be a finite"):
        C.pipeline(a(np.inf, 1.0, dtype=f64), b, 2, 1, one, 1)
    with pytest.raises(ValueError, match=r"pipeline: count = 2 must be 0 or 1 with no micro"):
        C.pipeline(a(dtype=f64), a(dtype=f64), 2, 1, a(), 2)
    with pytest.raises(ValueError, match=r"pipeline: orders holds 2 entries, not count"):
        C.pipeline(f, b, 2, 1, one, 2)
    with pytest.raises(ValueError, match=r"pipeline: orders\[3\] = 1 \(each row of orders"):
        C.pipeline(f, b, 2, 1, a(0, 1, 1, 1), 2)
    with pytest.raises(ValueError, match=r"pipeline: orders\[0\] = 2 \(each row of orders"):
        C.pipeline(f, b, 2, 1, a(2, 0), 1)
    # valid edges: no micro-batches; no orders; two orders of two micro-batches on 2 stages
    assert C.pipeline(a(dtype=f64), a(dtype=f64), 4, 2, a(), 1).tolist() == [0.0]
    assert C.pipeline(f, b, 2, 1, a(), 0).size == 0
    # 1F1B on 2 stages, in order 0, 1: stage 0 runs F0 0-1, F1 1-3; stage 1 F0 1-2, B0 2-4,
    # F1 4-6, B1 6-10; stage 0 then B0 4-6 and B1 10-14. Reversed: 14 too (2+1, 4+2+1+2, ...)
    got = C.pipeline(f, b, 2, 1, a(0, 1, 1, 0), 2)
    assert got.tolist() == [14.0, 14.0] == [pipeline_reference(f, b, 2)[0]] * 2
    assert pipeline(f, b, 2)[0] == got[0]


def test_rounds_tables():
    f64 = np.float64
    coefs = a(1.0, 0.5, 0.1, 0.01, 2.0, 1.0, 0.2, 0.02, 0.001, dtype=f64)
    with pytest.raises(ValueError, match=r"rounds_tables: kmin holds 1 entries, lengths 2"):
        C.rounds_tables(a(5, 9), a(1, 2), a(1), coefs, 10)
    with pytest.raises(ValueError, match=r"rounds_tables: len\(coefs\) = 8 must be 9"):
        C.rounds_tables(a(5), a(1), a(1), coefs[:8], 10)
    with pytest.raises(ValueError, match=r"rounds_tables: len\(ks\) = 0 must be in \[1, 64\]"):
        C.rounds_tables(a(5), a(), a(1), coefs, 10)
    with pytest.raises(ValueError, match=r"rounds_tables: cap = 0 must be in \[1, 2\*\*62\]"):
        C.rounds_tables(a(5), a(1), a(1), coefs, 0)
    with pytest.raises(ValueError, match=r"rounds_tables: coefs\[2\] = inf must be a finite"):
        C.rounds_tables(a(5), a(1), a(1), np.where(np.arange(9) == 2, np.inf, coefs), 10)
    with pytest.raises(ValueError, match=r"rounds_tables: ks\[0\] = 0 must be in \[1, 2\*\*20\]"):
        C.rounds_tables(a(5), a(0), a(1), coefs, 10)
    with pytest.raises(ValueError, match=r"rounds_tables: lengths\[1\] = -4 must be in"):
        C.rounds_tables(a(5, -4), a(1), a(1, 1), coefs, 10)
    # valid edges: nothing to tabulate; a row no size allows (inf work, caps at the first size)
    got = C.rounds_tables(a(), a(1, 2), a(), coefs, 10)
    assert all(x.size == 0 for x in got)
    tokens, times, work_time, work_quad, limit_time, limit_quad = C.rounds_tables(
        a(7), a(1, 2), a(3), coefs, 10
    )
    assert tokens.tolist() == [7, 4] and np.isinf(work_time).all() and np.isinf(work_quad).all()
    assert np.isfinite(times).all() and limit_quad.tolist() == [1.05 * 49.0 * (10 / 7)]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 1e-6, 3e-4, 0.5, 7.0]), min_size=9, max_size=9),
    st.lists(st.integers(0, 1 << 40), max_size=12),
    st.lists(st.integers(1, 300), min_size=1, max_size=9, unique=True),
    st.sampled_from([1, 7, 32768, 1 << 62]),
    st.randoms(use_true_random=False),
)
def test_rounds_tables_equals_reference_bit_for_bit(coefs, lens, ks, cap, rnd):
    coefs = np.array(coefs, dtype=np.float64)
    # past 2**52 tokens the shard is divided as numpy divides it; cap 2**62 wraps ks·cap
    lens = np.array(lens + [0, 1, 2, 1000, (1 << 52) + 1, (1 << 62) - 3], dtype=I64)
    ks = np.array(sorted(ks), dtype=I64)
    kmin = np.array([rnd.randint(-2, 320) for _ in range(lens.size)], dtype=I64)
    got = rounds_tables(coefs, lens, ks, kmin, cap)
    want = rounds_tables_reference(coefs, lens, ks, kmin, cap)
    for x, y in zip(got, want, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y)
