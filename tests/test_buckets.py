"""bucket_boundaries (DP against brute force and quantiles) and plan_buckets."""

import hashlib
import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from padless import _kernels as K
from padless import builtin_corpus
from padless.planners.buckets import boundary_cost, bucket_boundaries
from padless.sampling.shortcuts import BucketSampler, plan_buckets


def cost_of(sizes, cuts):
    """Σ count × longest over the buckets (b(i−1), b(i)], written out again."""
    sizes = np.asarray(sizes)
    total = 0
    edges = [-1, *cuts, np.inf]
    for lo, hi in itertools.pairwise(edges):
        members = sizes[(sizes > lo) & (sizes <= hi)]
        if members.size:
            total += members.size * int(members.max())
    return total


def brute_force(sizes, k):
    values = np.unique(sizes)
    best = cost_of(sizes, [])
    for m in range(1, min(k, values.size)):
        for cuts in itertools.combinations(values[:-1].tolist(), m):
            best = min(best, cost_of(sizes, list(cuts)))
    return best


histograms = st.lists(st.integers(0, 40), min_size=1, max_size=60)


@given(histograms, st.integers(1, 5))
def test_dp_matches_brute_force(sizes, k):
    sizes = np.array(sizes)
    cuts = bucket_boundaries(sizes, k)
    assert cost_of(sizes, cuts.tolist()) == brute_force(sizes, k)
    assert boundary_cost(sizes, cuts) == cost_of(sizes, cuts.tolist())


@given(
    st.integers(0, 2**20), st.integers(1, 20), st.sampled_from(["lognormal", "uniform", "spiky"])
)
def test_dp_never_worse_than_quantiles(seed, k, shape):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    if shape == "lognormal":
        sizes = np.clip(np.rint(rng.lognormal(3, 0.9, n)), 1, 1024).astype(np.int64)
    elif shape == "uniform":
        sizes = rng.integers(1, int(rng.integers(2, 500)), n)
    else:
        sizes = rng.choice(rng.integers(1, 300, 6), n) + rng.integers(0, 2, n)
    optimal = bucket_boundaries(sizes, k)
    quantile = bucket_boundaries(sizes, k, method="quantile")
    assert boundary_cost(sizes, optimal) <= boundary_cost(sizes, quantile)
    for cuts in (optimal, quantile):
        assert cuts.size <= k - 1
        assert np.all(np.diff(cuts) > 0)
        assert set(cuts.tolist()) <= set(sizes.tolist())
        assert cuts.size == 0 or cuts[-1] < sizes.max()


def test_quantiles_leave_the_shortest_bucket_wide():
    # lhotse #943: on a long-tailed corpus equal-count buckets pad the short ones heavily
    en = builtin_corpus()
    for k in (4, 8, 16):
        optimal = boundary_cost(en, bucket_boundaries(en, k))
        quantile = boundary_cost(en, bucket_boundaries(en, k, method="quantile"))
        assert optimal < quantile
    rng = np.random.default_rng(0)
    tail = np.clip(np.rint(rng.lognormal(np.log(27) - 0.32, 0.8, 100_000)), 1, 1024)
    tail = tail.astype(np.int64)
    optimal = boundary_cost(tail, bucket_boundaries(tail, 8))
    quantile = boundary_cost(tail, bucket_boundaries(tail, 8, method="quantile"))
    assert optimal < 0.9 * quantile


@given(
    st.lists(st.integers(0, 500), min_size=1, max_size=40, unique=True),
    st.integers(1, 9),
    st.integers(0, 2**16),
)
def test_dp_kernel_matches_reference(values, k, seed):
    values = np.sort(np.array(values, dtype=np.int64))
    counts = np.random.default_rng(seed).integers(1, 50, values.size).astype(np.int64)
    assert np.array_equal(
        K.optimal_cuts(values, counts, k), K.optimal_cuts_reference(values, counts, k)
    )


def test_dp_ties_and_degenerate_inputs():
    assert bucket_boundaries([], 4).tolist() == []
    assert bucket_boundaries([7], 4).tolist() == []
    assert bucket_boundaries([3, 5, 9], 1).tolist() == []
    assert bucket_boundaries([3, 5, 9, 9], 8).tolist() == [3, 5]  # fewer distinct sizes than k
    assert bucket_boundaries([3, 5, 9, 9], 8, method="quantile").tolist() == [3, 5]
    # a large sparse histogram takes the np.unique path
    sparse = np.array([1, 10**9, 10**9 - 5, 2])
    assert bucket_boundaries(sparse, 2).tolist() == [2]


