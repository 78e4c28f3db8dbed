"""plan_exact_length: properties, size rules, leftovers, errors, kernels, determinism and golden."""

import hashlib
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from padless import _kernels as K
from padless import builtin_corpus
from padless.sampling.shortcuts import ExactLengthSampler, plan_exact_length


def expected_size(length, *, batch_size=None, max_tokens=None, batch_sizes=None, multiple_of=1):
    """The size rule written out again, independently of the planner."""
    if max_tokens is not None:
        raw = max_tokens // max(length, 1)
    elif batch_sizes:
        keys = [k for k in sorted(batch_sizes) if k <= length]
        raw = batch_sizes[keys[-1]] if keys else batch_size
    else:
        raw = batch_size
    raw = max(raw, 1)
    return raw // multiple_of * multiple_of if raw >= multiple_of else raw


def key_of(lens, i):
    return tuple(np.atleast_1d(lens[i]).tolist())


def size_of(lens, i):
    return int(np.max(lens[i]))


@st.composite
def exact_cases(draw):
    n = draw(st.integers(0, 120))
    fields = draw(st.sampled_from([1, 1, 2]))
    top = draw(st.integers(1, 12))
    low = draw(st.sampled_from([0, 1]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    lens = rng.integers(low, top + 1, (n, fields) if fields > 1 else n)
    way = draw(st.sampled_from(["batch_size", "max_tokens", "batch_sizes"]))
    kw = {}
    if way == "batch_size":
        kw["batch_size"] = draw(st.integers(1, 9))
    elif way == "max_tokens":
        kw["max_tokens"] = draw(st.integers(1, 40))
        kw["oversize"] = draw(st.sampled_from(["error", "drop"]))
        if lens.size:
            lens = np.maximum(lens, 1)
    else:
        keys = draw(st.lists(st.integers(0, top), min_size=1, max_size=4, unique=True))
        kw["batch_sizes"] = {k: draw(st.integers(1, 9)) for k in keys}
        kw["batch_size"] = draw(st.integers(1, 9))
    kw["multiple_of"] = draw(st.sampled_from([1, 1, 2, 4]))
    kw["max_length"] = draw(st.sampled_from([None, None, max(top - 2, 1)]))
    kw["leftovers"] = draw(st.sampled_from(["partial", "drop", "merge"]))
    kw["include_partial"] = draw(st.booleans())
    kw["seed"] = draw(st.integers(0, 3))
    kw["epoch"] = draw(st.integers(0, 3))
    return lens, kw


@given(exact_cases())
def test_every_index_once_one_length_per_batch_sizes_follow_the_rule(case):
    lens, kw = case
    n = lens.shape[0]
    too_long = [
        i for i in range(n) if kw["max_length"] is not None and size_of(lens, i) > kw["max_length"]
    ]
    # a sequence the budget cannot hold alone is refused, or left out with oversize="drop"
    limit = kw.get("max_tokens")
    over = [i for i in range(n) if limit and i not in too_long and size_of(lens, i) > limit]
    if over and kw.get("oversize") == "error":
        with pytest.raises(ValueError, match=f"index {over[0]} has length .* exceeds max_tokens"):
            plan_exact_length(lens, **kw)
        return
    plan = plan_exact_length(lens, **kw)
    rule = {k: kw.get(k) for k in ("batch_size", "max_tokens", "batch_sizes", "multiple_of")}
    # each index exactly once, in a batch or reported
    both = np.concatenate([plan.indices, plan.skipped])
    assert sorted(both.tolist()) == list(range(n))
    assert np.all(np.diff(plan.skipped) > 0)
    assert plan.info["too_long"] == len(too_long)
    assert plan.info["over_budget"] == len(over)
    assert set(too_long) | set(over) <= set(plan.skipped.tolist())
    assert plan.skipped.size == len(too_long) + len(over) + plan.info["dropped_leftovers"]
    if limit:  # never a batch over the budget
        assert all(b.size * max(size_of(lens, int(i)) for i in b) <= limit for b in plan)
    too_long = too_long + over
    assert all(b.size > 0 for b in plan)
    merged = plan.info["merged_batches"]
    exact = list(plan)[: len(plan) - merged]
    # every exact batch holds one length (one length tuple for pairs), at most its size
    per_length = {}
    for b in exact:
        keys = {key_of(lens, int(i)) for i in b}
        assert len(keys) == 1
        (key,) = keys
        per_length.setdefault(key, []).append(b.size)
    mode = kw["leftovers"]
    if not kw["include_partial"] and mode == "partial":
        mode = "drop"
    kept = Counter(key_of(lens, i) for i in range(n) if i not in set(too_long))
    for key, count in kept.items():
        size = expected_size(max(key), **rule)
        full, rest = divmod(count, size)
        want = [size] * full + ([rest] if rest and mode == "partial" else [])
        assert sorted(per_length.get(key, []), reverse=True) == want
    assert plan.info["leftover_items"] == sum(
        c % expected_size(max(k), **rule) for k, c in kept.items()
    )
    # merged batches hold at most the size of their longest member; with include_partial=False
    # each but the last was closed because the next leftover (in pool order) did not fit (greedy);
    # otherwise there are no more than greedy makes, with no more padding
    pool = [b.tolist() for b in list(plan)[len(plan) - merged :]]
    for j, b in enumerate(pool):
        longest = max(size_of(lens, i) for i in b)
        assert len(b) <= expected_size(longest, **rule)
        if j + 1 < len(pool) and not kw["include_partial"]:
            grown = max(longest, size_of(lens, pool[j + 1][0]))
            assert len(b) + 1 > expected_size(grown, **rule)
    if pool and kw["include_partial"]:
        flat = [i for b in pool for i in b]
        sizes = np.array([size_of(lens, i) for i in flat], dtype=np.int64)
        caps = np.array([expected_size(int(x), **rule) for x in sizes], dtype=np.int64)
        greedy = K.capped_ends(sizes, caps)
        assert len(pool) <= len(greedy)  # no more batches than greedy...

        def pad(batches):
            return sum(len(b) * max(sizes[b]) - sizes[b].sum() for b in batches)

        bounds = np.concatenate([[0], greedy])
        greedy_batches = [np.arange(a, z) for a, z in zip(bounds[:-1], bounds[1:], strict=True)]
        ours, at = [], 0
        for b in pool:
            ours.append(np.arange(at, at + len(b)))
            at += len(b)
        assert pad(ours) <= pad(greedy_batches)  # ...and no more padding
    if mode == "merge" and not kw["include_partial"]:
        dropped = sorted(set(plan.skipped.tolist()) - set(too_long))
        assert len(dropped) == plan.info["dropped_leftovers"]
        if dropped:  # the last pooled batch, incomplete, went
            assert len(dropped) < expected_size(max(size_of(lens, i) for i in dropped), **rule)
        elif pool:
            last = pool[-1]
            assert len(last) == expected_size(max(size_of(lens, i) for i in last), **rule)
    if mode != "merge":
        assert merged == 0
        assert plan.stats(lens).padding_fraction == 0.0


@given(st.integers(0, 3), st.integers(0, 3), st.integers(1, 8))
def test_same_inputs_same_plan(seed, epoch, batch_size):
    lens = np.random.default_rng(7).integers(1, 9, 200)
    a = plan_exact_length(lens, batch_size=batch_size, seed=seed, epoch=epoch)
    b = plan_exact_length(lens.tolist(), batch_size=batch_size, seed=seed, epoch=epoch)
    assert a == b and a.info == b.info


def test_epochs_and_seeds_change_membership_not_shape():
    lens = builtin_corpus()
    plans = [
        plan_exact_length(lens, max_tokens=2048, seed=s, epoch=e)
        for s, e in ((0, 0), (0, 1), (1, 0))
    ]
    members = [{frozenset(b.tolist()) for b in p} for p in plans]
    assert members[0] != members[1] and members[0] != members[2] and members[1] != members[2]
    assert all(np.array_equal(p.sizes, plans[0].sizes) for p in plans)


def test_within_length_order_is_a_uniform_shuffle():
    # 6 items of one length, 720 orders: each position sees each item about equally often
    lens = np.full(6, 4)
    firsts = Counter(
        int(plan_exact_length(lens, batch_size=6, epoch=e).indices[0]) for e in range(1200)
    )
    assert set(firsts) == set(range(6))
    assert max(firsts.values()) < 1.5 * 1200 / 6


def _digest(plan):
    h = hashlib.sha256()
    for arr in (plan.indices, plan.offsets, plan.skipped):
        h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


def test_golden_small():
    lens = [3, 5, 3, 3, 5, 2, 3, 5, 5, 5]
    plan = plan_exact_length(lens, batch_size=2, seed=0, epoch=0)
    assert [b.tolist() for b in plan] == GOLDEN_SMALL
    merge = plan_exact_length(lens, batch_size=3, leftovers="merge", seed=1, epoch=2)
    assert [b.tolist() for b in merge] == GOLDEN_MERGE


# lengths 2: {5}; 3: {0, 2, 3, 6}; 5: {1, 4, 7, 8, 9}; batches come in length order
GOLDEN_SMALL = [[5], [6, 3], [2, 0], [7, 1], [4, 9], [8]]
# full batches first, then the pooled leftovers 5 (len 2), 6 (len 3), 1 and 4 (len 5), cut
# where they pad least: [5, 6] pads 1 slot, [1, 4] none (greedy [5, 6, 1], [4] would pad 5)
GOLDEN_MERGE = [[2, 0, 3], [7, 9, 8], [5, 6], [1, 4]]
GOLDEN_CORPUS = ["b9752bd1e3be7cbb", "76efb4abb73391fa", "52e695c1fb0966f5"]


def test_golden_corpus():
    en, pairs = builtin_corpus(), builtin_corpus(["en", "es"])
    got = [
        _digest(plan_exact_length(en, max_tokens=4096, seed=0, epoch=0)),
        _digest(plan_exact_length(en, batch_size=64, leftovers="merge", seed=3, epoch=1)),
        _digest(plan_exact_length(pairs, batch_size=8, leftovers="drop", seed=5, epoch=0)),
    ]
    assert got == GOLDEN_CORPUS


def test_leftover_modes_on_the_corpus():
    en = builtin_corpus()
    partial = plan_exact_length(en, batch_size=64)
    drop = plan_exact_length(en, batch_size=64, leftovers="drop")
    merge = plan_exact_length(en, batch_size=64, leftovers="merge")
    assert partial.stats(en).padding_fraction == 0.0
    assert drop.stats(en).padding_fraction == 0.0
    assert drop.info["dropped_leftovers"] == partial.info["leftover_items"] == drop.skipped.size
    assert set(drop.indices.tolist()) | set(drop.skipped.tolist()) == set(range(en.size))
    stats = merge.stats(en)
    assert 0 < stats.padding_fraction < 0.005
    assert merge.info["merged_batches"] > 0 and merge.skipped.size == 0
    # as few batches as full ones need (the least-padding cuts may leave several a little short)
    assert len(merge) == -(-en.size // 64)
    strict = plan_exact_length(en, batch_size=64, leftovers="merge", include_partial=False)
    assert np.all(strict.sizes == 64)
    assert strict.skipped.size == strict.info["dropped_leftovers"] == en.size % 64


def test_pairs_need_no_padding_in_either_field():
    pairs = builtin_corpus(["en", "es"])
    plan = plan_exact_length(pairs, max_tokens=4096)
    stats = plan.stats(pairs)
    assert stats.padding_fraction == 0.0 and stats.sentences == pairs.shape[0]
    merge = plan_exact_length(pairs, max_tokens=4096, leftovers="merge")
    assert merge.stats(pairs).padding_fraction < 0.05


def test_max_tokens_sizes_and_over_budget():
    lens = np.array([10] * 7 + [3] * 5 + [50])
    # 50 > max_tokens: no batch may hold it (a batch of one would pass the budget)
    with pytest.raises(ValueError, match=r"index 12 has length 50, which exceeds max_tokens=30"):
        plan_exact_length(lens, max_tokens=30)
    plan = plan_exact_length(lens, max_tokens=30, oversize="drop")
    got = sorted((int(lens[b[0]]), b.size) for b in plan)
    assert got == [(3, 5), (10, 1), (10, 3), (10, 3)]
    assert plan.skipped.tolist() == [12]
    assert plan.info["over_budget"] == 1 and plan.info["too_long"] == 0
    skip = plan_exact_length(lens, max_tokens=30, max_length=30)  # a cut-off: no error
    assert skip.skipped.tolist() == [12] and skip.info["too_long"] == 1
    assert skip.info["over_budget"] == 0


def test_multiple_of_rounds_down_but_keeps_small_sizes():
    lens = np.array([4] * 40 + [100] * 3)
    plan = plan_exact_length(lens, max_tokens=100, multiple_of=8)
    # 100 // 4 = 25 rounds down to 24; 100 // 100 = 1 stays below the multiple
    assert sorted((int(lens[b[0]]), b.size) for b in plan) == [(4, 16), (4, 24)] + [(100, 1)] * 3
    plan = plan_exact_length(lens, max_tokens=300, multiple_of=8)
    assert {int(b.size) for b in plan if lens[b[0]] == 100} == {3}
    plan = plan_exact_length(lens, batch_size=10, multiple_of=4)
    assert {int(b.size) for b in plan if lens[b[0]] == 4} == {8}


def test_step_schedule():
    lens = np.array([1, 2, 5, 6, 20, 30] * 10)
    plan = plan_exact_length(lens, batch_sizes={5: 4, 20: 2}, batch_size=10)
    full = {}
    for b in plan:
        full[int(lens[b[0]])] = max(full.get(int(lens[b[0]]), 0), b.size)
    assert full == {1: 10, 2: 10, 5: 4, 6: 4, 20: 2, 30: 2}


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_power_of_two_group_sizes(k, delta):
    count = 2**k + delta
    lens = np.full(count, 7)
    plan = plan_exact_length(lens, batch_size=2**k, leftovers="drop")
    assert plan.indices.size == (count // 2**k) * 2**k
    assert plan.skipped.size == count % 2**k
    partial = plan_exact_length(lens, batch_size=2**k)
    assert partial.sizes.tolist() == [2**k] * (count // 2**k) + (
        [count % 2**k] if count % 2**k else []
    )


def test_empty_and_single():
    for kw in ({"batch_size": 3}, {"max_tokens": 10}, {"batch_sizes": {0: 2}}):
        for mode in ("partial", "drop", "merge"):
            empty = plan_exact_length(np.zeros(0, np.int64), leftovers=mode, **kw)
            assert len(empty) == 0 and empty.skipped.size == 0
            one = plan_exact_length([5], leftovers=mode, **kw)
            got = ([b.tolist() for b in one], one.skipped.tolist())
            assert got == (([], [0]) if mode == "drop" else ([[0]], []))
    assert len(plan_exact_length(np.zeros((0, 2), np.int64), batch_size=2)) == 0


def test_zero_lengths_work_without_max_tokens():
    lens = np.array([0, 0, 3, 0])
    plan = plan_exact_length(lens, batch_size=2)
    assert sorted((int(lens[b[0]]), b.size) for b in plan) == [(0, 1), (0, 2), (3, 1)]
    assert all(np.unique(lens[b]).size == 1 for b in plan)


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        ({}, ValueError, "exactly one of batch_size, max_tokens or batch_sizes"),
        ({"batch_size": 4, "max_tokens": 100}, ValueError, "batch_size and max_tokens"),
        ({"max_tokens": 100, "batch_sizes": {1: 2}}, ValueError, "max_tokens and batch_sizes"),
        ({"batch_size": 0}, ValueError, "batch_size must be a positive int, got 0"),
        ({"batch_size": -3}, ValueError, "batch_size must be a positive int, got -3"),
        ({"max_tokens": 0}, ValueError, "max_tokens must be a positive int, got 0"),
        ({"batch_size": 2.5}, TypeError, "batch_size must be an int"),
        ({"batch_size": True}, TypeError, "batch_size must be an int"),
        ({"batch_sizes": {}}, ValueError, "at least one"),
        ({"batch_sizes": [1, 2]}, TypeError, "batch_sizes must be a dict"),
        ({"batch_sizes": {1: 0}}, ValueError, "batch_sizes[1] must be a positive int, got 0"),
        ({"batch_sizes": {-1: 4}}, ValueError, "lengths in [0, 2**62], got -1"),
        ({"batch_sizes": {10**23: 4}}, ValueError, "lengths in [0, 2**62], got 10000"),
        ({"batch_sizes": {"1": 4}}, TypeError, "keys must be int lengths"),
        ({"batch_size": 2, "multiple_of": 0}, ValueError, "multiple_of must be a positive int"),
        ({"batch_size": 2, "max_length": 0}, ValueError, "max_length must be a positive int"),
        ({"batch_size": 2, "leftovers": "pad"}, ValueError, "leftovers must be one of"),
        ({"batch_size": 2, "include_partial": 0}, TypeError, "include_partial must be a bool"),
        ({"batch_size": 2, "seed": -1}, ValueError, "seed must be a non-negative int"),
        ({"batch_size": 2, "epoch": 1.0}, TypeError, "epoch must be an int"),
    ],
)
def test_errors_name_parameter_rule_and_value(kwargs, exc, message):
    with pytest.raises(exc) as info:
        plan_exact_length([3, 4, 5], **kwargs)
    assert message in str(info.value)
    if "epoch" not in kwargs:  # the sampler takes the same options (and no epoch)
        with pytest.raises(exc) as info:
            ExactLengthSampler([3, 4, 5], **kwargs)
        assert message in str(info.value)


def test_data_dependent_errors_are_raised_up_front():
    with pytest.raises(ValueError, match="length 0 at index 2; drop empty sequences"):
        plan_exact_length([3, 4, 0, 0], max_tokens=64)
    with pytest.raises(ValueError, match="length 0 at index 1"):
        ExactLengthSampler(np.array([[2, 3], [0, 0]]), max_tokens=64)
    # an empty source with a non-empty target is fine: size is the max over fields
    assert len(plan_exact_length(np.array([[0, 3], [0, 3]]), max_tokens=64)) == 1
    with pytest.raises(ValueError, match="index 0 has length 2, below the smallest key 5"):
        plan_exact_length([2, 7], batch_sizes={5: 3})
    with pytest.raises(ValueError, match="index 0 has length 2, below the smallest key 5"):
        ExactLengthSampler([2, 7], batch_sizes={5: 3})
    # lengths skipped by max_length need no size
    plan = plan_exact_length([9, 7], batch_sizes={1: 3}, max_length=8)
    assert plan.skipped.tolist() == [0]
    with pytest.raises(ValueError, match=r"lengths must be whole numbers in \[0"):
        plan_exact_length([3, -1], batch_size=2)


@given(
    st.lists(st.integers(0, 6), max_size=12),
    st.lists(st.integers(0, 4), min_size=1, max_size=6),
    st.integers(0, 2),
)
def test_exact_split_kernel_matches_reference(counts, sizes, mode):
    counts = (counts + [0] * len(sizes))[: len(sizes)]
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    order = np.random.default_rng(len(counts)).permutation(int(starts[-1])).astype(np.int64)
    run_size = np.array(sizes, dtype=np.int64)
    a_order, b_order = order.copy(), order.copy()
    kept, ends, rest, rest_run = K.exact_split(a_order, starts, run_size, mode)
    r_kept, r_ends, r_rest, r_run = K.exact_split_reference(b_order, starts, run_size, mode)
    assert kept == r_kept
    assert np.array_equal(a_order[:kept], b_order[:kept])
    for x, y in ((ends, r_ends), (rest, r_rest), (rest_run, r_run)):
        assert np.array_equal(x, y)


@given(st.lists(st.integers(1, 30), max_size=60), st.integers(1, 100))
def test_capped_ends_kernel_matches_reference(sizes, budget):
    sizes = np.sort(np.array(sizes, dtype=np.int64))
    caps = np.maximum(budget // np.maximum(sizes, 1), 1).astype(np.int64)
    assert np.array_equal(K.capped_ends(sizes, caps), K.capped_ends_reference(sizes, caps))
    shuffled = np.random.default_rng(budget).permutation(sizes)
    caps = np.maximum(budget // np.maximum(shuffled, 1), 1).astype(np.int64)
    assert np.array_equal(K.capped_ends(shuffled, caps), K.capped_ends_reference(shuffled, caps))


# --------------------------------------------------------------------------- pad_to_multiple_of


def _round_up(lengths, m):
    return -(-np.asarray(lengths, dtype=np.int64) // m) * m


@given(
    st.lists(st.integers(1, 70), min_size=1, max_size=150),
    st.sampled_from([1, 4, 8]),
    st.sampled_from(["partial", "drop", "merge"]),
    st.integers(0, 2),
)
def test_pad_multiple_batches_one_padded_width(lengths, m, leftovers, seed):
    from padless import ExactLength

    lens = np.array(lengths, dtype=np.int64)
    spec = ExactLength(max_tokens=200, leftovers=leftovers, max_length=60, pad_to_multiple_of=m)
    plan = spec.plan(lens, seed=seed)
    same = ExactLength(max_tokens=200, leftovers=leftovers, max_length=60).plan(
        _round_up(lens, m), seed=seed
    )
    assert np.array_equal(plan.indices, same.indices)
    assert np.array_equal(plan.offsets, same.offsets)
    assert np.array_equal(plan.skipped, same.skipped)
    # max_length is compared with the padded width (so no width over 60 is batched)
    assert plan.info["too_long"] == int((_round_up(lens, m) > 60).sum())
    for b in plan:
        widths = _round_up(lens[b], m)
        assert len(b) * int(widths.max()) <= 200
        if leftovers != "merge":
            assert np.unique(widths).size == 1  # one padded width per batch: no padding past it


def test_pad_multiple_two_fields_and_config():
    from padless import ExactLength, PlanSampler

    lens = np.array([[3, 5], [4, 6], [9, 2], [8, 1], [3, 7]])
    plan = ExactLength(batch_size=4, pad_to_multiple_of=4).plan(lens)
    # rounded pairs: (4, 8), (4, 8), (12, 4), (8, 4), (4, 8)
    assert sorted(sorted(b.tolist()) for b in plan) == [[0, 1, 4], [2], [3]]
    assert plan.stats(lens).padded_slots == 3 * (4 + 8) + (12 + 4) + (8 + 4)
    prints = [
        PlanSampler(lens, ExactLength(batch_size=4, **kw)).state_dict()["fingerprint"]
        for kw in ({}, {"pad_to_multiple_of": 1}, {"pad_to_multiple_of": 4})
    ]
    assert prints[0] == prints[1] != prints[2]
