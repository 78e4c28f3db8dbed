"""FixedShapes (static shapes), shape_set (the static-cost DP), the shaped collate, fairseq's rule."""

from __future__ import annotations

import itertools
import pickle
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import padless
from padless import _kernels as K
from padless.core.plan import ShapedPlan, check_shapes
from padless.planners.buckets import bucket_boundaries
from padless.planners.exact import round_size
from padless.planners.shapes import (
    FixedShapes,
    shape_curve,
    shape_for,
    shape_set,
)
from padless.planners.spec import spec_from_dict, spec_to_dict

# --------------------------------------------------------------------------- fairseq, as a model


def fairseq_fixed_shapes(order, sizes, shapes):
    """What fairseq's ``batch_by_size(..., fixed_shapes=...)`` returns (behaviour, written anew).

    A sequence joins the open batch when some shape holds the batch plus it at the running
    longest length; otherwise the open batch is emitted (even when empty) and the sequence starts
    the next one, and the running longest restarts from 0, so the starter's length is not counted.
    Which shape fits is never returned, so the order fairseq sorts its shapes in plays no part.
    """
    batches = [[]]
    running = 0
    for idx in order:
        running = max(running, int(sizes[idx]))
        if not any(len(batches[-1]) + 1 <= b and running <= n for b, n in shapes):
            batches.append([])
            running = 0
        batches[-1].append(int(idx))
    return batches if batches[-1] else batches[:-1]


def fairseq_sorted_shapes(shapes):
    """fairseq's shape order: ``lexsort`` over ``argsort`` results (positions, not ranks)."""
    table = np.array(shapes, dtype=np.int64)
    return table[np.lexsort([table[:, 1].argsort(), table[:, 0].argsort()])]


def fairseq_first_fit(order, sizes, shapes):
    """The same walk with fairseq's shape search: first fit in its order, the list cut after it."""
    table = fairseq_sorted_shapes(shapes)
    batches, batch, running, view = [], [], 0, table
    for idx in order:
        running = max(running, int(sizes[idx]))
        hits = [s for s, (b, n) in enumerate(view) if len(batch) + 1 <= b and running <= n]
        if not hits:
            batches.append(batch)
            batch, running, view = [], 0, table
        else:
            view = view[hits[0] :]
        batch.append(int(idx))
    return batches + ([batch] if batch else [])


def fits_some_shape(batch, sizes, shapes):
    if not batch:
        return False
    longest = max(int(sizes[i]) for i in batch)
    return any(len(batch) <= b and longest <= n for b, n in shapes)


def as_lists(plan):
    return [b.tolist() for b in plan]


shape_lists = st.lists(
    st.tuples(st.integers(1, 6), st.integers(1, 30)), min_size=1, max_size=5, unique=True
)


@given(shape_lists, st.lists(st.integers(0, 30), max_size=40), st.randoms(use_true_random=False))
def test_fairseq_shape_order_changes_no_batch(shapes, sizes, rnd):
    order = list(range(len(sizes)))
    rnd.shuffle(order)
    assert fairseq_first_fit(order, sizes, shapes) == fairseq_fixed_shapes(order, sizes, shapes)


def test_fairseq_sorts_shapes_by_argsort_positions():
    # batch sizes 4, 8, 2: by value the order is (2, 4, 8); fairseq's key puts 8 first
    shapes = [(4, 16), (8, 8), (2, 32)]
    assert fairseq_sorted_shapes(shapes)[:, 0].tolist() == [8, 2, 4]
    # ...which changes which shape its search finds, never whether one fits (see the property)


@given(
    shape_lists,
    st.lists(st.integers(0, 30), max_size=40),
    st.randoms(use_true_random=False),
    st.booleans(),
)
def test_same_batches_as_fairseq_wherever_fairseq_is_valid(shapes, sizes, rnd, pad):
    order = list(range(len(sizes)))
    rnd.shuffle(order)
    theirs = fairseq_fixed_shapes(order, sizes, shapes)
    spec = FixedShapes(shapes=shapes, pad_batches=pad, oversize="drop")
    ours = as_lists(spec.plan(np.array(sizes, dtype=np.int64), order=order))
    if all(fits_some_shape(b, sizes, shapes) for b in theirs):
        assert ours == theirs
    for batch in ours:  # ours always fit
        assert fits_some_shape(batch, sizes, shapes)


