"""Issue 43: the compiled pipeline replay against its plain-Python reference, and the run-order
search of ``place`` with pipeline stages (planners/placement.py ``_sequence``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from padless._kernels.placement import pipeline, pipeline_orders, pipeline_reference
from padless.core.mesh import Mesh
from padless.planners import placement as PL
from tests.test_placement import COST  # the small cost model placement tests share


@st.composite
def schedules(draw):
    stages = draw(st.integers(1, 8))
    vpp = draw(st.integers(1, 4))
    micro = draw(st.integers(0, 64))
    if vpp > 1:
        micro = micro // stages * stages  # the interleaved schedule takes multiples of stages
    scale = draw(st.sampled_from([1e-3, 1.0, 7.0, 1e4]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    fwd = rng.random(micro) * scale
    bwd = rng.random(micro) * scale * draw(st.sampled_from([0.5, 2.0, 3.0]))
    if micro and draw(st.booleans()):
        fwd[rng.random(micro) < 0.3] = 0.0  # empty micro-batches take no time
        bwd[rng.random(micro) < 0.3] = 0.0
    return fwd, bwd, stages, vpp


@settings(max_examples=60, deadline=None)
@given(schedules())
def test_the_compiled_pipeline_is_the_reference_bit_for_bit(case):
    fwd, bwd, stages, vpp = case
    got = pipeline(fwd, bwd, stages, vpp)
    want = pipeline_reference(fwd, bwd, stages, vpp)
    assert got[0] == want[0]  # the same floats, not just close
    assert np.array_equal(got[1], want[1])


@settings(max_examples=25, deadline=None)
@given(schedules(), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_many_orders_in_one_call_are_each_order_s_pipeline(case, count, seed):
    fwd, bwd, stages, vpp = case
    rng = np.random.default_rng(seed)
    orders = np.array([rng.permutation(fwd.size) for _ in range(count)], dtype=np.int64)
    got = pipeline_orders(fwd, bwd, stages, vpp, orders)
    assert got.shape == ((count,) if fwd.size else (0,))
    for row, value in zip(orders, got, strict=False):
        assert value == pipeline_reference(fwd[row], bwd[row], stages, vpp)[0]


@pytest.mark.parametrize("stages, vpp", [(2, 2), (3, 2), (4, 2), (2, 3), (4, 4)])
def test_interleaved_counts_that_are_not_multiples_of_stages_are_refused(stages, vpp):
    # the reference's orders name micro-batches that do not exist there; the kernel says why
    for micro in range(1, 3 * stages + 1):
        fwd, bwd = np.ones(micro), np.full(micro, 2.0)
        if micro % stages == 0:
            assert (
                pipeline(fwd, bwd, stages, vpp)[0] == pipeline_reference(fwd, bwd, stages, vpp)[0]
            )
            continue
        with pytest.raises(IndexError):
            pipeline_reference(fwd, bwd, stages, vpp)
        with pytest.raises(ValueError, match=rf"len\(forward\) = {micro} must be a multiple of"):
            pipeline(fwd, bwd, stages, vpp)


@pytest.mark.parametrize("m", [1, 2, 3, 5])
def test_the_moves_are_every_order_one_move_or_swap_away(m):
    moves = PL._moves(m)
    assert moves.shape == (m, 2 * (m - 1), m)
    base = list(range(m))
    want = set()
    for i in range(m):
        got = {tuple(row) for row in moves[i].tolist()}
        for j in range(m):
            if j == i:
                continue
            moved = base[:i] + base[i + 1 :]
            moved.insert(j, i)
            swapped = base.copy()
            swapped[i], swapped[j] = swapped[j], swapped[i]
            assert tuple(moved) in got and tuple(swapped) in got
            want |= {tuple(moved), tuple(swapped)}
        assert all(sorted(row) == base for row in got)
    assert {tuple(r) for r in moves.reshape(-1, m).tolist()} == want


def _placements(micro: int, seed: int):
    """A heavy-tailed batch filling 60% of ``micro`` micro-batches of 8 ranks at 4096 tokens,
    and ``place``'s candidates for it on 4 stages (before evening out and reordering)."""
    rng = np.random.default_rng(seed)
    pool = np.minimum((1024 * (1 + rng.pareto(1.1, 400))).astype(np.int64), 8 * 4096 - 16)
    lens = pool[np.cumsum(pool) <= 0.6 * micro * 8 * 4096]
    mesh = Mesh(dp=1, cp=8, pp=4, dynamic=True, max_tokens=4096, micro_batches=micro)
    idx = np.arange(lens.size)
    firsts = [build() for _, build in PL._candidates(lens, idx, mesh, COST, micro, True)]
    assert len(firsts) >= 2
    return lens, firsts


@pytest.mark.parametrize("micro, seed", [(8, 3), (12, 4), (16, 5)])
def test_the_run_order_is_never_longer_and_no_single_move_shortens_it(micro, seed):
    lens, firsts = _placements(micro, seed)
    for p in firsts:
        before = PL._makespan(p)
        score, q = PL._sequence(p, before, budget=np.inf)
        assert score <= before
        # what it reports is the replayed step (up to the order of the sums of a slot's shares)
        assert score == pytest.approx(PL._makespan(q), rel=1e-12)
        assert np.array_equal(np.sort(q.indices), np.arange(lens.size))
        # the same micro-batches (as sets of sequences), in another order
        groups = {frozenset(p.indices[p.slots == s].tolist()) for s in range(micro)}
        assert groups == {frozenset(q.indices[q.slots == s].tolist()) for s in range(micro)}
        start, _ = PL.KP.replay_lanes(q.ranks, q.times, q.mesh.ranks, q.slots)
        span = PL._slot_times(q.slots, start, q.times, micro)
        fwd, bwd = PL._passes(q, span)
        bound = max(span.sum() + 3 * span.min(), 4 * span.max())
        near = pipeline_orders(fwd, bwd, 4, 1, PL._moves(micro).reshape(-1, micro))
        assert score <= bound * (1 + 1e-12) or near.min() >= score * (1 - 1e-12)  # local optimum
        assert PL._sequence(p, before, budget=np.inf)[0] == score  # deterministic


