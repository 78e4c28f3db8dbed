"""Invariants of plan_token_budget on arbitrary inputs."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from padless import plan_token_budget

lengths_1d = arrays(np.int64, st.integers(0, 300), elements=st.integers(0, 64))
limits = st.sampled_from([None, 64, 65, 100, 128, 1000])
caps = st.sampled_from([None, 1, 2, 3, 7, 8, 16, 33])
multiples = st.sampled_from([1, 2, 3, 4, 8])


@given(lengths_1d, limits, caps, multiples, st.integers(0, 3), st.integers(0, 3))
def test_plan_invariants(lengths, max_tokens, max_sentences, multiple, seed, epoch):
    plan = plan_token_budget(
        lengths,
        max_tokens=max_tokens,
        max_sentences=max_sentences,
        multiple_of=multiple,
        seed=seed,
        epoch=epoch,
    )
    # every index exactly once, nothing skipped (no length exceeds 64 <= every budget)
    assert np.array_equal(np.sort(plan.indices), np.arange(lengths.size))
    assert plan.skipped.size == 0
    # walked by non-decreasing length
    assert np.all(np.diff(lengths[plan.indices]) >= 0)
    for batch in plan:
        assert batch.size > 0
        if max_sentences is not None:
            assert batch.size <= max_sentences
        if max_tokens is not None:
            assert batch.size * lengths[batch].max() <= max_tokens
        # sizes are multiples of multiple_of, except batches smaller than it
        assert batch.size < multiple or batch.size % multiple == 0


@given(lengths_1d, st.integers(1, 80), st.data())
def test_given_order_is_kept_and_oversize_skipped(lengths, max_tokens, data):
    order = np.array(data.draw(st.permutations(range(lengths.size))), dtype=np.int64)
    plan = plan_token_budget(lengths, max_tokens=max_tokens, order=order, oversize="skip")
    keep = lengths[order] <= max_tokens
    assert np.array_equal(plan.indices, order[keep])
    assert np.array_equal(plan.skipped, np.flatnonzero(lengths > max_tokens))
    for batch in plan:
        assert batch.size * lengths[batch].max() <= max_tokens


@given(
    arrays(np.int64, st.tuples(st.integers(0, 200), st.integers(2, 3)), elements=st.integers(0, 40))
)
def test_two_dimensional_budget_uses_max_over_fields(lengths):
    plan = plan_token_budget(lengths, max_tokens=120)
    assert np.array_equal(np.sort(plan.indices), np.arange(lengths.shape[0]))
    sizes = lengths.max(axis=1)
    for batch in plan:
        assert batch.size * sizes[batch].max() <= 120
    walked = lengths[plan.indices]
    fields = [walked.shape[1] - 1, *range(walked.shape[1] - 1)]
    keys = np.zeros(walked.shape[0], dtype=np.int64)
    for f in fields:
        keys = keys * 41 + walked[:, f]
    assert np.all(np.diff(keys) >= 0)


@given(lengths_1d, st.integers(0, 2**32), st.integers(0, 50))
def test_plan_is_a_pure_function(lengths, seed, epoch):
    a = plan_token_budget(lengths, max_tokens=100, seed=seed, epoch=epoch)
    b = plan_token_budget(lengths.copy(), max_tokens=100, seed=seed, epoch=epoch)
    assert a == b


@given(lengths_1d, st.integers(1, 80), caps, multiples, st.integers(0, 3))
def test_sorted_runs_path_equals_per_position_path(
    lengths, max_tokens, max_sentences, multiple, seed
):
    # the default order batches straight from the counting sort's runs; walking the same order
    # given explicitly goes through per-position sizes: both must cut the same batches
    kw = {"max_tokens": max_tokens, "max_sentences": max_sentences, "multiple_of": multiple}
    plan = plan_token_budget(lengths, oversize="skip", seed=seed, **kw)
    again = plan_token_budget(lengths, oversize="skip", order=plan.indices, **kw)
    assert plan == again
    assert np.array_equal(
        np.sort(np.concatenate([plan.indices, plan.skipped])), np.arange(lengths.size)
    )
    assert np.array_equal(plan.skipped, np.flatnonzero(lengths > max_tokens))
