"""Cost models (issue 16): arithmetic, budgets in cost units, balance by cost, stats, records."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import padless
from padless import Buckets, Cost, ExactLength, Packing, PlanSampler, TokenBudget
from padless import _kernels as K
from padless._kernels import cost as KC
from padless.core._schedule import balanced_order, length_mixing, step_imbalance, step_mean_lengths

LENS = np.random.default_rng(11).lognormal(3.6, 0.9, 1500).astype(np.int64).clip(1, 400)
QUAD = Cost(linear=1.0, quadratic=0.02, per_sequence=3.0)

costs_st = (
    st.tuples(
        st.sampled_from([0.0, 1.0, 2.5]),
        st.sampled_from([0.0, 0.01, 0.3]),
        st.sampled_from([0.0, 4.0]),
    )
    .filter(lambda c: sum(c) > 0)
    .map(lambda c: Cost(*c))
)


def lengths_st(max_len: int = 60, max_n: int = 120):
    return arrays(np.int64, st.integers(0, max_n), elements=st.integers(1, max_len))


# ------------------------------------------------------------------ the model itself
def test_cost_arithmetic():
    c = Cost(linear=2.0, quadratic=0.5, per_sequence=1.0)
    assert c.of(4) == 1.0 + 8.0 + 8.0
    assert c.of([0, 2]).tolist() == [1.0, 7.0]
    assert c.padded([4, 2, 1]) == 3 * 17.0  # every row pays the longest
    assert c.padded([]) == 0.0
    assert c.packed([4, 2]) == 17.0 + 7.0  # varlen: each sequence its own attention
    # padded to capacity 10: Σ cost + 4 slots of padding at the linear rate
    assert c.packed([4, 2], capacity=10) == 17.0 + 7.0 + 4 * 2.0
    assert Cost().padded([3, 5]) == 10.0 and Cost().packed([3, 5], capacity=9) == 9.0
    assert Cost(**c.as_dict()) == c and json.loads(json.dumps(c.as_dict())) == c.as_dict()


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"linear": -1.0}, ValueError, "cost.linear must be a non-negative number, got -1.0"),
        ({"quadratic": float("nan")}, ValueError, "cost.quadratic must be a finite number"),
        ({"linear": 0.0}, ValueError, "must have a positive coefficient"),
        ({"per_sequence": "1"}, TypeError, "cost.per_sequence must be a number, got str"),
        ({"linear": True}, TypeError, "cost.linear must be a number, got bool"),
        # finite, but a batch's cost overflows (a report printed NaN, its --json invalid JSON)
        ({"linear": 1e308}, ValueError, "cost.linear must be at most 1e"),
        ({"quadratic": 1e300}, ValueError, "cost.quadratic must be at most 1e"),
    ],
)
def test_cost_refuses_bad_coefficients(kwargs, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        Cost(**kwargs)


def test_cost_refuses_bad_lengths_and_settings():
    with pytest.raises(ValueError, match="lengths must be non-negative, got -2"):
        Cost().of([3, -2])
    with pytest.raises(TypeError, match="lengths must be ints, got dtype float64"):
        Cost().padded([1.5])
    with pytest.raises(ValueError, match="lengths must fit in capacity=4 tokens, got 5"):
        Cost().packed([3, 2], capacity=4)
    with pytest.raises(ValueError, match=r"unknown keys \['quad'\]"):
        TokenBudget(max_tokens=8, cost={"quad": 1.0})
    with pytest.raises(TypeError, match="cost must be a padless.Cost"):
        TokenBudget(max_tokens=8, cost=2.0)
    with pytest.raises(ValueError, match="max_cost must be a positive finite number, got 0"):
        TokenBudget(max_cost=0)
    with pytest.raises(ValueError, match="max_cost must be a positive finite number, got inf"):
        Buckets(boundaries=[4], max_cost=float("inf"))
    with pytest.raises(ValueError, match="max_cost and batch_size"):
        Buckets(boundaries=[4], batch_size=3, max_cost=10.0)
    with pytest.raises(ValueError, match="got max_cost and batch_size"):
        ExactLength(batch_size=3, max_cost=10.0)
    with pytest.raises(ValueError, match="d_model must be a positive int, got 0"):
        Cost.transformer(0, 2)


@pytest.mark.parametrize("entry", ["of", "extra", "padded", "packed"])
def test_cost_entries_name_ragged_and_wrapping_lengths(entry):
    """Issue 24: ragged lengths gave numpy's error naming nothing; 2**63 wrapped negative."""
    fn = getattr(Cost(quadratic=1.0), entry)
    with pytest.raises(TypeError, match=r"lengths must be an int or an array of ints.*ragged"):
        fn([[1, 2], [3]])
    for big in (2**63, np.uint64(2**64 - 1), [np.uint64(2**63)]):
        with pytest.raises(ValueError, match=r"lengths must be < 2\*\*63"):
            fn(big)
    with pytest.raises(TypeError, match="lengths must be ints, got dtype object"):
        fn([2**70])
    assert Cost(quadratic=1.0).of(np.uint64(2**31)) == float(2**31) * (2**31 + 1)


