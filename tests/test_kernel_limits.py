"""Kernels near the int64 limits: count × size and sums of sizes never wrap around (issue 13.5).

Supported range: lengths below 2**31, budgets below 2**62, any number of items; the kernels stay
exact (or saturate at 2**63 − 1 where a figure cannot be represented) beyond that too, so sizes
up to 2**63 − 1 are fed here as well. Every kernel is checked against its plain reference, which
computes with exact Python ints.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from padless import _kernels as K
from padless._kernels._sat import INT64_MAX, mul_exceeds, sat, sat_add, sat_mul

LONGEST = 2**31 - 1  # the longest supported length
BUDGET = 2**62  # budgets are below this
EDGES = [0, 1, 2, 3, LONGEST - 1, LONGEST, 2**31, 2**32, 2**61, BUDGET - 1, BUDGET, 2**63 - 1]
# sizes: supported lengths near the top, and huge ones (a kernel must not wrap on them either)
near_limit_sizes = st.sampled_from(
    [0, 1, 2, LONGEST - 1, LONGEST, 2**40, 2**61, BUDGET - 1, BUDGET]
)


def _helpers(a, b, limit):
    return mul_exceeds(a, b, limit), sat_add(a, b), sat_mul(a, b)


def test_saturating_helpers_are_exact_on_every_edge():
    for a in EDGES:
        for b in EDGES:
            for limit in [0, 1, LONGEST, BUDGET - 1, BUDGET, 2**63 - 1]:
                exceeds, total, product = _helpers(a, b, limit)
                assert exceeds == (a * b > limit), (a, b, limit)
                assert total == sat(a + b) and product == sat(a * b), (a, b)
    # narrower operands are widened first (int32 lengths times an int64 count)
    assert _helpers(np.int32(LONGEST), np.int32(LONGEST), BUDGET - 1)[2] == LONGEST * LONGEST


def test_budget_never_puts_two_huge_items_in_one_batch():
    # 2 × 2**62 wraps to -2**63 in int64: before the fix all four landed in one batch
    sizes = np.full(4, BUDGET, dtype=np.int64)
    assert K.budget_ends(sizes, BUDGET, 0, 1).tolist() == [1, 2, 3, 4]
    assert K.budget_ends(sizes, BUDGET, 0, 4).tolist() == [1, 2, 3, 4]
    one_run = K.budget_ends_runs(np.array([BUDGET], np.int64), np.array([0, 4]), BUDGET, 0, 1)
    assert one_run.tolist() == [1, 2, 3, 4]
    # with the largest budget an int64 holds, two of 2**62 − 1 fit and three do not (3 × it
    # wraps to a negative number)
    sizes = np.full(6, 2**62 - 1, dtype=np.int64)
    assert K.budget_ends(sizes, 2**63 - 1, 0, 1).tolist() == [2, 4, 6]
    assert K.budget_ends_reference(sizes, 2**63 - 1, 0, 1).tolist() == [2, 4, 6]


def test_budget_at_the_longest_supported_length():
    sizes = np.full(7, LONGEST, dtype=np.int64)
    assert K.budget_ends(sizes, 3 * LONGEST, 0, 1).tolist() == [3, 6, 7]
    assert K.budget_ends(sizes, 3 * LONGEST - 1, 0, 1).tolist() == [2, 4, 6, 7]
    assert K.budget_ends(sizes, BUDGET - 1, 0, 1).tolist() == [7]


@given(
    st.lists(near_limit_sizes, max_size=40),
    st.sampled_from([0, LONGEST, 2 * LONGEST, 3 * LONGEST - 1, 2**61, BUDGET - 1, BUDGET]),
    st.sampled_from([0, 1, 2, 3, 7, BUDGET - 1]),
    st.sampled_from([1, 2, 3, 8]),
)
def test_budget_kernel_matches_reference_near_the_limits(sizes, max_tokens, max_sentences, mult):
    arr = np.array(sizes, dtype=np.int64)
    if max_tokens:
        arr = np.minimum(arr, max_tokens)  # planners leave longer items out first
    ends = K.budget_ends(arr, max_tokens, max_sentences, mult)
    assert np.array_equal(ends, K.budget_ends_reference(arr, max_tokens, max_sentences, mult))
    if max_tokens:  # no batch over budget, computed with Python ints
        bounds = [0, *ends.tolist()]
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            assert (hi - lo) * max(arr[lo:hi].tolist()) <= max_tokens


@given(
    st.lists(st.tuples(near_limit_sizes, st.integers(0, 6)), max_size=8),
    st.sampled_from([LONGEST, 3 * LONGEST, 2**61, BUDGET - 1, BUDGET]),
    st.sampled_from([0, 2, 5]),
    st.sampled_from([1, 2, 4]),
)
def test_budget_runs_match_reference_near_the_limits(runs, max_tokens, max_sentences, mult):
    """Runs of one size (the counting-sort path) give the same ends as per-item sizes."""
    by_size = dict(sorted((min(s, max_tokens), c) for s, c in runs))
    values = np.array(list(by_size), dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(list(by_size.values()))]).astype(np.int64)
    sizes = np.repeat(values, np.diff(starts))
    ends = K.budget_ends_runs(values, starts, max_tokens, max_sentences, mult)
    assert np.array_equal(ends, K.budget_ends_reference(sizes, max_tokens, max_sentences, mult))


@given(
    st.lists(st.integers(0, 9), min_size=1, max_size=6),
    st.lists(st.sampled_from([0, 1, 2, 3, LONGEST, BUDGET, 2**63 - 1]), min_size=6, max_size=6),
    st.sampled_from([0, 1, 2]),
)
def test_exact_split_with_huge_batch_sizes(counts, sizes, mode):
    # a batch size near 2**63 made the batch end pos + size wrap negative (a runaway loop)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    run_size = np.array(sizes[: len(counts)], dtype=np.int64)
    order = np.arange(starts[-1], dtype=np.int64)[::-1].copy()
    a, b = order.copy(), order.copy()
    kept, ends, rest, rest_run = K.exact_split(a, starts, run_size, mode)
    kept_r, ends_r, rest_r, rest_run_r = K.exact_split_reference(b, starts, run_size, mode)
    assert kept == kept_r and np.array_equal(a[:kept], b[:kept])
    assert np.array_equal(ends, ends_r)
    assert np.array_equal(rest, rest_r) and np.array_equal(rest_run, rest_run_r)


def _padding(sizes, ends):
    """Exact padding of the batches (Python ints)."""
    start, pad = 0, 0
    for end in ends.tolist():
        top = int(sizes[end - 1])
        pad += sum(top - int(s) for s in sizes[start:end])
        start = end
    return pad


@given(
    st.lists(near_limit_sizes | st.sampled_from([2**63 - 2, 2**63 - 1]), max_size=10),
    st.lists(st.sampled_from([1, 2, 3, 5, BUDGET, 2**63 - 1]), min_size=10, max_size=10),
)
def test_merge_kernels_match_references_near_the_limits(sizes, caps):
    arr = np.sort(np.array(sizes, dtype=np.int64))
    distinct = np.unique(arr)
    by_size = np.sort(np.array(caps[: distinct.size], dtype=np.int64))[::-1]  # longer: smaller cap
    cap = by_size[np.searchsorted(distinct, arr)]  # equal sizes get equal caps
    ends = K.least_padding_ends(arr, cap)
    count, pad = K.least_padding_ends_reference(arr, cap)
    assert (len(ends), sat(_padding(arr, ends))) == (count, pad)
    assert np.array_equal(K.capped_ends(arr, cap), K.capped_ends_reference(arr, cap))
    bounds = [0, *ends.tolist()]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        assert 0 < hi - lo <= cap[hi - 1]


def test_least_padding_does_not_prefer_a_wrapped_padding():
    # [0, 0, 0, H] pads 3H, which wrapped to a negative int64 and won over the padding-free cut
    huge = 2**62 + 2**60
    sizes = np.array([0, 0, 0, huge, huge], dtype=np.int64)
    caps = np.full(5, 4, dtype=np.int64)
    assert K.least_padding_ends(sizes, caps).tolist() == [3, 5]
    assert K.least_padding_ends_reference(sizes, caps) == (2, 0)


def test_least_padding_saturates_instead_of_wrapping():
    # the padding 3 × (2**63 − 1) cannot be represented: the reference reports 2**63 − 1, and
    # the kernel still finds the one batch
    sizes = np.array([0, 0, 0, 2**63 - 1], dtype=np.int64)
    caps = np.full(4, 4, dtype=np.int64)
    assert K.least_padding_ends(sizes, caps).tolist() == [4]
    assert K.least_padding_ends_reference(sizes, caps) == (1, INT64_MAX)


@given(
    st.lists(st.integers(1, LONGEST) | st.sampled_from([2**40, 2**62]), min_size=1, max_size=14),
    st.lists(st.integers(1, 2**44) | st.sampled_from([2**58, 2**59]), min_size=14, max_size=14),
    st.integers(1, 6),
)
def test_optimal_cuts_matches_reference_near_the_limits(values, counts, k):
    """Σ count × longest beyond 2**63 switches to 128-bit costs; still the plain DP's answer."""
    vals = np.unique(np.array(values, dtype=np.int64))
    cnt = np.array(counts[: vals.size], dtype=np.int64)
    got = K.optimal_cuts(vals, cnt, k)
    assert np.array_equal(got, K.optimal_cuts_reference(vals, cnt, k))


def test_optimal_cuts_with_costs_past_int64():
    # counts of 2**40 items at the longest length cost about 2**71 padded slots: int64 wraps
    values = np.array([1, 2, LONGEST - 1, LONGEST], dtype=np.int64)
    counts = np.array([2**40, 2**40, 1, 2**40], dtype=np.int64)
    for k in (2, 3):
        assert np.array_equal(
            K.optimal_cuts(values, counts, k), K.optimal_cuts_reference(values, counts, k)
        )
    assert K.optimal_cuts(values, counts, 2).tolist() == [1]


def test_optimal_cuts_refuses_counts_past_int64():
    with pytest.raises(ValueError, match="counts must add up to less than 2\\*\\*63"):
        K.optimal_cuts(np.array([1, 2], np.int64), np.array([2**62, 2**62], np.int64), 2)


def test_segment_max_near_the_limits():
    values = np.array([2**63 - 1, 0, LONGEST, BUDGET, 1], dtype=np.int64)
    offsets = np.array([0, 2, 2, 4, 5], dtype=np.int64)
    assert K.segment_max(values, offsets).tolist() == [2**63 - 1, 0, BUDGET, 1]
    assert np.array_equal(K.segment_max(values, offsets), K.segment_max_reference(values, offsets))