def test_the_order_search_beats_the_order_it_is_given_and_keeps_within_budget():
    lens, firsts = _placements(16, 7)
    p = firsts[0]
    before = PL._makespan(p)
    score, _ = PL._sequence(p, before)
    assert score < before  # the candidate's order (cheapest first, next cheapest last) improves
    # a budget smaller than one place's moves keeps the order given (or the span order)
    tiny, q = PL._sequence(p, before, budget=1.0)
    start, _ = PL.KP.replay_lanes(p.ranks, p.times, p.mesh.ranks, p.slots)
    span = PL._slot_times(p.slots, start, p.times, 16)
    fwd, bwd = PL._passes(p, span)
    by_span = pipeline(
        fwd[np.argsort(span, kind="stable")], bwd[np.argsort(span, kind="stable")], 4
    )
    assert tiny == min(before, by_span[0]) == pytest.approx(PL._makespan(q), rel=1e-12)


def test_place_with_interleaved_stages_keeps_a_valid_shorter_or_equal_step():
    rng = np.random.default_rng(11)
    lens = np.minimum((1024 * (1 + rng.pareto(1.1, 70))).astype(np.int64), 8 * 4096 - 16)
    mesh = Mesh(
        dp=1,
        cp=8,
        pp=2,
        dynamic=True,
        max_tokens=4096,
        micro_batches=12,
        vpp=2,
        schedule="interleaved",
    )
    p = PL.place(lens, mesh, COST)
    assert np.array_equal(np.sort(p.indices), np.arange(lens.size))
    sim = PL.simulate(p)
    assert sim.makespan == PL._makespan(p) and sim.makespan >= sim.bound * (1 - 1e-12)
    firsts = [build() for _, build in PL._candidates(lens, np.arange(70), mesh, COST, 12, True)]
    assert sim.makespan <= min(PL._makespan(q) for q in firsts)


def _valid(p, lens, mesh, micro):
    """Every sequence once, within the token budget of every rank, the same micro-batch count,
    each item on distinct ranks of the stage as many as its degree, at its cost model time."""
    assert p.micro_batches == micro
    assert np.array_equal(np.sort(p.indices), np.arange(lens.size))
    assert np.array_equal(p.lengths, lens[p.indices])
    assert p.slots.min() >= 0 and p.slots.max() < micro
    assert np.all(np.diff(p.slots) >= 0)  # items by micro-batch
    assert p.rank_tokens().max() <= mesh.max_tokens
    on = p.ranks >= 0
    assert np.array_equal(on.sum(axis=1), p.degrees)
    assert p.ranks.max() < mesh.ranks
    for row in p.ranks:
        row = row[row >= 0]
        assert np.unique(row).size == row.size
    assert np.allclose(p.times, COST.time(p.lengths, p.degrees), rtol=1e-12)


@pytest.mark.parametrize("micro, seed", [(8, 21), (12, 22), (16, 23)])
def test_evening_never_lengthens_the_step_and_keeps_a_valid_placement(micro, seed):
    lens, firsts = _placements(micro, seed)
    mesh = firsts[0].mesh
    for p in firsts[:3]:
        before = PL._makespan(p)
        score, q = PL._even(p, before)
        assert score <= before
        assert score == pytest.approx(PL._makespan(q), rel=1e-12)  # what it reports is the step
        _valid(q, lens, mesh, micro)
        again = PL._even(p, before)  # deterministic
        assert again[0] == score and np.array_equal(again[1].indices, q.indices)
        assert np.array_equal(again[1].ranks, q.ranks)


def test_evening_can_move_work_between_micro_batches():
    # some candidate gets a strictly shorter step by moves (not only by its run order)
    gains = []
    for micro, seed in [(8, 21), (12, 22), (16, 23)]:
        _, firsts = _placements(micro, seed)
        for p in firsts[:3]:
            before = PL._sequence(p, PL._makespan(p))[0]
            gains.append(before - PL._sequence(*PL._even(p, PL._makespan(p))[::-1])[0])
    assert max(gains) > 0


@pytest.mark.parametrize("micro, seed", [(8, 31), (16, 32)])
def test_place_with_stages_is_valid_and_never_longer_than_ordering_alone(micro, seed):
    lens, firsts = _placements(micro, seed)
    mesh = firsts[0].mesh
    p = PL.place(lens, mesh, COST)
    _valid(p, lens, mesh, micro)
    scores = [PL._makespan(q) for q in firsts]
    kept = firsts[int(np.argmin(scores))]
    assert PL._makespan(p) <= PL._sequence(kept, min(scores))[0] * (1 + 1e-12)
    q = PL.place(lens, mesh, COST)  # deterministic
    assert np.array_equal(q.indices, p.indices) and np.array_equal(q.ranks, p.ranks)
    assert np.array_equal(q.slots, p.slots)
