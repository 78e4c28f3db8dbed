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


# --------------------------------------------------------------------------- pad_to_multiple_of


def _round_up(lengths, m):
    return -(-np.asarray(lengths, dtype=np.int64) // m) * m


def _padded_cost(lengths, batch, m):
    """What a collate padding to a multiple of m makes of a batch: rows × width per field."""
    picked = np.asarray(lengths)[batch]
    widths = _round_up(picked.max(axis=0), m)  # one width per field (2-D) or one width
    return [len(batch) * int(w) for w in np.atleast_1d(widths)]


@given(
    st.one_of(
        st.lists(st.integers(0, 70), max_size=120),
        st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=80),
    ),
    st.sampled_from([1, 2, 3, 8, 64]),
    st.sampled_from([64, 100, 128, 1000]),
    st.sampled_from([1, 2, 8]),
    st.integers(0, 3),
)
def test_pad_multiple_plans_the_rounded_lengths(lengths, m, max_tokens, bsz_mult, seed):
    from padless import TokenBudget

    lens = np.array(lengths, dtype=np.int64).reshape(len(lengths), -1 if lengths else 1)
    lens = lens[:, 0] if lens.shape[1] == 1 else lens
    spec = TokenBudget(max_tokens=max_tokens, multiple_of=bsz_mult, oversize="drop")
    rounded = TokenBudget(
        max_tokens=max_tokens, multiple_of=bsz_mult, oversize="drop", pad_to_multiple_of=m
    )
    plan = rounded.plan(lens, seed=seed, epoch=1)
    same = spec.plan(_round_up(lens, m), seed=seed, epoch=1)
    assert np.array_equal(plan.indices, same.indices)
    assert np.array_equal(plan.offsets, same.offsets)
    assert np.array_equal(plan.skipped, same.skipped)
    padded = 0
    for batch in plan:  # within the budget at the padded width, field by field
        costs = _padded_cost(lens, batch, m)
        assert max(costs) <= max_tokens
        padded += sum(costs)
    assert plan.stats(lens).padded_slots == padded  # the figures count the padded width
    # a given order keeps the same rule
    order = np.random.default_rng(seed).permutation(len(lens))
    walked = rounded.plan(lens, order=order)
    assert np.array_equal(walked.indices, spec.plan(_round_up(lens, m), order=order).indices)
    assert all(max(_padded_cost(lens, b, m)) <= max_tokens for b in walked)


def test_pad_multiple_one_is_todays_plan_config_and_fingerprint():
    from padless import PlanSampler, TokenBudget, spec_from_dict, spec_to_dict

    lens = builtin_corpus()[:3000]
    old = TokenBudget(max_tokens=1024, multiple_of=8)
    one = TokenBudget(max_tokens=1024, multiple_of=8, pad_to_multiple_of=1)
    assert one == old and one.as_dict() == old.as_dict()
    assert "pad_to_multiple_of" not in old.as_dict() and old.describe() == one.describe()
    assert old.plan(lens, seed=2) == one.plan(lens, seed=2)
    assert "pad_to_multiple_of" not in old.plan(lens).info
    states = [PlanSampler(lens, s, seed=1).state_dict()["fingerprint"] for s in (old, one)]
    assert states[0] == states[1]
    eight = TokenBudget(max_tokens=1024, multiple_of=8, pad_to_multiple_of=8)
    assert eight.as_dict()["pad_to_multiple_of"] == 8
    assert spec_from_dict(spec_to_dict(eight)) == eight
    assert PlanSampler(lens, eight, seed=1).state_dict()["fingerprint"] != states[0]
    assert eight.describe() == "token_budget(max_tokens=1024, multiple_of=8, pad_to_multiple_of=8)"


