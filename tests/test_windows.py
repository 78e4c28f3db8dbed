"""Windowed plans (issue 14): layout and mixing, window plans equal to the specs' plans, memory-
mapped lengths in bounded memory, thread-count independence, windowed samplers."""

from __future__ import annotations

import json
import math
import os
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import padless
from padless import _kernels as K
from padless.core import _rng
from padless.planners import strategies
from padless.planners.windows import (
    WindowedPlanner,
    WindowLayout,
    _to_global,
    child_sequence,
    plan_windows,
    window_seed,
)

KW = K.windows
RNG = np.random.default_rng(11)
LENS = np.clip(RNG.lognormal(3.2, 0.7, 3000), 1, 400).astype(np.int32)
PAIRS = np.stack([LENS, np.clip(LENS * 1.2, 1, 420).astype(np.int32)], axis=1)

# one example of every registered strategy; a new strategy adds its example here
EXAMPLES = {
    "token_budget": [
        padless.TokenBudget(max_tokens=700),
        padless.TokenBudget(max_tokens=300, max_sentences=9, multiple_of=4, oversize="drop"),
    ],
    "exact_length": [
        padless.ExactLength(batch_size=4),
        padless.ExactLength(max_tokens=500, leftovers="merge"),
    ],
    "buckets": [
        padless.Buckets(num_buckets=5, max_tokens=800),
        padless.Buckets(boundaries=[20, 60], batch_size=7),
    ],
    "packing": [
        padless.Packing(capacity=512, rows_per_batch=3),
        padless.Packing(capacity=128, max_per_row=4, oversize="split"),
    ],
    "fixed_shapes": [padless.FixedShapes(shapes=[(16, 40), (6, 120), (2, 420)])],
    "decomposition": [],  # no windowed form: its curriculum orders the whole epoch (refused)
}


def test_every_registered_strategy_has_an_example():
    missing = sorted(set(strategies()) - set(EXAMPLES))
    assert not missing, f"add a windowed example spec for {missing}"


ALL_SPECS = [
    pytest.param(spec, id=f"{name}-{i}")
    for name, specs in EXAMPLES.items()
    for i, spec in enumerate(specs)
]


def reference_windows(lengths, spec, window, seed, epoch):
    """Each window planned by the spec itself over its items (what plan_windows promises), with
    settings fitted to the lengths (bucket boundaries) fitted to all of them."""
    spec = WindowedPlanner(spec, lengths, window).window_spec
    layout = WindowLayout(lengths.shape[0], window)
    member = layout.membership(seed, epoch)
    for w in range(layout.num_windows):
        items = member.items(w)
        local = spec.plan(
            np.asarray(lengths[items], dtype=np.int64), seed=window_seed(seed, epoch, w)
        )
        yield _to_global(local, items, lengths.shape[0])


# ------------------------------------------------------------------ layout and mixing
@given(st.integers(0, 5000), st.integers(1, 3000), st.integers(0, 3), st.integers(0, 3))
def test_windows_partition_the_items(n, window, seed, epoch):
    layout = WindowLayout(n, window)
    member = layout.membership(seed, epoch)
    parts = [member.items(w) for w in range(layout.num_windows)]
    allitems = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    assert np.array_equal(np.sort(allitems), np.arange(n))
    assert all(p.size <= layout.blocks_per_window * layout.block for p in parts)
    assert layout.block <= 4096 and layout.blocks_per_window * layout.block <= window


