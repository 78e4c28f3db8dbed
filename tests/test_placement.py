"""Placement over DP × CP × PP: every sequence once, budgets per rank, equal micro-batch counts,
determinism, resume and elastic resume (padless.planners.placement, padless.core.mesh)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from padless import Cost
from padless.core.mesh import Mesh, MeshCost, padded, rank_tokens
from padless.planners.placement import place, plan_placement, simulate

COST = MeshCost(
    forward=Cost(linear=1e-6, quadratic=1e-10, per_sequence=1e-4),
    backward=Cost(linear=2e-6, quadratic=2e-10, per_sequence=2e-4),
    kv_bytes=65536,
    bandwidth=5e10,
    latency=2e-5,
)

meshes = st.builds(
    lambda dp, cp, pp, dynamic, cap, vpp: Mesh(
        dp=dp,
        cp=cp,
        pp=pp if vpp == 1 else max(pp, 2),
        dynamic=dynamic,
        max_tokens=cap,
        schedule="1f1b" if vpp == 1 else "interleaved",
        vpp=vpp,
    ),
    st.integers(1, 4),
    st.integers(1, 5),
    st.integers(1, 3),
    st.booleans(),
    st.sampled_from([512, 1000, 4096]),
    st.sampled_from([1, 1, 2]),
)


def lengths_for(mesh: Mesh, raw: list[int]) -> np.ndarray:
    """Lengths that fit the mesh's budget at its largest degree."""
    top = mesh.max_tokens * mesh.cp - 2 * mesh.cp  # padded to 2·cp, then divided by cp
    return np.minimum(np.array(raw, dtype=np.int64), top)


def check_valid(p, lens: np.ndarray) -> None:
    mesh = p.mesh
    # every sequence once
    assert sorted(p.indices.tolist()) == list(range(lens.size))
    assert np.array_equal(p.lengths, lens[p.indices])
    # budgets per rank and micro-batch
    toks = p.rank_tokens()
    assert toks.shape == (p.micro_batches, mesh.ranks)
    assert int(toks.max(initial=0)) <= mesh.max_tokens
    # equal micro-batch counts, multiples of vpp; micro-batches are shared by every rank
    assert p.micro_batches % mesh.vpp == 0 and p.micro_batches >= mesh.pp
    for r in range(mesh.ranks):
        step = p.rank_step(r)
        assert len(step) == p.micro_batches
    # degrees: within cp, each shard's group has that many distinct ranks
    assert ((p.degrees >= 1) & (p.degrees <= mesh.cp)).all()
    for i in range(len(p)):
        row = p.ranks[i]
        group = row[row >= 0]
        assert group.size == p.degrees[i] == np.unique(group).size
        assert ((group >= 0) & (group < mesh.ranks)).all()
    if not mesh.dynamic:
        assert (p.degrees == mesh.cp).all()
        assert (p.ranks[:, 0] % mesh.cp == 0).all()  # a whole data-parallel group


@settings(max_examples=25, deadline=None)
@given(meshes, st.lists(st.integers(1, 20000), min_size=0, max_size=60))
def test_every_sequence_once_within_budgets_and_equal_micro_batches(mesh, raw):
    lens = lengths_for(mesh, raw)
    p = place(lens, mesh, COST)
    check_valid(p, lens)


@settings(max_examples=15, deadline=None)
@given(meshes, st.lists(st.integers(1, 20000), min_size=1, max_size=40))
def test_segments_are_thd_rows_that_cover_the_rank_s_shards(mesh, raw):
    lens = lengths_for(mesh, raw)
    p = place(lens, mesh, COST)
    seen: dict[int, set[int]] = {}
    for r in range(mesh.ranks):
        for segments in p.rank_step(r):
            for seg in segments:
                assert seg.group[seg.cp_rank] == r and len(seg.group) == seg.cp
                real = lens[seg.indices]
                assert np.array_equal(np.diff(seg.cu_seqlens), real)
                assert np.array_equal(np.diff(seg.cu_seqlens_padded), padded(real, seg.cp))
                # what the rank holds is within its budget (the zigzag share of the padded row)
                assert seg.cu_seqlens_padded[-1] // seg.cp <= mesh.max_tokens
                for i in seg.indices.tolist():
                    seen.setdefault(i, set()).add(r)
    for i in range(lens.size):  # each sequence is on exactly its group's ranks
        row = p.ranks[p.indices == i][0]
        assert seen[i] == set(row[row >= 0].tolist())