@given(shape_lists, st.lists(st.integers(1, 30), max_size=60), st.integers(0, 3))
def test_default_order_agrees_with_fairseq_when_nothing_is_too_long(shapes, sizes, seed):
    top = max(n for _, n in shapes)
    sizes = np.minimum(np.array(sizes, dtype=np.int64), top)
    plan = FixedShapes(shapes=shapes).plan(sizes, seed=seed)
    theirs = fairseq_fixed_shapes(plan.indices.tolist(), sizes, shapes)
    assert as_lists(plan) == theirs  # a length-sorted walk never trips fairseq


def test_fairseq_forgets_the_opener_length_padless_counts_it():
    # lengths 4, 8, 3 in this order; shapes: two rows of 4, or one row of 8
    sizes = np.array([4, 8, 3])
    shapes = [(2, 4), (1, 8)]
    theirs = fairseq_fixed_shapes([0, 1, 2], sizes, shapes)
    assert theirs == [[0], [1, 2]]  # two rows, one of length 8: no shape holds that
    assert not fits_some_shape(theirs[1], sizes, shapes)
    plan = FixedShapes(shapes=shapes).plan(sizes, order=[0, 1, 2])
    assert as_lists(plan) == [[0], [1], [2]]
    assert plan.batch_shapes.tolist() == [[2, 4], [1, 8], [2, 4]]


def test_fairseq_breaks_shapes_on_pairs_in_its_own_order():
    # (source, target) pairs walked by target length, as fairseq and padless both sort them;
    # the size is the longer field, so the walk is not sorted by size
    pairs = np.array([[2, 1], [8, 2], [3, 3]])
    shapes = [(2, 4), (1, 8)]
    plan = FixedShapes(shapes=shapes).plan(pairs)
    assert plan.indices.tolist() == [0, 1, 2]
    theirs = fairseq_fixed_shapes([0, 1, 2], pairs.max(axis=1), shapes)
    assert theirs == [[0], [1, 2]]
    assert not fits_some_shape(theirs[1], pairs.max(axis=1), shapes)
    assert as_lists(plan) == [[0], [1], [2]]


def test_fairseq_batches_a_too_long_sequence_padless_refuses_or_drops_it():
    sizes = np.array([9, 3, 2])
    shapes = [(2, 4)]
    assert fairseq_fixed_shapes([0, 1, 2], sizes, shapes) == [[], [0, 1], [2]]
    with pytest.raises(ValueError, match=r"index 0 has length 9, which exceeds the longest shape"):
        FixedShapes(shapes=shapes).plan(sizes, order=[0, 1, 2])
    plan = FixedShapes(shapes=shapes, oversize="drop").plan(sizes, order=[0, 1, 2])
    assert as_lists(plan) == [[1, 2]] and plan.skipped.tolist() == [0]
    # the same later in the walk: fairseq emits a batch of one too-long sequence
    assert fairseq_fixed_shapes([1, 0], sizes, shapes) == [[1], [0]]


# --------------------------------------------------------------------------- FixedShapes


def brute_shape(shapes, count, longest, pad):
    fits = [
        ((b * n if pad else n), n, b, s)
        for s, (b, n) in enumerate(shapes)
        if b >= count and n >= longest
    ]
    return min(fits)[3] if fits else -1


lengths_1d = st.lists(st.integers(0, 40), max_size=80)
lengths_2d = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=60)


@given(st.one_of(lengths_1d, lengths_2d), shape_lists, st.booleans(), st.integers(0, 2))
def test_every_batch_fits_its_shape_and_every_index_once(lengths, shapes, pad, epoch):
    lens = np.array(lengths, dtype=np.int64)  # (N,), (N, 2), or (0,) when empty
    sizes = lens if lens.ndim == 1 else lens.max(axis=1)
    spec = FixedShapes(shapes=shapes, pad_batches=pad, oversize="drop")
    plan = spec.plan(lens, seed=5, epoch=epoch)
    assert isinstance(plan, ShapedPlan)
    table = check_shapes(shapes)
    assert len(table) <= len(shapes)
    top = max(n for _, n in shapes)
    assert sorted(plan.indices.tolist() + plan.skipped.tolist()) == list(range(len(sizes)))
    assert plan.skipped.tolist() == np.flatnonzero(sizes > top).tolist()
    for b, batch in enumerate(plan):
        rows, length = plan.batch_shapes[b].tolist()
        assert 1 <= batch.size <= rows and sizes[batch].max() <= length
        # the tag is the rule's shape for the batch alone: what the collate finds
        want = brute_shape(table, batch.size, int(sizes[batch].max()), pad)
        assert plan.shape_of[b] == want == shape_for(table, batch.size, sizes[batch].max(), pad)
    stats = plan.stats(lens)
    fields = 1 if lens.ndim == 1 else 2
    slots = sum(
        (r if pad else c) * n * fields
        for (r, n), c in zip(plan.batch_shapes.tolist(), plan.sizes.tolist(), strict=True)
    )
    assert stats.padded_slots == slots
    assert plan.info["dummy_rows"] == (plan.dummy_rows if pad else 0)