@given(
    st.integers(1, 400),
    st.integers(1, 50),
    st.integers(0, 399),
    st.lists(st.integers(0, 100), max_size=12),
)
def test_window_items_kernel_matches_reference(n, block, rotation, blocks):
    rotation %= n
    nb = -(-n // block)
    ids = np.array([b % nb for b in blocks], dtype=np.int64)
    got = KW.window_items(n, block, rotation, ids)
    assert np.array_equal(got, KW.window_items_reference(n, block, rotation, ids))


@given(
    arrays(
        np.int32, st.tuples(st.integers(0, 60), st.integers(1, 3)), elements=st.integers(0, 1000)
    )
)
def test_scan_and_gather_kernels_match_references(rows):
    assert KW.scan_lengths(rows) == KW.scan_lengths_reference(rows)
    items = np.arange(rows.shape[0], dtype=np.int64)[::-1].copy()
    assert np.array_equal(KW.gather_rows(rows, items), KW.gather_rows_reference(rows, items))


def test_blocks_are_runs_of_consecutive_items():
    layout = WindowLayout(1_000_000, 100_000)
    items = layout.items(2, seed=4, epoch=1)
    jumps = np.count_nonzero(np.diff(items) != 1)
    assert layout.block == 4000 and layout.blocks_per_window == 25
    assert jumps <= 2 * layout.blocks_per_window  # a block is at most two runs (the wrap at N)


def test_epochs_change_membership_and_seeds_are_streams():
    layout = WindowLayout(20_000, 2_000)
    a = layout.items(0, seed=1, epoch=0)
    assert np.array_equal(a, layout.items(0, seed=1, epoch=0))
    assert not np.array_equal(np.sort(a), np.sort(layout.items(0, seed=1, epoch=1)))
    assert not np.array_equal(np.sort(a), np.sort(layout.items(0, seed=0, epoch=1)))
    parent = _rng.seed_sequence(3, 2, _rng.WINDOWS)
    assert np.array_equal(
        child_sequence(3, 2, _rng.WINDOWS, 4).generate_state(4),
        parent.spawn(5)[4].generate_state(4),
    )


def test_far_apart_items_share_a_window_at_the_expected_rate():
    """Over 600 epochs two items half the corpus apart (and 19 block pairs further) share a
    window as often as a random block bijection says: (k - 1) / (blocks - 1) per epoch."""
    n, window, epochs = 16_000, 1_600, 600
    layout = WindowLayout(n, window)
    assert (layout.block, layout.blocks_per_window, layout.num_blocks) == (100, 16, 160)
    pairs = [(5 + 400 * j, 8_005 + 400 * j) for j in range(20)]
    together = np.zeros(len(pairs), dtype=np.int64)
    near = 0  # items 30 apart: same block unless a boundary falls between them (p = 0.3)
    for epoch in range(epochs):
        member = layout.membership(0, epoch)
        where = np.empty(n, dtype=np.int64)
        for w in range(layout.num_windows):
            where[member.items(w)] = w
        together += [where[i] == where[j] for i, j in pairs]
        near += where[1000] == where[1030]
    p = layout.share_probability(8_000)
    assert abs(p - 15 / 159) < 1e-12
    mean, sd = epochs * p, np.sqrt(epochs * p * (1 - p))
    assert np.all(np.abs(together - mean) < 4.5 * sd)  # each pair
    pooled_sd = sd * np.sqrt(len(pairs))
    assert abs(together.sum() - mean * len(pairs)) < 4 * pooled_sd  # all pairs together
    q = layout.share_probability(30)
    assert abs(near - epochs * q) < 4 * np.sqrt(epochs * q * (1 - q))
    assert together.min() > 0  # every pair met


def test_layout_refuses_what_is_no_window_number_distance_or_size():
    """Issue 24: items(1.5) was neither window 1 nor 2, share_probability(nan) answered."""
    layout = WindowLayout(1000, 100)
    np.testing.assert_array_equal(layout.items(np.int64(2)), layout.items(2))
    for w in (1.5, True, None, "1", np.float64(1.0)):
        with pytest.raises(TypeError, match=r"w \(the window number\) must be an int"):
            layout.items(w)
    for w in (-1, layout.num_windows, 2**70):
        with pytest.raises(ValueError, match=r"w \(the window number\) must be in \[0, 11\)"):
            layout.items(w)
    with pytest.raises(ValueError, match=r"w \(the window number\)"):
        layout.membership(0, 0).items(11)
    for distance in (math.nan, math.inf, 1.5, True, None, "8"):
        with pytest.raises(TypeError, match="distance must be an int"):
            layout.share_probability(distance)
    with pytest.raises(ValueError, match="distance must be a non-negative int"):
        layout.share_probability(-1)
    assert layout.share_probability(2**70) == layout.share_probability(2**70 % 1000)
    for name, kw in (("seed", {"seed": -1}), ("epoch", {"epoch": 1.0})):
        with pytest.raises((TypeError, ValueError), match=name):
            layout.items(0, **kw)
    with pytest.raises(ValueError, match=r"n must be <= 2\*\*62"):
        WindowLayout(2**70, 100)


# ------------------------------------------------------------------ window plans
@pytest.mark.parametrize("spec", ALL_SPECS)
@pytest.mark.parametrize("lengths", [LENS, PAIRS], ids=["1d", "pairs"])
def test_every_spec_plans_each_window_as_it_plans_those_items(spec, lengths):
    plans = list(plan_windows(lengths, spec, window=700, seed=2, epoch=3))
    refs = list(reference_windows(lengths, spec, 700, 2, 3))
    assert len(plans) == len(refs) == 5
    for got, ref in zip(plans, refs, strict=True):
        assert type(got) is type(ref) and got == ref
        assert {k: v for k, v in got.info.items()} == ref.info
    planned = np.concatenate([np.unique(p.indices) for p in plans] + [p.skipped for p in plans])
    assert np.array_equal(np.sort(planned), np.arange(lengths.shape[0]))


@given(
    arrays(np.int64, st.integers(0, 400), elements=st.integers(0, 90)),
    st.integers(1, 150),
    st.sampled_from([np.int32, np.int64, np.uint16]),
    st.booleans(),
    st.integers(0, 3),
    st.data(),
)
def test_fused_kernels_equal_the_planners(lengths, window, dtype, column, seed, data):
    """The compiled token-budget and packing window paths give the specs' own plans."""
    lens = lengths.astype(dtype)
    if column:
        lens = lens[:, None]
    budget = padless.TokenBudget(
        max_tokens=data.draw(st.sampled_from([None, 60, 95, 400])),
        max_sentences=data.draw(st.sampled_from([None, 1, 5])),
        multiple_of=data.draw(st.sampled_from([1, 2, 8])),
        oversize="drop",
    )
    packing = padless.Packing(
        capacity=data.draw(st.sampled_from([90, 100, 256])),
        max_per_row=data.draw(st.sampled_from([None, 1, 3])),
        rows_per_batch=data.draw(st.sampled_from([1, 2, 5])),
    )
    for spec in (budget, packing):
        if budget.max_tokens is None and spec is budget and budget.max_sentences is None:
            continue
        planner = WindowedPlanner(spec, lens, window)
        if lens.shape[0]:
            assert planner._fast is not None
        plans = list(plan_windows(lens, spec, window=window, seed=seed, epoch=1))
        assert plans == list(reference_windows(lens, spec, window, seed, 1))
        member = planner.layout.membership(seed, 1)
        counts = [planner.count_window(member, w, seed, 1) for w in range(planner.num_windows)]
        assert counts == [len(p) for p in plans]


@given(
    arrays(np.int64, st.integers(0, 300), elements=st.integers(0, 40)),
    st.sampled_from([40, 41, 64, 100]),
    st.sampled_from([0, 1, 2, 3, 7]),
)
def test_best_fit_by_runs_equals_best_fit_item_by_item(sizes, capacity, max_per_row):
    starts = np.zeros(41 + 1, dtype=np.int64)
    np.add.at(starts, sizes + 1, 1)
    starts = np.cumsum(starts)
    row_of, rows = KW.best_fit_runs(starts, capacity, max_per_row)
    walk = np.sort(sizes)[::-1].copy()
    ref_rows, ref_n = K.best_fit_rows(walk, capacity, max_per_row)
    assert rows == ref_n and np.array_equal(row_of, ref_rows)
    slow_rows, slow_n = KW.best_fit_runs_reference(starts, capacity, max_per_row)
    assert slow_n == rows and np.array_equal(slow_rows, row_of)
    visits = KW.best_fit_visits(starts, capacity, max_per_row)
    assert np.array_equal(visits, KW.best_fit_visits_reference(starts, capacity, max_per_row))
    expanded = np.repeat(visits[:, 0], visits[:, 2])  # the visits give every position's row
    assert np.array_equal(expanded, row_of)


@pytest.mark.parametrize(
    "spec", [EXAMPLES["token_budget"][0], EXAMPLES["packing"][0], EXAMPLES["buckets"][0]]
)
def test_one_and_two_threads_give_the_same_plans(spec):
    lens = np.clip(RNG.lognormal(3, 0.6, 60_000), 1, 500).astype(np.int32)
    one = list(plan_windows(lens, spec, window=5_000, seed=5, epoch=2, threads=1))
    two = list(plan_windows(lens, spec, window=5_000, seed=5, epoch=2, threads=2))
    assert len(one) == WindowLayout(60_000, 5_000).num_windows == 13 and one == two
    planner = WindowedPlanner(spec, lens, 5_000, threads=1)
    assert np.array_equal(planner.counts(5, 2, threads=1), planner.counts(5, 2, threads=2))
    assert planner.counts(5, 2).tolist() == [len(p) for p in one]


def test_padding_grows_as_windows_shrink(bible):
    """One window of everything pads as the global plan; smaller windows pad more (each batch
    spans a wider range of lengths), the cost the benchmark measures."""
    spec = padless.TokenBudget(max_tokens=4096, multiple_of=8)
    base = spec.plan(bible).stats(bible)
    padding = []
    for window in (2 * bible.shape[0], 10_000, 2_000):
        plans = list(plan_windows(bible, spec, window=window, seed=0))
        real = sum(p.stats(bible).real_tokens for p in plans)
        padded = sum(p.stats(bible).padded_slots for p in plans)
        assert real == base.real_tokens
        padding.append(1 - real / padded)
    assert padding[0] == pytest.approx(base.padding_fraction, abs=1e-12)
    assert padding[0] < padding[1] < padding[2]


# ------------------------------------------------------------------ memory-mapped lengths
def _rss_anon() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def _write_lengths(path, n, dtype=np.int32, chunk=5_000_000):
    out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=(n,))
    gen = np.random.default_rng(0)
    for lo in range(0, n, chunk):
        raw = gen.lognormal(np.log(23.0), 0.55, min(chunk, n - lo))
        out[lo : lo + raw.size] = np.clip(np.round(raw), 1, 1024)
    out.flush()
    del out


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc (Linux)")
def test_memory_mapped_5e7_lengths_plan_in_bounded_anonymous_memory(tmp_path):
    """5e7 int32 lengths (200 MB) memory-mapped: a whole epoch of windows of 1e6 adds far less
    anonymous memory than one int64 copy of the lengths (400 MB) would."""
    n = 50_000_000
    path = tmp_path / "lengths.npy"
    _write_lengths(path, n)
    lengths = np.load(path, mmap_mode="r")
    assert not lengths.flags.writeable
    spec = padless.TokenBudget(max_tokens=4096)
    base = _rss_anon()
    peak = 0
    count = planned = 0
    for plan in plan_windows(lengths, spec, window=1_000_000, seed=1, threads=2):
        peak = max(peak, _rss_anon() - base)
        count += 1
        planned += plan.indices.size
    assert count == WindowLayout(n, 1_000_000).num_windows == 51 and planned == n
    print(f"peak RssAnon above the baseline: {peak / 2**20:.0f} MiB")
    assert peak < 160 * 2**20, f"{peak / 2**20:.0f} MiB of anonymous memory above the baseline"
    assert np.array_equal(np.load(path, mmap_mode="r")[:5], lengths[:5])  # the file is unchanged