def test_fixed_micro_batches_and_interleaved_multiples():
    lens = np.arange(1, 200) * 7  # 139,300 tokens: 9 micro-batches of 4 ranks × 4096
    mesh = Mesh(dp=2, cp=2, pp=2, max_tokens=4096, schedule="interleaved", vpp=3, micro_batches=12)
    p = place(lens, mesh, COST)
    assert p.micro_batches == 12
    check_valid(p, lens)
    with pytest.raises(ValueError, match="micro_batches must be a multiple of 6"):
        Mesh(dp=2, pp=2, schedule="interleaved", vpp=3, micro_batches=8)
    with pytest.raises(ValueError, match="cannot hold this batch"):
        place(lens, Mesh(dp=1, cp=1, max_tokens=2000, micro_batches=1), COST)


def test_deterministic_and_independent_of_input_order_labels():
    rng = np.random.default_rng(3)
    lens = rng.integers(1, 30000, 300)
    mesh = Mesh(dp=4, cp=4, dynamic=True, max_tokens=8192)
    a, b = place(lens, mesh, COST), place(lens.copy(), mesh, COST)
    for name in ("indices", "slots", "degrees", "ranks", "times"):
        assert np.array_equal(getattr(a, name), getattr(b, name))


def test_dynamic_cp_gives_long_sequences_larger_degrees_of_any_size():
    lens = np.array([60000, 40000, 20000] + [500] * 200)
    p = place(lens, Mesh(dp=2, cp=6, dynamic=True, max_tokens=12000), COST)
    k = dict(zip(p.indices.tolist(), p.degrees.tolist(), strict=True))
    assert k[0] >= k[1] >= k[2] >= k[3] == 1
    assert k[0] >= 5  # 60000 tokens need at least 5 ranks of 12000
    assert k[0] == 6  # not a power of two: any degree up to cp
    assert rank_tokens(60000, k[0]) <= 12000


def test_aligned_groups_are_blocks_of_their_degree():
    lens = np.random.default_rng(5).integers(1, 40000, 300)
    mesh = Mesh(dp=3, cp=5, dynamic=True, max_tokens=8192, aligned_groups=True)
    p = place(lens, mesh, COST)
    check_valid(p, lens)
    for row, k in zip(p.ranks, p.degrees, strict=True):
        group = row[row >= 0]
        assert group[0] % k == 0 and np.array_equal(group, group[0] + np.arange(k))
    assert (p.degrees > 1).any() and Mesh.parse(
        "dp=2,cp=2,dynamic=1,max_tokens=8,aligned_groups=yes"
    )
    with pytest.raises(ValueError, match="aligned_groups=True needs dynamic=True"):
        Mesh(dp=2, cp=2, aligned_groups=True)


