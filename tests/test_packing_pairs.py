"""Vector packing (a capacity per field): the best-fit-pairs kernel, the planner, its plan."""

import json
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import padless
from padless import _kernels as K
from padless.core.plan import VectorPackedPlan
from padless.planners.packing import next_fit_rows
from padless.planners.spec import spec_from_dict, spec_to_dict

# capacities at the 64-ary max tree's borders (one level, two, three) and small odd ones
EDGE_CAPACITIES = [1, 2, 3, 63, 64, 65, 127, 4095, 4096, 4097]


def _check_rows(row_of, rows, first, second, cap0, cap1, max_per_row):
    """Rows numbered in opening order, within both capacities and the count cap."""
    if row_of.size:
        assert np.array_equal(np.unique(row_of), np.arange(rows))
        top = np.maximum.accumulate(row_of)
        assert top[0] == 0 and np.all(np.diff(top) <= 1)
    assert np.all(np.bincount(row_of, weights=first, minlength=rows) <= cap0)
    assert np.all(np.bincount(row_of, weights=second, minlength=rows) <= cap1)
    if max_per_row and row_of.size:
        assert np.bincount(row_of).max() <= max_per_row


@st.composite
def pair_sizes(draw):
    cap0 = draw(st.sampled_from(EDGE_CAPACITIES) | st.integers(1, 200))
    cap1 = draw(st.sampled_from(EDGE_CAPACITIES) | st.integers(1, 200))
    n = draw(st.integers(0, 120))
    fracs = draw(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=n, max_size=n))
    scale = draw(st.sampled_from([1.0, 0.3, 0.05]))
    first = np.array([round(a * scale * cap0) for a, _ in fracs], dtype=np.int64)
    second = np.array([round(b * scale * cap1) for _, b in fracs], dtype=np.int64)
    if draw(st.booleans()):  # the planner's order: largest share first
        order = np.argsort(-np.maximum(first * cap1, second * cap0), kind="stable")
        first, second = first[order], second[order]
    return first, second, cap0, cap1


@given(pair_sizes(), st.sampled_from([0, 1, 2, 3, 7]))
def test_best_fit_pairs_kernel_matches_reference(case, max_per_row):
    first, second, cap0, cap1 = case
    row_of, rows = K.best_fit_pairs(first, second, cap0, cap1, max_per_row)
    want, want_rows = K.best_fit_pairs_reference(first, second, cap0, cap1, max_per_row)
    assert rows == want_rows and np.array_equal(row_of, want)
    _check_rows(row_of, rows, first, second, cap0, cap1, max_per_row)


@pytest.mark.parametrize("cap0", [63, 64, 65, 4097, 64 * 64 + 1])
def test_best_fit_pairs_kernel_at_tree_borders(cap0):
    rs = np.random.default_rng(cap0)
    # first sizes leaving residuals at the max tree's word borders, second ones spread out
    picks = [0, 1, cap0, cap0 - 1, cap0 // 2] + [
        min(cap0, 64 * k + d) for k in (1, 64) for d in (-1, 0, 1)
    ]
    first = np.concatenate([picks, rs.integers(0, cap0 + 1, 150), rs.integers(0, 3, 40)])
    second = rs.integers(0, 41, first.size)
    for max_per_row in (0, 3):
        got = K.best_fit_pairs(first, second, cap0, 40, max_per_row)
        want = K.best_fit_pairs_reference(first, second, cap0, 40, max_per_row)
        assert got[1] == want[1] and np.array_equal(got[0], want[0])
        _check_rows(got[0], got[1], first, second, cap0, 40, max_per_row)


def test_best_fit_pairs_rule():
    # rows left with (4, 9) and (2, 1): the (2, 1) item takes the least first-field room
    row_of, _ = K.best_fit_pairs(np.array([6, 8, 2]), np.array([1, 9, 1]), 10, 10, 0)
    assert row_of.tolist() == [0, 1, 1]
    # the least room in the first field that also fits the second: (1, 5) skips row 1's (2, 1)
    row_of, _ = K.best_fit_pairs(np.array([6, 8, 1]), np.array([1, 9, 5]), 10, 10, 0)
    assert row_of.tolist() == [0, 1, 0]
    # equal first-field room: the least second-field room, then the row opened last
    row_of, _ = K.best_fit_pairs(np.array([6, 6, 3]), np.array([5, 2, 1]), 10, 10, 0)
    assert row_of.tolist() == [0, 1, 0]
    row_of, _ = K.best_fit_pairs(np.array([6, 6, 1]), np.array([2, 2, 1]), 10, 10, 0)
    assert row_of.tolist() == [0, 1, 1]
    # a row closes at max_per_row items
    row_of, _ = K.best_fit_pairs(np.array([1, 1, 1]), np.array([1, 1, 1]), 9, 9, 2)
    assert row_of.tolist() == [0, 0, 1]


