"""Hostile direct calls into the compiled kernels of seven families (issue 39, item 3).

The families are packing, feistel, text, rows, shuffle, collate and ingest (csrc/<family>.cpp).
Their planners and readers check everything before they call a kernel, but nothing stops the next
caller inside padless from skipping that, so every binding checks its own arguments before it
writes anything. Each test below calls one binding straight through ``padless._core`` with wrong
sizes, indices and offsets out of range, values near 2**63, too-small or wrong-typed outputs, and
asserts a ValueError, TypeError or IndexError whose message names the kernel and the rule; then
it calls the same binding with valid edge cases (empty arrays, an item exactly at the capacity)
and checks the answer. A comment says where a case crashed the process, hung or gave garbage
before the checks.

``ATTACKED`` maps every binding of these families to the test that attacks it;
``test_every_binding_is_attacked`` fails when a binding is added to one of their sources without
an entry here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from padless import _core as C

FAMILIES = ("packing", "feistel", "text", "rows", "shuffle", "collate", "ingest")

ATTACKED: dict[str, str] = {
    "best_fit_rows": "test_best_fit_rows",
    "best_fit_pairs": "test_best_fit_pairs",
    "scatter_rows": "test_scatter_rows",
    "feistel_permute": "test_feistel_permute",
    "lm_gather": "test_lm_gather",
    "lm_random_batch": "test_lm_random_batch",
    "count_lines": "test_count_lines",
    "row_columns": "test_row_columns",
    "draw_below": "test_draw_below",
    "shuffle_indices": "test_shuffle_indices",
    "count_labels": "test_count_labels",
    "scatter_records": "test_scatter_records",
    "place_records": "test_place_records",
    "scatter_window_lines": "test_scatter_window_lines",
    "order_lines": "test_order_lines",
    "gather_lines": "test_gather_lines",
    "gather_records": "test_gather_records",
    "next_fit_count": "test_next_fit_count",
    "packed_batch": "test_packed_batch",
    "padded_batch": "test_padded_batch",
    "eos_offsets": "test_eos_offsets",
    "gather_tokens": "test_gather_tokens",
    "segment_positions": "test_segment_positions",
}

I64 = np.int64
TOP = 2**63 - 1
LONG = (1 << 24) - 1  # a line of 16 MiB or more in the shuffle's items
KEYS = np.arange(1, 7, dtype=np.uint64)  # round keys of the LM-stream permutation


def a64(*values: int) -> np.ndarray:
    return np.array(values, dtype=I64)


class Attack:
    """``bad(error, match, *args)`` calls the kernel and expects ``error`` matching ``match``; a
    ValueError or IndexError must also start with the kernel's name (a TypeError may come from
    nanobind's own argument matching)."""

    def __init__(self, f: Callable[..., Any], name: str | None = None) -> None:
        self.f = f
        self.name = name or f.__name__

    def __call__(self, error: type[Exception], match: str, *args: Any, **kwargs: Any) -> None:
        with pytest.raises(error, match=match) as info:
            self.f(*args, **kwargs)
        if error is not TypeError:
            assert str(info.value).startswith(self.name + ": "), str(info.value)


def test_every_binding_is_attacked() -> None:
    csrc = Path(__file__).resolve().parents[1] / "csrc"
    bound: set[str] = set()
    for family in FAMILIES:
        bound |= set(re.findall(r'm\.def\(\s*"(\w+)"', (csrc / f"{family}.cpp").read_text()))
    assert bound == set(ATTACKED), sorted(bound ^ set(ATTACKED))
    source = Path(__file__).read_text()
    for name, test in ATTACKED.items():
        assert hasattr(C, name), name
        body = source.split(f"\ndef {test}(")[1].split("\ndef ")[0]
        assert f"C.{name}" in body, (name, test)


# --------------------------------------------------------------------------- packing


def test_best_fit_rows() -> None:
    bad = Attack(C.best_fit_rows)
    bad(IndexError, r"sizes\[3\] = 5000 must be in \[0, 4096\]", a64(1, 2, 3, 5000), 4096, 0)
    bad(IndexError, r"sizes\[0\] = -1", a64(-1), 4, 0)
    bad(IndexError, r"sizes\[0\] = 4294967295", np.array([2**32 - 1], np.uint32), 4, 0)
    bad(ValueError, r"capacity = 0 must be in \[1, 2147483647\]", a64(), 0, 0)
    bad(ValueError, "capacity = -1 must be in", a64(), -1, 0)  # hung before
    bad(ValueError, f"capacity = {TOP} must be in", a64(1), TOP, 0)  # hung before
    bad(ValueError, "max_per_row = -1 must be >= 0", a64(1, 1, 1), 4, -1)  # opened 3 rows before
    bad(TypeError, "incompatible", a64(1), 4.5, 0)
    # valid edges: nothing, items exactly at the capacity, items of size 0
    assert C.best_fit_rows(a64(), 4, 0)[1] == 0
    row_of, rows = C.best_fit_rows(np.array([4, 4, 0], np.uint16), 4, 0)
    assert row_of.tolist() == [0, 1, 1] and rows == 2


def test_best_fit_pairs() -> None:
    bad = Attack(C.best_fit_pairs)
    bad(ValueError, "first and second must have one size per item, got 2 and 1", a64(1, 2), a64(1),
        4, 4, 0)  # fmt: skip
    bad(IndexError, r"first\[0\] = 3 must be in \[0, 2\]", a64(3), a64(1), 2, 4, 0)
    bad(IndexError, r"second\[1\] = 5 must be in \[0, 4\]", a64(1, 1), a64(1, 5), 4, 4, 0)
    bad(IndexError, r"second\[0\] = -2", a64(1), a64(-2), 4, 4, 0)
    bad(ValueError, f"capacity0 = {TOP} must be in", a64(1), a64(1), TOP, 4, 0)
    bad(ValueError, "capacity1 = 0 must be in", a64(), a64(), 4, 0, 0)
    bad(ValueError, "capacity1 = 2147483648 must be in", a64(), a64(), 4, 2**31, 0)
    bad(ValueError, "max_per_row = -3 must be >= 0", a64(), a64(), 4, 4, -3)
    assert C.best_fit_pairs(a64(), a64(), 1, 1, 0)[1] == 0
    row_of, rows = C.best_fit_pairs(a64(4, 0, 4), a64(0, 4, 4), 4, 4, 0)
    assert row_of.tolist() == [0, 0, 1] and rows == 2