def test_refuses_what_cannot_fit_naming_both_parts():
    with pytest.raises(ValueError, match="max_tokens=1000 per rank at the largest CP degree cp=2"):
        place([5000], Mesh(dp=1, cp=2, dynamic=True, max_tokens=1000), COST)
    with pytest.raises(ValueError, match="split over cp=2 ranks"):
        place([5000], Mesh(dp=1, cp=2, max_tokens=1000), COST)
    # at max_tokens=1 no CP shard fits (2 tokens at least): refused, not searched for forever
    with pytest.raises(ValueError, match=r"got length 2 \(sequence 1\).*2 tokens at least"):
        place([1, 2], Mesh(dp=1, cp=4, dynamic=True, max_tokens=1), COST)
    assert place([1, 1, 0], Mesh(dp=1, cp=4, dynamic=True, max_tokens=1), COST).degrees.max() == 1
    with pytest.raises(ValueError, match="dynamic=True needs max_tokens"):
        Mesh(dp=2, cp=2, dynamic=True)
    # an epoch with a sequence the mesh cannot hold is refused when planned, not at its step
    with pytest.raises(ValueError, match=r"got length 5000 \(sequence 3\)"):
        plan_placement(
            [10, 20, 30, 5000],
            Mesh(dp=1, cp=2, dynamic=True, max_tokens=1000),
            COST,
            global_batch=2,
        )
    with pytest.raises(ValueError, match="vpp must be 1 with schedule='1f1b'"):
        Mesh(dp=2, vpp=2)
    with pytest.raises(TypeError, match="dp must be an int"):
        Mesh(dp=2.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="mesh must be a padless.Mesh"):
        place([1], "dp=2", COST)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mesh must be key=value"):
        Mesh.parse("dp=2,tp=4")
    with pytest.raises(ValueError, match="'dp' twice"):
        Mesh.parse("dp=2,cp=2,dp=4")  # not the last one silently
    # an array of another shape is not flattened into sequences
    for call in (
        lambda: place(np.ones((3, 2), np.int64), Mesh(dp=2), COST),
        lambda: plan_placement([[4, 5], [6, 7]], Mesh(dp=2), COST, global_batch=2),
    ):
        with pytest.raises(ValueError, match=r"one length per sequence .* shape \((3, 2|2, 2)\)"):
            call()


def test_mesh_cost_round_trips_through_json(tmp_path):
    path = COST.save(tmp_path / "cost.json")
    assert MeshCost.load(path) == COST
    with pytest.raises(ValueError, match="unknown keys"):
        MeshCost.from_dict({**COST.as_dict(), "extra": 1})


def test_the_exchange_makes_a_large_degree_cost():
    # without the exchange the largest degree is always fastest; with it, short sequences are
    # fastest on one rank
    free = MeshCost(forward=COST.forward, backward=COST.backward)
    ks = np.arange(1, 9)
    assert np.argmin(free.time(2048, ks)) == 7
    assert np.argmin(COST.time(2048, ks)) == 0
    assert np.argmin(COST.time(131072, ks)) > 0


def plan_args(n: int = 400):
    lens = np.random.default_rng(7).integers(1, 16000, n)
    return lens, Mesh(dp=4, cp=2, dynamic=True, max_tokens=8192)


def test_epoch_covers_every_sequence_once_with_outliers_delayed():
    lens, mesh = plan_args()
    plan = plan_placement(
        lens, mesh, COST, global_batch=64, seed=5, delay_longer_than=14000, delay_steps=2
    )
    got = np.concatenate([plan.step(s).indices for s in range(len(plan))])
    assert sorted(got.tolist()) == list(range(lens.size))
    delayed = np.concatenate([plan.step(s).delayed for s in range(len(plan))])
    assert delayed.size > 0 and (lens[delayed] > 14000).all()
    plain = plan_placement(lens, mesh, COST, global_batch=64, seed=5)
    # a delayed sequence runs later than it would have
    where = {int(i): s for s in range(len(plan)) for i in plan.batch(s)}
    before = {int(i): s for s in range(len(plain)) for i in plain.batch(s)}
    assert all(where[int(i)] > before[int(i)] for i in delayed)


def test_resume_is_recomputation_and_elastic_resume_keeps_coverage():
    lens, mesh = plan_args()
    plan = plan_placement(lens, mesh, COST, global_batch=50, seed=2, epoch=1)
    again = plan_placement(lens, mesh, COST, global_batch=50, seed=2, epoch=1)
    assert np.array_equal(plan.step(3).indices, again.step(3).indices)
    assert np.array_equal(plan.step(3).ranks, again.step(3).ranks)
    # three steps on the old mesh, the rest on a new one
    bigger = Mesh(dp=8, cp=3, dynamic=True, max_tokens=8192)
    moved = plan.on(bigger)
    done = [plan.step(s).indices for s in range(3)]
    rest = [moved.step(s) for s in range(3, len(moved))]
    assert all(p.mesh == bigger for p in rest)
    got = np.concatenate(done + [p.indices for p in rest])
    assert sorted(got.tolist()) == list(range(lens.size))
    other = plan_placement(lens, mesh, COST, global_batch=50, seed=2, epoch=2)
    assert not np.array_equal(other.batch(0), plan.batch(0))
    with pytest.raises(ValueError, match=r"step must be in \[0, 8\)"):
        plan.step(8)