def test_order_is_by_length_with_a_tie_break_per_epoch():
    lens = np.array([5, 3, 5, 3, 5, 3, 5, 3, 1, 9])
    spec = FixedShapes(shapes=[(3, 5), (1, 9)])
    plans = [spec.plan(lens, seed=0, epoch=e) for e in range(6)]
    for plan in plans:
        assert np.all(np.diff(lens[plan.indices]) >= 0)
    assert len({tuple(p.indices.tolist()) for p in plans}) > 1
    assert spec.plan(lens, seed=0, epoch=2) == plans[2]


def test_stats_count_dummy_rows_only_with_pad_batches():
    lens = np.array([3, 3, 3, 7, 7])
    shapes = [(4, 4), (2, 8)]
    padded = FixedShapes(shapes=shapes).plan(lens)
    assert [sorted(b) for b in as_lists(padded)] == [[0, 1, 2], [3, 4]]
    assert padded.stats(lens).padded_slots == 4 * 4 + 2 * 8
    assert padded.dummy_rows == 1 and padded.info["dummy_rows"] == 1
    assert padded.stats(lens).real_tokens == int(lens.sum())
    plain = FixedShapes(shapes=shapes, pad_batches=False).plan(lens)
    assert plain.stats(lens).padded_slots == 3 * 4 + 2 * 8
    assert plain.dummy_rows == 0


def test_stats_refuse_lengths_longer_than_the_batch_shape():
    plan = FixedShapes(shapes=[(2, 4)]).plan([3, 4])
    with pytest.raises(ValueError, match="longer than its shape's length 4"):
        plan.stats([3, 5])


def test_plan_equality_and_checks():
    a = FixedShapes(shapes=[(2, 4), (1, 8)]).plan([3, 7, 4, 1])
    b = FixedShapes(shapes=[(2, 4), (1, 8)]).plan([3, 7, 4, 1])
    assert a == b
    assert a != FixedShapes(shapes=[(2, 4), (1, 8)], pad_batches=False).plan([3, 7, 4, 1])
    assert a != padless.BatchPlan(a.indices, a.offsets)
    with pytest.raises(ValueError, match="shape_of must hold one shape per batch"):
        ShapedPlan([0, 1], [0, 2], shapes=[(2, 4)], shape_of=[0, 0])
    with pytest.raises(ValueError, match="shape_of must index the 1 shapes, got 3"):
        ShapedPlan([0, 1], [0, 2], shapes=[(2, 4)], shape_of=[3])
    with pytest.raises(ValueError, match="batch 0 holds 2 sequences, more than its shape's"):
        ShapedPlan([0, 1], [0, 2], shapes=[(1, 4)], shape_of=[0])


def test_save_and_load_round_trip(tmp_path):
    spec = FixedShapes(shapes=[(2, 4), (1, 8)])
    plan = spec.plan([3, 7, 4, 1])
    path = tmp_path / "plan.npz"
    plan.save(path, spec=spec)
    back = padless.BatchPlan.load(path)
    assert isinstance(back, ShapedPlan) and back == plan
    assert back.batch_shapes.tolist() == plan.batch_shapes.tolist()
    assert spec_from_dict(back.info["spec"]) == spec


def test_spec_round_trip_registry_and_describe():
    spec = FixedShapes(shapes=[[8, 128], (32, 32)], pad_batches=False, oversize="skip")
    assert spec.shapes == ((32, 32), (8, 128)) and spec.oversize == "drop"
    assert type(spec)(**spec.as_dict()) == spec
    assert spec_from_dict(spec_to_dict(spec)) == spec
    assert padless.get_strategy("fixed_shapes") is FixedShapes
    assert "fixed_shapes" in padless.strategies()
    assert spec.describe().startswith("fixed_shapes(shapes=[[32, 32], [8, 128]]")
    assert padless.FixedShapes is FixedShapes and padless.shape_set is shape_set


