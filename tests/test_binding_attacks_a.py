"""Every compiled binding of the base, budget, cost, exact, buckets, shapes, streams and windows
families, called straight from Python with arguments that break its rules: each is refused
with a ValueError, TypeError or IndexError naming the kernel and what broke, and the edge cases
that keep the rules (empty arrays, an item exactly at the budget) still work.

``ATTACKED`` maps each binding to the test here that attacks it; a binding defined in one of
``FILES`` without an entry fails ``test_every_binding_of_these_files_is_attacked``. Before these
checks, many of the calls below wrote or read past an array (a segfault, a ``munmap_chunk():
invalid pointer`` abort, or heap memory handed back as a result) or never returned.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from padless import _core as C

I64 = np.int64
NO = np.zeros(0, dtype=I64)


def a(*values: int, dtype: type = I64) -> np.ndarray:
    return np.array(values, dtype=dtype)


# --------------------------------------------------------------------------- the table

FILES = ["base", "budget", "cost", "exact", "buckets", "shapes", "streams", "windows"]

ATTACKED: dict[str, str] = {
    # base.cpp
    "mul_exceeds": "test_mul_exceeds",
    "sat_add": "test_sat_add",
    "sat_mul": "test_sat_mul",
    "random_below": "test_random_below",
    "stream_key": "test_stream_key",
    "hash_ints": "test_hash_ints",
    "counting_order": "test_counting_order",
    "counting_order_named": "test_counting_order_named",
    "shuffle_runs": "test_shuffle_runs",
    "segment_max": "test_segment_max",
    "take_segments": "test_take_segments",
    "offset_list": "test_offset_list",
    "unnamed_segments": "test_unnamed_segments",
    "budget_ends_runs": "test_budget_ends_runs",
    # budget.cpp
    "gather_walk": "test_gather_walk",
    "walk_first_error": "test_walk_first_error",
    "narrow_into": "test_narrow_into",
    # cost.cpp
    "budget_cost_ends": "test_budget_cost_ends",
    "budget_field_cost_ends": "test_budget_field_cost_ends",
    "packed_batch_costs": "test_packed_batch_costs",
    "best_fit_rows_cost": "test_best_fit_rows_cost",
    # exact.cpp
    "exact_split": "test_exact_split",
    "capped_ends": "test_capped_ends",
    "least_padding_ends": "test_least_padding_ends",
    # buckets.cpp
    "optimal_cuts": "test_optimal_cuts",
    # shapes.cpp
    "shape_ends": "test_shape_ends",
    "pick_shapes": "test_pick_shapes",
    "static_cuts": "test_static_cuts",
    "shaped_cost": "test_shaped_cost_and_polish_ends",
    "polish_ends": "test_shaped_cost_and_polish_ends",
    "carry_cuts": "test_carry_cuts",
    # streams.cpp
    "budget_round": "test_budget_round",
    # windows.cpp
    "window_items": "test_window_items",
    "gather_rows": "test_gather_rows",
    "scan_lengths": "test_scan_lengths",
    "window_order": "test_window_order",
    "budget_ends_runs1": "test_budget_ends_runs1",
    "budget_window": "test_budget_window_and_count",
    "budget_window_count": "test_budget_window_and_count",
    "best_fit_visits": "test_best_fit_visits",
    "width_scatter": "test_width_scatter",
    "pack_window_count": "test_pack_window_count",
    "pack_rows": "test_pack_rows",
}


def _bindings_of(family: str) -> set[str]:
    src = Path(__file__).resolve().parent.parent / "csrc" / f"{family}.cpp"
    return set(re.findall(r'm\.def\("(\w+)"', src.read_text()))


def test_every_binding_of_these_files_is_attacked():
    defined = set().union(*(_bindings_of(f) for f in FILES))
    assert defined, "no m.def found: did csrc move?"
    missing = sorted(defined - set(ATTACKED))
    assert not missing, f"bindings with no attacking test in ATTACKED: {missing}"
    compiled = {n for n in dir(C) if not n.startswith("_")}
    assert set(ATTACKED) <= compiled, sorted(set(ATTACKED) - compiled)
    assert set(ATTACKED) <= defined, sorted(set(ATTACKED) - defined)
    for name, test in ATTACKED.items():
        assert callable(globals().get(test)), f"{name}: no test {test} in this file"


def refused(match: str, error: type[Exception] | tuple[type[Exception], ...] = ValueError):
    return pytest.raises(error, match=match)


# --------------------------------------------------------------------------- base.cpp


def test_mul_exceeds():
    with refused(r"mul_exceeds: count = -1 must be >= 0"):
        C.mul_exceeds(-1, 2, 5)
    with refused(r"mul_exceeds: size = -9223372036854775808 must be >= 0"):
        C.mul_exceeds(1, -(2**63), 5)
    with refused(r"mul_exceeds: limit = -1 must be >= 0"):
        C.mul_exceeds(1, 1, -1)
    with refused("incompatible function arguments", TypeError):
        C.mul_exceeds(2**63, 1, 1)
    assert C.mul_exceeds(2, 2**62, 2**63 - 1) and not C.mul_exceeds(0, 2**63 - 1, 0)


def test_sat_add():
    with refused(r"sat_add: b = -1 must be >= 0"):
        C.sat_add(1, -1)
    with refused("incompatible function arguments", TypeError):
        C.sat_add(1.5, 1)
    assert C.sat_add(2**63 - 1, 1) == 2**63 - 1 and C.sat_add(0, 0) == 0


def test_sat_mul():
    with refused(r"sat_mul: a = -2 must be >= 0"):
        C.sat_mul(-2, 3)
    assert C.sat_mul(2**62, 2) == 2**63 - 1 and C.sat_mul(0, 2**63 - 1) == 0


def test_random_below():
    for bound in (0, -5, 2**32, 2**40):  # 2**40 looped for ever, -5 too
        with refused(rf"random_below: bounds\[1\] = {bound} must be in \[1, 2\*\*32\)"):
            C.random_below(1, a(3, bound))
    with refused("incompatible function arguments", TypeError):
        C.random_below(-1, a(3))
    assert C.random_below(1, NO).size == 0
    out = C.random_below(2**64 - 1, a(1, 2**32 - 1))
    assert out[0] == 0 and 0 <= out[1] < 2**32 - 1


def test_stream_key():
    for bad in (-1, 2**64, 1.0, None):
        with refused("incompatible function arguments", TypeError):
            C.stream_key(bad, 0, 0)
    assert C.stream_key(2**64 - 1, 2**64 - 1, 0) == C.stream_key(2**64 - 1, 2**64 - 1, 0)


def test_hash_ints():
    for bad in ([1, 2], np.zeros((2, 2), I64), "12"):
        with refused("incompatible function arguments", TypeError):
            C.hash_ints(bad, 0)
    with refused("incompatible function arguments", TypeError):
        C.hash_ints(a(1), -1)
    assert C.hash_ints(NO, 0) != C.hash_ints(a(0), 0)
    assert C.hash_ints(a(2**63 - 1, -(2**63)), 2**64 - 1) >= 0


def test_counting_order():
    # a key at num_keys wrote past the run bounds (heap corruption); a negative one before them
    with refused(r"counting_order: keys\[2\] = 5 is outside \[0, num_keys = 5\)"):
        C.counting_order(a(0, 1, 5, 5, 5), 5)
    with refused(r"counting_order: keys\[1\] = -1 is outside \[0, num_keys = 4\)"):
        C.counting_order(a(0, -1, -100000), 4)
    with refused(r"keys\[0\] = 65535 is outside \[0, num_keys = 3\)"):
        C.counting_order(a(65535, dtype=np.uint16), 3)
    with refused(r"counting_order: num_keys = -1 must be in \[0, 2\*\*62\]"):
        C.counting_order(NO, -1)
    with refused(r"num_keys = 9223372036854775807 must be in \[0, 2\*\*62\]"):
        C.counting_order(NO, 2**63 - 1)  # num_keys + 1 wrapped
    with refused("incompatible function arguments", TypeError):
        C.counting_order(np.zeros((1, 1), I64), 1)
    order, starts = C.counting_order(NO, 0)
    assert order.tolist() == [] and starts.tolist() == [0]
    order, starts = C.counting_order(a(2, 0, 2, dtype=np.uint32), 3)  # the top key, num_keys - 1
    assert order.tolist() == [1, 0, 2] and starts.tolist() == [0, 1, 1, 3]


def test_counting_order_named():
    with refused("counting_order_named: names must have one entry per key"):
        C.counting_order_named(a(1, 0), 2, a(5))
    with refused(r"counting_order_named: keys\[0\] = 2 is outside \[0, num_keys = 2\)"):
        C.counting_order_named(a(2, 0), 2, a(7, 8))
    with refused(r"counting_order_named: num_keys = -3"):
        C.counting_order_named(NO, -3, NO)
    order, starts = C.counting_order_named(a(1, 0), 2, a(70, 80))
    assert order.tolist() == [80, 70] and starts.tolist() == [0, 1, 2]
    assert C.counting_order_named(NO, 0, NO)[1].tolist() == [0]


def test_shuffle_runs():
    values = np.arange(3, dtype=I64)
    with refused(r"shuffle_runs: starts\[1\] = 100000 is past the end of values \(3 entries\)"):
        C.shuffle_runs(values, a(0, 100000), 1)
    with refused(r"shuffle_runs: starts\[2\] = 1 is below starts\[1\] = 3"):
        C.shuffle_runs(values, a(0, 3, 1), 1)
    with refused(r"shuffle_runs: starts\[0\] = -2 is negative"):
        C.shuffle_runs(values, a(-2, 1), 1)
    with refused("incompatible function arguments", TypeError):  # written in place: no copy
        C.shuffle_runs(values.astype(np.float64), a(0, 3), 1)
    frozen = values.copy()
    frozen.setflags(write=False)
    with refused("incompatible function arguments", TypeError):
        C.shuffle_runs(frozen, a(0, 3), 1)
    assert values.tolist() == [0, 1, 2]  # nothing moved by a refused call
    C.shuffle_runs(values, NO, 1)
    C.shuffle_runs(values, a(0, 3), 1)
    C.shuffle_runs(values, a(3, 3), 1)  # a run that starts at the end: empty
    assert sorted(values.tolist()) == [0, 1, 2]


def test_segment_max():
    # the case: segment [2, 9) of a 3-value array handed back heap memory
    with refused(r"segment_max: offsets\[1\] = 9 is past the end of values \(3 entries\)"):
        C.segment_max(a(1, 2, 3), a(2, 9))
    with refused(r"segment_max: offsets\[2\] = 1 is below offsets\[1\] = 2"):
        C.segment_max(a(1, 2, 3), a(0, 2, 1))
    with refused(r"segment_max: offsets\[0\] = -1 is negative"):
        C.segment_max(np.ones(3), a(-1, 1))
    with refused(r"offsets\[1\] = 9223372036854775807 is past the end"):
        C.segment_max(a(1, dtype=np.uint16), a(0, 2**63 - 1))
    assert C.segment_max(a(1, 2, 3), NO).tolist() == []
    assert C.segment_max(a(1, 2, 3), a(0)).tolist() == []
    assert C.segment_max(a(1, 2, 3), a(0, 0, 3)).tolist() == [0, 3]
    assert C.segment_max(a(4, 2, 3), a(1, 3)).tolist() == [3]  # offsets need not start at 0
    assert C.segment_max(np.array([0.5, 2.5]), a(0, 2)).tolist() == [2.5]


def test_take_segments():
    values, offsets = a(5, 6, 7), a(0, 2, 3)
    with refused(r"take_segments: picked segment at position 1 is out of range", IndexError):
        C.take_segments(values, offsets, a(0, 2))
    with refused(r"take_segments: picked segment at position 0 is out of range", IndexError):
        C.take_segments(values, a(0, 9), a(0))
    with refused(r"take_segments: picked segment at position 0 is out of range", IndexError):
        C.take_segments(values, a(2, 1), a(0))  # decreasing bounds
    with refused(r"picked segment at position 0 is out of range", IndexError):
        C.take_segments(values, offsets, a(-1))
    assert C.take_segments(values, offsets, NO).tolist() == []
    assert C.take_segments(values, offsets, a(1, 0, 1)).tolist() == [7, 5, 6, 7]


def test_offset_list():
    with refused(r"offset_list: lo:hi out of range", IndexError):
        C.offset_list(a(1, 2), 0, 3, 0)
    with refused(r"offset_list: lo:hi out of range", IndexError):
        C.offset_list(a(1, 2), 2, 1, 0)
    with refused(r"offset_list: lo:hi out of range", IndexError):
        C.offset_list(a(1, 2), -1, 1, 0)
    with refused("offset_list: a value plus offset passes int64"):
        C.offset_list(a(-(2**63)), 0, 1, -1)
    assert C.offset_list(a(1, 2), 2, 2, 5) == []
    assert C.offset_list(a(2**62), 0, 1, 2**62 - 1) == [2**63 - 1]


def test_unnamed_segments():
    values, offsets = a(0, 3, 1), a(0, 2, 3)
    with refused(r"unnamed_segments: n = 0 must be in \[1, 2\*\*62\]"):
        C.unnamed_segments(values, offsets, a(0), 0)
    with refused(r"unnamed_segments: n = 9223372036854775807 must be in \[1, 2\*\*62\]"):
        C.unnamed_segments(values, offsets, a(0), 2**63 - 1)  # (n + 63) wrapped
    with refused("unnamed_segments: values must be non-negative"):
        C.unnamed_segments(a(-1), a(0, 1), a(0), 4)
    with refused(r"unnamed_segments: picked segment at position 0 is out of range", IndexError):
        C.unnamed_segments(values, a(0, 5), a(0), 4)
    assert C.unnamed_segments(values, offsets, NO, 3).tolist() == [0, 1, 2]
    assert C.unnamed_segments(values, offsets, a(0), 4).tolist() == [1, 2]


def test_budget_ends_runs():
    none = NO
    # an item over max_tokens wrote past the ends (munmap_chunk(): invalid pointer, a segfault)
    sizes = a(5000, 10, 5000, 5000, 9000)
    with refused(
        r"budget_ends_runs: values\[0\] = 5000 exceeds max_tokens = 4096 "
        r"\(every item must fit the budget\)"
    ):
        C.budget_ends_runs(sizes, none, 4096, 0, 1)
    with refused(r"values\[3\] = 9000 exceeds max_tokens = 4096"):
        C.budget_ends_runs(a(1, 1, 1, 9000, 1, 1), none, 4096, 0, 8)
    with refused(r"values\[1\] = 65535 exceeds max_tokens = 100"):
        C.budget_ends_runs(a(1, 65535, dtype=np.uint16), none, 100, 3, 1)
    # runs: starts reaching past values read past them; a run over the budget
    with refused(r"budget_ends_runs: values holds 1 sizes for 3 runs"):
        C.budget_ends_runs(a(3), a(0, 2, 4, 1000), 100, 0, 1)
    with refused(r"budget_ends_runs: values\[1\] = 500 exceeds max_tokens = 100"):
        C.budget_ends_runs(a(3, 500), a(0, 2, 4), 100, 0, 1)
    with refused(r"budget_ends_runs: starts\[2\] = 2 is below starts\[1\] = 10"):
        C.budget_ends_runs(a(3, 4, 5), a(0, 10, 2, 1), 100, 0, 1)
    with refused(r"budget_ends_runs: starts\[0\] = 1 must be 0"):
        C.budget_ends_runs(a(3), a(1, 4), 100, 0, 1)
    with refused(r"starts\[1\] = 9223372036854775807 is past the end of the positions"):
        C.budget_ends_runs(a(3), a(0, 2**63 - 1), 100, 0, 1)  # n + 1 wrapped
    with refused(r"budget_ends_runs: max_tokens = -1 must be >= 0 \(0: no limit\)"):
        C.budget_ends_runs(a(1), none, -1, 0, 1)
    with refused(r"budget_ends_runs: max_sentences = -5 must be >= 0"):
        C.budget_ends_runs(a(1), none, 10, -5, 1)
    with refused(r"budget_ends_runs: multiple = 0 must be >= 1"):
        C.budget_ends_runs(a(1), none, 10, 0, 0)
    # edges that keep the rules
    assert C.budget_ends_runs(none, none, 4096, 0, 1).tolist() == []
    assert C.budget_ends_runs(a(4096, 1), none, 4096, 0, 1).tolist() == [1, 2]  # exactly at it
    assert C.budget_ends_runs(none, a(0), 10, 0, 1).tolist() == []  # no run, no position
    # a run over the budget that holds no item is not an item over it
    assert C.budget_ends_runs(a(5, 500), a(0, 3, 3), 10, 0, 1).tolist() == [2, 3]
    assert C.budget_ends_runs(a(7, 7, 7), none, 0, 0, 1).tolist() == [3]  # no limit
    # the Python wrapper over it
    from padless._kernels import budget_ends

    with refused(r"values\[2\] = 11 exceeds max_tokens = 10"):
        budget_ends(a(1, 2, 11), 10, 0, 1)


# --------------------------------------------------------------------------- budget.cpp


def test_gather_walk():
    order, sizes = a(1, 0), a(7, 8)
    walk, gathered, seen = np.zeros(2, I64), np.zeros(2, I64), np.zeros(1, np.uint64)
    with refused("gather_walk: lo:hi or an output array out of range", IndexError):
        C.gather_walk(order, sizes, 0, 3, walk, gathered, seen)
    with refused("gather_walk: lo:hi or an output array out of range", IndexError):
        C.gather_walk(order, sizes, 2, 1, walk, gathered, seen)
    with refused("gather_walk: lo:hi or an output array out of range", IndexError):
        C.gather_walk(order, sizes, 0, 2, walk[:1], gathered, seen)
    with refused("gather_walk: lo:hi or an output array out of range", IndexError):
        C.gather_walk(order, sizes, 0, 2, walk, gathered, np.zeros(0, np.uint64))
    with refused("incompatible function arguments", TypeError):  # outputs: no copies
        C.gather_walk(order, sizes, 0, 2, walk, gathered.astype(np.float64), seen)
    with refused("incompatible function arguments", TypeError):
        C.gather_walk(order, sizes, 0, 2, walk, gathered, seen.astype(np.int64))
    assert not C.gather_walk(a(0, 5), sizes, 0, 2, walk, gathered, seen)  # 5: no such item
    seen[:] = 0
    assert C.gather_walk(order, sizes, 0, 2, walk, gathered, seen)
    assert walk.tolist() == [1, 0] and gathered.tolist() == [8, 7]
    assert C.gather_walk(NO, NO, 0, 0, NO.copy(), NO.copy(), np.zeros(1, np.uint64))


def test_walk_first_error():
    with refused(r"walk_first_error: n_items = -1 must be in \[0, 2\*\*62\]"):
        C.walk_first_error(a(0), -1)
    with refused(r"walk_first_error: n_items = 9223372036854775807"):
        C.walk_first_error(a(0), 2**63 - 1)
    assert C.walk_first_error(NO, 0) == 0
    assert C.walk_first_error(a(0, 1, 0), 2) == -1 - 3 - 2  # position 2 repeats item 0
    assert C.walk_first_error(a(0, 2), 2) == -2  # position 1 out of range
    assert C.walk_first_error(a(-1, dtype=np.int32), 2) == -1


def test_narrow_into():
    out = np.zeros(2, np.uint16)
    with refused("narrow_into: lo:hi out of range", IndexError):
        C.narrow_into(a(1, 2), 0, 3, out)
    with refused("narrow_into: lo:hi out of range", IndexError):
        C.narrow_into(a(1, 2, 3), 0, 3, out)  # out shorter than hi
    with refused("narrow_into: lo:hi out of range", IndexError):
        C.narrow_into(a(1, 2), -1, 1, out)
    with refused("incompatible function arguments", TypeError):
        C.narrow_into(a(1, 2), 0, 2, out.astype(np.int64))
    assert C.narrow_into(a(1, 2), 1, 1, out) == (0, 0)
    assert C.narrow_into(a(-1, 2**40), 0, 2, out) == (-1 | 2**40, 2**40)


# --------------------------------------------------------------------------- cost.cpp


def test_budget_cost_ends():
    ones = np.ones(3)
    # items over either budget wrote past the ends (sysmalloc assertion, abort)
    with refused(r"budget_cost_ends: sizes\[1\] = 9000 exceeds max_tokens = 4096"):
        C.budget_cost_ends(a(5, 9000, 1), ones, 4096, 0, 1, 0.0)
    with refused(r"budget_cost_ends: item 2 costs more than max_cost = 5 on its own"):
        C.budget_cost_ends(a(1, 1, 1), np.array([1.0, 1.0, 10.0]), 0, 0, 1, 5.0)
    with refused(r"budget_cost_ends: units holds 2 entries, sizes 3"):
        C.budget_cost_ends(a(1, 1, 1), np.ones(2), 0, 0, 1, 0.0)
    with refused(r"budget_cost_ends: units holds 4 entries, sizes 3"):
        C.budget_cost_ends(a(1, 1, 1), np.ones(4), 0, 0, 1, 0.0)
    with refused(r"budget_cost_ends: max_cost = nan must be >= 0"):
        C.budget_cost_ends(a(1), np.ones(1), 0, 0, 1, float("nan"))
    with refused(r"budget_cost_ends: max_cost = -1 must be >= 0"):
        C.budget_cost_ends(a(1), np.ones(1), 0, 0, 1, -1.0)
    with refused(r"budget_cost_ends: multiple = -8 must be >= 1"):
        C.budget_cost_ends(a(1), np.ones(1), 0, 0, -8, 0.0)
    with refused(r"budget_cost_ends: max_tokens = -4096"):
        C.budget_cost_ends(a(1), np.ones(1), -4096, 0, 1, 0.0)
    assert C.budget_cost_ends(NO, np.ones(0), 10, 0, 1, 1.0).tolist() == []
    # an item exactly at both budgets
    assert C.budget_cost_ends(a(10, 10), np.array([5.0, 5.0]), 10, 0, 1, 5.0).tolist() == [1, 2]
    assert C.budget_cost_ends(a(3, 3), np.array([-1.0, 2.0]), 0, 0, 1, 2.0).tolist() == [1, 2]


def test_budget_field_cost_ends():
    units = np.array([[1.0, 2.0], [3.0, 4.0]])
    with refused(r"budget_field_cost_ends: item 1 costs more than max_cost = 6"):
        C.budget_field_cost_ends(a(1, 1), units, 0, 0, 1, 6.0)  # 3 + 4 > 6, each field under
    with refused(r"budget_field_cost_ends: sizes\[0\] = 11 exceeds max_tokens = 10"):
        C.budget_field_cost_ends(a(11, 1), units, 10, 0, 1, 0.0)
    with refused(r"budget_field_cost_ends: units must be \(n, fields\) with fields >= 1"):
        C.budget_field_cost_ends(a(1, 1), np.ones((2, 0)), 0, 0, 1, 0.0)
    with refused(r"budget_field_cost_ends: units holds 3 entries, sizes 2"):
        C.budget_field_cost_ends(a(1, 1), np.ones((3, 2)), 0, 0, 1, 0.0)
    with refused(r"budget_field_cost_ends: max_sentences = -1"):
        C.budget_field_cost_ends(a(1, 1), units, 0, -1, 1, 0.0)
    with refused("incompatible function arguments", TypeError):
        C.budget_field_cost_ends(a(1, 1), np.ones(2), 0, 0, 1, 0.0)
    assert C.budget_field_cost_ends(NO, np.ones((0, 2)), 0, 0, 1, 1.0).tolist() == []
    assert C.budget_field_cost_ends(a(1, 1), units, 0, 0, 1, 7.0).tolist() == [1, 2]


def test_packed_batch_costs():
    extras, bounds = np.ones(3), a(0, 1, 3)
    with refused("packed_batch_costs: row_offsets is empty"):
        C.packed_batch_costs(extras, bounds, NO, 0.0)
    with refused(r"packed_batch_costs: row_offsets\[1\] = 100000 is past the end of the rows"):
        C.packed_batch_costs(extras, bounds, a(0, 100000), 0.0)
    with refused(r"packed_batch_costs: row_offsets\[1\] = 3 is past the end of the rows"):
        C.packed_batch_costs(extras, bounds, a(0, 3), 0.0)  # 2 rows
    with refused(r"packed_batch_costs: row_bounds\[2\] = 4 is past the end of extras"):
        C.packed_batch_costs(extras, a(0, 1, 4), a(0, 2), 0.0)
    with refused(r"packed_batch_costs: row_bounds\[2\] = 0 is below row_bounds\[1\] = 1"):
        C.packed_batch_costs(extras, a(0, 1, 0), a(0, 2), 0.0)
    with refused(r"packed_batch_costs: row_offsets\[0\] = -1 is negative"):
        C.packed_batch_costs(extras, bounds, a(-1, 1), 0.0)
    assert C.packed_batch_costs(extras, bounds, a(0), 0.0).tolist() == []
    assert C.packed_batch_costs(np.ones(0), NO, a(0, 0), 1.0).tolist() == [0.0]
    assert C.packed_batch_costs(extras, bounds, a(0, 2), 1.0).tolist() == [5.0]


def test_best_fit_rows_cost():
    sizes, extras = a(3, 2), np.array([2.0, 1.0])
    for capacity in (0, -1):  # -1 never returned
        with refused(rf"best_fit_rows_cost: capacity = {capacity} must be in \[1, 2\*\*62\]"):
            C.best_fit_rows_cost(sizes, extras, capacity, 0, 0.0, 10.0)
    with refused(r"best_fit_rows_cost: sizes\[0\] = 9 is outside \[0, capacity = 4\]", IndexError):
        C.best_fit_rows_cost(a(9, 1), extras, 4, 0, 0.0, 10.0)
    with refused(r"best_fit_rows_cost: extras holds 1 entries, sizes 2"):
        C.best_fit_rows_cost(sizes, np.ones(1), 4, 0, 0.0, 10.0)
    with refused(r"best_fit_rows_cost: max_per_row = -1 must be >= 0"):
        C.best_fit_rows_cost(sizes, extras, 4, -1, 0.0, 10.0)
    row_of, rows = C.best_fit_rows_cost(NO, np.ones(0), 4, 0, 0.0, 10.0)
    assert row_of.tolist() == [] and rows == 0
    row_of, rows = C.best_fit_rows_cost(a(4, 2, 2), np.ones(3), 4, 0, 0.0, 10.0)  # at capacity
    assert row_of.tolist() == [0, 1, 1] and rows == 2


# --------------------------------------------------------------------------- exact.cpp


def test_exact_split():
    def order() -> np.ndarray:
        return np.arange(4, dtype=I64)

    sizes = a(2, 2)
    with refused(r"exact_split: starts\[2\] = 1 is below starts\[1\] = 4"):  # was a segfault
        C.exact_split(order(), a(0, 4, 1), sizes, 0)
    with refused(r"exact_split: starts is empty"):
        C.exact_split(order(), NO, NO, 0)
    with refused(r"exact_split: starts\[0\] = 1 must be 0"):
        C.exact_split(order(), a(1, 2, 4), sizes, 0)
    with refused(r"exact_split: starts\[2\] = 3 must be the size of order \(4\)"):
        C.exact_split(order(), a(0, 2, 3), sizes, 0)  # item 3 in no run: garbage in rest
    with refused(r"exact_split: starts\[2\] = 5 is past the end of order"):
        C.exact_split(order(), a(0, 2, 5), sizes, 0)
    with refused(r"exact_split: run_size holds 1 sizes for 2 runs"):
        C.exact_split(order(), a(0, 2, 4), a(2), 0)
    with refused(r"exact_split: run_size\[1\] = -3 is negative"):
        C.exact_split(order(), a(0, 2, 4), a(2, -3), 0)
    with refused(r"exact_split: mode = 3 must be 0, 1 or 2"):
        C.exact_split(order(), a(0, 2, 4), sizes, 3)
    with refused("incompatible function arguments", TypeError):  # written in place
        C.exact_split(order().astype(np.int32), a(0, 2, 4), sizes, 0)
    kept, ends, rest, runs = C.exact_split(NO.copy(), a(0), NO, 1)
    assert kept == 0 and ends.size == rest.size == runs.size == 0
    kept, ends, rest, runs = C.exact_split(order(), a(0, 3, 4), a(2, 0), 1)
    assert (kept, ends.tolist(), rest.tolist(), runs.tolist()) == (2, [2], [2, 3], [0, 1])


def test_capped_ends():
    with refused(r"capped_ends: caps holds 2 entries, sizes 3"):
        C.capped_ends(a(1, 2, 3), a(1, 1))
    with refused(r"capped_ends: caps holds 4 entries, sizes 3"):
        C.capped_ends(a(1, 2, 3), a(1, 1, 1, 1))
    with refused("incompatible function arguments", TypeError):
        C.capped_ends(a(1, 2), a(1, 1, dtype=np.float64).reshape(1, 2))
    assert C.capped_ends(NO, NO).tolist() == []
    assert C.capped_ends(a(1, 1, 2, 2), a(2, 2, 2, 2)).tolist() == [2, 4]


def test_least_padding_ends():
    with refused(r"least_padding_ends: caps\[0\] = -5 must be >= 1"):
        C.least_padding_ends(a(1, 2, 3), a(-5, -5, -5))
    with refused(r"least_padding_ends: sizes\[1\] = -9223372036854775808 is negative"):
        C.least_padding_ends(a(0, -(2**63)), a(1, 1))
    with refused(r"least_padding_ends: sizes\[2\] = 1 is below sizes\[1\] = 3"):
        C.least_padding_ends(a(2, 3, 1), a(1, 1, 1))
    with refused(r"least_padding_ends: caps holds 1 entries, sizes 2"):
        C.least_padding_ends(a(1, 2), a(1))
    assert C.least_padding_ends(NO, NO).tolist() == []
    assert C.least_padding_ends(a(1, 1, 2), a(3, 3, 2)).tolist() == [2, 3]  # no padding


# --------------------------------------------------------------------------- buckets.cpp


def test_optimal_cuts():
    counts = a(1, 1, 1)
    with refused(r"optimal_cuts: values\[1\] = 1 is not above values\[0\] = 5"):
        C.optimal_cuts(a(5, 1, 2**62), counts, 3)
    with refused(r"optimal_cuts: values\[1\] = 2 is not above values\[0\] = 2"):
        C.optimal_cuts(a(2, 2, 3), counts, 2)
    with refused(r"optimal_cuts: values\[0\] = -4 is negative"):
        C.optimal_cuts(a(-4, 1, 2), counts, 2)
    with refused(r"optimal_cuts: counts\[2\] = -1 is negative"):
        C.optimal_cuts(a(1, 2, 3), a(1, 1, -1), 2)
    with refused("optimal_cuts: counts must have one entry per value"):
        C.optimal_cuts(a(1, 2, 3), a(1, 1), 2)
    with refused(r"optimal_cuts: k = 0 must be >= 1"):
        C.optimal_cuts(a(1, 2, 3), counts, 0)
    with refused(r"counts must add up to less than 2\*\*63"):
        C.optimal_cuts(a(1, 2), a(2**62, 2**62), 2)
    assert C.optimal_cuts(NO, NO, 3).tolist() == []
    assert C.optimal_cuts(a(1, 2, 3), counts, 1).tolist() == []
    assert C.optimal_cuts(a(1, 9), a(5, 5), 99).tolist() == [0]


# --------------------------------------------------------------------------- shapes.cpp


def test_shape_ends():
    tiers, caps = a(4, 8), a(4, 2)
    with refused(r"shape_ends: sizes\[1\] = 100 exceeds the longest tier, tiers\[1\] = 8"):
        C.shape_ends(a(1, 100, 5), tiers, caps)  # the tier scan ran past the last tier
    with refused(r"shape_ends: tiers\[1\] = 4 is not above tiers\[0\] = 8"):
        C.shape_ends(a(1), a(8, 4), caps)
    with refused(r"shape_ends: caps holds 1 entries, tiers 2"):
        C.shape_ends(a(1), tiers, a(4))
    with refused(r"shape_ends: caps\[1\] = 9 is above caps\[0\] = 4"):
        C.shape_ends(a(1), tiers, a(4, 9))
    with refused(r"shape_ends: caps\[0\] = 0 must be >= 1"):
        C.shape_ends(a(1), tiers, a(0, 0))
    with refused("shape_ends: tiers is empty: no shape fits"):
        C.shape_ends(a(1), NO, NO)
    ends, longest = C.shape_ends(NO, NO, NO)
    assert ends.tolist() == longest.tolist() == []
    ends, longest = C.shape_ends(a(8, 8, 8, dtype=np.uint16), tiers, caps)  # at the top tier
    assert ends.tolist() == [2, 3] and longest.tolist() == [8, 8]


def test_pick_shapes():
    rows, lengths = a(4, 2), a(4, 8)
    with refused(r"pick_shapes: longest holds 1 entries, counts 3"):
        C.pick_shapes(a(1, 1, 1), a(1), rows, lengths, True)
    with refused(r"pick_shapes: lengths holds 1 entries, rows 2"):
        C.pick_shapes(a(1), a(1), rows, a(4), True)
    with refused(r"pick_shapes: lengths\[1\] = 2 is below lengths\[0\] = 4"):
        C.pick_shapes(a(1), a(1), rows, a(4, 2), True)
    with refused(r"pick_shapes: rows\[0\] = 0 must be >= 1"):
        C.pick_shapes(a(1), a(1), a(0, 2), lengths, True)
    with refused(r"pick_shapes: shape 0 \(rows 4611686018427387904, length 4\) has more than"):
        C.pick_shapes(a(1), a(1), a(2**62, 1), lengths, True)
    assert C.pick_shapes(NO, NO, rows, lengths, True).tolist() == []
    assert C.pick_shapes(a(2, 3, 1), a(8, 1, 9), rows, lengths, True).tolist() == [1, 0, -1]


TABLE = (a(1, 2, 3), a(2, 1, 1), a(4, 2, 1))  # values, counts, rows


def test_static_cuts():
    values, counts, rows = TABLE
    with refused(r"static_cuts: rows\[1\] = 0 must be >= 1"):  # a division by zero before
        C.static_cuts(values, counts, a(4, 0, 1), 2)
    with refused(r"static_cuts: counts\[0\] = 0 must be >= 1"):
        C.static_cuts(values, a(0, 1, 1), rows, 2)
    with refused(r"static_cuts: values\[2\] = 2 is not above values\[1\] = 2"):
        C.static_cuts(a(1, 2, 2), counts, rows, 2)
    with refused(r"static_cuts: rows holds 2 entries, values 3"):
        C.static_cuts(values, counts, a(4, 2), 2)
    with refused(r"static_cuts: .* pass 2\*\*60 slots \(costs would overflow\)"):
        C.static_cuts(values, a(2**62, 2**62, 1), rows, 3)
    with refused(r"static_cuts: k = 0 must be >= 1"):
        C.static_cuts(values, counts, rows, 0)
    assert C.static_cuts(NO, NO, NO, 2).tolist() == []
    assert C.static_cuts(values, counts, rows, 1).tolist() == []
    assert C.static_cuts(values, counts, rows, 3).tolist() == [0]


def test_shaped_cost_and_polish_ends():
    values, counts, rows = TABLE
    for kernel in ("shaped_cost", "polish_ends"):
        fn = getattr(C, kernel)
        with refused(rf"{kernel}: ends\[0\] = 100000 is outside \[0, 3\)"):  # read past rows
            fn(values, counts, rows, a(100000))
        with refused(rf"{kernel}: ends\[0\] = -1 is outside \[0, 3\)"):
            fn(values, counts, rows, a(-1, 2))
        with refused(rf"{kernel}: ends\[1\] = 1 must be n - 1 = 2"):
            fn(values, counts, rows, a(0, 1))
        with refused(rf"{kernel}: ends\[1\] = 0 is not above ends\[0\] = 2"):
            fn(values, counts, rows, a(2, 0, 2))
        with refused(rf"{kernel}: ends is empty \(the last must be n - 1\)"):
            fn(values, counts, rows, NO)
        with refused(rf"{kernel}: rows\[2\] = 0 must be >= 1"):
            fn(values, counts, a(4, 2, 0), a(2))
        with refused(rf"{kernel}: values\[1\] = -2 is negative"):
            fn(a(1, -2, 3), counts, rows, a(2))
    assert C.shaped_cost(NO, NO, NO, NO) == 0
    one = C.shaped_cost(values, counts, rows, a(2))  # one shape: (1 row, length 3)
    assert one == 4 * 3
    ends, cost = C.polish_ends(values, counts, rows, a(0, 2))
    assert cost <= C.shaped_cost(values, counts, rows, a(0, 2)) and ends[-1] == 2


def test_carry_cuts():
    values, counts, rows = TABLE
    with refused("carry_cuts: values is empty"):
        C.carry_cuts(NO, NO, NO, 2, 100)
    with refused(r"carry_cuts: bound = -1 must be in \[0, 2\*\*62\]"):
        C.carry_cuts(values, counts, rows, 2, -1)
    with refused(r"carry_cuts: bound = 9223372036854775807"):
        C.carry_cuts(values, counts, rows, 2, 2**63 - 1)
    with refused(r"carry_cuts: k = -1 must be >= 1"):
        C.carry_cuts(values, counts, rows, -1, 100)
    with refused(r"carry_cuts: rows\[0\] = -4 must be >= 1"):
        C.carry_cuts(values, counts, a(-4, 2, 1), 2, 100)
    assert C.carry_cuts(a(5), a(3), a(2), 4, 100).tolist() == [0]
    best = C.carry_cuts(values, counts, rows, 3, 2**62)
    assert best[-1] == 2
    # a bound below every plan's cost prunes the search, never the answer's validity
    assert C.carry_cuts(values, counts, rows, 3, 0)[-1] == 2


# --------------------------------------------------------------------------- streams.cpp


def test_budget_round():
    late = np.zeros(2, bool)
    args = (10, 0, 1, False, 0.0)  # max_tokens, max_sentences, multiple, final, target
    with refused(r"budget_round: keys must be in \[0, span\)"):
        C.budget_round(a(0, 2), 2, a(3, 4), late, *args)
    with refused(r"budget_round: keys must be in \[0, span\)"):
        C.budget_round(a(0, -1), 2, a(3, 4), late, *args)
    with refused("budget_round: sizes and late need one entry per key", IndexError):
        C.budget_round(a(0, 1), 2, a(3), late, *args)
    with refused("budget_round: sizes and late need one entry per key", IndexError):
        C.budget_round(a(0, 1), 2, a(3, 4), np.zeros(3, bool), *args)
    with refused(r"budget_round: span = -1 must be in \[0, 2\*\*62\]"):
        C.budget_round(NO, -1, NO, np.zeros(0, bool), *args)
    with refused(r"budget_round: max_tokens = -10"):
        C.budget_round(a(0, 1), 2, a(3, 4), late, -10, 0, 1, False, 0.0)
    with refused(r"budget_round: multiple = 0 must be >= 1"):
        C.budget_round(a(0, 1), 2, a(3, 4), late, 10, 0, 0, False, 0.0)
    with refused(r"budget_round: target = nan must be >= 0"):
        C.budget_round(a(0, 1), 2, a(3, 4), late, 10, 0, 1, False, float("nan"))
    out = C.budget_round(NO, 0, NO, np.zeros(0, bool), *args)
    assert all(x.size == 0 for x in out)
    order, ends, real, padded, leave = C.budget_round(a(0, 1), 2, a(10, 10), late, *args)
    assert ends.tolist() == [1, 2] and real.tolist() == padded.tolist() == [10, 10]


# --------------------------------------------------------------------------- windows.cpp


def test_window_items():
    with refused(r"window_items: blocks\[1\] = 1000000 must be in \[0, 2\] \(n = 10 items"):
        C.window_items(10, 4, 0, a(0, 1000000))  # read and wrote past the items
    with refused(r"window_items: blocks\[0\] = -1 must be in \[0, 2\]"):
        C.window_items(10, 4, 0, a(-1))
    with refused(r"window_items: block = 0 must be in \[1, 2\*\*61\]"):
        C.window_items(10, 0, 0, a(0))
    with refused(r"window_items: rotation = 10 must be in \[0, n = 10\)"):
        C.window_items(10, 4, 10, a(0))
    with refused(r"window_items: rotation = 3 must be in \[0, n = 0\)"):
        C.window_items(0, 4, 3, a(0))
    with refused(r"window_items: n = -1 must be in \[0, 2\*\*62\]"):
        C.window_items(-1, 4, 0, NO)
    with refused("window_items: the blocks hold more than 2\\*\\*62 positions"):
        C.window_items(2**62, 2**61, 0, a(0, 0, 0))
    assert C.window_items(0, 1, 0, a(0)).tolist() == []  # a block that starts at n is empty
    assert C.window_items(10, 4, 9, a(2, 0)).tolist() == [7, 8, 9, 0, 1, 2]


def test_gather_rows():
    src = np.arange(6, dtype=I64).reshape(3, 2)
    with refused(r"gather_rows: items\[1\] = 10000000 is outside \[0, 3\) \(the rows of src\)"):
        C.gather_rows(src, a(0, 10**7))  # a segfault
    with refused(r"gather_rows: items\[0\] = -1 is outside \[0, 3\)"):
        C.gather_rows(src, a(-1))
    with refused("incompatible function arguments", TypeError):
        C.gather_rows(src[:, 0], a(0))
    assert C.gather_rows(src, NO).shape == (0, 2)
    assert C.gather_rows(src[:, ::-1], a(2)).tolist() == [[5, 4]]  # any strides
    assert C.gather_rows(np.zeros((0, 2), I64), NO).shape == (0, 2)


def test_scan_lengths():
    with refused(r"scan_lengths: src has 3 rows of no field"):
        C.scan_lengths(np.zeros((3, 0), I64))  # read element 0 of an empty array
    with refused("incompatible function arguments", TypeError):
        C.scan_lengths(a(1, 2))
    assert C.scan_lengths(np.zeros((0, 2), np.int32)) == (0, 0, 0, -1, 0, -1)
    assert C.scan_lengths(np.zeros((0, 0), np.int32)) == (0, 0, 0, -1, 0, -1)
    assert C.scan_lengths(a(3, -1, 2**63 - 1).reshape(3, 1))[:2] == (-1, 2**63 - 1)


def test_window_order():
    sizes = a(3, 1, 2, 0)
    with refused(r"window_order: sizes\[0\] = 3 is outside \[0, span = 3\)"):
        C.window_order(sizes, 4, 2, 0, a(0, 1), 3, 1)
    with refused(r"window_order: sizes\[1\] = -1 is outside \[0, span = 4\)"):
        C.window_order(a(3, -1, 2, 0), 4, 2, 0, a(0, 1), 4, 1)
    with refused(r"window_order: sizes holds 4 lengths for n = 5 items"):
        C.window_order(sizes, 5, 2, 0, a(0), 4, 1)
    with refused(r"window_order: span = -4 must be in \[0, 2\*\*62\]"):
        C.window_order(sizes, 4, 2, 0, a(0), -4, 1)
    with refused(r"window_order: blocks\[0\] = 3 must be in \[0, 2\]"):
        C.window_order(sizes, 4, 2, 0, a(3), 4, 1)
    order, starts = C.window_order(NO, 0, 1, 0, NO, 0, 1)
    assert order.tolist() == [] and starts.tolist() == [0]
    order, starts = C.window_order(sizes, 4, 2, 1, a(0), 4, 7)  # items 1, 2
    assert order.tolist() == [1, 2] and starts.tolist() == [0, 0, 1, 2, 2]


def test_budget_ends_runs1():
    starts = a(0, 2, 5)
    with refused(r"budget_ends_runs1: starts holds 2 bounds for runs = 1000"):
        C.budget_ends_runs1(a(0, 5), 1000, 10, 0)  # a segfault
    with refused(r"budget_ends_runs1: starts holds 3 bounds for runs = -1"):
        C.budget_ends_runs1(starts, -1, 10, 0)
    # an item of size 1 under max_tokens 0 < 1 < 2... size 2 > max_tokens 1: a loop without end
    with refused(r"budget_ends_runs1: an item of size 2 exceeds max_tokens = 1"):
        C.budget_ends_runs1(a(0, 0, 1, 3), 3, 1, 0)
    with refused(r"budget_ends_runs1: starts\[2\] = 1 is below starts\[1\] = 2"):
        C.budget_ends_runs1(a(0, 2, 1), 2, 10, 0)
    with refused(r"budget_ends_runs1: starts\[0\] = 1 must be 0"):
        C.budget_ends_runs1(a(1, 2), 1, 10, 0)
    with refused(r"budget_ends_runs1: max_sentences = -1"):
        C.budget_ends_runs1(starts, 2, 10, -1)
    assert C.budget_ends_runs1(a(0), 0, 10, 0).tolist() == []
    assert C.budget_ends_runs1(a(0, 0, 3, 9), 2, 1, 0).tolist() == [1, 2, 3]  # 1 exactly at it
    assert C.budget_ends_runs1(a(0, 0, 3, 3, 99), 2, 2, 0).tolist() == [2, 3]  # more bounds


def test_budget_window_and_count():
    sizes = a(1, 5, 2, 3)
    blocks = a(0, 1)
    for kernel in ("budget_window", "budget_window_count"):
        fn = getattr(C, kernel)
        key = (1,) if kernel == "budget_window" else ()

        def call(*args, fn=fn, key=key):
            sizes, n, block, rotation, blocks, span, *rest = args
            return fn(sizes, n, block, rotation, blocks, span, *key, *rest)

        # limit admits size 5, max_tokens 4 does not: the batch-at-a-time walk never ended
        with refused(rf"{kernel}: an item of size 5 exceeds max_tokens = 4"):
            call(sizes, 4, 2, 0, blocks, 6, 5, 4, 0, 1)
        with refused(rf"{kernel}: an item of size 5 exceeds max_tokens = 4"):
            call(sizes, 4, 2, 0, blocks, 6, 5, 4, 0, 3)
        with refused(rf"{kernel}: sizes\[1\] = 5 is outside \[0, span = 4\)"):
            call(sizes, 4, 2, 0, blocks, 4, 3, 10, 0, 1)
        with refused(rf"{kernel}: limit = -2 must be in \[0, 2\*\*62\]"):
            call(sizes, 4, 2, 0, blocks, 6, -2, 10, 0, 1)
        with refused(rf"{kernel}: limit = 9223372036854775807"):
            call(sizes, 4, 2, 0, blocks, 6, 2**63 - 1, 10, 0, 1)  # limit + 1 wrapped
        with refused(rf"{kernel}: multiple = 0 must be >= 1"):
            call(sizes, 4, 2, 0, blocks, 6, 5, 10, 0, 0)
        with refused(rf"{kernel}: sizes holds 4 lengths for n = 8 items"):
            call(sizes, 8, 2, 0, blocks, 6, 5, 10, 0, 1)
    # items over the limit are left out: over max_tokens too, they are no fault
    order, kept, ends = C.budget_window(sizes, 4, 2, 0, blocks, 6, 1, 3, 4, 0, 1)
    assert kept == 3 and sorted(order[:kept].tolist()) == [0, 2, 3] and ends.tolist() == [2, 3]
    assert C.budget_window_count(sizes, 4, 2, 0, blocks, 6, 3, 4, 0, 1) == 2
    order, kept, ends = C.budget_window(NO, 0, 1, 0, NO, 1, 1, 0, 4, 0, 1)
    assert order.size == kept == ends.size == 0


def test_best_fit_visits():
    with refused("best_fit_visits: starts is empty"):
        C.best_fit_visits(NO, 4, 0)
    # three items of size 9 over capacity 4: a visit per step without end, past the room
    with refused(r"best_fit_visits: an item of size 9 exceeds capacity = 4"):
        C.best_fit_visits(a(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3), 4, 0)
    with refused(r"best_fit_visits: capacity = 0 must be in \[1, 2\*\*62\]"):
        C.best_fit_visits(a(0, 1), 0, 0)
    with refused(r"best_fit_visits: starts\[2\] = 1 is below starts\[1\] = 2"):
        C.best_fit_visits(a(0, 2, 1), 4, 0)
    with refused(r"best_fit_visits: max_per_row = -2 must be >= 0"):
        C.best_fit_visits(a(0, 2), 4, -2)
    with refused(r"best_fit_visits: starts\[1\] = 2305843009213693952 items: more than 2\*\*60"):
        C.best_fit_visits(a(0, 2**61), 4, 0)
    assert C.best_fit_visits(a(0), 4, 0).tolist() == []
    assert C.best_fit_visits(a(0, 0, 0, 0, 0, 2), 4, 0).tolist() == [0, 0, 1, 4, 1, 1, 1, 4]


def test_width_scatter():
    cursor, index = a(0, 1, 3), np.zeros(4, I64)
    with refused(r"width_scatter: low = -1 must be in \[0, runs = 3\]"):  # wrote before cursor
        C.width_scatter(a(-1), 0, -1, 3, cursor.copy(), index)
    with refused(r"width_scatter: a cursor passed the index's end \(or is negative\)"):
        C.width_scatter(a(0), 0, 0, 3, a(-5, 1, 3), index)  # wrote before the index
    with refused(r"width_scatter: a cursor passed the index's end"):
        C.width_scatter(a(2, 2), 0, 0, 3, cursor.copy(), index)
    with refused("width_scatter: cursor holds fewer than runs widths"):
        C.width_scatter(a(0), 0, 0, 5, cursor.copy(), index)
    with refused(r"width_scatter: first_id = 2147483647 and 2 widths name ids outside"):
        C.width_scatter(a(0, 0), 2**31 - 1, 0, 3, cursor.copy(), index.astype(np.int32))
    with refused(r"width_scatter: first_id = -1"):
        C.width_scatter(a(0), -1, 0, 3, cursor.copy(), index)
    with refused("incompatible function arguments", TypeError):
        C.width_scatter(a(0), 0, 0, 3, cursor.astype(np.int32), index)
    C.width_scatter(NO, 0, 0, 0, NO.copy(), NO.copy())
    c = cursor.copy()
    C.width_scatter(a(1, 2, 0, 9), 10, 0, 3, c, index)  # width 9 is left out
    assert index[:4].tolist() == [12, 10, 0, 11] and c.tolist() == [1, 2, 4]


def test_pack_window_count():
    sizes = a(3, 70, 5)
    with refused(r"pack_window_count: an item of size 70 exceeds capacity = 64"):
        C.pack_window_count(sizes, 3, 3, 0, a(0), 71, 64, 0)  # a loop without end before
    with refused(r"pack_window_count: rotation = 5 must be in \[0, n = 2\)"):
        C.pack_window_count(a(1, 2), 2, 2, 5, a(0), 4, 10, 0)
    with refused(r"pack_window_count: blocks\[0\] = 7 must be in \[0, 1\]"):
        C.pack_window_count(a(1, 2), 2, 2, 0, a(7), 4, 10, 0)
    with refused(r"pack_window_count: capacity = 0 must be in \[1, 2\*\*62\]"):
        C.pack_window_count(a(0, 0), 2, 2, 0, a(0), 4, 0, 0)
    with refused(r"pack_window_count: sizes\[1\] = 70 is outside \[0, span = 70\)"):
        C.pack_window_count(sizes, 3, 3, 0, a(0), 70, 64, 0)
    assert C.pack_window_count(NO, 0, 1, 0, a(0), 1, 4, 0) == 0
    assert C.pack_window_count(a(64, 64, 1), 3, 3, 0, a(0), 65, 64, 0) == 3  # at capacity


def _pack(sizes, row_order, names=None, **kw):
    args = dict(n=len(sizes), block=max(len(sizes), 1), rotation=0, blocks=a(0), span=8, key=1,
                capacity=8, max_per_row=0, rows_per_batch=1)  # fmt: skip
    args.update(kw)
    return C.pack_rows(
        sizes, args["n"], args["block"], args["rotation"], args["blocks"], args["span"],
        args["key"], args["capacity"], args["max_per_row"], args["rows_per_batch"], row_order,
        NO if names is None else names,
    )  # fmt: skip


def test_pack_rows():
    sizes = a(3, 5, 7, 1)
    with refused("pack_rows: every size must be at most capacity"):
        _pack(sizes, np.arange, capacity=6)
    with refused(r"pack_rows: capacity = 0 must be in \[1, 2\*\*62\]"):
        _pack(sizes, np.arange, capacity=0)
    with refused(r"pack_rows: sizes\[2\] = 7 is outside \[0, span = 6\)"):
        _pack(sizes, np.arange, span=6)
    with refused("pack_rows: names must be empty or one per size"):
        _pack(sizes, np.arange, names=a(1, 2))
    with refused(r"pack_rows: blocks\[0\] = 2 must be in \[0, 1\]"):
        _pack(sizes, np.arange, blocks=a(2))
    with refused("rows_per_batch must be positive"):
        _pack(sizes, np.arange, rows_per_batch=0)
    with refused("pack_rows: row_order must return a writable 1-D int64 array", TypeError):
        _pack(sizes, lambda k: list(range(k)))
    with refused("pack_rows: row_order must return a writable 1-D int64 array", TypeError):
        _pack(sizes, lambda k: np.arange(k).reshape(1, k))
    with refused("row_order must give one entry per row"):
        _pack(sizes, lambda k: np.arange(k + 1))
    with refused("row_order must give a permutation of the rows"):
        _pack(sizes, lambda k: np.zeros(k, I64))
    with refused("row_order must give a permutation of the rows"):
        _pack(sizes, lambda k: np.arange(k) + 5)
    with refused("division", ZeroDivisionError):  # the callable's own error comes through
        _pack(sizes, lambda k: 1 // 0)
    items, bounds, lens, offsets, real = _pack(NO, np.arange, blocks=a(0), span=1)
    assert items.size == lens.size == 0 and bounds.tolist() == offsets.tolist() == [0]
    items, bounds, lens, offsets, real = _pack(a(8, 8), np.arange, span=9)  # at capacity
    assert sorted(items.tolist()) == [0, 1] and lens.tolist() == [8, 8] and real == 16
    # an order drawn in another integer dtype is taken as its int64 copy
    assert _pack(sizes, lambda k: np.arange(k, dtype=np.int32))[4] == 16


def test_working_memory_sized_by_a_scalar_is_refused_up_front():
    """A key span, index count or row capacity whose working memory no process could have is a
    ValueError naming it, before anything is allocated (it was a MemoryError, or under
    overcommit a process killed when the pages were touched). Through the fuzzer: a tiny input
    with num_keys = 2**62 (counting_order), n = 2**31 (unnamed_segments under the worker's
    address-space limit), capacity = 2**62 (best_fit_rows_cost); under `make fuzz`, n_items,
    span and a run of 2**31 items (walk_first_error, budget_round, window_order,
    budget_ends_runs1)."""
    huge = 2**62
    need = r" = 4611686018427387904 needs \d+ bytes of working memory \([\d.]+ per unit\), more"
    with refused("counting_order: num_keys" + need):
        C.counting_order(a(0, 1), huge)
    with refused("counting_order_named: num_keys" + need):
        C.counting_order_named(a(0, 1), huge, a(0, 1))
    with refused("unnamed_segments: n" + need):
        C.unnamed_segments(NO, a(0), NO, huge)
    with refused("best_fit_rows_cost: capacity" + need):
        C.best_fit_rows_cost(a(3, 2), np.array([2.0, 1.0]), huge, 0, 0.0, 10.0)
    with refused("best_fit_visits: capacity" + need):
        C.best_fit_visits(a(0, 1), huge, 0)
    with refused("budget_round: span" + need):
        C.budget_round(a(0, 1), huge, a(3, 4), np.zeros(2, bool), 10, 0, 1, False, 0.0)
    with refused("window_order: span" + need):
        C.window_order(a(3, 1, 2, 0), 4, 2, 0, a(0, 1), huge, 1)
    with refused("walk_first_error: n_items" + need):
        C.walk_first_error(a(0), huge)
    with refused(r"budget_ends_runs1: starts\[runs\] = 2305843009213693952 needs \d+ bytes"):
        C.budget_ends_runs1(a(0, 2**61, 4), 1, 1, 8)  # 2**61 items of size 0 in run 0
    # what fits is still served: a span of 2**20 keys over two items
    order, starts = C.counting_order(a(2**20 - 1, 0), 2**20)
    assert order.tolist() == [1, 0] and starts[-1] == 2