def test_a_path_to_npy_is_memory_mapped(tmp_path):
    path = tmp_path / "l.npy"
    np.save(path, LENS.astype(np.int64))
    planner = WindowedPlanner(padless.Packing(capacity=512), path, 500)
    assert isinstance(planner.lengths, np.memmap)
    plans = list(plan_windows(path, padless.Packing(capacity=512), window=500))
    assert plans == list(plan_windows(LENS, padless.Packing(capacity=512), window=500))


def test_a_pickled_planner_carries_mapped_lengths_as_their_file(tmp_path):
    import copy
    import pickle

    lengths = np.random.default_rng(5).integers(1, 300, 1_000_000).astype(np.int32)
    path = tmp_path / "l.npy"
    np.save(path, lengths)
    for spec in (padless.TokenBudget(max_tokens=2048), padless.Packing(capacity=512)):
        planner = WindowedPlanner(spec, path, 200_000)
        blob = pickle.dumps(planner)
        assert len(blob) < 20_000, len(blob)  # 4 MB of lengths: never in the pickle
        again = pickle.loads(blob)
        assert isinstance(again.lengths, np.memmap) and again.lengths.filename == str(path)
        member = planner.layout.membership(3, 1)
        for w in (0, planner.num_windows - 1):
            assert again.plan_window(member, w, 3, 1) == planner.plan_window(member, w, 3, 1)
        assert np.array_equal(again.counts(3, 1, threads=1), planner.counts(3, 1, threads=1))
    # a file that lost its lengths is refused on arrival, not read past its end
    np.save(path, lengths[:1000])
    with pytest.raises(ValueError, match=r"l\.npy changed: it holds \d+ bytes, fewer than"):
        pickle.loads(blob)
    # lengths in memory travel as they are; copies keep them
    pairs = WindowedPlanner(padless.TokenBudget(max_tokens=2048), PAIRS, 1000)  # (N, F) lengths
    member = pairs.layout.membership(0, 0)
    for clone in (pickle.loads(pickle.dumps(pairs)), copy.copy(pairs), copy.deepcopy(pairs)):
        assert clone.plan_window(member, 1, 0, 0) == pairs.plan_window(member, 1, 0, 0)


