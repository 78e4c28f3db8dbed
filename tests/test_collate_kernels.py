"""The collate kernels (next_fit_count, packed_batch, padded_batch) equal their references and
refuse what breaks their rules before writing anything."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from padless import _kernels as K
from padless.planners.packing import next_fit_rows

DTYPES = [np.dtype(t) for t in ("uint8", "int8", "int16", "uint16", "int32", "uint32", "int64")]
OUT = [np.dtype(np.int64), np.dtype(np.int32)]


def _tokens(dtype: np.dtype, size: int, seed: int) -> np.ndarray:
    info = np.iinfo(dtype)
    hi = min(int(info.max), 2**31 - 1)  # values an int32 output holds
    lo = max(int(info.min), -(2**31))
    return np.random.default_rng(seed).integers(lo, hi, size, endpoint=True).astype(dtype)


@settings(max_examples=30)
@given(
    lengths=st.lists(st.integers(0, 9), max_size=30),
    capacity=st.integers(9, 20),
    per_row=st.integers(0, 4),
)
def test_next_fit_count_is_the_rows_next_fit_opens(lengths, capacity, per_row):
    arr = np.array(lengths, dtype=np.int64)
    got = K.next_fit_count(arr, capacity, per_row)
    assert got == K.next_fit_count_reference(arr, capacity, per_row)
    rows = next_fit_rows(arr, capacity=capacity, max_per_row=per_row or None)
    assert got == (int(rows[-1]) + 1 if len(lengths) else 0)


def _items(data: st.DataObject, size: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
    n = data.draw(st.integers(0, 8))
    lengths = np.array(data.draw(st.lists(st.integers(0, limit), min_size=n, max_size=n)))
    starts = np.array([data.draw(st.integers(0, size - k)) for k in lengths.tolist()])
    return starts.astype(np.int64), lengths.astype(np.int64)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@settings(max_examples=12)
@given(data=st.data())
def test_packed_batch_matches_reference(dtype, data):
    tokens = _tokens(dtype, 200, data.draw(st.integers(0, 99)))
    capacity = data.draw(st.integers(4, 24))
    starts, lengths = _items(data, tokens.size, capacity)
    per_row = data.draw(st.integers(0, 3))
    flatten = data.draw(st.booleans())
    out = data.draw(st.sampled_from(OUT))
    needed = K.next_fit_count(lengths, capacity, per_row)
    rows = 0 if flatten else needed + data.draw(st.integers(0, 2))
    total = int(lengths.sum()) if flatten else rows * capacity
    results = []
    for fn in (K.packed_batch, K.packed_batch_reference):
        bufs = [np.full(total, 7, out), np.full(total, 7, out), np.full(total, 7, np.int64),
                np.full(total, 7, np.int32), np.full(len(starts) + rows + 1, 7, np.int32)]  # fmt: skip
        counts = fn(tokens, starts, lengths, capacity, per_row, rows, flatten, -1, -100, 2, *bufs)
        results.append((counts, bufs))
    (got_counts, got), (want_counts, want) = results
    assert got_counts == want_counts
    segments = got_counts[0]
    for g, w in zip(got[:4], want[:4], strict=True):
        assert np.array_equal(g, w)
    assert np.array_equal(got[4][: segments + 1], want[4][: segments + 1])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@settings(max_examples=12)
@given(data=st.data())
def test_padded_batch_matches_reference(dtype, data):
    tokens = _tokens(dtype, 200, data.draw(st.integers(0, 99)))
    width = data.draw(st.integers(0, 16))
    starts, lengths = _items(data, tokens.size, width)
    rows = len(starts) + data.draw(st.integers(0, 2))
    out = data.draw(st.sampled_from(OUT))
    got = (np.full(rows * width, 7, out), np.full(rows * width, 7, np.int64))
    want = (np.full(rows * width, 7, out), np.full(rows * width, 7, np.int64))
    K.padded_batch(tokens, starts, lengths, rows, width, 3, *got)
    K.padded_batch_reference(tokens, starts, lengths, rows, width, 3, *want)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def _packed(**change):
    args = {
        "tokens": np.arange(100, dtype=np.uint16),
        "starts": np.array([0, 10], dtype=np.int64),
        "lengths": np.array([5, 4], dtype=np.int64),
        "capacity": 8,
        "max_per_row": 0,
        "rows": 2,
        "flatten": False,
        "pad": 0,
        "ignore": -100,
        "position_start": 0,
    }
    args.update(change)
    total = int(args["lengths"].sum()) if args["flatten"] else args["rows"] * args["capacity"]
    ids = np.full(total, 7, np.int64)
    out = [ids, np.full(total, 7, np.int64), np.full(total, 7, np.int64),
           np.full(total, 7, np.int32), np.full(len(args["starts"]) + args["rows"] + 1, 7, np.int32)]  # fmt: skip
    K.packed_batch(*args.values(), *out)
    return out


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"lengths": np.array([5, 9])}, r"item 1: lengths\[1\] must be in \[0, capacity=8\]"),
        ({"starts": np.array([0, 97])}, "must be <= the 100 tokens"),
        ({"starts": np.array([-1, 10])}, r"starts\[0\] must be >= 0"),
        ({"rows": 1}, "needs 2 rows of capacity=8, more than rows=1"),
        ({"capacity": 0}, "capacity must be >= 1"),
        ({"position_start": 2**63 - 2}, "position_start"),
        ({"tokens": np.array([2**40] * 20), "pad": 2**40}, None),
    ],
)
def test_packed_batch_refuses_before_writing(change, match):
    if match is None:  # int64 out holds anything: fine
        assert _packed(**change)[0][0] == 2**40
        return
    with pytest.raises(ValueError, match=match):
        _packed(**change)


def test_int32_outputs_refuse_tokens_and_pads_they_cannot_hold():
    tokens = np.array([1, 2, 2**31, 4], dtype=np.uint32)
    ids, mask = np.full(4, 7, np.int32), np.full(4, 7, np.int64)
    with pytest.raises(ValueError, match="item 0 holds a token outside int32"):
        K.padded_batch(tokens, np.array([1]), np.array([3]), 1, 4, 0, ids, mask)
    assert (ids == 7).all() and (mask == 7).all()  # nothing written
    with pytest.raises(ValueError, match="pad and ignore_index must fit"):
        K.padded_batch(tokens, np.array([0]), np.array([2]), 1, 4, 2**31, ids, mask)
    with pytest.raises(TypeError, match="int64 or int32"):
        K.padded_batch(tokens, np.array([0]), np.array([2]), 1, 4, 0, ids.astype(np.int16), mask)
    with pytest.raises(ValueError, match="rows must hold the 2 items"):
        K.padded_batch(tokens, np.array([0, 1]), np.array([1, 1]), 1, 4, 0, ids, mask)
