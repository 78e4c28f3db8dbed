"""Vector packing (a capacity per field): the best-fit-pairs kernel, the planner, its plan."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from padless import _kernels as K

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