def test_scatter_rows() -> None:
    bad = Attack(C.scatter_rows)
    one, two = a64(1), a64(1, 2)
    # the first three crashed the process before (SIGSEGV)
    bad(ValueError, r"row_of\[1\] = 5000000 must be in \[0, 0\]", a64(0, 5_000_000), a64(0), two,
        two)  # fmt: skip
    bad(ValueError, r"row_rank\[0\] = 900000000 must be in \[0, 0\]", a64(0, 0), a64(900_000_000),
        two, two)  # fmt: skip
    bad(ValueError, "row_of and values must have the same size, got 100000 and 1",
        np.arange(100_000), np.arange(100_000), one, one)  # fmt: skip
    bad(ValueError, "row_of and sizes must have the same size, got 2 and 3", a64(0, 0), a64(0),
        two, a64(1, 2, 3))  # fmt: skip
    bad(ValueError, r"row_of\[0\] = -1", a64(-1), a64(0), one, one)
    bad(ValueError, r"row_of\[0\] = 0 must be in \[0, -1\]", a64(0), a64(), one, one)
    values, sizes, bounds = C.scatter_rows(a64(), a64(), a64(), a64())
    assert values.size == sizes.size == 0 and bounds.tolist() == [0]
    sizes16 = np.array([1, 2, 3], np.uint16)
    values, sizes, bounds = C.scatter_rows(a64(1, 0, 1), a64(1, 0), a64(7, 8, 9), sizes16)
    assert values.tolist() == [7, 9, 8] and sizes.tolist() == [1, 3, 2]  # row 1 has rank 0
    assert bounds.tolist() == [0, 2, 3]


# --------------------------------------------------------------------------- feistel


def test_feistel_permute() -> None:
    bad = Attack(C.feistel_permute)
    bad(ValueError, r"ids\[0\] = 5 must be in \[0, 2\]", a64(5), 3, KEYS)  # garbage before
    bad(ValueError, r"ids\[1\] = -1", a64(0, -1), 3, KEYS)  # garbage before
    bad(ValueError, "n = 0 must be >= 1", a64(0), 0, KEYS)  # hung before
    bad(ValueError, "n = -4 must be >= 0", a64(), -4, KEYS)
    bad(ValueError, rf"ids\[0\] = {TOP}", a64(TOP), 2**62, KEYS)
    assert C.feistel_permute(a64(), 0, KEYS).size == 0
    assert C.feistel_permute(a64(0), 1, KEYS).tolist() == [0]
    assert sorted(C.feistel_permute(np.arange(10), 10, KEYS).tolist()) == list(range(10))
    assert 0 <= C.feistel_permute(a64(TOP - 1), TOP, KEYS)[0] < TOP


def _xy(rows: int, w: int, dtype: Any = I64) -> tuple[np.ndarray, np.ndarray]:
    return np.full((rows, w), 7, dtype), np.full((rows, w), 7, dtype)


def test_lm_gather() -> None:
    bad = Attack(C.lm_gather)
    src = np.arange(10, dtype=np.uint16)
    x, y = _xy(1, 3)
    bad(IndexError, "row 0 starts at 7: its 4 tokens are not all within the 10", src, a64(7), x, y)
    bad(IndexError, "row 0 starts at -1", src, a64(-1), x, y)
    bad(IndexError, f"row 0 starts at {TOP}", src, a64(TOP), x, y)
    bad(ValueError, "more starts than rows of x: 2 > 1", src, a64(0, 1), x, y)
    bad(ValueError, "x and y must have the same shape and dtype", src, a64(0), x, a64(0)[None])
    strided = np.zeros((1, 6), I64)[:, ::2]
    bad(ValueError, "x and y must be C-contiguous", src, a64(0), strided, y)
    bad(ValueError, "x and y must be C-contiguous", src, a64(0), x, strided)
    ro = np.zeros((1, 3), I64)
    ro.flags.writeable = False
    bad(TypeError, "x must be a 2-D writable", src, a64(0), ro, y)
    bad(TypeError, "src must be a 1-D", np.zeros(10), a64(0), x, y)
    bad(TypeError, "x and y must be int64, int32 or uint16", src, a64(0), *_xy(1, 3, np.int8))
    assert (x == 7).all() and (y == 7).all()  # nothing written by any refusal
    C.lm_gather(src, a64(6), x, y)  # the last row that fits: tokens 6..9
    assert x.tolist() == [[6, 7, 8]] and y.tolist() == [[7, 8, 9]]
    C.lm_gather(src, a64(), *_xy(0, 3))
    C.lm_gather(src[:0], a64(0), *_xy(1, 0))  # rows of nothing read nothing


def test_lm_random_batch() -> None:
    bad = Attack(C.lm_random_batch)
    src = np.arange(100, dtype=np.int32)
    x, y = _xy(2, 3)
    bad(ValueError, "n = -1 must be >= 1", src, 0, -1, 0, KEYS, x, y)
    bad(ValueError, "n = 0 must be >= 1", src, 0, 0, 0, KEYS, x, y)
    # first + b wrapped past int64 before: rows of garbage positions, no error
    bad(ValueError, rf"first \+ rows - 1 = {TOP} \+ 1 exceeds int64", src, TOP, 5, 0, KEYS, x, y)
    bad(ValueError, rf"offset = {TOP - 1} must be in \[0, 96\]", src, 0, 5, TOP - 1, KEYS, x, y)
    bad(ValueError, "offset = -1", src, 0, 5, -1, KEYS, x, y)
    bad(ValueError, r"the n=34 subsequences of 3 \+ 1 tokens from offset=0 do not all lie", src, 0,
        34, 0, KEYS, x, y)  # fmt: skip
    bad(ValueError, "n=2 subsequences", src, 0, 2, 94, KEYS, x, y)
    bad(ValueError, f"n={TOP} subsequences", src, 0, TOP, 0, KEYS, x, y)
    bad(ValueError, "do not all lie in the 3 tokens", src[:3], 0, 1, 0, KEYS, x, y)
    assert (x == 7).all() and (y == 7).all()
    # valid edges: the last subsequence ends at the last token; first wraps around n
    C.lm_random_batch(src, 0, 33, 0, KEYS, x, y)
    C.lm_random_batch(src, -5, 1, 96, KEYS, x, y)
    assert x.tolist() == [[96, 97, 98]] * 2 and y.tolist() == [[97, 98, 99]] * 2
    C.lm_random_batch(src, TOP - 1, 3, 0, KEYS, x, y)
    C.lm_random_batch(src, 0, 33, 0, KEYS, *_xy(0, 3))  # no rows