# ------------------------------------------------------------------ errors
def test_bad_input_is_refused_up_front_with_global_positions(tmp_path):
    spec = padless.TokenBudget(max_tokens=100)
    for window, exc, msg in [
        (0, ValueError, "window"),
        (True, TypeError, "window"),
        (2.5, TypeError, "window"),
    ]:
        with pytest.raises(exc, match=msg):
            plan_windows(LENS, spec, window=window)
    with pytest.raises(ValueError, match="threads"):
        plan_windows(LENS, spec, window=10, threads=0)
    lens = np.full(5_000_000, 7, dtype=np.int64)
    lens[3_100_000] = 2**31
    with pytest.raises(ValueError, match=r"got 2147483648 at position \[3100000\]"):
        plan_windows(lens, spec, window=100)
    lens[3_100_000] = 101
    with pytest.raises(
        ValueError, match="index 3100000 has length 101, which exceeds max_tokens=100"
    ):
        plan_windows(lens, spec, window=100)
    pairs = np.ones((2_000_000, 2), dtype=np.int32)
    pairs[1_500_000, 1] = -3
    with pytest.raises(ValueError, match=r"got -3 at position \[1500000, 1\]"):
        plan_windows(pairs, spec, window=100)
    with pytest.raises(ValueError, match="index 2 has length 0"):
        plan_windows([3, 4, 0, 5], padless.Buckets(boundaries=[3], max_tokens=10), window=2)
    with pytest.raises(TypeError, match="spec"):
        plan_windows(LENS, "token_budget", window=10)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="epoch"):
        plan_windows(LENS, spec, window=10, epoch=-1)
    with pytest.raises(TypeError, match="lengths"):
        plan_windows(np.array([1.5, 2]) > 1, spec, window=10)