@pytest.mark.parametrize(
    ("value", "error"),
    [(0, ValueError), (-8, ValueError), (2**31 + 1, ValueError), (2**70, ValueError),
     (8.0, TypeError), (True, TypeError), ("8", TypeError), (None, TypeError)],
)  # fmt: skip
def test_pad_multiple_refuses_bad_values(value, error):
    from padless import Buckets, ExactLength, TokenBudget

    makers = [
        lambda: TokenBudget(max_tokens=64, pad_to_multiple_of=value),
        lambda: Buckets(num_buckets=2, max_tokens=64, pad_to_multiple_of=value),
        lambda: ExactLength(batch_size=4, pad_to_multiple_of=value),
        lambda: plan_token_budget([3], max_tokens=64, pad_to_multiple_of=value),
    ]
    for make in makers:
        with pytest.raises(error, match="pad_to_multiple_of"):
            make()


def test_pad_multiple_oversize_names_the_padded_width():
    from padless import Cost, TokenBudget

    with pytest.raises(
        ValueError, match=r"index 1 has padded width 16 .*pad_to_multiple_of=8.*max_tokens=12"
    ):
        TokenBudget(max_tokens=12, pad_to_multiple_of=8).plan([3, 9, 2])
    plan = TokenBudget(max_tokens=12, pad_to_multiple_of=8, oversize="drop").plan([3, 9, 2])
    assert plan.skipped.tolist() == [1] and sorted(plan.indices.tolist()) == [0, 2]
    # a cost budget counts the padded width too: cost(16) = 16 + 16**2
    cost = Cost(quadratic=1.0)
    with pytest.raises(ValueError, match="padded width 16"):
        TokenBudget(max_tokens=64, cost=cost, max_cost=200.0, pad_to_multiple_of=8).plan([3, 9])
    plan = TokenBudget(max_tokens=64, cost=cost, max_cost=300.0, pad_to_multiple_of=8).plan(
        [3, 9, 2]
    )
    for b in plan:  # count × cost(width) within max_cost
        w = int(_round_up([3, 9, 2], 8)[b].max())
        assert len(b) * (w + w * w) <= 300


def test_pad_multiple_stats_costs_and_windows_count_the_width():
    from padless import Cost, PlanSampler, TokenBudget

    lens = np.random.default_rng(5).integers(1, 64, 700)
    spec = TokenBudget(max_tokens=1024, pad_to_multiple_of=8)
    sampler = PlanSampler(lens, spec, seed=0, world_size=2, balance=True)
    plan, _ = sampler.epoch_plan(0)
    padded = sum(sum(_padded_cost(lens, b, 8)) for b in plan)
    stats = sampler.stats()
    assert stats["padded_slots"] == padded
    assert stats["padding_fraction"] == pytest.approx(1 - lens.sum() / padded)
    assert stats["pad_to_multiple_of"] == 8
    costs = sampler.planner.costs(plan)
    assert costs.tolist() == [sum(_padded_cost(lens, b, 8)) for b in plan]
    with_cost = PlanSampler(lens, TokenBudget(max_tokens=1024, cost=Cost(), pad_to_multiple_of=8))
    assert with_cost.stats()["real_work"] == pytest.approx(
        with_cost.stats()["real_tokens"] / with_cost.stats()["padded_slots"]
    )
    windowed = PlanSampler(lens, spec, seed=0, window=200)
    got = [b for b in windowed]
    assert sorted(i for b in got for i in b) == list(range(len(lens)))
    assert all(max(_padded_cost(lens, b, 8)) <= 1024 for b in got)
    wstats = windowed.stats()
    assert wstats["padded_slots"] == sum(sum(_padded_cost(lens, b, 8)) for b in got)


def test_pad_multiple_from_the_command_line(tmp_path):
    from padless.cli import main

    lens = np.random.default_rng(1).integers(1, 64, 300)
    np.save(tmp_path / "lengths.npy", lens)
    out = tmp_path / "plan.npz"
    main(["plan", str(tmp_path / "lengths.npy"), "-o", str(out), "--strategy", "token_budget",
          "--max-tokens", "512", "--set", "pad_to_multiple_of=8"])  # fmt: skip
    plan = BatchPlan.load(out)
    assert plan.info["pad_to_multiple_of"] == 8
    assert all(max(_padded_cost(lens, b, 8)) <= 512 for b in plan)
    assert plan.stats(lens).padded_slots == sum(sum(_padded_cost(lens, b, 8)) for b in plan)
