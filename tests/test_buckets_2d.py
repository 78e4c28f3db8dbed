"""2-D buckets (issue 29): the fits against brute force and lhotse's walk, plans that keep every
field's budget, the equal-bin estimate on the built-in en–es corpus, windows, and refusals."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import padless
from padless import Buckets, PlanSampler, bucket_boundaries_2d
from padless.planners.buckets import _equal_total_cuts, _joint_cuts, boundary_costs

PAIRS = np.random.default_rng(5).integers(1, 90, (400, 2))


def _joint_cost(values, counts, other, cuts):
    """Σ group count × (largest value + largest other) of the groups ending at ``cuts``."""
    total, lo = 0, 0
    for hi in [*list(cuts), len(values) - 1]:
        total += int(counts[lo : hi + 1].sum()) * int(values[hi] + other[lo : hi + 1].max())
        lo = hi + 1
    return total


def _joint_brute_force(values, counts, other, k):
    n = len(values)
    splits = (c for m in range(min(k, n)) for c in itertools.combinations(range(n - 1), m))
    return min(_joint_cost(values, counts, other, c) for c in splits)


@given(
    st.lists(st.integers(0, 60), min_size=1, max_size=9, unique=True),
    st.integers(1, 4),
    st.integers(0, 2**16),
)
def test_joint_dp_matches_brute_force(values, k, seed):
    rng = np.random.default_rng(seed)
    values = np.sort(np.array(values, dtype=np.int64))
    counts = rng.integers(1, 9, values.size).astype(np.int64)
    other = rng.integers(0, 80, values.size).astype(np.int64)
    cuts = _joint_cuts(values, counts, other, k)
    assert cuts.size == min(k, values.size) - 1 and np.all(np.diff(cuts) > 0)
    assert _joint_cost(values, counts, other, cuts) == _joint_brute_force(values, counts, other, k)


def _lhotse_walk(sizes, k):
    """lhotse's estimate_duration_buckets, item by item (written out again)."""
    share, bins, total = sum(sizes) / k, [], 0
    for size in sorted(sizes):
        if total > share:
            bins.append(size)
            total = 0
        total += size
    return bins


@given(st.lists(st.integers(0, 50), min_size=1, max_size=80), st.integers(1, 12))
def test_equal_total_rule_is_lhotses_walk(sizes, k):
    values, counts = np.unique(sizes, return_counts=True)
    cuts, merged = _equal_total_cuts(values, counts, k)
    bins = _lhotse_walk(sizes, k) if k > 1 else []
    top = max(sizes)
    assert cuts.tolist() == sorted({b for b in bins if b < top})
    # every walked bucket lands in the bucket of its upper bound (the next bin; the last: top)
    assert merged.tolist() == [
        sum(1 for u in [*bins, top] if (u == c if i < cuts.size else u >= top))
        for i, c in enumerate([*cuts.tolist(), top])
    ]


@st.composite
def grid_cases(draw):
    n = draw(st.integers(0, 120))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    lens = rng.integers(1, draw(st.integers(2, 60)), (n, 2))
    kw = {}
    if draw(st.booleans()):
        kw["num_buckets"] = (draw(st.integers(1, 5)), draw(st.integers(1, 4)))
    else:
        first = sorted(draw(st.sets(st.integers(0, 70), max_size=4)))
        subs = [
            sorted(draw(st.sets(st.integers(0, 70), max_size=3))) for _ in range(len(first) + 1)
        ]
        kw["boundaries"] = (first, subs)
    choice = draw(st.sampled_from(["fields", "one", "size", "table"]))
    if choice == "fields":
        kw["max_tokens"] = tuple(draw(st.sampled_from([None, 60, 150, 400])) for _ in range(2))
        if kw["max_tokens"] == (None, None):
            kw["max_tokens"] = (None, 100)
    elif choice == "one":
        kw["max_tokens"] = draw(st.integers(60, 400))
    elif choice == "table" and "boundaries" in kw:
        count = sum(len(s) + 1 for s in kw["boundaries"][1])
        kw["batch_sizes"] = [draw(st.integers(1, 9)) for _ in range(count)]
    else:
        kw["batch_size"] = draw(st.integers(1, 12))
    kw["multiple_of"] = draw(st.sampled_from([1, 2]))
    return lens, kw, draw(st.integers(0, 3))