@pytest.mark.parametrize(
    ("shapes", "error", "message"),
    [
        (None, TypeError, "shapes must be a list of (batch_size, length) pairs, got NoneType"),
        ("8x128", TypeError, "shapes must be a list"),
        ([], ValueError, "shapes must hold at least one"),
        ([8, 128], TypeError, "shapes[0] must be a (batch_size, length) pair"),
        ([(8, 128, 1)], TypeError, "shapes[0] must be a (batch_size, length) pair"),
        ([(8, 12.5)], TypeError, "shapes[0] length must be an int, got float"),
        ([(True, 12)], TypeError, "shapes[0] batch_size must be an int, got bool"),
        ([(8, 16), (0, 12)], ValueError, "shapes[1] batch_size must be in [1, 2**31), got 0"),
        ([(8, 2**31)], ValueError, "shapes[0] length must be in [1, 2**31), got 2147483648"),
        ([(8, 16), (8, 16)], ValueError, "shapes must not repeat a shape, got (8, 16) twice"),
    ],
)
def test_bad_shapes_are_refused_by_name(shapes, error, message):
    with pytest.raises(error, match=re.escape(message)):
        FixedShapes(shapes=shapes)


def test_bad_settings_are_refused_by_name():
    with pytest.raises(TypeError, match="pad_batches must be a bool"):
        FixedShapes(shapes=[(2, 4)], pad_batches=1)
    with pytest.raises(ValueError, match="oversize must be one of 'error', 'drop'"):
        FixedShapes(shapes=[(2, 4)], oversize="split")
    with pytest.raises(ValueError, match=r"order must hold each index at most once"):
        FixedShapes(shapes=[(2, 4)]).plan([1, 2], order=[0, 0])


def test_shape_of_method_and_shapes_for_pad_rules():
    spec = FixedShapes(shapes=[(4, 8), (3, 12), (1, 16)])
    assert spec.shape_of(2, 9) == (3, 12)
    assert spec.shape_of(2, 6) == (4, 8)  # 32 slots beat 36
    shapes = check_shapes([(10, 8), (3, 12)])
    assert shape_for(shapes, 2, 6, True) == 1  # 36 slots < 80
    assert shape_for(shapes, 2, 6, False) == 0  # shorter length without dummy rows


def test_empty_lengths_give_an_empty_plan():
    plan = FixedShapes(shapes=[(2, 4)]).plan(np.zeros(0, np.int64))
    assert len(plan) == 0 and plan.stats(np.zeros(0, np.int64)).padded_slots == 0


# --------------------------------------------------------------------------- kernels


@given(st.lists(st.integers(0, 30), max_size=60), shape_lists)
def test_shape_ends_matches_reference(sizes, shapes):
    table = np.array(check_shapes(shapes), dtype=np.int64)
    tiers = np.unique(table[:, 1])
    caps = np.array([table[table[:, 1] >= t, 0].max() for t in tiers], dtype=np.int64)
    sizes = np.minimum(np.array(sizes, dtype=np.int64), tiers[-1])
    got = K.shape_ends(sizes, tiers, caps)
    want = K.shape_ends_reference(sizes, tiers, caps)
    for g, w in zip(got, want, strict=True):
        assert g.tolist() == w.tolist()


@given(
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 40)), max_size=30),
    shape_lists,
    st.booleans(),
)
def test_pick_shapes_matches_reference(batches, shapes, pad):
    table = np.array(check_shapes(shapes), dtype=np.int64)
    counts = np.array([c for c, _ in batches], dtype=np.int64)
    longest = np.array([m for _, m in batches], dtype=np.int64)
    rows, lens = np.ascontiguousarray(table[:, 0]), np.ascontiguousarray(table[:, 1])
    got = K.pick_shapes(counts, longest, rows, lens, pad)
    assert got.tolist() == K.pick_shapes_reference(counts, longest, rows, lens, pad).tolist()
    tuples = [tuple(s) for s in table.tolist()]
    assert got.tolist() == [shape_for(tuples, c, m, pad) for c, m in batches]


histograms = st.lists(st.integers(1, 40), min_size=1, max_size=50)