# ------------------------------------------------------------ the search's candidates (issue 43)


@settings(max_examples=20, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(1, 6),
    st.sampled_from([512, 1000, 4096]),
    st.lists(st.integers(1, 20000), min_size=1, max_size=60),
)
def test_megatron_like_candidates_are_valid(dp, cp, cap, raw):
    """The two candidates built the Megatron-dev way: every sequence once, no rank over
    max_tokens after padding, equal micro-batch counts, group sizes powers of two (or cp) on
    consecutive ranks, times the cost model's."""
    from padless.planners import placement as PL

    mesh = Mesh(dp=dp, cp=cp, dynamic=True, max_tokens=cap)
    lens = lengths_for(mesh, raw)
    kmin, _, _ = PL._degrees(lens, mesh, COST, mesh.ranks, None)
    made = PL._rounds(lens, kmin, mesh, COST, cap)
    assert len(made) == 2
    for rnd, start, first, degrees, times, m in made:
        assert all(k == cp or k & (k - 1) == 0 for k in degrees.tolist())
        assert (degrees >= kmin).all() and (first + degrees <= mesh.ranks).all()
        assert np.allclose(times, COST.time(lens, degrees))
        assert sorted(set(rnd.tolist())) == list(range(m))
        got = (rnd, start, PL._blocks(first, degrees))
        p = PL._assemble(got, mesh, COST, np.arange(lens.size), lens, degrees, times, m)
        check_valid(p, lens)


@settings(max_examples=20, deadline=None)
@given(meshes, st.lists(st.integers(1, 20000), min_size=1, max_size=50))
def test_the_kept_placement_is_never_slower_than_any_candidate(mesh, raw):
    """place keeps the shortest replayed step among its candidates (and the pipeline's evening
    and reordering only shorten it); each candidate's floor is no longer than its replay."""
    from padless.planners import placement as PL

    lens = lengths_for(mesh, raw)
    kept = simulate(place(lens, mesh, COST)).makespan
    built = 0
    for floor, build in PL._candidates(
        lens, np.arange(lens.size), mesh, COST, mesh.micro_batches, True
    ):
        q = build()
        check_valid(q, lens)
        step = simulate(q).makespan
        assert floor <= step * (1 + 1e-9)
        if mesh.dynamic:
            assert kept <= step * (1 + 1e-12)
        built += 1
    assert built >= 1


