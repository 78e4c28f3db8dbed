import hashlib
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from padless import BatchPlan, builtin_corpus, plan_token_budget
from padless import _kernels as K
from padless._kernels import budget as budget_kernels


def batches(plan: BatchPlan) -> list[list[int]]:
    return [b.tolist() for b in plan]


@pytest.mark.parametrize(
    ("sizes", "kwargs", "expected"),
    [
        # plain budget: 3 × 2 = 6 fits, a 4th does not
        ([2, 2, 2, 2, 2], {"max_tokens": 6}, [[0, 1, 2], [3, 4]]),
        # multiple_of=2: the odd third item waits in the tail and opens the next batch
        ([2, 2, 2, 2, 2], {"max_tokens": 6, "multiple_of": 2}, [[0, 1], [2, 3], [4]]),
        # the longest item sets the cost of the whole batch
        ([1, 1, 1, 5], {"max_tokens": 12}, [[0, 1, 2], [3]]),
        # max_sentences alone
        ([9, 9, 9, 9, 9], {"max_sentences": 2}, [[0, 1], [2, 3], [4]]),
        # small batches (< multiple_of) join freely, then only at multiples
        (
            [1, 1, 1, 1, 2, 2, 3, 3],
            {"max_tokens": 10, "multiple_of": 4},
            [[0, 1, 2, 3], [4, 5, 6], [7]],
        ),
        # the tail itself overflows: it closes without the new item, which starts alone
        (
            [1, 1, 1, 1, 1, 1, 1, 6],
            {"max_tokens": 20, "multiple_of": 4},
            [[0, 1, 2, 3], [4, 5, 6], [7]],
        ),
        # no limits at all: one batch of a multiple, then the tail
        ([1, 2, 3, 4, 5], {"multiple_of": 2}, [[0, 1, 2, 3], [4]]),
        # zero-length items cost nothing
        ([0, 0, 0, 3], {"max_tokens": 3}, [[0, 1, 2], [3]]),
        ([], {"max_tokens": 3}, []),
        ([4], {"max_tokens": 4}, [[0]]),
    ],
)
def test_fairseq_rule_on_given_order(sizes, kwargs, expected):
    plan = plan_token_budget(sizes, order=np.arange(len(sizes)), **kwargs)
    assert batches(plan) == expected


def test_last_batch_is_never_dropped():
    # fairseq's wrapper drops a last batch that is not a multiple of bsz_mult (fairseq #5036)
    plan = plan_token_budget([1] * 10, max_tokens=100, multiple_of=4, order=np.arange(10))
    assert sum(len(b) for b in plan) == 10
    assert batches(plan)[-1] == [8, 9]


def test_order_is_walked_as_given():
    order = np.array([3, 0, 2, 1])
    plan = plan_token_budget([5, 5, 5, 5], max_tokens=10, order=order)
    assert batches(plan) == [[3, 0], [2, 1]]


def test_order_may_be_a_subset():
    plan = plan_token_budget([5, 5, 5, 5], max_tokens=10, order=[2])
    assert batches(plan) == [[2]]


def test_two_fields_use_max_over_fields():
    lengths = np.array([[1, 6], [6, 1], [3, 3]])
    plan = plan_token_budget(lengths, max_tokens=12, order=np.arange(3))
    assert batches(plan) == [[0, 1], [2]]


def test_default_order_sorts_by_last_field_then_first():
    rs = np.random.default_rng(3)
    lengths = rs.integers(1, 6, size=(300, 2))
    plan = plan_token_budget(lengths, max_sentences=7)
    walked = lengths[plan.indices]
    keys = walked[:, 1] * 100 + walked[:, 0]
    assert np.all(np.diff(keys) >= 0)


def test_oversize_error_names_first_index_and_length():
    with pytest.raises(ValueError, match=r"index 2 has length 9, which exceeds max_tokens=8"):
        plan_token_budget([1, 2, 9, 10], max_tokens=8)