def test_input_is_not_modified():
    lens = LENS.copy()
    list(plan_windows(lens, padless.Packing(capacity=512), window=300))
    assert np.array_equal(lens, LENS)


# ------------------------------------------------------------------ samplers
def _named_samplers():
    return {
        "token_budget": lambda **o: padless.TokenBudgetSampler(LENS, max_tokens=700, **o),
        "exact": lambda **o: padless.ExactLengthSampler(LENS, batch_size=4, **o),
        "buckets": lambda **o: padless.BucketSampler(LENS, num_buckets=4, max_tokens=900, **o),
        "packing": lambda **o: padless.PackingSampler(LENS, capacity=600, rows_per_batch=2, **o),
        "pairs": lambda **o: padless.PlanSampler(PAIRS, padless.TokenBudget(max_tokens=900), **o),
        "shapes": lambda **o: padless.PlanSampler(LENS, EXAMPLES["fixed_shapes"][0], **o),
    }


NAMED = [pytest.param(f, id=k) for k, f in _named_samplers().items()]


@pytest.mark.parametrize("make", NAMED)
@pytest.mark.parametrize("balance", [False, True])
def test_windowed_samplers_cover_the_epoch_with_equal_steps(make, balance):
    world = 3
    ranks = [
        make(window=400, seed=4, rank=r, world_size=world, balance=balance) for r in range(world)
    ]
    for s in ranks:
        s.set_epoch(1)
    got = [list(s) for s in ranks]
    assert len({len(g) for g in got}) == 1 and len(got[0]) == len(ranks[0])
    single = make(window=400, seed=4, balance=balance)
    single.set_epoch(1)
    ref = Counter(tuple(b) for b in single)
    seen = Counter(tuple(b) for g in got for b in g)
    assert not ref - seen and sum((seen - ref).values()) == ranks[0].repeated < world
    skipped = {int(i) for p in single.planner.plans(4, 1) for i in p.skipped}
    units = sorted(u for b in ref.elements() for u in b)
    assert units == sorted(set(range(LENS.shape[0])) - skipped)