def test_best_fit_pairs_kernel_refuses_what_it_cannot_place():
    with pytest.raises(IndexError):
        K.best_fit_pairs(np.array([3]), np.array([5]), 4, 4, 0)
    with pytest.raises(ValueError, match="one size per item"):
        K.best_fit_pairs(np.array([1, 2]), np.array([1]), 4, 4, 0)


# ---------------------------------------------------------------------------------- planner


def check_pair_plan(
    plan, lengths, caps, max_per_row=None, rows_per_batch=1, skipped=(), whole=True
):
    """Invariants of a vector packing plan over (N, 2) ``lengths`` (``whole``: a plan of every
    pair, not one window's)."""
    assert isinstance(plan, VectorPackedPlan) and plan.capacities == tuple(caps)
    if whole:
        kept = sorted(set(range(lengths.shape[0])) - set(skipped))
        assert sorted(plan.indices.tolist()) == kept  # every kept pair exactly once
        assert plan.skipped.tolist() == sorted(skipped)
    picked = lengths[plan.indices]
    assert np.array_equal(plan.piece_lengths, picked.sum(axis=1))
    bounds = plan.rows.offsets
    for f in range(2):
        used = np.add.reduceat(picked[:, f], bounds[:-1]) if plan.num_rows else np.zeros(0)
        assert np.all(used <= caps[f])
    counts = np.diff(bounds)
    assert np.all(counts >= 1)
    if max_per_row:
        assert np.all(counts <= max_per_row)
    per_batch = np.diff(plan.row_offsets)
    assert np.all(per_batch[:-1] == rows_per_batch)
    # the collate's next fit over both fields gives back every batch's rows
    for b in range(len(plan)):
        lo, hi = plan.offsets[b], plan.offsets[b + 1]
        rebuilt = next_fit_rows(picked[lo:hi], capacity=tuple(caps), max_per_row=max_per_row)
        first_row = plan.row_offsets[b]
        planned = np.repeat(np.arange(per_batch[b]), counts[first_row : first_row + per_batch[b]])
        assert np.array_equal(rebuilt, planned)
    fields = plan.field_stats(lengths)
    for f, stats in enumerate(fields):
        assert stats.real_tokens == int(picked[:, f].sum())
        assert stats.padded_slots == plan.num_rows * caps[f]
    assert plan.info["field_real_tokens"] == [s.real_tokens for s in fields]
    assert plan.stats(lengths).padded_slots == plan.num_rows * sum(caps)
    bound = max(-(-int(picked[:, f].sum()) // caps[f]) for f in range(2))
    assert plan.info["rows_lower_bound"] == bound <= plan.num_rows
    assert plan.info["rows"] == plan.num_rows


@st.composite
def pair_corpora(draw):
    caps = (draw(st.integers(1, 60)), draw(st.integers(1, 60)))
    n = draw(st.integers(0, 80))
    over = draw(st.booleans())  # some pairs over a capacity, for oversize="drop"
    top = [c + (5 if over else 0) for c in caps]
    rows = draw(
        st.lists(st.tuples(st.integers(0, top[0]), st.integers(0, top[1])), min_size=n, max_size=n)
    )
    return np.array(rows, dtype=np.int64).reshape(-1, 2), caps


@given(
    pair_corpora(),
    st.sampled_from([None, 1, 3]),
    st.sampled_from([1, 2, 5]),
    st.integers(0, 3),
    st.integers(0, 2),
)
def test_every_pair_once_within_both_capacities(case, max_per_row, per, seed, epoch):
    lengths, caps = case
    spec = padless.Packing(
        capacity=caps, max_per_row=max_per_row, rows_per_batch=per, oversize="drop"
    )
    plan = spec.plan(lengths, seed=seed, epoch=epoch)
    over = np.flatnonzero((lengths[:, 0] > caps[0]) | (lengths[:, 1] > caps[1])).tolist()
    check_pair_plan(plan, lengths, caps, max_per_row, per, skipped=over)
    assert plan.info["dropped"] == len(over)
    assert plan.info["tokens_lost"] == int(lengths[over].sum())
    assert spec.plan(lengths, seed=seed, epoch=epoch) == plan  # deterministic
    if not over:
        with_error = padless.Packing(capacity=caps, max_per_row=max_per_row, rows_per_batch=per)
        assert with_error.plan(lengths, seed=seed, epoch=epoch) == plan


def test_en_es_rows_within_half_a_percent_of_the_lower_bound():
    lengths = padless.builtin_corpus(["en", "es"])
    for cap in (512, 1024, 2048):
        plan = padless.Packing(capacity=(cap, cap)).plan(lengths)
        bound = plan.info["rows_lower_bound"]
        assert plan.num_rows <= bound * 1.005, (cap, plan.num_rows, bound)
        # max over fields wastes rows: 1,050 at 1024 against the bound's 1,028
        assert padless.Packing(capacity=cap).plan(lengths).num_rows > plan.num_rows
    check_pair_plan(plan, lengths, (2048, 2048))


def test_rows_order_and_ties_change_with_the_epoch():
    lengths = np.tile([[3, 4], [4, 3], [2, 2]], (40, 1))
    spec = padless.Packing(capacity=(16, 16), rows_per_batch=2)
    plans = [spec.plan(lengths, seed=1, epoch=e) for e in range(3)]
    assert plans[0] != plans[1] and plans[1] != plans[2]
    assert spec.plan(lengths, seed=1, epoch=1) == plans[1]


def test_settings_record_and_round_trip():
    spec = padless.Packing(capacity=[1024, 512], rows_per_batch=4, oversize="drop")
    assert spec.capacity == (1024, 512)
    record = spec.as_dict()
    assert record["capacity"] == [1024, 512]
    assert json.loads(json.dumps(record)) == record
    assert padless.Packing(**record) == spec
    assert spec_from_dict(spec_to_dict(spec)) == spec
    assert padless.Packing(capacity=256).as_dict()["capacity"] == 256  # one field: as before


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"oversize": "split"}, "oversize='split' is not supported with one capacity per field"),
        ({"oversize": "truncate"}, "oversize='truncate'"),
        ({"cost": padless.Cost(quadratic=0.1)}, "cost="),
        ({"cost": padless.Cost(), "max_row_cost": 1e9}, "cost="),
        ({"max_row_cost": 1e9}, "max_row_cost=1000000000.0"),
        ({"context_parallel": 2}, "context_parallel=2"),
    ],
)
def test_settings_the_vector_form_refuses_are_named(settings, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        padless.Packing(capacity=(64, 64), **settings)


def test_bad_capacities_and_lengths_are_refused_by_name():
    with pytest.raises(ValueError, match=r"capacity must be an int, or a pair .* got 3 entries"):
        padless.Packing(capacity=(64, 64, 64))
    with pytest.raises(ValueError, match=r"capacity\[1\] must be a positive int"):
        padless.Packing(capacity=(64, 0))
    with pytest.raises(TypeError, match=r"capacity\[0\]"):
        padless.Packing(capacity=("64", 64))
    spec = padless.Packing(capacity=(64, 32))
    with pytest.raises(
        ValueError, match=r"capacity=\[64, 32\] .* must be \(N, 2\), got shape \(3,\)"
    ):
        spec.plan(np.array([1, 2, 3]))
    with pytest.raises(ValueError, match=r"must be \(N, 2\), got shape \(2, 3\)"):
        spec.plan(np.ones((2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match=r"index 1 has lengths \(5, 40\), whose field 1 exceeds"):
        spec.plan(np.array([[1, 1], [5, 40], [70, 1]]))


def test_forms_of_one_field_refuse_a_capacity_per_field():
    spec = padless.Packing(capacity=(64, 64))
    lengths = np.array([[3, 4], [5, 6]] * 10)
    with pytest.raises(ValueError, match="no stream form yet"):
        padless.StreamBatcher([[1, 2]], spec, buffer=4, length=len)
    with pytest.raises(ValueError, match="histogram form"):
        padless.PlanSampler(lengths, spec, window="histogram")
    with pytest.raises(ValueError, match="packs rows of one field"):
        _ = spec.row_capacity
    assert spec.collate_form().capacities == (64, 64) and spec.collate_form().capacity == 0


def test_windowed_plans_pack_each_window_by_both_fields():
    rs = np.random.default_rng(3)
    lengths = rs.integers(1, 40, (500, 2))
    spec = padless.Packing(capacity=(128, 96), rows_per_batch=2)
    sampler = padless.PlanSampler(lengths, spec, window=128, seed=4)
    seen = [i for batch in sampler for i in batch]
    assert sorted(seen) == list(range(500))
    plans = list(padless.plan_windows(lengths, spec, window=128, seed=4))
    assert sorted(i for p in plans for i in p.indices.tolist()) == list(range(500))
    for plan in plans:
        check_pair_plan(plan, lengths, (128, 96), rows_per_batch=2, whole=False)


def test_resume_across_a_capacity_change_loses_nothing():
    rs = np.random.default_rng(5)
    lengths = rs.integers(1, 50, (300, 2))
    before = padless.PlanSampler(lengths, padless.Packing(capacity=(128, 128)), seed=2)
    it = iter(before)
    head = [next(it) for _ in range(10)]
    after = padless.PlanSampler(lengths, padless.Packing(capacity=(256, 200)), seed=2)
    after.load_state_dict(before.state_dict())
    rest = list(after)
    assert sorted(i for b in head + rest for i in b) == list(range(300))
    for batch in rest:
        assert lengths[batch, 0].sum() <= 256 and lengths[batch, 1].sum() <= 200


def test_plans_save_and_load_with_their_capacities(tmp_path):
    lengths = np.random.default_rng(6).integers(0, 30, (60, 2))
    plan = padless.Packing(capacity=(64, 48), rows_per_batch=3).plan(lengths, seed=1)
    path = tmp_path / "plan.npz"
    plan.save(path)
    again = padless.BatchPlan.load(path)
    assert isinstance(again, VectorPackedPlan) and again == plan
    assert again.capacities == (64, 48) and again.info == json.loads(json.dumps(plan.info))
    made = VectorPackedPlan(
        plan.indices, plan.rows.offsets, plan.row_offsets, plan.piece_stop,
        capacities=[64, 48], num_sequences=60,
    )  # fmt: skip
    assert made == plan and made != padless.Packing(capacity=(64, 49)).plan(lengths, seed=1)
    with pytest.raises(TypeError, match="capacities must be a sequence"):
        VectorPackedPlan(plan.indices, plan.rows.offsets, plan.row_offsets, plan.piece_stop,
                         capacities=64, num_sequences=60)  # fmt: skip
    with pytest.raises(ValueError, match=r"capacities\[1\]"):
        VectorPackedPlan(plan.indices, plan.rows.offsets, plan.row_offsets, plan.piece_stop,
                         capacities=(64, 0), num_sequences=60)  # fmt: skip


def test_field_stats_of_one_field_packing_count_each_field_of_its_pieces():
    lengths = np.array([[10, 3], [4, 6], [2, 2]])
    plan = padless.Packing(capacity=8, oversize="split").plan(lengths)
    stats = plan.field_stats(lengths)
    assert [s.real_tokens for s in stats] == [16, 11]  # field 1 of index 0: 3 tokens in piece 0
    assert [s.padded_slots for s in stats] == [plan.num_rows * 8] * 2


def test_a_change_from_split_pieces_to_pairs_is_refused_while_pieces_are_left():
    lengths = np.full((20, 2), 150)
    split = padless.PlanSampler(lengths, padless.Packing(capacity=64, oversize="split"))
    it = iter(split)
    next(it)  # one piece of a sequence cut in three
    pairs = padless.PlanSampler(lengths, padless.Packing(capacity=(160, 160)))
    with pytest.raises(ValueError, match=r"oversize='split' to capacity=\(160, 160\)"):
        pairs.load_state_dict(split.state_dict())