def test_transformer_coefficients_follow_the_derivation():
    c = Cost.transformer(64, 2, d_ff=200, vocab=100, causal=False)
    assert c.linear == 6 * (2 * (4 * 64 * 64 + 2 * 64 * 200) + 64 * 100)
    assert c.quadratic == 12 * 2 * 64 and c.per_sequence == 0.0
    causal = Cost.transformer(64, 2, d_ff=200, vocab=100)
    assert causal.quadratic == c.quadratic / 2 and causal.linear == c.linear
    assert Cost.transformer(64, 2) == Cost.transformer(64, 2, d_ff=256)


def test_transformer_cost_equals_measured_training_flops():
    """FlopCounterMode over forward + backward of a small pre-norm transformer (dense
    attention, so causal=False): the derivation's count, within 0.1% (it is exact here: the
    counter counts matrix products only, as the derivation does)."""
    torch = pytest.importorskip("torch")
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    class Block(nn.Module):
        def __init__(self, d: int, heads: int, ff: int) -> None:
            super().__init__()
            self.d, self.heads = d, heads
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, ff), nn.Linear(ff, d)
            self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)

        def forward(self, x):
            b, n, d = x.shape
            dh = d // self.heads
            q, k, v = self.qkv(self.n1(x)).split(d, -1)
            q, k, v = (t.view(b, n, self.heads, dh).transpose(1, 2) for t in (q, k, v))
            a = (q @ k.transpose(-1, -2) / math.sqrt(dh)).masked_fill(
                torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")
            )
            x = x + self.o((a.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))
            return x + self.down(nn.functional.gelu(self.up(self.n2(x))))

    d, layers, ff, vocab = 32, 3, 80, 50
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Embedding(vocab, d),
        *[Block(d, 4, ff) for _ in range(layers)],
        nn.LayerNorm(d),
        nn.Linear(d, vocab),
    )
    cost = Cost.transformer(d, layers, d_ff=ff, vocab=vocab, causal=False)
    for n in (7, 40):
        ids = torch.randint(0, vocab, (1, n))
        with FlopCounterMode(display=False) as counter:
            logits = model(ids)
            nn.functional.cross_entropy(logits.view(-1, vocab), ids.view(-1)).backward()
        measured = counter.get_total_flops()
        assert measured == pytest.approx(cost.of(n), rel=1e-3)