@pytest.mark.parametrize("make", NAMED)
def test_windowed_resume_is_exact_and_states_are_tiny(make):
    world = 2
    full = [make(window=500, seed=1, rank=r, world_size=world) for r in range(world)]
    batches = [list(s) for s in full]
    steps = len(batches[0])
    for k in (0, 1, steps // 2, steps):
        s = make(window=500, seed=1, world_size=world)
        it = iter(s)
        for _ in range(k):
            next(it)
        state = json.loads(json.dumps(s.state_dict()))
        assert len(json.dumps(state)) < 300
        assert set(state) == {
            "version",
            "seed",
            "epoch",
            "position",
            "world_size",
            "fingerprint",
            "drop_last",
            "window",
        }
        for r in range(world):
            again = make(window=500, seed=1, rank=r, world_size=world)
            again.load_state_dict(state)
            assert list(again) == batches[r][k:]


def test_windowed_state_does_not_load_into_an_unwindowed_sampler():
    a = padless.TokenBudgetSampler(LENS, max_tokens=700, window=500)
    b = padless.TokenBudgetSampler(LENS, max_tokens=700)
    with pytest.raises(ValueError, match="window=500, this TokenBudgetSampler has window=None"):
        b.load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="window=500, this TokenBudgetSampler has window=400"):
        padless.TokenBudgetSampler(LENS, max_tokens=700, window=400).load_state_dict(a.state_dict())


def test_elastic_windowed_resume_with_balance_loses_and_repeats_nothing():
    def make(world, rank):
        return padless.PackingSampler(
            LENS, capacity=450, window=600, balance=True, world_size=world, rank=rank, seed=2
        )

    seen = []
    ranks = [make(4, r) for r in range(4)]
    its = [iter(s) for s in ranks]
    for _ in range(7):
        for it in its:
            seen.append(tuple(next(it)))
    state = ranks[0].state_dict()
    for r in range(3):
        s = make(3, r)
        s.load_state_dict(state)
        seen.extend(tuple(b) for b in s)
    ref = Counter(tuple(b) for b in make(1, 0))
    got = Counter(seen)
    assert not ref - got and sum((got - ref).values()) < 3