def test_two_dimensional_lengths_bucket_by_max_over_fields():
    pairs = np.array([[1, 9], [8, 2], [3, 3], [2, 1]])
    assert bucket_boundaries(pairs, 2).tolist() == bucket_boundaries([9, 8, 3, 2], 2).tolist()
    plan = plan_buckets(pairs, boundaries=[3], batch_size=4)
    assert sorted(sorted(b.tolist()) for b in plan) == [[0, 1], [2, 3]]


@st.composite
def bucket_cases(draw):
    n = draw(st.integers(0, 150))
    fields = draw(st.sampled_from([1, 1, 2]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    lens = rng.integers(1, draw(st.integers(2, 60)), (n, fields) if fields > 1 else n)
    kw = {}
    if draw(st.booleans()):
        kw["num_buckets"] = draw(st.integers(1, 6))
    else:
        kw["boundaries"] = sorted(draw(st.sets(st.integers(0, 70), max_size=5)))
    if draw(st.booleans()):
        kw["batch_size"] = draw(st.integers(1, 12))
    else:
        kw["max_tokens"] = draw(st.integers(60, 400))
    kw["multiple_of"] = draw(st.sampled_from([1, 2, 8]))
    kw["seed"] = draw(st.integers(0, 3))
    kw["epoch"] = draw(st.integers(0, 3))
    return lens, kw


@given(bucket_cases())
def test_plan_buckets_properties(case):
    lens, kw = case
    n = lens.shape[0]
    sizes = lens if lens.ndim == 1 else lens.max(axis=1)
    plan = plan_buckets(lens, **kw)
    assert sorted(plan.indices.tolist()) == list(range(n)) and plan.skipped.size == 0
    cuts = kw.get("boundaries")
    if cuts is None:
        cuts = bucket_boundaries(lens, kw["num_buckets"]).tolist()
    assert plan.info["boundaries"] == list(cuts)
    bucket = np.searchsorted(np.array(cuts, dtype=np.int64), sizes, side="left")
    for i, c in enumerate(cuts):  # bucket i holds sizes in (b(i-1), b(i)]
        assert np.all(sizes[bucket == i] <= c)
        assert np.all(sizes[bucket == i + 1] > c)
    longest = np.array(plan.info["bucket_longest"])
    want = np.array(plan.info["bucket_batch_sizes"])
    m = kw["multiple_of"]
    seen_partial = set()
    for b in plan:
        ids = set(bucket[b].tolist())
        assert len(ids) == 1  # one bucket per batch
        (i,) = ids
        assert b.size <= want[i]
        if b.size < want[i]:
            assert i not in seen_partial  # at most one smaller batch per bucket
            seen_partial.add(i)
        if "max_tokens" in kw:
            raw = max(kw["max_tokens"] // longest[i], 1)
            assert want[i] == (raw // m * m if raw >= m else raw)
            if longest[i] <= kw["max_tokens"]:
                assert b.size * longest[i] <= kw["max_tokens"]
        else:
            b_size = kw["batch_size"]
            assert want[i] == (b_size // m * m if b_size >= m else b_size)
    counts = np.bincount(bucket, minlength=len(cuts) + 1)
    assert plan.info["bucket_counts"] == counts.tolist()
    assert plan.info["bucket_padded_slots"] == cost_of(sizes, list(cuts))
    assert plan.stats(np.atleast_1d(sizes)).padded_slots <= cost_of(sizes, list(cuts))


def test_membership_depends_on_seed_and_epoch():
    en = builtin_corpus()
    plans = [
        plan_buckets(en, num_buckets=8, max_tokens=4096, seed=s, epoch=e)
        for s, e in ((0, 0), (0, 1), (1, 0))
    ]
    members = [{frozenset(b.tolist()) for b in p} for p in plans]
    assert members[0] != members[1] and members[0] != members[2]
    again = plan_buckets(en, num_buckets=8, max_tokens=4096, seed=0, epoch=1)
    assert again == plans[1]


def _digest(plan):
    h = hashlib.sha256()
    for arr in (plan.indices, plan.offsets):
        h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


def test_golden():
    en = builtin_corpus()
    assert bucket_boundaries(en, 4).tolist() == GOLDEN_CUTS_4
    assert bucket_boundaries(en, 8).tolist() == GOLDEN_CUTS_8
    small = plan_buckets([5, 1, 2, 9, 8, 1, 2, 7], boundaries=[2], batch_size=3, seed=0)
    assert [b.tolist() for b in small] == GOLDEN_SMALL
    digest = _digest(plan_buckets(en, num_buckets=8, max_tokens=4096, seed=2, epoch=5))
    assert digest == GOLDEN_DIGEST


GOLDEN_CUTS_4 = [28, 43, 64]
GOLDEN_CUTS_8 = [20, 26, 32, 39, 47, 57, 74]
# bucket 0 (sizes <= 2) holds {1, 2, 5, 6}, bucket 1 holds {0, 3, 4, 7}
GOLDEN_SMALL = [[6, 5, 2], [1], [0, 3, 7], [4]]
GOLDEN_DIGEST = "8457349517420e48"


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        ({"batch_size": 4}, ValueError, "exactly one of boundaries or num_buckets, got neither"),
        (
            {"boundaries": [3], "num_buckets": 2, "batch_size": 4},
            ValueError,
            "exactly one of boundaries or num_buckets, got both",
        ),
        ({"num_buckets": 2}, ValueError, "exactly one of max_tokens or batch_size, got neither"),
        (
            {"num_buckets": 2, "batch_size": 4, "max_tokens": 99},
            ValueError,
            "exactly one of max_tokens or batch_size, got both",
        ),
        (
            {"num_buckets": 0, "batch_size": 4},
            ValueError,
            "num_buckets must be a positive int, got 0",
        ),
        (
            {"num_buckets": 2, "batch_size": 0},
            ValueError,
            "batch_size must be a positive int, got 0",
        ),
        (
            {"num_buckets": 2, "max_tokens": -5},
            ValueError,
            "max_tokens must be a positive int, got -5",
        ),
        ({"num_buckets": 2, "batch_size": 2, "multiple_of": 0}, ValueError, "multiple_of must be"),
        (
            {"boundaries": [5, 3], "batch_size": 4},
            ValueError,
            "strictly increasing cut points, got 5 then 3",
        ),
        ({"boundaries": [3, 3], "batch_size": 4}, ValueError, "got 3 then 3"),
        ({"boundaries": [-1], "batch_size": 4}, ValueError, "non-negative lengths, got -1"),
        ({"boundaries": [2.5], "batch_size": 4}, TypeError, "boundaries must hold int lengths"),
        ({"boundaries": [[1, 2]], "batch_size": 4}, ValueError, "boundaries must be a 1-D"),
        ({"num_buckets": 2.0, "batch_size": 4}, TypeError, "num_buckets must be an int"),
        (
            {"num_buckets": 2, "batch_size": 4, "seed": -1},
            ValueError,
            "seed must be a non-negative",
        ),
    ],
)
def test_errors_name_parameter_rule_and_value(kwargs, exc, message):
    with pytest.raises(exc) as info:
        plan_buckets([3, 4, 5], **kwargs)
    assert message in str(info.value)
    with pytest.raises(exc) as info:
        BucketSampler([3, 4, 5], **kwargs)
    assert message in str(info.value)


def test_boundary_errors_and_empty_buckets_with_max_tokens():
    with pytest.raises(ValueError, match="k must be a positive int, got 0"):
        bucket_boundaries([1, 2], 0)
    with pytest.raises(ValueError, match="method must be one of 'optimal', 'quantile'"):
        bucket_boundaries([1, 2], 2, method="equal")
    # a bucket of only empty sequences cannot be sized by max_tokens
    with pytest.raises(
        ValueError, match="bucket 0 holds only empty sequences .length 0 at index 1"
    ):
        plan_buckets([4, 0, 6], boundaries=[0], max_tokens=64)
    with pytest.raises(ValueError, match="bucket 0 holds only empty sequences"):
        BucketSampler([4, 0, 6], boundaries=[0], max_tokens=64)
    # an empty sequence among longer ones only pads
    plan = plan_buckets([4, 0, 6], boundaries=[5], max_tokens=64)
    assert sorted(plan.indices.tolist()) == [0, 1, 2]
    assert len(plan_buckets([0, 0], boundaries=[], batch_size=2)) == 1


def test_edge_cases():
    assert len(plan_buckets(np.zeros(0, np.int64), num_buckets=3, batch_size=2)) == 0
    # longer than the budget: refused (never a batch over max_tokens), or left out on request
    with pytest.raises(ValueError, match=r"index 1 has length 7, which exceeds max_tokens=4"):
        plan_buckets([3, 7], num_buckets=3, max_tokens=4)
    dropped = plan_buckets([3, 7, 2], num_buckets=3, max_tokens=4, oversize="drop")
    assert sorted(i for b in dropped for i in b.tolist()) == [0, 2]
    assert dropped.skipped.tolist() == [1]
    assert all(len(b) * max([3, 7, 2][i] for i in b) <= 4 for b in dropped)
    for k in range(1, 7):
        for delta in (-1, 0, 1):
            plan = plan_buckets(np.full(2**k + delta, 5), boundaries=[], batch_size=2**k)
            full, rest = divmod(2**k + delta, 2**k)
            assert plan.sizes.tolist() == [2**k] * full + ([rest] if rest else [])


def test_corpus_padding_against_quantiles():
    en = builtin_corpus()
    for k in (4, 8, 16):
        opt = plan_buckets(en, num_buckets=k, batch_size=64).stats(en)
        qua = plan_buckets(
            en, boundaries=bucket_boundaries(en, k, method="quantile"), batch_size=64
        ).stats(en)
        assert opt.padding_fraction < qua.padding_fraction


# --------------------------------------------------------------------------- pad_to_multiple_of


def _round_up(lengths, m):
    return -(-np.asarray(lengths, dtype=np.int64) // m) * m


@given(
    st.lists(st.integers(1, 90), min_size=1, max_size=150),
    st.sampled_from([1, 2, 8, 32]),
    st.sampled_from([{"num_buckets": 3}, {"boundaries": [10, 33]}, {"num_buckets": 1}]),
    st.integers(0, 2),
)
def test_pad_multiple_plans_the_rounded_lengths(lengths, m, where, seed):
    from padless import Buckets, Cost

    lens = np.array(lengths, dtype=np.int64)
    for budget in ({"max_tokens": 256}, {"batch_size": 5}, {"cost": Cost(), "max_cost": 256.0}):
        spec = Buckets(**where, **budget, pad_to_multiple_of=m)
        plan = spec.plan(lens, seed=seed)
        same = Buckets(**where, **budget).plan(_round_up(lens, m), seed=seed)
        assert np.array_equal(plan.indices, same.indices)
        assert np.array_equal(plan.offsets, same.offsets)
        if "batch_size" in budget:
            continue
        for b in plan:  # the padded batch keeps the budget, but for a sequence alone over it
            assert len(b) * int(_round_up(lens[b].max(), m)) <= 256 or len(b) == 1


def test_pad_multiple_fits_boundaries_to_widths_and_windows_agree():
    from padless import Buckets, PlanSampler

    lens = np.random.default_rng(3).integers(1, 200, 3000)
    spec = Buckets(num_buckets=4, max_tokens=2048, pad_to_multiple_of=16)
    whole = PlanSampler(lens, spec, seed=0)
    assert whole.boundaries.tolist() == bucket_boundaries(_round_up(lens, 16), 4).tolist()
    assert all(c % 16 == 0 for c in whole.boundaries.tolist())
    windowed = PlanSampler(lens, spec, seed=0, window=1000)
    assert list(windowed.planner.window_spec.boundaries) == whole.boundaries.tolist()
    for sampler in (whole, windowed):
        got = list(sampler)
        assert sorted(i for b in got for i in b) == list(range(lens.size))
        assert all(len(b) * int(_round_up(lens[b].max(), 16)) <= 2048 for b in got)
    plan, _ = whole.epoch_plan(0)
    assert plan.info["bucket_padded_slots"] == boundary_cost(_round_up(lens, 16), whole.boundaries)
    assert (
        Buckets(num_buckets=4, max_tokens=2048).as_dict()
        == Buckets(num_buckets=4, max_tokens=2048, pad_to_multiple_of=1).as_dict()
    )