# ------------------------------------------------------------------ kernels == references
def test_cost_kernels_call_the_core_and_have_references():
    import inspect

    from padless import _core

    assert "numba" not in inspect.getsource(KC)
    public = []
    for name, obj in vars(KC).items():
        if not inspect.isfunction(obj) or obj.__module__ != KC.__name__ or name.startswith("_"):
            continue
        if name.endswith("_reference"):
            continue
        public.append(name)
        assert f"_core.{name}(" in inspect.getsource(obj), name
        assert callable(getattr(_core, name, None)), name
        assert callable(getattr(KC, f"{name}_reference", None)), name
    assert sorted(public) == [
        "best_fit_rows_cost",
        "budget_cost_ends",
        "budget_field_cost_ends",
        "packed_batch_costs",
    ]


@given(
    lengths_st(40),
    costs_st,
    st.sampled_from([0, 40, 64, 200]),
    st.sampled_from([0, 3, 7]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([0.0, 60.0, 150.0, 900.0]),
)
def test_budget_cost_kernel_matches_reference(sizes, cost, max_tokens, max_sentences, mult, mc):
    sizes = np.sort(sizes)
    units = cost.of(sizes)
    keep = np.ones(sizes.size, dtype=bool)
    if mc:
        keep &= units <= mc
    if max_tokens:
        keep &= sizes <= max_tokens
    sizes, units = np.ascontiguousarray(sizes[keep]), np.ascontiguousarray(units[keep])
    args = (max_tokens, max_sentences, mult, mc)
    got = KC.budget_cost_ends(sizes, units, *args)
    assert np.array_equal(got, KC.budget_cost_ends_reference(sizes, units, *args))
    if mc == 0.0:  # no cost budget: exactly fairseq's rule
        assert np.array_equal(got, K.budget_ends(sizes, max_tokens, max_sentences, mult))


@given(arrays(np.float64, st.integers(0, 80), elements=st.floats(0, 1e6)), st.data())
def test_batch_cost_kernels_match_references(values, data):
    n = values.shape[0]
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=8)))
    offsets = np.array([0, *cuts, n], dtype=np.int64)
    a = np.diff(offsets) * K.segment_max(values, offsets)  # what padless.core.cost computes
    b = KC.padded_batch_costs_reference(values, offsets)
    assert np.array_equal(a, b)
    groups = sorted(data.draw(st.lists(st.integers(0, len(offsets) - 1), max_size=4)))
    row_offsets = np.array([0, *groups, len(offsets) - 1], dtype=np.int64)
    base = data.draw(st.sampled_from([0.0, 7.5]))
    a = KC.packed_batch_costs(values, offsets, row_offsets, base)
    assert np.array_equal(a, KC.packed_batch_costs_reference(values, offsets, row_offsets, base))


@given(
    arrays(np.int64, st.integers(0, 90), elements=st.integers(0, 50)),
    costs_st,
    st.sampled_from([0, 2, 3]),
    st.sampled_from([None, 1.0, 1.3, 2.0]),
)
def test_best_fit_cost_kernel_matches_reference(sizes, cost, max_per_row, slack):
    capacity = 50
    sizes = np.sort(sizes)[::-1].copy()
    extras = cost.extra(sizes)
    base = cost.linear * capacity
    cap = 1e300 if slack is None else base + slack * float(extras.max(initial=0.0)) + 1.0
    ok = base + (0.0 + extras) <= cap
    sizes, extras = np.ascontiguousarray(sizes[ok]), np.ascontiguousarray(extras[ok])
    got = KC.best_fit_rows_cost(sizes, extras, capacity, max_per_row, base, cap)
    want = KC.best_fit_rows_cost_reference(sizes, extras, capacity, max_per_row, base, cap)
    assert np.array_equal(got[0], want[0]) and got[1] == want[1]
    if slack is None:  # no cap reached: exactly best fit by tokens
        plain = K.best_fit_rows(sizes, capacity, max_per_row)
        assert np.array_equal(got[0], plain[0]) and got[1] == plain[1]