def test_oversize_skip_records_skipped():
    plan = plan_token_budget([1, 2, 9, 10], max_tokens=8, oversize="skip")
    assert plan.skipped.tolist() == [2, 3]
    assert sorted(plan.indices.tolist()) == [0, 1]


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"max_tokens": 0}, ValueError, "max_tokens must be a positive int, got 0"),
        ({"max_tokens": -5}, ValueError, "max_tokens must be a positive int, got -5"),
        ({"max_tokens": 2.5}, TypeError, "max_tokens must be an int"),
        ({"max_tokens": True}, TypeError, "max_tokens must be an int"),
        ({"max_sentences": 0}, ValueError, "max_sentences must be a positive int, got 0"),
        ({"multiple_of": 0}, ValueError, "multiple_of must be a positive int, got 0"),
        ({"oversize": "clip"}, ValueError, "oversize must be one of"),
        ({"seed": -1}, ValueError, "seed must be a non-negative int, got -1"),
        ({"seed": True}, TypeError, "seed must be an int"),
        ({"epoch": -1}, ValueError, "epoch must be a non-negative int"),
        ({"order": [0, 7]}, ValueError, r"order must hold indices in \[0, 3\), got 7"),
        ({"order": [0.0, 1.0]}, TypeError, "order must hold integer indices"),
    ],
)
def test_bad_arguments(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        plan_token_budget([1, 2, 3], **{"max_tokens": 10, **kwargs})


def digest(plan: BatchPlan) -> str:
    h = hashlib.sha256(plan.indices.tobytes())
    h.update(plan.offsets.tobytes())
    return h.hexdigest()[:16]


def test_same_seed_same_plan_across_processes():
    here = digest(plan_token_budget(builtin_corpus(), max_tokens=4096, multiple_of=8, seed=5))
    code = (
        "import hashlib, padless;"
        "p = padless.plan_token_budget(padless.builtin_corpus(), max_tokens=4096, multiple_of=8, seed=5);"
        "h = hashlib.sha256(p.indices.tobytes()); h.update(p.offsets.tobytes());"
        "print(h.hexdigest()[:16])"
    )
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert there.stdout.strip() == here


def test_epochs_change_membership_and_seed_epoch_do_not_add():
    en = builtin_corpus()
    a = plan_token_budget(en, max_tokens=2048, seed=0, epoch=1)
    b = plan_token_budget(en, max_tokens=2048, seed=0, epoch=2)
    c = plan_token_budget(en, max_tokens=2048, seed=1, epoch=0)
    members = [{frozenset(x.tolist()) for x in p} for p in (a, b, c)]
    assert members[0] != members[1]
    assert members[0] != members[2]  # (0, 1) is not (1, 0)


def test_padding_on_builtin_corpus_is_tiny():
    st = plan_token_budget(builtin_corpus(), max_tokens=4096).stats(builtin_corpus())
    assert st.padding_fraction < 0.01  # random batches of 64 waste about 55%


def test_order_with_duplicate_indices_is_refused():
    """Issue 13.6: "every index exactly once" must hold for a given order too."""
    with pytest.raises(
        ValueError, match=r"order must hold each index at most once.*index 2 again at position 2"
    ):
        plan_token_budget([3, 4, 5, 6], max_tokens=20, order=[0, 2, 2, 3])
    plan = plan_token_budget([3, 4, 5, 6], max_tokens=20, order=[3, 1])  # a subset is fine
    assert sorted(plan.indices.tolist()) == [1, 3]


@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=60),
    st.data(),
    st.integers(1, 120),
    st.integers(0, 9),
    st.integers(1, 4),
    st.booleans(),
)
def test_given_order_pass_equals_its_reference(sizes, data, max_tokens, max_sentences, mult, skip):
    """The check + gather + greedy pass == check, filter, gather and the list reference, on one
    thread and split over three (faults in any part, repeats across parts)."""
    sizes = np.array(sizes, dtype=np.int64)
    if not skip:  # planners refuse (oversize="error") or leave out items over the budget
        sizes = np.minimum(sizes, max_tokens)
    n = sizes.size
    order = np.array(data.draw(st.lists(st.integers(-2, n + 1), max_size=n + 3)), dtype=np.int64)
    want = K.budget_order_reference(order, sizes, max_tokens, max_sentences, mult, skip)
    for parts in (1, 3):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(budget_kernels, "_threads", lambda n, parts=parts: min(parts, max(1, n)))
            got = K.budget_order(order, sizes, max_tokens, max_sentences, mult, skip)
        assert got[0] == want[0]
        assert got[1].tolist() == want[1].tolist() and got[2].tolist() == want[2].tolist()