def test_pipeline_evening_and_order_never_lengthen_the_step():
    from padless.planners import placement as PL

    rng = np.random.default_rng(3)
    lens = np.minimum((1024 * (1 + rng.pareto(1.1, 120))).astype(np.int64), 8 * 4096 - 16)
    mesh = Mesh(dp=1, cp=8, pp=4, dynamic=True, max_tokens=4096, micro_batches=8)
    firsts = [build() for _, build in PL._candidates(lens, np.arange(120), mesh, COST, 8, True)]
    for p in firsts:
        before = PL._makespan(p)
        score, q = PL._sequence(*PL._even(p, before)[::-1])
        assert score <= before and score == pytest.approx(PL._makespan(q), rel=1e-12)
        check_valid(q, lens)
        assert np.array_equal(np.sort(q.indices), np.arange(120))


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 9), st.lists(st.integers(1, 60000), min_size=1, max_size=40))
def test_the_free_spread_is_the_widest_degree_within_two_percent_of_the_least_work(cp, raw):
    from padless.planners import placement as PL

    mesh = Mesh(dp=2, cp=cp, dynamic=True, max_tokens=4096)
    lens = lengths_for(mesh, raw)
    kmin, base, m = PL._degrees(lens, mesh, COST, mesh.ranks, None)
    table = PL._Table(lens, COST, cp, kmin)
    rows = np.arange(lens.size)
    table.of(rows)
    widths, times = PL._free_spread(table, base)
    assert (widths >= kmin).all() and (widths <= cp).all()
    assert np.allclose(times, COST.time(lens, widths))
    for i in range(lens.size):
        ks = np.arange(int(kmin[i]), cp + 1)
        area = ks * COST.time(np.full(ks.size, lens[i]), ks)
        free = ks[area <= 1.02 * area.min()]
        assert widths[i] == free.max()


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.5, 7.0]), min_size=1, max_size=40),
    st.lists(st.sampled_from([0.25, 1.0, 2.0, 9.0]), max_size=40),
    st.randoms(use_true_random=False),
)
def test_longest_first_merge_is_a_stable_sort(base, new, rnd):
    """The spreads' longest-first order (the others sorted once, the changed rows merged in)
    is exactly a stable sort of −times: ties by index."""
    from padless.planners import placement as PL

    base = np.array(base)
    rows = np.array(sorted(rnd.sample(range(base.size), min(len(new), base.size))), dtype=int)
    times = base.copy()
    times[rows] = new[: rows.size]
    got = PL._Longest(base, rows)(times)
    assert np.array_equal(got, np.argsort(-times, kind="stable"))


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.5, 7.0]), min_size=1, max_size=40),
    st.lists(st.sampled_from([0.25, 1.0, 2.0, 9.0]), max_size=40),
    st.lists(st.sampled_from([0.5, 2.0, 3.0, 8.0]), min_size=1, max_size=10),
    st.randoms(use_true_random=False),
)
def test_longest_first_is_a_stable_sort_where_times_change_outside_its_rows(base, new, out, rnd):
    """Times may change at items outside the rows the order was built for (rows a later spread
    costs and appends to the table): the order is still exactly a stable sort of −times, for
    every call on the same object."""
    from padless.planners import placement as PL

    base = np.array(base)
    rows = np.array(sorted(rnd.sample(range(base.size), min(len(new), base.size))), dtype=int)
    longest = PL._Longest(base, rows)
    for _ in range(3):
        times = base.copy()
        times[rows] = new[: rows.size]
        others = [i for i in range(base.size) if i not in set(rows.tolist())]
        for i in rnd.sample(others, min(len(out), len(others))):
            times[i] = rnd.choice(out)
        assert np.array_equal(longest(times), np.argsort(-times, kind="stable"))


@settings(max_examples=20, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 1e-6, 3e-4, 0.5]), min_size=6, max_size=6),
    st.sampled_from([0.0, 1.0, 65536.0]),
    st.sampled_from([0.0, 2e-5]),
    st.lists(st.integers(0, 1 << 30), min_size=1, max_size=12),
)
def test_the_compiled_cost_table_is_mesh_cost_time_bit_for_bit(coefs, kv, latency, lens):
    """The planner's table (padless._kernels.placement.cost_table) is MeshCost.time at every
    degree, the same numbers bit for bit: the plans do not depend on which one costs them."""
    from padless._kernels.placement import cost_table
    from padless.planners import placement as PL

    if not any(coefs[:3]) or not any(coefs[3:]):
        coefs = [1e-6, *coefs[1:3], 2e-6, *coefs[4:]]
    cost = MeshCost(
        forward=Cost(linear=coefs[0], quadratic=coefs[1], per_sequence=coefs[2]),
        backward=Cost(linear=coefs[3], quadratic=coefs[4], per_sequence=coefs[5]),
        kv_bytes=kv,
        bandwidth=5e10,
        latency=latency,
    )
    lens = np.array(lens, dtype=np.int64)
    ks = np.arange(1, 20, dtype=np.int64)
    table = cost_table(PL._coefs(cost), lens, ks, np.zeros(lens.size, dtype=np.int64))[0]
    assert np.array_equal(table, np.asarray(cost.time(lens[:, None], ks[None, :])))