# ------------------------------------------------------------------ budgets never exceeded
@settings(max_examples=40)
@given(
    lengths_st(80, 200),
    costs_st,
    st.sampled_from([None, 160, 400]),
    st.sampled_from([90.0, 300.0, 2500.0]),
    st.sampled_from([None, 6]),
    st.sampled_from([1, 4]),
    st.integers(0, 3),
)
def test_token_budget_keeps_both_budgets(lens, cost, max_tokens, max_cost, cap, mult, seed):
    spec = TokenBudget(
        max_tokens=max_tokens,
        max_sentences=cap,
        multiple_of=mult,
        oversize="drop",
        cost=cost,
        max_cost=max_cost,
    )
    plan = spec.plan(lens, seed=seed)
    seen = np.sort(np.concatenate([plan.indices, plan.skipped]))
    assert np.array_equal(seen, np.arange(lens.size))  # every index once: batched or skipped
    for b in plan:
        assert cost.padded(lens[b]) <= max_cost
        assert max_tokens is None or b.size * lens[b].max() <= max_tokens
        assert cap is None or b.size <= cap
    too_costly = cost.of(lens) > max_cost
    too_long = lens > max_tokens if max_tokens else np.zeros(lens.size, bool)
    assert np.array_equal(plan.skipped, np.flatnonzero(too_costly | too_long))


@given(lengths_st(60, 150), st.integers(0, 3))
def test_a_cost_budget_never_reached_changes_nothing(lens, seed):
    plain = TokenBudget(max_tokens=200, multiple_of=2)
    loose = TokenBudget(max_tokens=200, multiple_of=2, cost=QUAD, max_cost=1e12)
    assert loose.plan(lens, seed=seed) == plain.plan(lens, seed=seed)
    order = np.random.default_rng(seed).permutation(lens.size)
    assert loose.plan(lens, order=order) == plain.plan(lens, order=order)
    # a cost budget of linear=1 tokens is the token budget
    assert TokenBudget(max_cost=200.0).plan(lens, seed=seed) == TokenBudget(max_tokens=200).plan(
        lens, seed=seed
    )


def test_token_budget_cost_over_pairs_order_and_errors():
    pairs = np.stack([LENS, (LENS * 1.2).astype(np.int64)], axis=1)
    spec = TokenBudget(max_tokens=2000, cost=QUAD, max_cost=6000.0)
    sizes = pairs.max(axis=1)
    plan = spec.plan(pairs, seed=2)
    assert all(QUAD.padded(sizes[b]) <= 6000.0 for b in plan)
    order = np.random.default_rng(0).permutation(LENS.size)
    walked = spec.plan(LENS, order=order)
    assert np.array_equal(walked.indices, order)  # the given walk, cut by both budgets
    assert all(QUAD.padded(LENS[b]) <= 6000.0 for b in walked)
    with pytest.raises(ValueError, match="order must hold each index at most once"):
        spec.plan(LENS, order=[0, 1, 0])
    with pytest.raises(
        ValueError, match=r"index \d+ has length \d+, whose cost .* exceeds max_cost=900"
    ):
        TokenBudget(cost=QUAD, max_cost=900.0).plan(LENS)


@settings(max_examples=30)
@given(
    lengths_st(50, 150),
    costs_st,
    st.sampled_from([None, 120]),
    st.sampled_from([80.0, 700.0]),
    st.sampled_from(["partial", "merge", "drop"]),
)
def test_exact_length_keeps_the_cost_budget(lens, cost, max_tokens, max_cost, leftovers):
    spec = ExactLength(
        max_tokens=max_tokens,
        leftovers=leftovers,
        cost=cost,
        max_cost=max_cost,
        multiple_of=1,
        oversize="drop",
    )
    plan = spec.plan(lens)
    for b in plan:  # every batch, a batch of one included
        assert cost.padded(lens[b]) <= max_cost
        assert max_tokens is None or b.size * lens[b].max() <= max_tokens
    over = (cost.of(lens) > max_cost) | (lens > (max_tokens or np.inf))
    assert plan.info["over_budget"] == int(over.sum())
    assert set(np.flatnonzero(over).tolist()) <= set(plan.skipped.tolist())
    if over.any():  # refused by default, naming the first
        with pytest.raises(ValueError, match=f"index {int(np.flatnonzero(over)[0])} has"):
            dataclasses.replace(spec, oversize="error").plan(lens)