@pytest.mark.parametrize(
    ("values", "dtype"),
    [
        ([0, 7, 65535], np.uint16),
        ([0, 65536], np.uint32),
        ([3, 2**32 - 1], np.uint32),
        ([3, 2**32], np.int64),
        ([-1, 5], np.int64),
    ],
)
def test_narrow_sizes_keeps_every_value(values, dtype):
    """Sizes narrow to the smallest unsigned type that holds them all, never wrapping a value;
    the same pass gives the OR of all values and the largest."""
    sizes = np.array(values, dtype=np.int64)
    for parts in (1, 2):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(budget_kernels, "_threads", lambda n, parts=parts: min(parts, n))
            out, bits, top = K.narrow_sizes(sizes)
        assert out.dtype == dtype and out.tolist() == values
        assert bits == int(np.bitwise_or.reduce(sizes)) and top == max(values)


def test_in_parts_covers_the_range_and_raises_a_part_error(monkeypatch):
    monkeypatch.setattr(budget_kernels, "_threads", lambda n: 3)
    assert K.in_parts(10, lambda lo, hi, p: (lo, hi, p)) == [(0, 3, 0), (3, 6, 1), (6, 10, 2)]

    def fail_in_the_last(lo: int, hi: int, part: int) -> int:
        if part == 2:
            raise OSError("part 2")
        return part

    with pytest.raises(OSError, match="part 2"):
        K.in_parts(10, fail_in_the_last)


@pytest.mark.parametrize(
    ("lengths", "kwargs", "message"),
    [
        ([3, -1, 2], {"max_tokens": 8}, r"lengths must be whole numbers in \[0, 2\*\*31\), got -1"),
        ([3, 2**31, 2], {"max_tokens": 8}, r"got 2147483648(\.0)? at position \[1\]"),
        ([3, 9, 2], {"max_tokens": 8}, r"index 1 has length 9, which exceeds max_tokens=8"),
    ],
)
def test_given_order_checks_the_lengths_in_the_narrowing_pass(lengths, kwargs, message):
    """int64 lengths with a walk over them: the narrowing pass yields the range and oversize
    checks; what they find is refused with the same errors as other lengths."""
    arr = np.array(lengths, dtype=np.int64)
    for form in (arr, arr.tolist(), arr.astype(np.float64)):
        with pytest.raises(ValueError, match=message):
            plan_token_budget(form, order=[2, 0, 1], **kwargs)


def test_given_order_drops_oversize_items_found_by_the_narrowing_pass():
    lengths = np.array([3, 9, 2, 70_000], dtype=np.int64)
    plan = plan_token_budget(lengths, max_tokens=8, oversize="drop", order=[3, 2, 1, 0])
    assert batches(plan) == [[2, 0]] and plan.skipped.tolist() == [1, 3]
    assert batches(plan_token_budget(np.array([3, 5, 2]), max_tokens=8, order=[2, 0])) == [[2, 0]]


def test_large_given_walk_on_threads_equals_one_thread():
    """Above the split size the walk is checked and gathered on threads; same plan as one."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 70_000, 600_000)  # some over 65535: sizes narrow to uint32
    order = rng.permutation(lengths.size)
    plan = plan_token_budget(lengths, max_tokens=200_000, order=order)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(budget_kernels, "_threads", lambda n: 1)
        one = plan_token_budget(lengths, max_tokens=200_000, order=order)
    assert np.array_equal(plan.indices, one.indices) and np.array_equal(plan.offsets, one.offsets)
    order[400_000] = order[10]  # a repeat across the parts
    with pytest.raises(ValueError, match=f"index {order[10]} again at position 400000"):
        plan_token_budget(lengths, max_tokens=200_000, order=order)
