"""Outlier filters: the ratio between two fields and bounds per field, against a plain loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from padless.core.filters import length_filter, ratio_filter

pairs = st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 400)), min_size=1, max_size=60).map(
    lambda rows: np.array(rows, dtype=np.int64)
)
bounds = st.one_of(st.none(), st.floats(0, 60, allow_nan=False))


def _units(lens: np.ndarray, res: tuple | None) -> np.ndarray:
    res = res or (None,) * lens.shape[1]
    return np.stack([lens[:, f] * (r if r is not None else 1.0) for f, r in enumerate(res)], axis=1)


@given(pairs, bounds, bounds, st.sampled_from([(0.01, None), None, (0.02, 0.5)]))
def test_ratio_filter_keeps_exactly_the_items_within_the_bounds(lens, lo, hi, res):
    if lo is None and hi is None:
        hi = 10.0
    if lo is not None and hi is not None and lo > hi:
        lo, hi = hi, lo
    f = ratio_filter(lens, min_ratio=lo, max_ratio=hi, resolution=res)
    units = _units(lens, res)
    kept, low, high, undefined = [], 0, 0, 0
    for i, (den, num) in enumerate(units):
        if den == 0 and num == 0:
            undefined += 1
            continue
        ratio = math.inf if den == 0 else num / den
        if lo is not None and ratio < lo:
            low += 1
        elif hi is not None and ratio > hi:
            high += 1
        else:
            kept.append(i)
    assert f.kept.tolist() == kept
    assert sorted(f.kept.tolist() + f.dropped.tolist()) == list(range(len(lens)))
    assert (f.low, f.high, f.undefined) == (low, high, undefined)
    assert f.mask.tolist() == [i in set(kept) for i in range(len(lens))]
    d = f.as_dict()
    for field, (_, total, gone) in enumerate(f.totals):  # in units
        assert total == pytest.approx(units[:, field].sum())
        assert gone == pytest.approx(units[f.dropped, field].sum())
        assert d["fields"][field]["dropped"] == pytest.approx(gone)
    extremes = d["extremes"]
    assert len(extremes["lowest"]) == min(3, low) and len(extremes["highest"]) == min(3, high)
    for i, r in extremes["lowest"]:
        assert i in set(f.dropped.tolist()) and lo is not None and r < lo
    for _, r in extremes["highest"]:
        assert hi is not None and r > hi
    if f.kept.size:
        a, b = d["kept_range"]
        assert (lo is None or a >= lo) and (hi is None or b <= hi)


@given(pairs, bounds, bounds, bounds, bounds)
def test_length_filter_keeps_exactly_the_items_within_every_field_bound(lens, a, b, c, d):
    lo = (a, c)
    hi = (None if b is None else b * 50, None if d is None else d * 5)
    if all(x is None for x in lo + hi):
        hi = (10.0, None)
    lo = tuple(
        None if x is None or (h is not None and x > h) else x for x, h in zip(lo, hi, strict=True)
    )
    res = (0.01, None)
    f = length_filter(lens, min_length=lo, max_length=hi, resolution=res)
    units = _units(lens, res)
    want = [
        i
        for i, row in enumerate(units)
        if all(
            (lo[k] is None or row[k] >= lo[k]) and (hi[k] is None or row[k] <= hi[k])
            for k in range(2)
        )
    ]
    assert f.kept.tolist() == want
    assert f.low + f.high == f.dropped.size
    assert f.ratios is None and f.values.shape == (len(lens), 2)


def test_tokens_per_second_report_names_counts_shares_and_extremes():
    lens = np.array([[500, 60], [1200, 3], [300, 45], [800, 95], [0, 0], [100, 30]])
    f = ratio_filter(lens, min_ratio=1.0, max_ratio=25.0, resolution=(0.01, None))
    assert f.kept.tolist() == [0, 2, 3] and f.dropped.tolist() == [1, 4, 5]
    text = f.report()
    assert "1 <= field 1 / field 0 <= 25 (tokens per second)" in text
    assert "kept 3 of 6, dropped 3 (50.00%): 1 below, 1 above, 1 undefined (0/0)" in text
    assert "field 0 (s): dropped 13 of 29 (44.83%)" in text
    assert "field 1 (tokens): dropped 33 of 233 (14.16%)" in text
    assert "lowest dropped: #1: 0.25" in text and "highest dropped: #5: 30" in text


def test_one_dimensional_lengths_take_a_scalar_bound():
    f = length_filter(np.array([3, 40, 7, 2]), min_length=3, max_length=10)
    assert f.kept.tolist() == [0, 2] and (f.low, f.high) == (1, 1)


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: ratio_filter(np.array([1, 2]), max_ratio=2), ValueError, "F >= 2"),
        (lambda: ratio_filter(np.ones((2, 2), int)), ValueError, "min_ratio or max_ratio"),
        (
            lambda: ratio_filter(np.ones((2, 2), int), numerator=0, max_ratio=1),
            ValueError,
            "different",
        ),
        (
            lambda: ratio_filter(np.ones((2, 2), int), numerator=2, max_ratio=1),
            ValueError,
            "numerator",
        ),
        (
            lambda: ratio_filter(np.ones((2, 2), int), denominator=1.0, max_ratio=1),
            TypeError,
            "denominator",
        ),
        (
            lambda: ratio_filter(np.ones((2, 2), int), min_ratio=3, max_ratio=1),
            ValueError,
            "min_ratio",
        ),
        (lambda: ratio_filter(np.ones((2, 2), int), max_ratio=math.nan), ValueError, "max_ratio"),
        (
            lambda: ratio_filter(np.ones((2, 2), int), max_ratio=1, resolution=(0.01,)),
            ValueError,
            "resolution",
        ),
        (
            lambda: ratio_filter(np.ones((2, 2), int), max_ratio=1, resolution=-1.0),
            ValueError,
            "resolution",
        ),
        (lambda: ratio_filter(np.ones((2, 2), int), max_ratio="1"), TypeError, "max_ratio"),
        (lambda: length_filter(np.ones((2, 2), int), max_length=(1,)), ValueError, "max_length"),
        (lambda: length_filter(np.ones(3, int)), ValueError, "min_length or max_length"),
        (
            lambda: length_filter(np.ones(3, int), min_length=5, max_length=2),
            ValueError,
            "min_length",
        ),
        (lambda: length_filter(np.ones(3, int), max_length=-2), ValueError, "max_length"),
    ],
)
def test_bad_settings_are_refused_by_name(call, error, words):
    with pytest.raises(error, match=words):
        call()