@settings(max_examples=30)
@given(lengths_st(70, 150), costs_st, st.sampled_from([None, 150]), st.integers(1, 4))
def test_buckets_keep_the_cost_budget(lens, cost, max_tokens, k):
    spec = Buckets(num_buckets=k, max_tokens=max_tokens, cost=cost, max_cost=500.0, oversize="drop")
    plan = spec.plan(lens)
    for b in plan:  # every batch, a batch of one included
        assert cost.padded(lens[b]) <= 500.0
        assert max_tokens is None or b.size * lens[b].max() <= max_tokens
    over = (cost.of(lens) > 500.0) | (lens > (max_tokens or np.inf))
    assert plan.skipped.tolist() == np.flatnonzero(over).tolist()


def _row_costs(plan, cost):
    return [
        cost.packed(plan.piece_lengths[lo:hi], capacity=plan.capacity)
        for lo, hi in zip(plan.rows.offsets[:-1], plan.rows.offsets[1:], strict=True)
    ]


@settings(max_examples=40)
@given(
    lengths_st(64, 200),
    costs_st,
    st.sampled_from([None, 3]),
    st.sampled_from([1.05, 1.5, 4.0]),
    st.integers(0, 3),
)
def test_packing_rows_keep_the_row_cost_cap(lens, cost, max_per_row, slack, seed):
    capacity = 64
    base = cost.linear * capacity
    cap = base + slack * float(cost.extra([40])[0]) + 1.0
    spec = Packing(
        capacity=capacity,
        max_per_row=max_per_row,
        rows_per_batch=2,
        oversize="drop",
        cost=cost,
        max_row_cost=cap,
    )
    plan = spec.plan(lens, seed=seed)
    assert all(c <= cap for c in _row_costs(plan, cost))
    assert all(len(r) <= (max_per_row or 10**9) for r in plan.rows)
    fits = base + cost.extra(lens) <= cap
    assert np.array_equal(plan.skipped, np.flatnonzero(~fits | (lens > capacity)))
    assert sorted(plan.indices.tolist()) == np.flatnonzero(fits & (lens <= capacity)).tolist()
    planner = spec.bind(lens)
    costs = planner.costs(plan)
    rows = _row_costs(plan, cost)
    assert np.allclose(
        costs,
        [sum(rows[a:b]) for a, b in zip(plan.row_offsets[:-1], plan.row_offsets[1:], strict=True)],
    )


def test_packing_with_a_cap_never_reached_is_the_plain_plan():
    plain = Packing(capacity=512, rows_per_batch=2).plan(LENS, seed=4)
    assert (
        Packing(
            capacity=512,
            max_per_row=None,
            rows_per_batch=2,
            oversize="error",
            cost=QUAD,
            max_row_cost=1e15,
        ).plan(LENS, seed=4)
        == plain
    )
    split = Packing(capacity=100, oversize="split", cost=QUAD, max_row_cost=1e9)
    assert split.plan(LENS, seed=1) == Packing(capacity=100, oversize="split").plan(LENS, seed=1)


def test_packing_row_cost_errors():
    with pytest.raises(
        ValueError, match=r"max_row_cost must be at least .* cost.linear × capacity = 512"
    ):
        Packing(capacity=512, max_row_cost=100.0)
    with pytest.raises(ValueError, match='oversize="split", whose pieces fill whole rows'):
        Packing(capacity=100, oversize="split", cost=QUAD, max_row_cost=150.0)
    spec = Packing(capacity=512, cost=QUAD, max_row_cost=2000.0)
    assert spec.longest_in_row() == 272  # 512 + 3 + 0.02·272² <= 2000 < the same at 273
    with pytest.raises(
        ValueError, match=r"a row holding it costs .* exceeds max_row_cost=2000 .* longer than 272"
    ):
        spec.plan(LENS)