# --------------------------------------------------------------------------- text


def test_count_lines() -> None:
    bad = Attack(C.count_lines)
    buf = np.frombuffer(b"a b\nc\n", np.uint8)
    out, flags = np.zeros(40_000, I64), np.zeros(16_384, np.uint8)

    def state(count: int = 0, prev: int = 1) -> np.ndarray:
        return np.array([count, prev], I64)

    bad(ValueError, r"mode = 7 must be in \[0, 2\]", buf, 7, out, 0, state(), flags)
    bad(ValueError, "mode = -1", buf, -1, out, 0, state(), flags)
    # the next one read n_out as a position in out before (stopped short only by luck)
    bad(ValueError, r"n_out = 40001 must be in \[0, 40000\]", buf, 0, out, 40_001, state(), flags)
    bad(ValueError, "n_out = -1", buf, 0, out, -1, state(), flags)
    bad(ValueError, "state must hold 2 entries", buf, 0, out, 0, a64(0), flags)
    bad(ValueError, r"state\[0\] \(the open line's count\) = -5", buf, 0, out, 0, state(-5), flags)
    bad(ValueError, rf"state\[0\] .* = {TOP} must be in \[0, {TOP - 6}\]", buf, 0, out, 0,
        state(TOP), flags)  # fmt: skip
    bad(ValueError, r"state\[1\] .* = 2 must be in \[0, 1\]", buf, 1, out, 0, state(0, 2), flags)
    bad(ValueError, "positive multiple of 8 bytes, got 12", buf, 0, out, 0, state(),
        np.zeros(12, np.uint8))  # fmt: skip
    bad(TypeError, "incompatible", buf, 0, out.astype(np.int32), 0, state(), flags)
    ro = out.copy()
    ro.flags.writeable = False
    bad(TypeError, "incompatible", buf, 0, ro, 0, state(), flags)
    assert (out == 0).all()
    assert C.count_lines(buf, 0, out, 0, state(), flags) == (6, 2, -1)
    assert out[:2].tolist() == [2, 1]
    assert C.count_lines(buf[:0], 0, out, 40_000, state(), flags) == (0, 40_000, -1)
    # an out with no room for a block's lines: nothing consumed, nothing written
    assert C.count_lines(buf, 0, np.zeros(8, I64), 0, state(), np.zeros(8, np.uint8)) == (0, 0, -1)


# --------------------------------------------------------------------------- rows


def test_row_columns() -> None:
    bad = Attack(C.row_columns)
    values = np.arange(5, dtype=np.int16)
    # the first two gave back uninitialised memory before
    bad(ValueError, "bounds must run from 0 to n=1, got 1 ... 1", values, a64(0), a64(3), a64(1, 1))
    bad(ValueError, "bounds must run from 0 to n=2, got 0 ... 1", values, a64(0, 1), a64(3, 3),
        a64(0, 1))  # fmt: skip
    bad(ValueError, r"bounds must be non-decreasing: bounds\[2\] = 0 < bounds\[1\] = 2", values,
        a64(0, 1), a64(1, 1), a64(0, 2, 0, 2))  # fmt: skip
    bad(ValueError, "bounds must hold at least one entry", values, a64(), a64(), a64())
    bad(ValueError, "src and seg must have the same size, got 1 and 2", values, a64(0), a64(1, 1),
        a64(0, 1))  # fmt: skip
    bad(ValueError, r"seg\[0\] = -1 must be in \[0, 5\]", values, a64(0), a64(-1), a64(0, 1))
    bad(ValueError, rf"seg\[0\] = {TOP}", values, a64(0), a64(TOP), a64(0, 1))
    bad(IndexError, "entry 0 is not within values", values, a64(3), a64(3), a64(0, 1))
    bad(IndexError, "entry 1 is not within values", values, a64(0, -1), a64(1, 0), a64(0, 2))
    tokens, position, seq_idx, cu = C.row_columns(values, a64(), a64(), a64(0))
    assert tokens.size == position.size == seq_idx.size == cu.size == 0
    tokens, position, seq_idx, cu = C.row_columns(values, a64(0, 3), a64(3, 2), a64(0, 2))
    assert tokens.tolist() == [0, 1, 2, 3, 4] and position.tolist() == [0, 1, 2, 0, 1]
    assert seq_idx.tolist() == [0, 0, 0, 1, 1] and cu.tolist() == [0, 3, 5]
    assert C.row_columns(values, a64(5), a64(0), a64(0, 0, 1))[3].tolist() == [0, 0, 0]


# --------------------------------------------------------------------------- shuffle


def _state(value: int = 7) -> np.ndarray:
    return np.array([value], np.uint64)


NO_STATE = np.zeros(0, np.uint64)


def test_draw_below() -> None:
    bad = Attack(C.draw_below)
    # read and wrote the word past the array before
    bad(ValueError, "state must be a one-element uint64 array, got 0 entries", NO_STATE, 3)
    bad(ValueError, r"bound = 0 must be in \[1, 4294967295\]", _state(), 0)  # gave 0 before
    bad(ValueError, "bound = -1", _state(), -1)
    bad(ValueError, "bound = 4294967296", _state(), 2**32)
    bad(TypeError, "incompatible", _state().astype(I64), 3)
    ro = _state()
    ro.flags.writeable = False
    bad(TypeError, "incompatible", ro, 3)
    state = _state()
    assert C.draw_below(state, 1) == 0 and int(state[0]) != 7  # the stream advanced
    assert 0 <= C.draw_below(state, 2**32 - 1) < 2**32 - 1