def _grid_ids(lens, first, subs):
    """Each sequence's 2-D bucket, written out: (b(i-1), b(i)] on the first field, then on the
    second field within it, numbered row by row."""
    ids = []
    for a, b in lens.tolist():
        i = sum(1 for c in first if a > c)
        j = sum(1 for c in subs[i] if b > c)
        ids.append(sum(len(s) + 1 for s in subs[:i]) + j)
    return np.array(ids, dtype=np.int64)


@settings(max_examples=60, deadline=None)
@given(grid_cases())
def test_grid_plan_properties(case):
    lens, kw, seed = case
    spec = Buckets(**kw)
    plan = spec.plan(lens, seed=seed)
    assert sorted(plan.indices.tolist()) == list(range(lens.shape[0]))
    first, subs = plan.info["boundaries"]
    if "boundaries" in kw:
        assert [first, subs] == [list(kw["boundaries"][0]), [list(s) for s in kw["boundaries"][1]]]
    ids = _grid_ids(lens, first, subs)
    sizes = np.array(plan.info["bucket_batch_sizes"])
    assert sizes.size == sum(len(s) + 1 for s in subs) == len(plan.info["bucket_counts"])
    assert plan.info["bucket_counts"] == np.bincount(ids, minlength=sizes.size).tolist()
    if "batch_sizes" in kw:
        m = kw["multiple_of"]
        want = [s // m * m if s >= m else s for s in kw["batch_sizes"]]
        assert sizes.tolist() == want
    smaller = set()
    for batch in plan:
        (bucket,) = set(ids[batch].tolist())  # one bucket per batch
        assert batch.size <= sizes[bucket]
        if batch.size < sizes[bucket]:
            assert bucket not in smaller  # at most one smaller batch per bucket
            smaller.add(bucket)
        budget = kw.get("max_tokens")
        if isinstance(budget, tuple):  # every field within its own budget
            for f, b in enumerate(budget):
                assert b is None or batch.size * lens[batch, f].max() <= b
        elif budget is not None:
            assert batch.size * lens[batch].max() <= budget
    slots = plan.info["field_padded_slots"]
    assert tuple(slots) == boundary_costs(lens, (first, subs))
    assert sum(slots) >= plan.stats(lens).padded_slots  # batches pad to at most their bucket


def test_int_settings_and_tables_give_the_one_budget_plans():
    # (B, B) per field is one budget B on the longest size: min_f B // l_f == B // max_f l_f
    for seed in (0, 1):
        one = Buckets(num_buckets=4, max_tokens=600).plan(PAIRS, seed=seed)
        both = Buckets(num_buckets=4, max_tokens=(600, 600)).plan(PAIRS, seed=seed)
        assert one == both and one.info == both.info
        cuts = one.info["boundaries"]
        table = Buckets(boundaries=cuts, batch_sizes=[7] * (len(cuts) + 1)).plan(PAIRS, seed=seed)
        assert table == Buckets(boundaries=cuts, batch_size=7).plan(PAIRS, seed=seed)
    # records of the settings made before 2-D buckets existed stay the same
    assert Buckets(num_buckets=4, max_tokens=600).as_dict() == {
        "boundaries": None,
        "num_buckets": 4,
        "max_tokens": 600,
        "batch_size": None,
        "multiple_of": 1,
    }


def test_fitted_grid_and_the_spec_round_trip():
    cuts, subs = bucket_boundaries_2d(PAIRS, (3, 2))
    spec = Buckets(num_buckets=(3, 2), max_tokens=(500, 400))
    sampler = PlanSampler(PAIRS, spec, seed=1)
    assert sampler.boundaries == (tuple(cuts.tolist()), tuple(tuple(s.tolist()) for s in subs))
    given_spec = Buckets(boundaries=sampler.boundaries, max_tokens=(500, 400))
    assert given_spec.plan(PAIRS, seed=1) == spec.plan(PAIRS, seed=1)
    assert Buckets(boundaries=(cuts, subs), max_tokens=(500, 400)) == given_spec
    for s in (spec, given_spec):
        assert padless.spec_from_dict(padless.spec_to_dict(s)) == s
        assert Buckets(**s.as_dict()) == s and hash(s) == hash(Buckets(**s.as_dict()))
    # in seconds: 6.0 s of 10 ms ticks is 600 ticks
    secs = Buckets(num_buckets=(3, 2), max_tokens=(5.0, 400), resolution=(0.01, None))
    assert secs.field_budgets == (500, 400) and secs.plan(PAIRS, seed=1) == spec.plan(PAIRS, seed=1)


def test_methods_on_the_en_es_corpus():
    """padless's 2-D DP pads less than NeMo's equal-total estimate in each field."""
    en_es = padless.builtin_corpus(["en", "es"])
    for k in ((4, 2), (30, 2)):
        slots = {
            m: boundary_costs(en_es, bucket_boundaries_2d(en_es, k, method=m))
            for m in ("joint", "sequential", "equal")
        }
        assert all(a <= b for a, b in zip(slots["joint"], slots["equal"], strict=True)), slots
        assert all(a <= b for a, b in zip(slots["sequential"], slots["equal"], strict=True))
        assert sum(slots["joint"]) <= sum(slots["sequential"])  # exact within each bucket
    cuts, subs = bucket_boundaries_2d(en_es, (30, 2), method="equal")
    assert cuts.size <= 29 and all(s.size <= 3 for s in subs)  # ties merge: more sub-buckets


def test_windows_fit_the_grid_once_and_keep_the_budgets():
    spec = Buckets(num_buckets=(4, 2), max_tokens=(600, 700), pad_to_multiple_of=8)
    whole = PlanSampler(PAIRS, spec, seed=0)
    windowed = PlanSampler(PAIRS, spec, seed=0, window=150)
    assert windowed.planner.window_spec.boundaries == whole.boundaries
    widths = -(-PAIRS // 8) * 8
    for sampler in (whole, windowed):
        got = list(sampler)
        assert sorted(i for b in got for i in b) == list(range(len(PAIRS)))
        for b in got:
            assert len(b) * widths[b, 0].max() <= 600 and len(b) * widths[b, 1].max() <= 700
    zero = PAIRS.copy()
    zero[3] = 0
    with pytest.raises(ValueError, match="index 3 has length 0 on every budgeted field"):
        PlanSampler(zero, spec, window=150)


def test_oversize_and_empty_buckets_per_field():
    lens = np.array([[3, 4], [5, 90], [2, 2], [6, 3]])
    with pytest.raises(
        ValueError, match=r"index 1 has field 1 length 90, which exceeds max_tokens\[1\]=50"
    ):
        Buckets(num_buckets=(2, 2), max_tokens=(100, 50)).plan(lens)
    dropped = Buckets(num_buckets=(2, 2), max_tokens=(100, 50), oversize="drop").plan(lens)
    assert dropped.skipped.tolist() == [1] and sorted(dropped.indices.tolist()) == [0, 2, 3]
    empty = np.array([[0, 5], [0, 7], [4, 9]])
    with pytest.raises(
        ValueError, match="bucket 0 holds only empty sequences .length 0 at index 0"
    ):
        Buckets(boundaries=[[0], [[], []]], max_tokens=(40, None)).plan(empty)
    plan = Buckets(boundaries=[[0], [[], []]], max_tokens=(40, 30)).plan(empty)  # field 1 sizes
    assert plan.info["bucket_batch_sizes"] == [4, 3]


@pytest.mark.parametrize(
    ("kwargs", "lengths", "exc", "message"),
    [
        ({"num_buckets": (4,), "batch_size": 2}, PAIRS, ValueError, "num_buckets must be a positive int, or a pair"),
        ({"num_buckets": (4, 0), "batch_size": 2}, PAIRS, ValueError, r"num_buckets\[1\] must be a positive int, got 0"),
        ({"num_buckets": (2, 2), "batch_size": 2}, PAIRS[:, 0], ValueError, r"num_buckets=\(2, 2\) makes 2-D buckets over two fields: lengths must be \(N, 2\)"),
        ({"boundaries": [[5], [[1]]], "batch_size": 2}, PAIRS, ValueError, r"boundaries\[1\] must hold one list of second-field cuts per first-field bucket"),
        ({"boundaries": [[5], [[3, 1], []]], "batch_size": 2}, PAIRS, ValueError, r"boundaries\[1\]\[0\] must be strictly increasing"),
        ({"boundaries": [5, 9], "batch_sizes": [3, 3]}, PAIRS, ValueError, "the boundaries make 3 buckets, got 2 batch sizes"),
        ({"num_buckets": 3, "batch_sizes": [3, 3, 3]}, PAIRS, ValueError, "batch_sizes gives one batch size per bucket, so it needs the buckets"),
        ({"boundaries": [5], "batch_sizes": [3, 3], "max_tokens": 90}, PAIRS, ValueError, "got batch_sizes and max_tokens"),
        ({"boundaries": [5], "batch_sizes": [3, 0]}, PAIRS, ValueError, r"batch_sizes\[1\] must be a positive int, got 0"),
        ({"boundaries": [5], "batch_sizes": "33"}, PAIRS, TypeError, "batch_sizes must be a list of positive ints"),
        ({"num_buckets": (2, 2), "max_tokens": (9, 9, 9)}, PAIRS, ValueError, "must name the same number of fields, got 2-D buckets: 2"),
        ({"num_buckets": 2, "max_tokens": (90, 90, 90)}, PAIRS, ValueError, r"max_tokens names 3 fields, but the lengths have 2"),
        ({"num_buckets": 2, "max_tokens": (90, 90), "cost": padless.Cost()}, PAIRS, ValueError, "need a cost model per field for cost"),
        ({"num_buckets": 2, "max_tokens": 90, "resolution": (0.01, None)}, PAIRS, ValueError, "resolution=.0.01, None. names fields but max_tokens=90 is one budget"),
        ({"num_buckets": 2, "max_tokens": (None, None)}, PAIRS, ValueError, "max_tokens must budget some field"),
    ],
)  # fmt: skip
def test_settings_errors_name_the_setting(kwargs, lengths, exc, message):
    with pytest.raises(exc, match=message):
        Buckets(**kwargs).plan(lengths)


def test_streams_refuse_two_fields_and_boundaries_fit_checks():
    for spec in (
        Buckets(num_buckets=(2, 2), batch_size=4),
        Buckets(boundaries=[[3], [[2], []]], batch_size=4),
        Buckets(num_buckets=2, max_tokens=(90, 90)),
    ):
        with pytest.raises(ValueError, match="StreamBatcher does not follow yet"):
            padless.StreamBatcher(iter(PAIRS.tolist()), spec)
    with pytest.raises(TypeError, match="num_buckets must be a pair"):
        bucket_boundaries_2d(PAIRS, 3)
    with pytest.raises(ValueError, match=r"lengths must be \(N, 2\)"):
        bucket_boundaries_2d(PAIRS[:, 0], (2, 2))
    with pytest.raises(ValueError, match="method must be one of 'joint', 'sequential', 'equal'"):
        bucket_boundaries_2d(PAIRS, (2, 2), method="optimal")
    assert [s.tolist() for s in bucket_boundaries_2d(np.zeros((0, 2), np.int64), (3, 2))[1]] == [[]]