@settings(max_examples=30, deadline=None)
@given(meshes, st.lists(st.integers(1, 20000), min_size=1, max_size=60))
def test_stopping_placements_past_the_best_step_never_changes_the_plan(mesh, raw):
    """place() passes the best step so far to place_items as a limit (a placement whose
    busiest lane passes it stops once the rest provably fits): the plan is the one placed in
    full, item for item."""
    from padless._kernels import placement as KP

    lens = lengths_for(mesh, raw)
    got = place(lens, mesh, COST)
    full = KP.place_items

    def unlimited(*args):  # place_items without its limit (the 9th argument)
        return full(*args[:8])

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(KP, "place_items", unlimited)
        want = place(lens, mesh, COST)
    assert got.micro_batches == want.micro_batches
    for name in ("indices", "slots", "degrees", "ranks", "times"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.sampled_from([0.0, 0.5, 1.0, 2.5]), st.integers(1, 9)),
        max_size=60,
    ),
    st.integers(0, 40),
)
def test_one_key_sorts_are_the_lexsorts_they_replace(items, tokens_top):
    """_by_slot_start and _by_tokens (one sort of a unique integer key) give the stable orders
    of np.lexsort, ties by index."""
    from padless.planners import placement as PL

    slot = np.array([s for s, _, _ in items], dtype=np.int64)
    start = np.array([t for _, t, _ in items], dtype=np.float64)
    widths = np.array([w for _, _, w in items], dtype=np.int64)
    tokens = np.minimum(slot * 7 + widths, tokens_top)
    assert np.array_equal(PL._by_slot_start(slot, start), np.lexsort((start, slot)))
    assert np.array_equal(PL._by_tokens(widths, tokens), np.lexsort((-widths, -tokens)))
    assert np.array_equal(PL._stable_order(-start), np.argsort(-start, kind="stable"))


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(1, 300000), min_size=1, max_size=30),
    st.integers(1, 12),
    st.floats(0.0, 0.2),
)
def test_the_table_s_first_degree_within_a_target_is_the_running_minimum_s(lens, cp, target):
    """_Table.within(target) is where the running minimum over the degrees first gets to the
    target (the count of degrees whose running minimum is above it)."""
    from padless.planners import placement as PL

    lens = np.array(lens, dtype=np.int64)
    kmin = np.maximum(1, -(-lens // 40000))
    kmin = np.minimum(kmin, cp)
    table = PL._Table(lens, COST, cp, kmin)
    table.of(np.arange(lens.size))
    running = np.minimum.accumulate(table.table, axis=1)
    assert np.array_equal(table.within(target), np.count_nonzero(running > target, axis=1))


def test_a_mix_of_short_sequences_stops_placements_and_keeps_the_plan():
    """On a long-tailed mix (400 sequences, 16 ranks) some candidate's placement passes the best
    step and stops early; the plans are those placed in full."""
    from padless._kernels import placement as KP

    full = KP.place_items
    stopped = 0

    def counting(*args):
        nonlocal stopped
        got = full(*args)
        stopped += got is None
        return got

    def unlimited(*args):  # place_items without its limit (the 9th argument)
        return full(*args[:8])

    mesh = Mesh(dp=1, cp=16, dynamic=True, max_tokens=4096)
    for seed in range(4):
        rng = np.random.default_rng(seed)
        lens = np.minimum(rng.lognormal(7.5, 1.2, 400).astype(np.int64) + 1, 16 * 4096 - 32)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(KP, "place_items", counting)
            got = place(lens, mesh, COST)
            mp.setattr(KP, "place_items", unlimited)
            want = place(lens, mesh, COST)
        for name in ("indices", "slots", "degrees", "ranks", "times"):
            assert np.array_equal(getattr(got, name), getattr(want, name)), (seed, name)
    assert stopped >= 1
