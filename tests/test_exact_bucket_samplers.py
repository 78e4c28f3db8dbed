"""ExactLengthSampler and BucketSampler on the sampler base: ranks, tail policy, epochs, resume."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from padless import builtin_corpus
from padless.sampling.shortcuts import (
    BucketSampler,
    ExactLengthSampler,
    plan_buckets,
    plan_exact_length,
)

CONFIGS = {
    "exact-partial": (ExactLengthSampler, {"batch_size": 4}),
    "exact-drop": (ExactLengthSampler, {"batch_size": 3, "leftovers": "drop"}),
    "exact-merge": (
        ExactLengthSampler,
        {"max_tokens": 64, "leftovers": "merge", "oversize": "drop"},
    ),
    "buckets-optimal": (BucketSampler, {"num_buckets": 4, "max_tokens": 64, "oversize": "drop"}),
    "buckets-fixed": (BucketSampler, {"boundaries": [5, 12, 20], "batch_size": 5}),
}
NAMES = sorted(CONFIGS)


def make(name, lengths, **kw):
    cls, config = CONFIGS[name]
    return cls(lengths, **config, **kw)


@pytest.mark.parametrize("name", NAMES)
@given(
    n=st.integers(1, 200),
    world=st.integers(1, 9),
    drop_last=st.booleans(),
    balance=st.booleans(),
    seed=st.integers(0, 5),
    epoch=st.integers(0, 3),
)
def test_ranks_cover_every_index_once_plus_reported_repeats(
    name, n, world, drop_last, balance, seed, epoch
):
    lengths = np.random.default_rng(n).integers(1, 25, n)
    samplers = [
        make(
            name, lengths, rank=r, world_size=world, drop_last=drop_last, balance=balance, seed=seed
        )
        for r in range(world)
    ]
    for s in samplers:
        s.set_epoch(epoch)
    per_rank = [list(s) for s in samplers]
    assert {len(b) for b in per_rank} == {len(samplers[0])}  # equal counts per rank
    s0 = samplers[0]
    plan, _ = s0.epoch_plan(epoch)
    planned = Counter(tuple(b.tolist()) for b in plan)
    got = Counter(tuple(b) for rank in per_rank for b in rank)
    extra, missing = got - planned, planned - got
    assert sum(extra.values()) == s0.repeated
    assert sum(missing.values()) == s0.dropped
    # each index exactly once: in a yielded batch, a dropped tail batch or the plan's skipped
    seen = Counter(i for b in (got - extra + missing).elements() for i in b)
    seen.update(plan.skipped.tolist())
    assert seen == Counter(range(n))
    assert s0.stats()["skipped"] == plan.skipped.size


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", [1, 2, 7, 100])
def test_equal_counts_for_world_sizes_1_to_9(name, n):
    lengths = np.random.default_rng(0).integers(1, 30, n)
    for world in range(1, 10):
        for drop_last in (False, True):
            counts = {
                len(list(make(name, lengths, rank=r, world_size=world, drop_last=drop_last)))
                for r in range(world)
            }
            assert len(counts) == 1


@pytest.mark.parametrize("name", NAMES)
def test_epochs_change_membership_and_order(name):
    lengths = builtin_corpus()[:3000]
    s = make(name, lengths)
    e0 = list(s)
    s.set_epoch(1)
    e1 = list(s)
    assert {frozenset(b) for b in e0} != {frozenset(b) for b in e1}
    assert [b[0] for b in e0[:20]] != [b[0] for b in e1[:20]]
    assert all(type(i) is int for i in e0[0])


@pytest.mark.parametrize("name", NAMES)
def test_sampler_plan_is_the_planner_plan(name):
    lengths = builtin_corpus()[:2000]
    cls, config = CONFIGS[name]
    s = make(name, lengths, seed=7)
    planner = plan_exact_length if cls is ExactLengthSampler else plan_buckets
    for epoch in (0, 2):
        assert s.epoch_plan(epoch)[0] == planner(lengths, **config, seed=7, epoch=epoch)
    fixed = make(name, lengths, seed=7, shuffle=False)
    fixed.set_epoch(3)
    assert list(fixed) == [b.tolist() for b in planner(lengths, **config, seed=7, epoch=0)]


@pytest.mark.parametrize("name", NAMES)
def test_state_of_another_config_is_refused(name):
    lengths = np.random.default_rng(5).integers(1, 30, 100)
    state = make(name, lengths).state_dict()
    cls, config = CONFIGS[name]
    other = dict(config)
    key = "batch_size" if "batch_size" in other else "max_tokens"
    other[key] += 1
    resumed = cls(lengths, **other)
    resumed.load_state_dict(state)  # a change of budget: the epoch goes on (test_resume_change)
    assert resumed.state_dict()["changes"][0]["settings"]["spec"][key] == config[key]
    with pytest.raises(ValueError, match="settings differ .* shuffle"):
        cls(lengths, **config, shuffle=False).load_state_dict(state)
    with pytest.raises(ValueError, match="fingerprint"):
        make(name, lengths[:-1]).load_state_dict(state)


def test_stats_report_plan_figures():
    en = builtin_corpus()
    exact = ExactLengthSampler(en, max_tokens=4096, leftovers="drop", world_size=8).stats()
    assert exact["padding_fraction"] == 0.0
    assert exact["dropped_leftovers"] == exact["skipped"] > 0
    merge = ExactLengthSampler(en, max_tokens=4096, leftovers="merge").stats()
    assert merge["merged_batches"] > 0 and merge["skipped"] == 0
    buckets = BucketSampler(en, num_buckets=8, max_tokens=4096, world_size=8, balance=True)
    stats = buckets.stats()
    assert stats["boundaries"] == buckets.boundaries.tolist() and len(stats["boundaries"]) == 7
    assert stats["imbalance"] < 1.05


def test_bucket_sampler_keeps_the_boundaries_it_chose():
    en = builtin_corpus()
    s = BucketSampler(en, num_buckets=8, batch_size=64)
    s.set_epoch(4)
    plan, _ = s.epoch_plan(4)
    assert plan.info["boundaries"] == s.boundaries.tolist()