def test_len_counts_once_per_epoch_and_shuffle_false_repeats_epoch_zero():
    s = padless.TokenBudgetSampler(LENS, max_tokens=700, window=500, seed=3)
    n0 = len(s)
    cum = s._epochs._cum
    assert len(s) == n0 and s._epochs._cum is cum  # cached
    s.set_epoch(1)
    assert len(s) > 0 and s._epochs._cum is not cum
    still = padless.TokenBudgetSampler(LENS, max_tokens=700, window=500, seed=3, shuffle=False)
    first = list(still)
    still.set_epoch(5)
    assert list(still) == first


def test_windowed_stats_match_the_batches_delivered():
    from padless.core._schedule import step_imbalance

    for balance in (False, True):
        s = padless.TokenBudgetSampler(
            LENS, max_tokens=600, window=500, world_size=3, balance=balance
        )
        st_ = s.stats()
        assert (
            st_["windows"] == WindowLayout(3000, 500).num_windows == 7
            and st_["batches"] == s.planner.counts(0, 0).sum()
        )
        single = padless.TokenBudgetSampler(
            LENS, max_tokens=600, window=500, world_size=1, balance=balance
        )
        order = [tuple(b) for b in single]  # slot order (world size 1 gives the same slots)
        costs = np.array([len(b) * int(LENS[list(b)].max()) for b in order])
        if not balance:
            assert st_["imbalance"] == pytest.approx(step_imbalance(costs, 3, st_["steps"]))
        assert st_["real_tokens"] == int(LENS.sum())
        assert st_["padded_slots"] == int(costs.sum())


def test_windowed_sampler_errors_are_clear():
    s = padless.TokenBudgetSampler(LENS, max_tokens=700, window=500)
    with pytest.raises(ValueError, match="windowed sampler"):
        s.epoch_plan(0)
    with pytest.raises(ValueError, match="window must be a positive int"):
        padless.PackingSampler(LENS, capacity=600, window=0)
    assert s.max_tokens == 700 and "window=500" in repr(s)
    b = padless.BucketSampler(LENS, num_buckets=3, batch_size=8, window=500)
    assert b.boundaries.tolist() == padless.bucket_boundaries(LENS, 3).tolist()


@given(
    arrays(np.int64, st.integers(0, 300), elements=st.integers(0, 60)),
    st.sampled_from([0, 1, 59, 60, 64, 100, 1000]),
    st.sampled_from([0, 1, 2, 3, 7, 16]),
    st.integers(0, 61),
)
def test_budget_a_batch_at_a_time_equals_item_by_item(sizes, max_tokens, max_sentences, runs):
    if max_tokens:
        runs = min(runs, max_tokens + 1)
    starts = np.zeros(62, dtype=np.int64)
    np.add.at(starts, sizes + 1, 1)
    starts = np.cumsum(starts)
    values = np.arange(runs, dtype=np.int64)
    ref = K.budget_ends_runs(values, starts[: runs + 1], max_tokens, max_sentences, 1)
    assert np.array_equal(KW.budget_ends_runs1(starts, runs, max_tokens, max_sentences), ref)


@pytest.mark.parametrize("spec", ALL_SPECS)
@pytest.mark.parametrize("dtype", [np.int32, np.uint16, np.int8])
def test_narrow_integer_lengths_plan_as_int64_lengths_without_a_copy(spec, dtype):
    """Spec.plan keeps 32-bit (or narrower) integer arrays as they are: same plans as int64."""
    for lengths in (LENS, PAIRS):
        narrow = np.minimum(lengths, 127).astype(dtype)
        wide = narrow.astype(np.int64)
        assert spec.plan(narrow, seed=3, epoch=1) == spec.plan(wide, seed=3, epoch=1)
    from padless.planners.spec import plannable_lengths

    arr = LENS.astype(np.int32)
    assert plannable_lengths(arr) is arr
    assert plannable_lengths(arr[::2]).dtype == np.int64  # not contiguous: the int64 copy
    with pytest.raises(ValueError, match=r"got -1 at position \[1\]"):
        plannable_lengths(np.array([3, -1], dtype=np.int32))