@given(histograms, st.integers(1, 6), st.integers(8, 200), st.integers(1, 4))
def test_static_cuts_matches_reference(sizes, k, max_tokens, multiple_of):
    sizes = np.array(sizes, dtype=np.int64)
    max_tokens = max(max_tokens, int(sizes.max()))
    values, counts = np.unique(sizes, return_counts=True)
    rows = round_size(max_tokens // values, multiple_of)
    got = K.static_cuts(values, counts.astype(np.int64), rows, k)
    assert got.tolist() == K.static_cuts_reference(values, counts, rows, k).tolist()


def test_shape_kernels_call_the_core_and_have_references():
    import importlib
    import inspect

    from padless import _core

    module = importlib.import_module(f"{K.__name__}.shapes")
    assert "numba" not in inspect.getsource(module)
    seen = 0
    for name, obj in vars(module).items():
        if not inspect.isfunction(obj) or obj.__module__ != module.__name__:
            continue
        if name.startswith("_") or name.endswith("_reference"):
            continue
        seen += 1
        assert callable(getattr(module, f"{name}_reference", None)), name
        assert f"_core.{name}(" in inspect.getsource(obj), name
        assert callable(getattr(_core, name, None)), name
    assert seen == 6


# --------------------------------------------------------------------------- shape_set


def static_cost(sizes, shapes):
    """Σ over groups of ceil(count / rows) × rows × length, groups cut at the shape lengths."""
    sizes = np.maximum(np.asarray(sizes), 1)
    total, lo = 0, 0
    for rows, length in shapes:
        n = int(((sizes > lo) & (sizes <= length)).sum())
        total += -(-n // rows) * rows * length
        lo = length
    return total


def shapes_at(sizes, cut_lengths, max_tokens, multiple_of=1):
    ends = sorted({*map(int, cut_lengths), max(int(np.max(sizes)), 1)})
    return [(int(round_size(max_tokens // v, multiple_of)), v) for v in ends]


def brute_static(sizes, k, max_tokens, multiple_of):
    values = np.unique(np.maximum(sizes, 1)).tolist()
    best = None
    for m in range(0, min(k, len(values))):
        for cuts in itertools.combinations(values[:-1], m):
            c = static_cost(sizes, shapes_at(sizes, cuts, max_tokens, multiple_of))
            best = c if best is None else min(best, c)
    return best


def histogram_of(sizes, max_tokens, multiple_of):
    values, counts = np.unique(np.maximum(sizes, 1), return_counts=True)
    rows = round_size(max_tokens // values, multiple_of)
    return values.astype(np.int64), counts.astype(np.int64), rows


def plan_slots(sizes, shapes):
    return FixedShapes(shapes=shapes).plan(sizes).stats(sizes).padded_slots


small_cases = st.tuples(
    st.lists(st.integers(0, 30), min_size=1, max_size=40), st.integers(1, 5), st.integers(1, 3)
)


@given(small_cases, st.data())
def test_static_cuts_is_optimal_for_the_per_group_cost(case, data):
    sizes, k, multiple_of = case
    sizes = np.array(sizes, dtype=np.int64)
    max_tokens = data.draw(st.integers(max(int(sizes.max()), 1), 120))
    values, counts, rows = histogram_of(sizes, max_tokens, multiple_of)
    ends = [*K.static_cuts(values, counts, rows, k).tolist(), values.size - 1]
    shapes = [(int(rows[e]), int(values[e])) for e in ends]
    assert len(shapes) <= k
    assert static_cost(sizes, shapes) == brute_static(sizes, k, max_tokens, multiple_of)


@given(small_cases, st.data())
def test_shape_set_is_optimal_for_the_plan_cost(case, data):
    sizes, k, multiple_of = case
    sizes = np.array(sizes, dtype=np.int64)
    max_tokens = data.draw(st.integers(max(int(sizes.max()), 1), 120))
    shapes = shape_set(sizes, k, max_tokens=max_tokens, multiple_of=multiple_of)
    assert 1 <= len(shapes) <= k
    assert [n for _, n in shapes] == sorted({n for _, n in shapes})
    assert shapes[-1][1] == max(int(sizes.max()), 1)
    for rows, length in shapes:
        assert rows == round_size(max_tokens // length, multiple_of)
    values = np.unique(np.maximum(sizes, 1)).tolist()
    best = min(
        plan_slots(sizes, shapes_at(sizes, cuts, max_tokens, multiple_of))
        for m in range(min(k, len(values)))
        for cuts in itertools.combinations(values[:-1], m)
    )
    assert plan_slots(sizes, shapes) == best


@given(small_cases, st.data())
def test_shaped_cost_is_the_plan_cost(case, data):
    sizes, k, multiple_of = case
    sizes = np.array(sizes, dtype=np.int64)
    max_tokens = data.draw(st.integers(max(int(sizes.max()), 1), 120))
    values, counts, rows = histogram_of(sizes, max_tokens, multiple_of)
    cuts = data.draw(st.sets(st.integers(0, values.size - 1), max_size=k))
    ends = np.array(sorted(cuts | {values.size - 1}), dtype=np.int64)
    shapes = [(int(rows[e]), int(values[e])) for e in ends]
    got = K.shaped_cost(values, counts, rows, ends)
    assert got == K.shaped_cost_reference(values, counts, rows, ends)
    assert got == plan_slots(np.maximum(sizes, 1), shapes)


@given(small_cases, st.data())
def test_carry_cuts_matches_reference_for_any_bound(case, data):
    sizes, k, multiple_of = case
    sizes = np.array(sizes, dtype=np.int64)
    max_tokens = data.draw(st.integers(max(int(sizes.max()), 1), 120))
    values, counts, rows = histogram_of(sizes, max_tokens, multiple_of)
    ref_ends, ref_cost = K.carry_cuts_reference(values, counts, rows, k)
    assert K.shaped_cost(values, counts, rows, ref_ends) == ref_cost
    loose = ref_cost + data.draw(st.sampled_from([0, 1, 50, 2**40]))
    ends = K.carry_cuts(values, counts, rows, k, loose)
    assert ends.size <= k and ends[-1] == values.size - 1 and np.all(np.diff(ends) > 0)
    assert K.shaped_cost(values, counts, rows, ends) == ref_cost


@given(small_cases, st.data())
def test_polish_matches_reference_and_never_worsens(case, data):
    sizes, k, multiple_of = case
    sizes = np.array(sizes, dtype=np.int64)
    max_tokens = data.draw(st.integers(max(int(sizes.max()), 1), 120))
    values, counts, rows = histogram_of(sizes, max_tokens, multiple_of)
    cuts = data.draw(st.sets(st.integers(0, values.size - 1), max_size=k))
    start = np.array(sorted(cuts | {values.size - 1}), dtype=np.int64)
    ends, cost = K.polish_ends(values, counts, rows, start)
    ref_ends, ref_cost = K.polish_ends_reference(values, counts, rows, start)
    assert ends.tolist() == ref_ends.tolist() and cost == ref_cost
    assert cost == K.shaped_cost(values, counts, rows, ends)
    assert cost <= K.shaped_cost(values, counts, rows, start) and ends.size <= start.size


def test_fallback_without_the_exact_table_is_never_worse_than_its_starts(monkeypatch):
    from padless.planners import shapes as mod

    lens = padless.builtin_corpus()[:8000]
    exact = shape_set(lens, 6, max_tokens=2048)
    monkeypatch.setattr(mod, "MAX_CARRY_WORK", 0)
    fallback = shape_set(lens, 6, max_tokens=2048)
    ours = plan_slots(lens, fallback)
    assert plan_slots(lens, exact) <= ours
    for method in ("quantile", "optimal"):
        cuts = bucket_boundaries(lens, 6, method=method)
        assert ours <= plan_slots(lens, shapes_at(lens, cuts, 2048))
    static = shapes_at(lens, [], 2048)
    assert ours <= plan_slots(lens, static)


@given(st.integers(0, 2**20), st.integers(1, 12))
def test_shape_set_never_worse_than_quantile_or_bucket_shapes(seed, k):
    rng = np.random.default_rng(seed)
    sizes = np.clip(np.rint(rng.lognormal(3, 0.8, int(rng.integers(1, 2000)))), 1, 512)
    sizes = sizes.astype(np.int64)
    ours = plan_slots(sizes, shape_set(sizes, k, max_tokens=1024))
    for method in ("quantile", "optimal"):
        cuts = bucket_boundaries(sizes, k, method=method)
        assert ours <= plan_slots(sizes, shapes_at(sizes, cuts, 1024))


def test_shape_set_goals_on_the_builtin_corpus():
    # the goal at k = 8, and never above quantile shapes (benchmarks/bench_shapes.py)
    lens = padless.builtin_corpus()
    real = int(lens.sum())
    for k in (2, 4, 8, 16):
        ours = FixedShapes(shapes=shape_set(lens, k, max_tokens=4096)).plan(lens).stats(lens)
        cuts = bucket_boundaries(lens, k, method="quantile")
        quant = FixedShapes(shapes=shapes_at(lens, cuts, 4096)).plan(lens).stats(lens)
        assert ours.padded_slots < quant.padded_slots
        if k == 8:
            dp = padless.Buckets(num_buckets=8, max_tokens=4096).plan(lens).stats(lens)
            assert ours.padded_slots - real <= 1.15 * (dp.padded_slots - real)


def test_shape_set_small_cases_and_errors():
    assert shape_set([5, 5, 5], 4, max_tokens=10) == [(2, 5)]
    assert shape_set([0, 0, 3], 2, max_tokens=6) in ([(2, 3)], [(6, 1), (2, 3)])
    with pytest.raises(ValueError, match="index 2 has length 11, which exceeds max_tokens=10"):
        shape_set([1, 2, 11], 2, max_tokens=10)
    with pytest.raises(ValueError, match="lengths must hold at least one sequence"):
        shape_set([], 2, max_tokens=10)
    with pytest.raises(ValueError, match=r"max_tokens must be <= 2\*\*40"):
        shape_set([1], 2, max_tokens=2**41)
    with pytest.raises(ValueError, match="k must be a positive int"):
        shape_set([1], 0, max_tokens=8)
    with pytest.raises(TypeError, match="max_tokens must be an int"):
        shape_set([1], 1, max_tokens=None)
    with pytest.raises(ValueError, match="multiple_of must be a positive int"):
        shape_set([1], 1, max_tokens=8, multiple_of=0)


def test_shape_curve_falls_with_k():
    lens = padless.builtin_corpus()[:5000]
    rows = shape_curve(lens, [1, 2, 4, 8], max_tokens=4096)
    assert [r["k"] for r in rows] == [1, 2, 4, 8]
    pads = [r["padded_slots"] for r in rows]
    assert pads == sorted(pads, reverse=True)
    assert all(len(r["shapes"]) <= r["k"] for r in rows)
    assert rows[0]["real_tokens"] == int(lens.sum())
    with pytest.raises(TypeError, match="ks must be a list of ints"):
        shape_curve(lens, 4, max_tokens=4096)
    with pytest.raises(ValueError, match=r"ks\[1\] must be a positive int"):
        shape_curve(lens, [2, 0], max_tokens=4096)


# --------------------------------------------------------------------------- samplers


LENS = np.random.default_rng(3).lognormal(3.2, 0.6, 500).astype(np.int64).clip(1, 200)
SHAPES = shape_set(LENS, 4, max_tokens=800)


def test_sampler_ranks_cover_every_index_once():
    spec = FixedShapes(shapes=SHAPES)
    total = len(spec.plan(LENS, seed=4))
    seen, batches = [], 0
    for rank in range(3):
        s = padless.PlanSampler(LENS, spec, seed=4, rank=rank, world_size=3, drop_last=True)
        got = list(s)
        assert len(got) == len(s) == total // 3
        batches += len(got)
        seen += [i for b in got for i in b]
    assert len(seen) == len(set(seen))
    assert batches == total - total % 3


def test_sampler_resume_balance_and_stats():
    spec = FixedShapes(shapes=SHAPES)
    s = padless.PlanSampler(LENS, spec, seed=2, world_size=2, rank=1, balance=True)
    s.set_epoch(1)
    it = iter(s)
    head = [next(it) for _ in range(3)]
    state = s.state_dict()
    rest = list(it)
    t = padless.PlanSampler(LENS, spec, seed=2, world_size=2, rank=1, balance=True)
    t.load_state_dict(state)
    assert list(t) == rest and head
    stats = s.stats()
    plan, _ = s.epoch_plan(1)
    assert stats["strategy"] == "fixed_shapes"
    assert stats["padded_slots"] == plan.stats(LENS).padded_slots
    assert stats["dummy_rows"] == plan.dummy_rows
    assert s.planner.costs(plan).tolist() == (plan.rows * plan.batch_shapes[:, 1]).tolist()
    # a state from other shapes goes on with the new ones (a change of settings), other
    # strategies are refused
    other = padless.PlanSampler(LENS, FixedShapes(shapes=SHAPES[1:] + [(1, 1000)]), seed=2)
    other.load_state_dict(state)
    assert other.state_dict()["changes"][0]["world_size"] == 2
    later = [i for b in other for i in b]
    assert len(later) == len(set(later)) > 0
    with pytest.raises(ValueError, match="strategy"):
        padless.PlanSampler(LENS, padless.TokenBudget(max_tokens=1000), seed=2).load_state_dict(
            state
        )


# --------------------------------------------------------------------------- collate


def test_sampler_collate_pads_every_batch_to_its_tagged_shape():
    from padless.torch import collate_for

    pytest.importorskip("torch")
    spec = FixedShapes(shapes=SHAPES)
    s = padless.PlanSampler(LENS, spec, seed=1)
    collate = collate_for(s, pad_id=-1)
    data = [np.arange(n) + 1 for n in LENS]
    plan, order = s.epoch_plan(0)
    for b in order[:12].tolist():
        batch = plan[b]
        out = collate([data[i] for i in batch])
        rows, length = plan.batch_shapes[b].tolist()
        assert tuple(out["input_ids"].shape) == (rows, length)
        assert out["lengths"].tolist() == LENS[batch].tolist() + [0] * (rows - batch.size)
        assert out["attention_mask"][batch.size :].sum() == 0
        assert out["attention_mask"].sum() == LENS[batch].sum()
        assert (out["input_ids"][batch.size :] == -1).all()
    assert pickle.loads(pickle.dumps(collate)).shapes == spec.shapes


def test_collate_without_dummy_rows_and_with_fields():
    pytest.importorskip("torch")
    from padless.torch import collate_padded

    spec = FixedShapes(shapes=[(4, 8), (2, 16)], pad_batches=False)
    collate = collate_padded(0, shapes=spec, fields=("src", "tgt"))
    out = collate([{"src": [1, 2, 3], "tgt": [4] * 9}, ([5], [6, 7])])
    assert tuple(out["src"].shape) == (2, 16) and tuple(out["tgt"].shape) == (2, 16)
    assert out["tgt_lengths"].tolist() == [9, 2]


def test_collate_refusals():
    from padless.torch import collate_for

    pytest.importorskip("torch")
    from padless.torch import collate_padded

    collate = collate_padded(0, shapes=[(2, 4)])
    with pytest.raises(ValueError, match=r"the batch of 3 samples \(longest 2 tokens\) fits none"):
        collate([[1], [2, 3], [4]])
    with pytest.raises(ValueError, match="multiple_of must be 1 with shapes"):
        collate_padded(0, shapes=[(2, 4)], multiple_of=8)
    with pytest.raises(TypeError, match="shapes must be a list"):
        collate_padded(0, shapes=padless.TokenBudget(max_tokens=8))
    s = padless.PlanSampler(LENS, FixedShapes(shapes=SHAPES))
    with pytest.raises(ValueError, match=r"shapes must not be passed to collate_for\(sampler\)"):
        collate_for(s, pad_id=0, shapes=[(2, 4)])


# --------------------------------------------------------------------------- hostile values

HOSTILE = [
    None,
    -1,
    0,
    2**31,
    2**63,
    2**70,
    1e300,
    float("nan"),
    1.5,
    True,
    "8",
    b"x",
    {},
    object(),
]
HOSTILE_ENTRIES = [
    (shape_set, {"lengths": LENS, "k": 4, "max_tokens": 800}, ["k", "max_tokens", "multiple_of"]),
    (FixedShapes, {"shapes": SHAPES}, ["shapes", "pad_batches", "oversize"]),
    (
        lambda **kw: padless.PlanSampler(LENS, FixedShapes(shapes=SHAPES), **kw),
        {},
        ["seed", "rank", "world_size", "balance"],
    ),
]


@pytest.mark.parametrize(
    ("entry", "base", "param", "value"),
    [(e, b, p, v) for e, b, ps in HOSTILE_ENTRIES for p in ps for v in HOSTILE],
)
def test_hostile_values_get_an_error_naming_the_parameter(entry, base, param, value):
    try:
        out = entry(**{**base, param: value})
    except (ValueError, TypeError) as err:
        assert param in str(err), err
        return
    if isinstance(out, list):  # shape_set took it (e.g. a huge k)
        assert 1 <= len(out) <= 4 or param == "k"
    elif isinstance(out, padless.PlanSampler):
        assert sorted(i for b in out for i in b)


def test_docs_example_compiles_once_per_shape(capsys):
    """The example of docs/static_shapes.md (the README section) runs as written."""
    pytest.importorskip("torch")
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "static_shapes.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(code, "docs/static_shapes.md", "exec"), namespace)
    assert 1 <= len(namespace["compiles"]) == len(namespace["seen"]) <= 4
    assert namespace["shapes"] == padless.shape_set(padless.builtin_corpus(), 4, max_tokens=4096)
    assert 0.0 < float(capsys.readouterr().out) < 0.3