def test_shuffle_indices() -> None:
    bad = Attack(C.shuffle_indices)
    perm = np.full(4, -7, np.int32)
    bad(ValueError, r"m = 1000000 must be in \[0, 4\]", 1_000_000, _state(), perm)  # SIGSEGV before
    bad(ValueError, "m = -1", -1, _state(), perm)
    bad(ValueError, "state must be a one-element", 2, NO_STATE, perm)
    bad(TypeError, "incompatible", 2, _state(), perm.astype(I64))
    assert (perm == -7).all()
    C.shuffle_indices(0, _state(), perm)
    C.shuffle_indices(4, _state(), perm)
    assert sorted(perm.tolist()) == [0, 1, 2, 3]


def test_count_labels() -> None:
    bad = Attack(C.count_labels)
    counts = np.full(2, 7, I64)
    # SIGSEGV before
    bad(ValueError, "counts has 2 entries, needs at least 1000000", 100_000, 1_000_000, 7, counts)
    bad(ValueError, r"num_buckets = 0 must be in \[1, 4294967295\]", 10, 0, 7, counts)
    bad(ValueError, "num_buckets = 4294967296", 10, 2**32, 7, counts)
    bad(ValueError, "n = -1 must be >= 0", -1, 2, 7, counts)
    bad(TypeError, "incompatible", 10, 2, -1, counts)  # a key is a uint64
    assert (counts == 7).all()
    C.count_labels(0, 2, 7, counts)
    assert counts.tolist() == [0, 0]
    C.count_labels(100, 2, 2**64 - 1, counts)
    assert counts.sum() == 100


def _records(
    src: np.ndarray, lo: int, hi: int, width: int, buckets: int, dst: np.ndarray, dst_lo: int,
    starts: np.ndarray | None = None, counts: np.ndarray | None = None,
) -> None:  # fmt: skip
    """C.scatter_records with key 7 and starts and counts of the right sizes unless given."""
    starts = np.full(buckets + 1, -7, I64) if starts is None else starts
    counts = np.full(buckets, -7, I64) if counts is None else counts
    C.scatter_records(src, lo, hi, width, buckets, 7, dst, dst_lo, starts, counts)


def test_scatter_records() -> None:
    bad = Attack(_records, "scatter_records")  # C.scatter_records through _records
    src = np.arange(8, dtype=np.uint32)
    dst = np.zeros(8, np.uint32)
    bad(ValueError, r"hi = 10000000 must be in \[0, 8\]", src, 0, 10**7, 1, 2, dst, 0)  # SIGSEGV
    bad(ValueError, r"lo = -1 must be in \[0, 8\]", src, -1, 4, 1, 2, dst, 0)
    bad(ValueError, r"hi = 2 must be in \[4, 8\]", src, 4, 2, 1, 2, dst, 0)
    bad(ValueError, "width = 0 must be >= 1", src, 0, 8, 0, 2, dst, 0)  # SIGFPE before
    bad(ValueError, "hi - lo = 7 words must be whole records of width=2", src, 0, 7, 2, 2, dst, 0)
    # SIGABRT before (heap corruption)
    bad(ValueError, "dst has 1 entries: no room for 8 from dst_lo = 0", src, 0, 8, 1, 2, dst[:1], 0)
    bad(ValueError, "dst has 8 entries: no room for 8 from dst_lo = 1", src, 0, 8, 1, 2, dst, 1)
    bad(ValueError, "dst_lo = -1 must be >= 0", src, 0, 8, 1, 2, dst, -1)
    bad(ValueError, "num_buckets = 0", src, 0, 8, 1, 0, dst, 0)
    bad(ValueError, "starts has 2 entries, needs at least 3", src, 0, 8, 1, 2, dst, 0, a64(0, 0))
    bad(ValueError, "counts has 1 entries, needs at least 2", src, 0, 8, 1, 2, dst, 0, None,
        a64(0))  # fmt: skip
    # records of another word than dst's: refused, not converted (uint64 into uint32 would wrap)
    bad(TypeError, "incompatible", src, 0, 8, 1, 2, dst.astype(np.uint64), 0)
    assert (dst == 0).all()
    starts, counts = np.zeros(3, I64), np.zeros(2, I64)
    _records(src, 0, 8, 2, 2, dst, 0, starts, counts)  # exactly dst's room
    assert sorted(dst.tolist()) == list(range(8)) and starts[-1] == 8 and counts.sum() == 4
    _records(src, 8, 8, 1, 1, dst[:0], 0)  # an empty window into an empty dst


def test_place_records() -> None:
    bad = Attack(C.place_records)
    src = np.arange(4, dtype=np.uint64)
    dst = np.zeros(4, np.uint64)
    # SIGSEGV before
    bad(ValueError, r"fill\[0\] = 1000000000: bucket 0 gets 4 words of this window, which do not "
        "fit dst's 4 words", src, 0, 4, 1, 1, _state(), dst, a64(10**9))  # fmt: skip
    bad(ValueError, r"fill\[0\] = -1", src, 0, 4, 1, 1, _state(), dst, a64(-1))
    bad(ValueError, r"fill\[0\] = 1: bucket 0 gets 4 words", src, 0, 4, 1, 1, _state(), dst, a64(1))
    bad(ValueError, "fill has 1 entries, needs at least 2", src, 0, 4, 1, 2, _state(), dst, a64(0))
    bad(ValueError, "state must be a one-element", src, 0, 4, 1, 1, NO_STATE, dst, a64(0))
    bad(ValueError, r"hi = 5 must be in \[0, 4\]", src, 0, 5, 1, 1, _state(), dst, a64(0))
    bad(ValueError, "width = -2", src, 0, 4, -2, 1, _state(), dst, a64(0))
    bad(ValueError, "whole records of width=3", src, 0, 4, 3, 1, _state(), dst, a64(0))
    bad(TypeError, "incompatible", src, 0, 4, 1, 1, _state(), dst.astype(np.uint8), a64(0))
    assert (dst == 0).all()
    # two buckets, each given exactly the room its records need
    state, fill, counts = _state(), a64(0, 0), np.zeros(2, I64)
    C.count_labels(4, 2, 7, counts)  # the labels place_records draws from state 7
    fill[1] = counts[0]
    C.place_records(src, 0, 4, 1, 2, state, dst, fill)
    assert sorted(dst.tolist()) == [0, 1, 2, 3] and fill.tolist() == [counts[0], 4]
    # a bucket that gets no records of the window may point anywhere: it is not written
    state = _state()
    while True:  # a state whose next label is bucket 0
        C.count_labels(1, 2, int(state[0]), counts)
        if counts[0] == 1:
            break
        state[0] += np.uint64(1)
    fill, lone = a64(0, 10**9), np.zeros(8, np.uint64)
    C.place_records(src, 3, 4, 1, 2, state, lone, fill)
    assert lone[0] == 3 and fill.tolist() == [1, 10**9]