@given(
    arrays(np.int64, st.integers(1, 300), elements=st.integers(0, 40)),
    st.integers(1, 64),
    st.integers(0, 299),
    st.lists(st.integers(0, 100), min_size=1, max_size=6, unique=True),
    st.sampled_from([40, 41, 64, 100]),
    st.sampled_from([0, 1, 3]),
    st.sampled_from([1, 2, 5]),
    st.integers(0, 2**32),
    st.sampled_from([np.int64, np.int32, np.uint16]),
)
def test_pack_rows_equals_its_reference(
    sizes, block, rotation, blocks, capacity, max_per_row, rows_per_batch, seed, dtype
):
    """The fused packing kernel (order, best fit, rows in the drawn order, batch bounds) equals
    best fit item by item with the rows regrouped in Python, on any window of any dtype."""
    n = sizes.size
    rotation %= n
    nb = -(-n // block)
    ids = np.unique(np.array([b % nb for b in blocks], dtype=np.int64))
    lens = sizes.astype(dtype)

    def row_order(rows):
        return np.random.default_rng(seed).permutation(rows)

    args = (lens, n, block, rotation, ids, 41, np.uint64(seed), capacity, max_per_row)
    got = KW.pack_rows(*args, rows_per_batch, row_order)
    want = KW.pack_rows_reference(*args, rows_per_batch, row_order)
    for g, w in zip(got[:4], want[:4], strict=True):
        assert np.array_equal(g, w)
    assert got[4] == want[4] == int(np.asarray(got[2]).sum())
    names = 7 * np.arange(n, dtype=np.int64) + 3  # the entries named: names[item], no gather
    named = KW.pack_rows(*args, rows_per_batch, row_order, names)
    assert np.array_equal(named[0], names[got[0]])
    assert np.array_equal(
        named[0], KW.pack_rows_reference(*args, rows_per_batch, row_order, names)[0]
    )
    assert all(np.array_equal(a, b) for a, b in zip(named[1:4], got[1:4], strict=True))


def test_pack_rows_refuses_a_size_over_capacity():
    lens = np.array([3, 70, 5], dtype=np.int64)
    with pytest.raises((ValueError, IndexError)):
        KW.pack_rows(lens, 3, 3, 0, np.array([0]), 71, np.uint64(1), 64, 0, 1, np.arange)


@given(
    st.lists(arrays(np.int64, st.integers(0, 60), elements=st.integers(0, 12)), max_size=4),
    st.integers(1, 13),
    st.sampled_from([np.int32, np.int64]),
)
def test_width_scatter_builds_the_stable_by_width_index(chunks, runs, dtype):
    widths = np.concatenate([np.zeros(0, np.int64), *chunks])
    kept = widths < runs
    counts = np.bincount(widths[kept], minlength=runs)
    cursor = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    index, ref = np.full(int(kept.sum()), -1, dtype), np.full(int(kept.sum()), -1, dtype)
    ref_cursor, lo = cursor.copy(), 0
    mid = runs // 2  # two width ranges, placed one after the other (as two threads do)
    for low, high in ((0, mid), (mid, runs)):
        lo = 0
        for chunk in chunks:
            part = chunk.astype(dtype)  # the lengths' own dtype, read in place
            KW.width_scatter(part, lo, high, cursor, index, low)
            KW.width_scatter_reference(part, lo, high, ref_cursor, ref, low)
            lo += chunk.size
    assert np.array_equal(index, ref) and np.array_equal(cursor, ref_cursor)
    stable = np.flatnonzero(kept)[np.argsort(widths[kept], kind="stable")]
    assert index.tolist() == stable.tolist()
    if index.size:  # a cursor past the end is refused, not written
        with pytest.raises(ValueError, match="passed the index"):
            KW.width_scatter(widths[kept][:1], 0, runs, np.full(runs, index.size), index)