# ------------------------------------------------------------------ records and fingerprints
SPECS = [
    TokenBudget(max_tokens=600, cost=QUAD, max_cost=4000.0),
    TokenBudget(max_cost=700),
    ExactLength(
        max_tokens=400, leftovers="merge", cost={"quadratic": 0.5}, max_cost=9000, oversize="drop"
    ),
    Buckets(num_buckets=4, cost=QUAD, max_cost=5000.0, oversize="drop"),
    Buckets(boundaries=[30, 90], batch_size=8, cost=QUAD),
    Packing(capacity=512, rows_per_batch=2, cost=Cost.transformer(64, 2), max_row_cost=1e10),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_specs_with_a_cost_round_trip_through_json(spec):
    data = json.loads(json.dumps(spec.as_dict()))
    assert type(spec)(**data) == spec
    assert padless.spec_from_dict(json.loads(json.dumps(padless.spec_to_dict(spec)))) == spec
    assert isinstance(data.get("cost"), dict) or spec.cost is None
    assert "cost" in PlanSampler(LENS, spec).planner.config() or spec.cost is None


def test_defaults_keep_records_and_fingerprints():
    """Fingerprints and records computed with the code before cost models (commit 35d6f95)."""
    lens = np.random.default_rng(7).lognormal(3.5, 0.8, 600).astype(np.int64).clip(1, 300)
    two = np.stack([lens, (lens * 1.1).astype(np.int64).clip(1, 300)], axis=1)
    fp = {
        "token_budget": padless.TokenBudgetSampler(lens, max_tokens=600, oversize="drop"),
        "exact_length": padless.ExactLengthSampler(lens, max_tokens=400, leftovers="merge"),
        "buckets": padless.BucketSampler(two, num_buckets=4, max_tokens=600),
        "packing": padless.PackingSampler(lens, capacity=256, rows_per_batch=2, balance=True),
    }
    assert {k: s.state_dict()["fingerprint"] for k, s in fp.items()} == {
        "token_budget": "55b66929-865cd136",
        "exact_length": "55b66929-1ac1a4fc",
        "buckets": "3ecc4f7a-5b6ab59d",
        "packing": "55b66929-258c76b6",
    }
    assert TokenBudget(max_tokens=600).as_dict() == {
        "max_tokens": 600,
        "max_sentences": None,
        "multiple_of": 1,
        "oversize": "error",
    }
    assert padless.spec_to_dict(Packing(capacity=256)) == {
        "strategy": "packing",
        "capacity": 256,
        "max_per_row": None,
        "rows_per_batch": 1,
        "oversize": "error",
    }
    with_cost = padless.TokenBudgetSampler(lens, max_tokens=600, oversize="drop", cost=Cost())
    assert with_cost.state_dict()["fingerprint"] != fp["token_budget"].state_dict()["fingerprint"]


# ------------------------------------------------------------------ balance and stats
@pytest.mark.parametrize(
    "spec",
    [
        TokenBudget(max_tokens=3000, cost=QUAD),
        Buckets(num_buckets=6, max_tokens=3000, cost=QUAD),
        ExactLength(max_tokens=3000, cost=QUAD),
        Packing(capacity=1024, cost=QUAD),
    ],
    ids=lambda s: s.name,
)
def test_balance_groups_steps_by_the_cost_model(spec):
    plain = PlanSampler(LENS, spec, world_size=4, seed=1)
    plan, order = plain.epoch_plan(0)
    costs = plain.planner.costs(plan)
    if isinstance(plan, padless.PackedPlan):
        rows = _row_costs(plan, QUAD)
        assert np.allclose(costs, rows)
    else:
        assert np.array_equal(costs, [QUAD.padded(LENS[b]) for b in plan])
    st_ = plain.stats()
    assert st_["imbalance"] == pytest.approx(step_imbalance(costs[order], 4, st_["steps"]))
    balanced = PlanSampler(LENS, spec, world_size=4, seed=1, balance=True)
    _, border = balanced.epoch_plan(0)
    assert np.array_equal(border, balanced_order(costs, 4, padless.core._rng.rng(1, 0, 1)))
    assert balanced.stats()["imbalance"] < st_["imbalance"]
    assert st_["cost"] == QUAD.as_dict()


def test_real_work_share():
    spec = TokenBudget(max_tokens=3000, cost=QUAD)
    s = PlanSampler(LENS, spec, world_size=2)
    plan, _ = s.epoch_plan(0)
    real = QUAD.of(LENS).sum()
    total = sum(QUAD.padded(LENS[b]) for b in plan)
    assert s.stats()["real_work"] == pytest.approx(real / total)
    tokens = PlanSampler(LENS, TokenBudget(max_tokens=3000)).stats()
    assert tokens["real_work"] == pytest.approx(1 - tokens["padding_fraction"])
    assert tokens["cost"] is None
    packed = PlanSampler(LENS, Packing(capacity=1024, cost=QUAD))
    pplan, _ = packed.epoch_plan(0)
    assert packed.stats()["real_work"] == pytest.approx(
        QUAD.of(LENS).sum() / sum(_row_costs(pplan, QUAD))
    )


def test_length_mixing_figures():
    assert length_mixing(np.arange(10.0)) == pytest.approx((1.0, 0.7))
    assert length_mixing(np.ones(5)) == (0.0, 0.0) and length_mixing(np.zeros(2)) == (0.0, 0.0)
    saw = np.tile(np.linspace(9, 1, 50), 6)  # HF megabatches: sorted long to short, repeated
    trend, lag1 = length_mixing(saw)
    assert abs(trend) < 0.2 and lag1 > 0.8
    means = step_mean_lengths(np.array([10, 20, 30]), np.array([1, 2, 3]), 2)
    assert means.tolist() == [10.0, 40 / 4]  # the tail wraps to the first batch
    big = np.random.default_rng(3).lognormal(4, 1, 40_000).astype(np.int64).clip(1, 2000)
    shuffled = PlanSampler(big, TokenBudget(max_tokens=4096), world_size=2).stats()
    assert shuffled["steps"] > 400  # sampling error of a correlation about 1/sqrt(steps)
    assert abs(shuffled["length_trend"]) < 0.15 and abs(shuffled["length_lag1"]) < 0.15
    fixed = PlanSampler(big, TokenBudget(max_tokens=4096), world_size=2, shuffle=False).stats()
    assert fixed["length_trend"] > 0.6 and fixed["length_lag1"] > 0.9  # length order


def test_report_rows_carry_cost_figures():
    from padless.sampling.report import compare_report

    rows, _ = compare_report(LENS, max_tokens=4096, cost=QUAD, world_size=4)
    by = {r.strategy: r for r in rows}
    assert by["token_budget"].spec["cost"] == QUAD.as_dict()
    assert by["token_budget"].real_work == pytest.approx(
        PlanSampler(LENS, TokenBudget(max_tokens=4096, cost=QUAD)).stats()["real_work"]
    )
    assert by["random"].real_work < by["packing"].real_work
    assert all(r.length_lag1 is not None and r.length_trend is not None for r in rows)


def test_the_readme_section_example_runs():
    """The example of docs/flops.md (the proposed README section) runs as written."""
    from pathlib import Path

    pytest.importorskip("torch")
    text = (Path(__file__).parent.parent / "docs" / "flops.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {"__name__": "flops_example"}
    exec(compile(code, "docs/flops.md", "exec"), namespace)
    assert namespace["balanced"]["imbalance"] < 1.01 < namespace["dealt"]["imbalance"]