def _b8(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    b8 = np.frombuffer(data, np.uint8)
    return b8, b8[: b8.size & ~7].view(np.uint64)


def _window(
    b8: np.ndarray, b64: np.ndarray, lo: int, hi: int, buckets: int = 2,
    dst: np.ndarray | None = None, dst_lo: int = 0, room: int = 8,
    bounds: np.ndarray | None = None, counts: np.ndarray | None = None,
    state: np.ndarray | None = None,
) -> int:  # fmt: skip
    """C.scatter_window_lines with outputs of the right sizes unless given."""
    return int(C.scatter_window_lines(
        b8, b64, lo, hi, buckets, _state() if state is None else state, np.zeros(room, np.uint32),
        np.zeros(b8.size, np.uint8) if dst is None else dst, dst_lo,
        np.zeros(buckets + 1, I64) if bounds is None else bounds,
        np.zeros(buckets, I64) if counts is None else counts,
    ))  # fmt: skip


def test_scatter_window_lines() -> None:
    bad = Attack(_window, "scatter_window_lines")  # C.scatter_window_lines through _window
    b8, b64 = _b8(b"abc" * 10)
    # SIGSEGV before: the scan for a newline ran past b8
    bad(ValueError, r"\[lo, hi\) = \[0, 30\) must end with a newline", b8, b64, 0, 30)
    b8, b64 = _b8(b"ab\n" * 4)
    bad(ValueError, "b64 has 10000000 words, more than the 1 whole words of b8's 12 bytes", b8,
        np.zeros(10**7, np.uint64), 0, 12)  # fmt: skip
    bad(ValueError, r"\[lo, hi\) = \[0, 13\) must be a range of b8's 12 bytes", b8, b64, 0, 13)
    bad(ValueError, r"\[lo, hi\) = \[-1, 3\)", b8, b64, -1, 3)
    bad(ValueError, r"\[lo, hi\) = \[6, 3\)", b8, b64, 6, 3)
    # SIGSEGV before
    bad(ValueError, "dst has 3 entries: no room for 12 from dst_lo = 0", b8, b64, 0, 12, 2,
        np.zeros(3, np.uint8))  # fmt: skip
    bad(ValueError, "dst_lo = -3 must be >= 0", b8, b64, 0, 12, 2, None, -3)
    bad(ValueError, "num_buckets = 0", b8, b64, 0, 12, 0)
    bad(ValueError, "lengths has 0 entries, needs at least 1", b8, b64, 0, 12, 2, None, 0, 0)
    bad(ValueError, "bounds has 2 entries, needs at least 3", b8, b64, 0, 12, 2, None, 0, 8,
        a64(0, 0))  # fmt: skip
    bad(ValueError, "counts has 1 entries, needs at least 2", b8, b64, 0, 12, 2, None, 0, 8, None,
        a64(0))  # fmt: skip
    bad(ValueError, "state must be a one-element", b8, b64, 0, 12, 2, None, 0, 8, None, None,
        NO_STATE)  # fmt: skip
    bad(TypeError, "incompatible", b8.astype(I64), b64, 0, 12)  # bytes are not converted
    dst, counts = np.zeros(12, np.uint8), np.zeros(2, I64)
    assert _window(b8, b64, 0, 12, 2, dst, 0, 8, None, counts) == 12  # dst exactly the window
    assert dst.tobytes() == b"ab\n" * 4 and counts.sum() == 4
    assert _window(b8, b64, 0, 12, 1, dst, 0, 3) == 9  # lengths full after 3 lines
    assert _window(b8, b64, 5, 5, 1, dst[:0]) == 5  # an empty window


def _order(
    b8: np.ndarray, b64: np.ndarray, bounds: np.ndarray, s: int, items: int = 8,
    state: np.ndarray | None = None,
) -> int:  # fmt: skip
    """C.order_lines into `items` entries."""
    out = np.zeros(items, np.uint64)
    return int(C.order_lines(b8, b64, bounds, s, _state() if state is None else state, out))


def test_order_lines() -> None:
    bad = Attack(_order, "order_lines")  # C.order_lines through _order
    b8, b64 = _b8(b"ab\n")
    rows = a64(0, 3)[None]
    # SIGSEGV before
    bad(ValueError, r"bounds\[0, s:s\+2\] = \[0, 100000000\) must be a range of b8's 3 bytes", b8,
        b64, a64(0, 10**8)[None], 0)  # fmt: skip
    bad(ValueError, r"bounds\[1, s:s\+2\] = \[2, 1\)", b8, b64, np.array([[0, 3], [2, 1]]), 0)
    bad(ValueError, r"= \[0, 2\) must end with a newline", b8, b64, a64(0, 2)[None], 0)
    bad(ValueError, r"s = 5 must be in \[0, 0\]", b8, b64, rows, 5)  # garbage before
    bad(ValueError, r"s = -1 must be in \[0, 0\]", b8, b64, rows, -1)
    bad(ValueError, r"s = 0 must be in \[0, -1\]", b8, b64, a64(0)[None], 0)
    bad(ValueError, "b64 has 1 words, more than the 0 whole words", b8, np.zeros(1, np.uint64),
        rows, 0)  # fmt: skip
    bad(ValueError, "state must be a one-element", b8, b64, rows, 0, 8, NO_STATE)
    b8, b64 = _b8(b"a\n" * 100)
    whole, state = a64(0, 200)[None], _state()
    # SIGSEGV before
    bad(ValueError, "bucket 0 has more lines than the 99 entries of items", b8, b64, whole, 0, 99,
        state)  # fmt: skip
    assert int(state[0]) == 7  # the stream did not move
    assert _order(b8, b64, whole, 0, 100) == 100  # items exactly big enough
    assert _order(b8, b64, np.zeros((0, 2), I64), 0, 0) == 0
    assert _order(b8, b64, np.array([[0, 0, 4], [4, 4, 6]]), 1, 3) == 3  # pieces of two rows


def test_gather_lines() -> None:
    bad = Attack(C.gather_lines)
    b8, b64 = _b8(b"ab\n" * 4)
    items = np.array([3 * k | 3 << 40 for k in range(4)], np.uint64)
    dst = np.zeros(12, np.uint8)

    def item(start: int, length: int) -> np.ndarray:
        return np.array([start | length << 40], np.uint64)

    # SIGSEGV before
    bad(ValueError, r"items\[0\] names a line of 3 bytes at 1000000000, not within b8's 12 bytes",
        b8, b64, item(10**9, 3), 0, 1, dst, 0, 12)  # fmt: skip
    two = np.concatenate([item(0, 3), item(9, 4)])
    bad(ValueError, r"items\[1\] names a line of 4 bytes at 9", b8, b64, two, 0, 2, dst, 0, 12)
    bad(ValueError, f"a line of at least {LONG} bytes at 0", b8, b64, item(0, LONG), 0, 1, dst, 0,
        12)  # fmt: skip
    bad(ValueError, r"limit = 1000000 must be in \[0, 12\]", b8, b64, items, 0, 4, dst, 0, 10**6)
    bad(ValueError, r"m = 100000 must be in \[0, 4\]", b8, b64, items, 0, 10**5, dst, 0, 12)
    bad(ValueError, r"i = 5 must be in \[0, 4\]", b8, b64, items, 5, 4, dst, 0, 12)
    bad(ValueError, r"i = -1", b8, b64, items, -1, 4, dst, 0, 12)
    bad(ValueError, r"at = 13 must be in \[0, 12\]", b8, b64, items, 0, 4, dst, 13, 12)
    bad(ValueError, r"at = -1", b8, b64, items, 0, 4, dst, -1, 12)
    bad(ValueError, "b64 has 2 words", b8, np.zeros(2, np.uint64), items, 0, 4, dst, 0, 12)
    bad(TypeError, "incompatible", b8, b64, items, 0, 4, dst.astype(np.int8), 0, 12)
    bad(TypeError, "incompatible", b8, b64, items.astype(I64), 0, 4, dst, 0, 12)
    assert (dst == 0).all()
    assert C.gather_lines(b8, b64, items, 0, 4, dst, 0, 12) == (4, 12)  # dst exactly full
    assert dst.tobytes() == b"ab\n" * 4
    assert C.gather_lines(b8, b64, items, 1, 4, dst, 0, 5) == (2, 3)  # the next line is past limit
    assert C.gather_lines(b8, b64, items, 4, 4, dst[:0], 0, 0) == (4, 0)
    # a line of 16 MiB or more is measured here: one that ends at b8's last byte is copied
    big = np.full(LONG + 1, 97, np.uint8)
    big[-1] = 10
    words = big[: big.size & ~7].view(np.uint64)
    out = np.zeros(big.size, np.uint8)
    assert C.gather_lines(big, words, item(0, LONG), 0, 1, out, 0, out.size) == (1, big.size)
    big[-1] = 97  # no newline before b8 ends: refused, not read past
    bad(ValueError, "has no newline before b8 ends", big, words, item(0, LONG), 0, 1, out, 0,
        out.size)  # fmt: skip


def test_gather_records() -> None:
    bad = Attack(C.gather_records)
    src = np.arange(8, dtype=np.uint16)
    perm = np.array([3, 2, 1, 0], np.int32)
    dst = np.zeros(8, np.uint16)
    huge = np.array([10**9], np.int32)
    # SIGSEGV before
    bad(ValueError, r"perm\[0\] = 1000000000 must be in \[0, 8\)", src, 1, 0, huge, 0, 1, dst, 0,
        8)  # fmt: skip
    bad(ValueError, r"perm\[2\] = -1 must be in \[0, 4\)", src, 2, 0,
        np.array([0, 1, -1], np.int32), 0, 3, dst, 0, 8)  # fmt: skip
    bad(ValueError, r"perm\[0\] = 3 must be in \[0, 3\)", src, 2, 2, perm, 0, 4, dst, 0, 8)
    # SIGSEGV before
    bad(ValueError, r"limit = 1000000 must be in \[0, 8\]", src, 1, 0, perm, 0, 4, dst, 0, 10**6)
    bad(ValueError, r"m = 5 must be in \[0, 4\]", src, 1, 0, perm, 0, 5, dst, 0, 8)
    bad(ValueError, r"i = 5 must be in \[0, 4\]", src, 1, 0, perm, 5, 4, dst, 0, 8)
    bad(ValueError, r"at = 9 must be in \[0, 8\]", src, 1, 0, perm, 0, 4, dst, 9, 8)
    bad(ValueError, r"lo = 9 must be in \[0, 8\]", src, 1, 9, perm, 0, 4, dst, 0, 8)
    bad(ValueError, "width = 0 must be >= 1", src, 0, 0, perm, 0, 4, dst, 0, 8)
    # int64 positions are not narrowed to int32 (2**40 + 3 was read as record 3 before)
    bad(TypeError, "incompatible", src, 1, 0, perm.astype(I64) + 2**40, 0, 4, dst, 0, 8)
    bad(TypeError, "incompatible", src.astype(np.uint64), 1, 0, perm, 0, 4, dst, 0, 8)
    assert (dst == 0).all()
    # records 3, 2, 1, 0 of two words: dst exactly full
    assert C.gather_records(src, 2, 0, perm, 0, 4, dst, 0, 8) == (4, 8)
    assert dst.tolist() == [6, 7, 4, 5, 2, 3, 0, 1]
    assert C.gather_records(src, 2, 0, perm, 1, 4, dst, 0, 3) == (2, 2)  # stops before limit
    # only the records this call can reach are checked: a bad one beyond waits for its own call
    far = np.array([0] * 20 + [10**9], np.int32)
    assert C.gather_records(src, 1, 0, far, 0, far.size, dst, 0, 8) == (8, 8)


# --------------------------------------------------------------------------- collate


def test_next_fit_count() -> None:
    bad = Attack(C.next_fit_count)
    bad(ValueError, "capacity must be >= 1, got 0", a64(1), 0, 0)
    bad(ValueError, "max_per_row must be >= 0", a64(1), 4, -1)
    bad(ValueError, "item 2 has 5 tokens; items must hold between 0 and capacity=4", a64(1, 2, 5),
        4, 0)  # fmt: skip
    bad(ValueError, f"item 0 has {TOP} tokens", a64(TOP), 4, 0)
    bad(ValueError, "item 1 has -1 tokens", a64(0, -1), 4, 0)
    assert C.next_fit_count(a64(), 1, 0) == 0
    assert C.next_fit_count(a64(4, 4, 0), 4, 0) == 2
    assert C.next_fit_count(a64(1, 1, 1), TOP, 2) == 2


def _packed(
    lengths: list[int], capacity: int = 4, rows: int = 2, flatten: bool = False, **change: Any
) -> tuple[list[np.ndarray], Any]:
    """C.packed_batch of 20 uint16 tokens, item k from token 2k, into outputs of the right sizes
    (``out={k: array}`` replaces output k); returns the outputs and the result."""
    tokens = change.pop("tokens", np.arange(20, dtype=np.uint16))
    starts = change.pop("starts", a64(*[2 * k for k in range(len(lengths))]))
    total = int(sum(lengths)) if flatten else rows * capacity
    segments = len(lengths) + (0 if flatten else rows)
    if not 0 <= total <= 1000:  # the call is refused before it looks at the outputs
        total = segments = 0
    out: list[np.ndarray] = [np.full(total, 7, I64), np.full(total, 7, I64),
                             np.full(total, 7, I64), np.full(total, 7, np.int32),
                             np.full(segments + 1, 7, np.int32)]  # fmt: skip
    for k, v in change.pop("out", {}).items():
        out[k] = v
    args = dict(max_per_row=0, pad=0, ignore=-100, position_start=0)
    args.update(change)
    got = C.packed_batch(
        tokens, starts, a64(*lengths), capacity, args["max_per_row"], rows, flatten, args["pad"],
        args["ignore"], args["position_start"], *out,
    )  # fmt: skip
    return out, got


def test_packed_batch() -> None:
    bad = Attack(_packed, "packed_batch")  # C.packed_batch through _packed
    narrow = {0: np.zeros(8, np.int32), 1: np.zeros(8, np.int32)}
    bad(ValueError, r"item 1: lengths\[1\] must be in \[0, capacity=4\], got 5", [1, 5])
    bad(ValueError, "the batch needs 2 rows of capacity=4, more than rows=1", [3, 3], 4, 1)
    bad(ValueError, "capacity must be >= 1, got 0", [], 0)
    bad(ValueError, "rows must be >= 0, got -1", [], 4, -1)
    bad(ValueError, "max_per_row must be >= 0", [1], max_per_row=-2)
    bad(ValueError, r"starts\[0\] must be >= 0, got -1", [1], starts=a64(-1))
    bad(ValueError, rf"starts \+ lengths = {TOP} \+ 1 must be <= the 20 tokens", [1],
        starts=a64(TOP))  # fmt: skip
    bad(ValueError, "starts and lengths must have the same size, got 2 and 1", [1],
        starts=a64(0, 0))  # fmt: skip
    bad(ValueError, "position_start must be in", [1], position_start=TOP)
    bad(ValueError, "position_start must be in", [1], position_start=-1)
    bad(ValueError, rf"rows \* capacity exceeds int64: rows={TOP}", [], 4, TOP)
    bad(ValueError, "cu must have at least 4 entries, got 1", [1], out={4: np.zeros(1, np.int32)})
    bad(ValueError, "ids must have 8 entries, got 3", [1], out={0: np.zeros(3, I64)})
    bad(ValueError, "seq_idx must have 8 entries, got 9", [1], out={3: np.zeros(9, np.int32)})
    bad(TypeError, "packed_batch: ids must be an int64 or int32 array, got int16", [1],
        out={0: np.zeros(8, np.int16), 1: np.zeros(8, np.int16)})  # fmt: skip
    bad(TypeError, "labels must have the dtype of ids", [1], out={1: np.zeros(8, np.int32)})
    bad(TypeError, "packed_batch: tokens must be an array of", [1], tokens=np.zeros(20))
    bad(ValueError, "pad and ignore_index must fit the int32 output", [1], pad=2**40, out=narrow)
    bad(ValueError, "item 0 holds a token outside int32's range", [1],
        tokens=np.full(20, 2**40, I64), out=narrow)  # fmt: skip
    ro = np.zeros(8, I64)
    ro.flags.writeable = False
    bad(TypeError, "incompatible", [1], out={2: ro})
    # valid edges: items exactly at the capacity, an empty batch, the flattened form
    out, got = _packed([4, 4])
    assert got == (2, 4) and out[0].tolist() == [0, 1, 2, 3, 2, 3, 4, 5]
    out, got = _packed([], 4, 0)
    assert got == (0, 0) and out[4].tolist() == [0]
    out, got = _packed([2, 0, 1], flatten=True)
    assert got == (3, 2) and out[4].tolist() == [0, 2, 2, 3]


def test_padded_batch() -> None:
    bad = Attack(C.padded_batch)
    tokens = np.arange(10, dtype=np.int32)
    ids, mask = np.full(8, 7, I64), np.full(8, 7, I64)
    none = a64()
    bad(ValueError, "rows must be >= 0, got -1", tokens, none, none, -1, 0, 0, ids[:0], mask[:0])
    bad(ValueError, "rows must hold the 2 items, got rows=1", tokens, a64(0, 1), a64(1, 1), 1, 4,
        0, ids[:4], mask[:4])  # fmt: skip
    bad(ValueError, "width must be >= 0, got -4", tokens, none, none, 2, -4, 0, ids, mask)
    bad(ValueError, r"lengths\[0\] must be in \[0, width=4\], got 5", tokens, a64(0), a64(5), 2, 4,
        0, ids, mask)  # fmt: skip
    bad(ValueError, "must be <= the 10 tokens", tokens, a64(8), a64(3), 2, 4, 0, ids, mask)
    bad(ValueError, r"starts\[0\] must be >= 0", tokens, a64(-1), a64(3), 2, 4, 0, ids, mask)
    bad(ValueError, "starts and lengths must have the same size", tokens, a64(0), none, 2, 4, 0,
        ids, mask)  # fmt: skip
    bad(ValueError, rf"rows \* width exceeds int64: rows={TOP}", tokens, none, none, TOP, 4, 0,
        ids, mask)  # fmt: skip
    bad(ValueError, r"ids and mask must have rows \* width = 8 entries, got 8 and 3", tokens,
        a64(0), a64(1), 2, 4, 0, ids, mask[:3])  # fmt: skip
    bad(TypeError, "padded_batch: ids must be an int64 or int32 array", tokens, a64(0), a64(1), 2,
        4, 0, ids.astype(np.float64), mask)  # fmt: skip
    bad(TypeError, "incompatible", tokens, a64(0), a64(1), 2, 4, 0, ids, mask.astype(np.int32))
    assert (ids == 7).all() and (mask == 7).all()
    C.padded_batch(tokens, a64(6), a64(4), 2, 4, -1, ids, mask)  # an item exactly at the width
    assert ids.tolist() == [6, 7, 8, 9, -1, -1, -1, -1]
    assert mask.tolist() == [1, 1, 1, 1, 0, 0, 0, 0]
    C.padded_batch(tokens, none, none, 0, 4, 0, ids[:0], mask[:0])


# --------------------------------------------------------------------------- ingest


def test_eos_offsets() -> None:
    bad = Attack(C.eos_offsets)
    tokens = np.array([5, 0, 5, 0, 5], np.uint8)
    bad(ValueError, "threads must be >= 1, got 0", tokens, 0, 0)
    bad(ValueError, "threads must be >= 1, got -3", tokens, 0, -3)
    bad(ValueError, r"eos must be a token of the tokens' dtype uint8, in \[0, 255\], got 256",
        tokens, 256, 1)  # fmt: skip
    bad(ValueError, "got -1", tokens, -1, 1)
    bad(TypeError, "eos_offsets: tokens must be an array of .* got float64", np.zeros(5), 0, 1)
    assert C.eos_offsets(tokens, 0, 1).tolist() == [0, 2, 4, 5]
    assert C.eos_offsets(tokens, 0, TOP).tolist() == [0, 2, 4, 5]  # threads are capped
    assert C.eos_offsets(tokens[:0], 0, 1).tolist() == [0]
    assert C.eos_offsets(a64(TOP), TOP, 1).tolist() == [0, 1]


def test_gather_tokens() -> None:
    bad = Attack(C.gather_tokens)
    tokens = np.arange(10, dtype=np.uint32)
    out = np.full(4, 7, I64)
    zero, one = a64(0), a64(1)
    bad(ValueError, r"item 0: dest\[0\] \+ lengths\[0\] = 5 \+ 3 must be <= out's 4 entries",
        tokens, zero, a64(3), a64(5), out, 0)  # fmt: skip
    bad(ValueError, r"starts\[0\] \+ lengths\[0\] = 8 \+ 3 must be <= the 10", tokens, a64(8),
        a64(3), zero, out, 0)  # fmt: skip
    bad(ValueError, rf"starts\[0\] \+ lengths\[0\] = {TOP} \+ 1", tokens, a64(TOP), one, zero, out,
        0)  # fmt: skip
    bad(ValueError, r"lengths\[0\] must be >= 0, got -1", tokens, zero, a64(-1), zero, out, 0)
    bad(ValueError, r"dest\[1\] = 0 must be >= the end of item 0, 2", tokens, a64(0, 0),
        a64(2, 1), a64(0, 0), out, 0)  # fmt: skip
    bad(ValueError, "starts, lengths and dest must have the same size, got 1, 2 and 1", tokens,
        zero, a64(1, 1), zero, out, 0)  # fmt: skip
    bad(TypeError, "out must be an int64 or int32 array, got uint16", tokens, zero, one, zero,
        out.astype(np.uint16), 0)  # fmt: skip
    bad(ValueError, "pad must fit out's dtype int32", tokens, zero, one, zero,
        out.astype(np.int32), 2**31)  # fmt: skip
    bad(ValueError, "item 0 holds a token outside int32's range", np.array([2**32 - 1], np.uint32),
        zero, one, zero, out.astype(np.int32), 0)  # fmt: skip
    ro = out.copy()
    ro.flags.writeable = False
    bad(TypeError, "incompatible", tokens, zero, one, zero, ro, 0)
    assert (out == 7).all()
    C.gather_tokens(tokens, a64(6), a64(4), zero, out, -1)  # the item fills out exactly
    assert out.tolist() == [6, 7, 8, 9]
    C.gather_tokens(tokens, a64(), a64(), a64(), out, -1)
    assert out.tolist() == [-1] * 4
    C.gather_tokens(tokens, a64(), a64(), a64(), out[:0], 0)


def test_segment_positions() -> None:
    bad = Attack(C.segment_positions)
    out = np.full(3, 7, I64)
    bad(ValueError, r"out must have sum\(lengths\) = 3 entries, got 1", a64(3), out[:1], 0)
    bad(ValueError, r"lengths\[1\] must be >= 0, got -1", a64(1, -1), out, 0)
    bad(ValueError, "the lengths' sum exceeds int64", a64(TOP, 1), out, 0)
    bad(ValueError, rf"start \+ the longest length - 1 = {TOP} \+ 2 exceeds int64", a64(3), out,
        TOP)  # fmt: skip
    bad(TypeError, "incompatible", a64(3), out.astype(np.int32), 0)
    assert (out == 7).all()
    C.segment_positions(a64(3), out, TOP - 2)  # the last position is int64's largest
    assert out.tolist() == [TOP - 2, TOP - 1, TOP]
    C.segment_positions(np.array([1, 0, 2], np.uint16), out, -(2**63))
    assert out.tolist() == [-(2**63), -(2**63), -(2**63) + 1]
    C.segment_positions(a64(), out[:0], 5)
