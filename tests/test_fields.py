"""Lengths with units (durations in ticks) and budgets per field (issue 29)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import padless
from padless import Cost, TokenBudget
from padless._kernels import cost as KC
from padless.core.fields import durations, field_scales, scaled_sizes, to_ticks
from padless.planners.budget import field_units


def test_durations_round_up_to_whole_ticks_ignoring_float_noise():
    got = durations([0.0, 0.3, 1.001, 2.345, 0.005], resolution=0.01)
    assert got.tolist() == [0, 30, 101, 235, 1]
    assert durations(np.array([[0.3, 0.7]]), resolution=0.1).tolist() == [[3, 7]]
    assert got.dtype == np.int64


@pytest.mark.parametrize(
    "seconds, resolution, error, match",
    [
        (
            [1.0, float("nan")],
            0.01,
            ValueError,
            r"finite and non-negative, got nan at position \[1\]",
        ),
        ([-0.5], 0.01, ValueError, "non-negative"),
        ([1e9], 0.01, ValueError, "2\\*\\*31 ticks"),
        ([1.0], 0.0, ValueError, "resolution must be a positive"),
        (["1.0"], 0.01, TypeError, "numeric array"),
        ([[[1.0]]], 0.01, ValueError, "1-D"),
    ],
)
def test_durations_refuse_bad_input(seconds, resolution, error, match):
    with pytest.raises(error, match=match):
        durations(seconds, resolution=resolution)


def test_budget_ticks_round_down_and_refuse_what_cannot_be_met():
    assert to_ticks("b", 200.0, 0.01) == 20000
    assert to_ticks("b", 0.019, 0.01) == 1
    with pytest.raises(ValueError, match="less than one tick"):
        to_ticks("b", 0.001, 0.01)
    with pytest.raises(TypeError, match="padless.durations"):
        TokenBudget(max_tokens=200.0)


def test_float_lengths_name_the_way_to_give_durations():
    with pytest.raises(ValueError, match="padless.durations"):
        padless.lengths_of(np.array([1.5, 2.0]))
    with pytest.raises(ValueError, match="resolution=0.01"):
        padless.TokenBudgetSampler([1.25], max_tokens=200)


@given(
    st.lists(st.integers(1, 10_000), min_size=2, max_size=3),
    st.lists(
        st.tuples(st.integers(0, 5_000), st.integers(0, 5_000), st.integers(0, 5_000)),
        min_size=1,
        max_size=20,
    ),
    st.integers(1, 20),
)
def test_field_scales_are_exact(budgets, rows, count):
    f = len(budgets)
    widths = np.array(rows, dtype=np.int64)[:, :f]
    scales, limit = field_scales(tuple(budgets))
    one = count * int(scaled_sizes(widths, scales).max()) <= limit
    each = all(count * int(widths[:, j].max()) <= budgets[j] for j in range(f))
    assert one == each


def test_field_scales_refuse_an_lcm_past_int64():
    with pytest.raises(ValueError, match="least common multiple"):
        field_scales((2**61 - 1, 2**61 - 3))


def _pairs(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    sec = rng.lognormal(1.5, 0.6, n).clip(0.2, 30.0)
    tokens = (sec * rng.uniform(2.0, 5.0, n)).astype(np.int64) + 1
    return np.stack([durations(sec, resolution=0.01), tokens], axis=1)


@given(st.integers(0, 2**16), st.integers(1, 4), st.booleans())
def test_per_field_budget_holds_for_every_batch_and_covers_every_index(seed, multiple, costed):
    lengths = _pairs(300, seed)
    settings = {"max_tokens": (60.0, 400), "resolution": (0.01, None), "multiple_of": multiple}
    costs = (Cost(linear=1.0, quadratic=2e-4), Cost(linear=3.0))
    if costed:
        settings.update(cost=costs, max_cost=9000.0)
    plan = TokenBudget(**settings).plan(lengths, seed=seed)
    assert sorted(plan.indices.tolist()) == list(range(300))
    for batch in plan:
        rows = lengths[batch]
        assert len(batch) * rows[:, 0].max() <= 6000
        assert len(batch) * rows[:, 1].max() <= 400
        if costed:
            units = field_units(costs, rows)
            assert len(batch) * (units[:, 0].max() + units[:, 1].max()) <= 9000.0


def test_per_field_budgets_fill_batches_the_max_over_fields_leaves_short():
    lengths = padless.builtin_corpus(["en", "es"])
    fields = TokenBudget(max_tokens=(4096, 4096)).plan(lengths)
    single = TokenBudget(max_tokens=4096).plan(lengths)
    # each field is budgeted on its own: fewer batches for the same budgets
    assert len(fields) < len(single)
    for f, stats in enumerate(fields.field_stats(lengths)):
        assert stats.real_tokens == int(lengths[:, f].sum())
        assert stats.padded_slots <= stats.batches * 4096


def test_one_field_tuple_is_the_plain_budget():
    lengths = _pairs(200, 1)[:, :1]
    a = TokenBudget(max_tokens=(50.0,), resolution=(0.01,)).plan(lengths, seed=3)
    b = TokenBudget(max_tokens=5000).plan(lengths[:, 0], seed=3)
    assert [x.tolist() for x in a] == [x.tolist() for x in b]


def test_seconds_budget_is_the_ticks_budget():
    lengths = _pairs(200, 2)[:, 0]
    a = TokenBudget(max_tokens=45.0, resolution=0.01).plan(lengths, seed=1)
    b = TokenBudget(max_tokens=4500).plan(lengths, seed=1)
    assert a == b


def test_per_field_settings_round_trip_and_refuse_mismatches():
    spec = TokenBudget(
        max_tokens=[200.0, None], resolution=[0.01, None], cost=[Cost(), None], max_cost=5.0e4
    )
    assert TokenBudget(**spec.as_dict()) == spec
    assert padless.spec_from_dict(padless.spec_to_dict(spec)) == spec
    with pytest.raises(ValueError, match="same number of fields"):
        TokenBudget(max_tokens=(1, 2), resolution=(0.01, None, None))
    with pytest.raises(ValueError, match="cost model per field"):
        TokenBudget(max_tokens=(10, 20), cost=Cost(), max_cost=100.0)
    with pytest.raises(ValueError, match="give max_tokens per field"):
        TokenBudget(max_tokens=10, resolution=(0.01, None))
    with pytest.raises(ValueError, match="names 2 fields, but the lengths have 3"):
        TokenBudget(max_tokens=(10, 20)).plan(np.ones((4, 3), np.int64))
    with pytest.raises(ValueError, match=r"field 1 length 30, which exceeds max_tokens\[1\]=20"):
        TokenBudget(max_tokens=(10, 20)).plan(np.array([[1, 1], [2, 30]]))
    dropped = TokenBudget(max_tokens=(10, 20), oversize="drop").plan(np.array([[1, 1], [2, 30]]))
    assert dropped.skipped.tolist() == [1]
    with pytest.raises(ValueError, match="StreamBatcher"):
        TokenBudget(max_tokens=(10, 20)).stream_engine()


@given(
    st.lists(st.tuples(st.integers(1, 40), st.floats(0, 50), st.floats(0, 50)), max_size=40),
    st.integers(0, 200),
    st.integers(0, 6),
    st.integers(1, 4),
    st.floats(0, 400),
)
def test_field_cost_kernel_is_its_reference(items, max_tokens, max_sentences, multiple, max_cost):
    sizes = np.array([i[0] for i in items], dtype=np.int64)
    units = np.array([[i[1], i[2]] for i in items], dtype=np.float64).reshape(-1, 2)
    max_tokens = max(max_tokens, int(sizes.max()) if sizes.size else 0)
    alone = float(units.sum(axis=1).max()) if units.size else 0.0
    max_cost = 0.0 if max_cost == 0 else max(max_cost, alone)
    args = (max_tokens, max_sentences, multiple, max_cost)
    got = KC.budget_field_cost_ends(sizes, units, *args)
    assert got.tolist() == KC.budget_field_cost_ends_reference(sizes, units, *args).tolist()
    one = np.ascontiguousarray(units[:, :1])
    assert (
        KC.budget_field_cost_ends(sizes, one, *args).tolist()
        == KC.budget_cost_ends(sizes, np.ascontiguousarray(units[:, 0]), *args).tolist()
    )


def test_sampler_stats_report_each_field_and_seconds():
    lengths = _pairs(400, 5)
    spec = TokenBudget(max_tokens=(60.0, 400), resolution=(0.01, None))
    fields = padless.PlanSampler(lengths, spec).stats()["fields"]
    assert [f["real"] for f in fields] == lengths.sum(axis=0).tolist()
    assert fields[0]["real_seconds"] == pytest.approx(lengths[:, 0].sum() / 100)
    assert "real_seconds" not in fields[1]
    assert all(f["padded"] >= f["real"] for f in fields)
    assert "fields" not in padless.PlanSampler(lengths[:, 1], TokenBudget(max_tokens=400)).stats()


def test_the_walk_of_two_budgets_pads_both_fields_less_than_one_field_order():
    lengths = _pairs(6000, 9)
    spec = TokenBudget(max_tokens=(120.0, 1200), resolution=(0.01, None))
    walked = spec.plan(lengths, seed=2)
    by_seconds = spec.plan(lengths, order=np.argsort(lengths[:, 0], kind="stable"))
    got = [s.padding_fraction for s in walked.field_stats(lengths)]
    one = [s.padding_fraction for s in by_seconds.field_stats(lengths)]
    # ordered by seconds, the tokens pad 27%; the walk pads both fields about alike, far less
    assert sum(got) <= 0.5 * sum(one) and max(got) < 0.06, (got, one)
    assert len(walked) <= 1.06 * len(by_seconds)


def test_stats_with_a_cost_per_field_count_each_fields_work():
    lengths = _pairs(300, 4)
    costs = (Cost(quadratic=1e-3), Cost())
    spec = TokenBudget(max_tokens=(60.0, 400), resolution=(0.01, None), cost=costs)
    sampler = padless.PlanSampler(lengths, spec)
    stats = sampler.stats()
    assert stats["cost"] == [c.as_dict() for c in costs]
    plan = spec.plan(lengths)
    real = sum(float(c.of(lengths[:, f]).sum()) for f, c in enumerate(costs))
    paid = sum(float(c.padded(lengths[b, f])) for b in plan for f, c in enumerate(costs))
    assert stats["real_work"] == pytest.approx(real / paid)
