"""Hostile values into every public entry: a clear error naming the parameter, or a right answer.

Issue 13: never a crash, a hang, a wrap-around or a silent wrong answer. Each entry is called with
valid arguments except one, which takes each hostile value in turn. A ``ValueError`` or
``TypeError`` must name that parameter; any other exception fails; a result must be a valid
plan (every planned index in range, each at most once) or sampler.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import padless
from padless.mixing import MixtureSampler

L = np.random.default_rng(0).integers(1, 60, 200)

HOSTILE = [
    None,
    -1,
    0,
    2**31,
    2**62 + 1,
    2**63,
    2**70,
    -(2**70),
    1e300,
    math.nan,
    math.inf,
    -math.inf,
    1.5,
    True,
    "4096",
    b"x",
    [1, 2],
    np.array([[1]]),
    {},
    object(),
    np.int64(-5),
    np.uint64(2**64 - 1),
]

# entry, valid keyword arguments, parameters to attack (name in the message, if different)
ENTRIES = [
    (
        padless.plan_token_budget,
        {"lengths": L, "max_tokens": 200},
        ["max_tokens", "max_sentences", "multiple_of", "oversize", "seed", "epoch", "order"],
    ),
    (
        padless.plan_exact_length,
        {"lengths": L, "batch_size": 4},
        ["batch_size", "max_length", "multiple_of", "leftovers", "include_partial", "seed"],
    ),
    (
        padless.plan_buckets,
        {"lengths": L, "num_buckets": 3, "max_tokens": 300},
        ["num_buckets", "max_tokens", "multiple_of", "boundaries", "seed"],
    ),
    (
        padless.plan_packing,
        {"lengths": L, "capacity": 128},
        ["capacity", "max_per_row", "rows_per_batch", "oversize", "seed", "epoch"],
    ),
    (
        padless.TokenBudgetSampler,
        {"lengths": L, "max_tokens": 200},
        ["max_tokens", "seed", "rank", "world_size", "shuffle", "drop_last", "balance"],
    ),
    (
        padless.PackingSampler,
        {"lengths": L, "capacity": 128},
        ["capacity", "rows_per_batch", "world_size", "rank", "balance"],
    ),
    (
        padless.BucketSampler,
        {"lengths": L, "num_buckets": 2, "batch_size": 8},
        ["num_buckets", "batch_size", "seed"],
    ),
    (
        padless.ExactLengthSampler,
        {"lengths": L, "max_tokens": 100},
        ["max_tokens", "max_length", "seed"],
    ),
    (
        padless.PlanSampler,
        {"lengths": L, "spec": padless.TokenBudget(max_tokens=200)},
        ["spec", "seed", "world_size"],
    ),
    (
        padless.LMStream,
        {"tokens": np.arange(1000), "batch_size": 2, "num_steps": 8},
        ["batch_size", "num_steps", "mode", "seed", "rank", "world_size", "out_dtype"],
    ),
    (padless.bucket_boundaries, {"lengths": L, "k": 3}, ["k", "method"]),
]
LENGTH_ENTRIES = [padless.plan_token_budget, padless.plan_packing, padless.TokenBudgetSampler]


def _check_result(out):
    if isinstance(out, padless.BatchPlan):
        idx = out.indices
        assert idx.size == 0 or (idx.min() >= 0 and idx.max() < L.shape[0])
        assert np.unique(idx).size == idx.size
        assert out.offsets[0] == 0 and out.offsets[-1] == idx.size
    elif hasattr(out, "state_dict"):
        batches = list(out)
        assert len(batches) == len(out) or len(out) == 0
    return out


CASES = [
    pytest.param(entry, base, param, value, id=f"{entry.__name__}-{param}-{i}")
    for entry, base, params in ENTRIES
    for param in params
    for i, value in enumerate(HOSTILE)
]


@pytest.mark.parametrize(("entry", "base", "param", "value"), CASES)
def test_hostile_value_gets_a_clear_error_or_a_right_answer(entry, base, param, value):
    kwargs = dict(base)
    kwargs[param] = value
    try:
        out = entry(**kwargs)
    except (ValueError, TypeError) as err:
        assert param in str(err), f"{entry.__name__}({param}={value!r}): {err}"
        return
    _check_result(out)


def test_count_of_hostile_cases():
    """Recorded for the closing note: how many (entry, parameter, value) triples run here."""
    assert len(CASES) > 1100


lengths_values = st.one_of(
    st.lists(st.integers(-(2**70), 2**70), max_size=20),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=20),
    st.lists(st.lists(st.integers(0, 5), max_size=4), max_size=6),
    st.lists(st.text(max_size=3), min_size=1, max_size=3),
    st.just([[1, 2], [3]]),
    st.just(np.zeros((2, 2, 2), np.int64)),
    st.just(np.array([1e19, 5.0])),
    st.just(np.array([2**62] * 4, dtype=np.int64)),
    st.just({"a": 1}),
    st.just("lengths.npy"),
)


@pytest.mark.parametrize("entry", LENGTH_ENTRIES)
@given(value=lengths_values)
def test_hostile_lengths(entry, value):
    base = {padless.plan_packing: {"capacity": 128}}.get(entry, {"max_tokens": 200})
    try:
        out = entry(value, **base)
    except (ValueError, TypeError) as err:
        assert "length" in str(err) or "max_tokens" in str(err) or "capacity" in str(err), err
        return
    if isinstance(out, padless.BatchPlan):
        n = len(padless.lengths_of(value))
        assert sorted(np.concatenate([out.indices, out.skipped]).tolist()) == list(range(n))


@given(position=st.one_of(st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=2)))
def test_hostile_state_positions(position):
    s = padless.TokenBudgetSampler(L, max_tokens=200)
    state = {**s.state_dict(), "position": position}
    try:
        s.load_state_dict(state)
    except (ValueError, TypeError) as err:
        assert "position" in str(err)
        return
    assert 0 <= position <= len(list(padless.TokenBudgetSampler(L, max_tokens=200)))


def test_mixture_hostile_temperature_and_weights():
    subs = {"a": padless.TokenBudgetSampler(L, max_tokens=200)}
    for value in HOSTILE:
        for param in ("temperature", "num_batches", "seed"):
            try:
                MixtureSampler(subs, **{param: value})
            except (ValueError, TypeError) as err:
                assert param in str(err), (param, value, err)
