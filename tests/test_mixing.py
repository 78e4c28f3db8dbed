"""Tests for padless.sampling.mixing: zip_lengths and MixtureSampler."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from padless.core.plan import BatchPlan
from padless.planners.spec import Planner, Spec
from padless.sampling.mixing import (
    MixtureSampler,
    ZippedLengths,
    stratified_counts,
    temperature_probabilities,
    zip_lengths,
)
from padless.sampling.sampler import PlanSampler
from padless.sampling.shortcuts import PackingSampler, TokenBudgetSampler, plan_token_budget

INF = float("inf")


def budget(lengths, max_tokens=16, **kw):
    return TokenBudgetSampler(np.asarray(lengths, dtype=np.int64), max_tokens=max_tokens, **kw)


def corpora(sizes=(40, 9, 3), seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 5, n) for n in sizes]


def small_mix(sizes=(40, 9, 3), sub_kw=None, **kw):
    """A large, a small and a tiny corpus (the tiny one has one batch per epoch)."""
    subs = {
        name: budget(lens, **(sub_kw or {}))
        for name, lens in zip("abc", corpora(sizes), strict=True)
    }
    kw.setdefault("temperature", INF)
    kw.setdefault("num_batches", 30)
    return MixtureSampler(subs, **kw)


def expected_batches(mix, epoch=None):
    """The mixture's global batches, slot by slot, rebuilt from its schedule and the sub-plans."""
    sched = mix.epoch_schedule(mix.epoch if epoch is None else epoch)
    out = []
    for k, e, b in zip(sched.corpus, sched.sub_epoch, sched.batch, strict=True):
        sub = mix.samplers[mix.names[k]]
        plan, _ = sub.epoch_plan(int(e))
        out.append((plan[int(b)] + mix.corpus_offsets[k]).tolist())
    return out


@dataclasses.dataclass(frozen=True)
class Chunks(Spec):
    """A minimal other strategy: consecutive chunks of ``size`` in a seed/epoch-dependent order."""

    size: int = 1
    name = "chunks"

    def bind(self, lengths):
        return _ChunkPlanner(self, lengths)


class _ChunkPlanner(Planner):
    def plan(self, seed, epoch):
        n = self.sizes.shape[0]
        order = np.random.default_rng([seed, epoch]).permutation(n)
        return BatchPlan(order, np.r_[np.arange(0, n, self.spec.size), n])


def ChunkSampler(lengths, size, **kw):  # noqa: N802 - reads as the sampler it builds
    return PlanSampler(lengths, Chunks(size), **kw)


# ---------------------------------------------------------------------------------------- zip
def test_zip_max_with_wraparound():
    z = zip_lengths([[3, 9, 4, 1, 2], [5, 2]])
    assert isinstance(z, ZippedLengths)
    assert z.lengths.tolist() == [5, 9, 5, 2, 5]
    assert z.sizes == (5, 2)
    assert z.repeated == (0, 3)
    assert z.passes == (1.0, 2.5)


def test_zip_longest_in_the_middle():
    a, b, c = [1, 1], [2, 0, 0, 0, 0, 7, 0], [0, 3, 0]
    z = zip_lengths([a, b, c])
    expected = [max(a[i % 2], b[i], c[i % 3]) for i in range(7)]
    assert z.lengths.tolist() == expected
    assert z.repeated == (5, 0, 4)
    assert len(z) == 7


def test_zip_fields_combine_field_by_field():
    a = np.array([[1, 9], [4, 2], [3, 3]])
    b = np.array([[5, 1]])
    z = zip_lengths([a, b])
    assert z.lengths.tolist() == [[5, 9], [5, 2], [5, 3]]


def test_zip_inputs_untouched_and_single_corpus():
    a = np.array([4, 1, 3])
    z = zip_lengths([a])
    z.lengths[0] = 99
    assert a.tolist() == [4, 1, 3]
    assert z.repeated == (0,)


@given(
    st.lists(
        st.lists(st.integers(0, 50), min_size=1, max_size=20),
        min_size=1,
        max_size=4,
    )
)
def test_zip_matches_reference(lists):
    z = zip_lengths(lists)
    n = max(len(x) for x in lists)
    expected = [max(x[i % len(x)] for x in lists) for i in range(n)]
    assert z.lengths.tolist() == expected
    assert z.lengths.dtype == np.int64
    assert z.repeated == tuple(n - len(x) for x in lists)
    for k, x in enumerate(lists):
        idx = z.source_indices(k, np.arange(n))
        assert all(z.lengths[i] >= x[j] for i, j in enumerate(idx.tolist()))


def test_zip_feeds_planners_and_samplers():
    z = zip_lengths([[3, 9, 4, 1, 2], [5, 2]])
    assert np.asarray(z).tolist() == [5, 9, 5, 2, 5]
    plan = plan_token_budget(z, max_tokens=10)
    assert sorted(plan.indices.tolist()) == [0, 1, 2, 3, 4]
    s = TokenBudgetSampler(z, max_tokens=10)
    assert sorted(i for b in s for i in b) == [0, 1, 2, 3, 4]
    assert z.source_indices(1, [0, 1, 2, 3, 4]).tolist() == [0, 1, 0, 1, 0]


@pytest.mark.parametrize(
    ("arg", "exc", "match"),
    [
        ([], ValueError, "at least one corpus"),
        ([[1, 2], []], ValueError, r"corpora\[1\] is empty"),
        ([np.array([1, 2]), np.array([[1, 2]])], ValueError, "same fields"),
        ([[1, -2]], ValueError, r"corpora\[0\].*whole numbers in \[0, 2\*\*31\)"),
        (np.array([[1, 2], [3, 4]]), TypeError, "list of lengths"),
        ("abc", TypeError, "list of lengths"),
        ({"a": [1]}, TypeError, "list of lengths"),
    ],
)
def test_zip_errors(arg, exc, match):
    with pytest.raises(exc, match=match):
        zip_lengths(arg)


def test_zip_source_indices_errors():
    z = zip_lengths([[1, 2, 3], [4]])
    with pytest.raises(ValueError, match="corpus must be"):
        z.source_indices(2, [0])
    with pytest.raises(ValueError, match="indices must lie"):
        z.source_indices(0, [3])


# ---------------------------------------------------------------------------------------- probabilities
def test_default_temperature_is_proportional():
    mix = small_mix(temperature=None)
    assert mix.temperature == 1.0
    n = np.array([40, 9, 3])
    np.testing.assert_allclose(mix.p, n / n.sum())


@pytest.mark.parametrize("t", [0.5, 1.0, 2.0, 5.0, INF])
def test_temperature_formula(t):
    mix = small_mix(temperature=t)
    share = np.array([40, 9, 3]) / 52
    expected = np.ones(3) / 3 if math.isinf(t) else share ** (1 / t) / (share ** (1 / t)).sum()
    np.testing.assert_allclose(mix.p, expected, rtol=1e-12)
    assert mix.probabilities == dict(zip("abc", mix.p.tolist(), strict=True))


def test_tokens_unit_counts_sizes():
    a = np.array([[1, 5], [2, 2]])  # sizes 5, 2 -> 7 tokens
    b = np.array([[7, 3]])  # 7 tokens
    mix = MixtureSampler(
        {"a": budget(a), "b": budget(b)}, unit="tokens", temperature=1.0, num_batches=2
    )
    np.testing.assert_allclose(mix.p, [0.5, 0.5])


def test_tiny_temperature_does_not_underflow():
    p = temperature_probabilities([100, 50, 1], 1e-3)
    assert np.all(np.isfinite(p)) and p[0] == pytest.approx(1.0)


@pytest.mark.parametrize("weights", [{"a": 2, "b": 1, "c": 1}, [2, 1, 1], np.array([2.0, 1, 1])])
def test_explicit_weights(weights):
    mix = small_mix(weights=weights, temperature=None)
    np.testing.assert_allclose(mix.p, [0.5, 0.25, 0.25])
    assert mix.temperature is None


def test_zero_weight_corpus_is_never_drawn():
    mix = small_mix(weights=[1, 0, 1], temperature=None, num_batches=200)
    assert mix.corpus_counts()["b"] == 0
    assert not any(40 <= i < 49 for batch in mix for i in batch)


def _three(t, seed, num, draw):
    subs = {name: budget(np.ones(n, np.int64)) for name, n in [("a", 2000), ("b", 200), ("c", 20)]}
    return MixtureSampler(subs, temperature=t, num_batches=num, seed=seed, draw=draw)


@pytest.mark.parametrize("t", [1.0, 2.0, 5.0, INF])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_independent_draws_match_probabilities(t, seed):
    """Statistical test with fixed seeds: 20,000 i.i.d. draws; each share within 4 standard
    errors of p_k (and 1% absolute), and a chi-square goodness-of-fit p-value above 1e-3."""
    from scipy.stats import chisquare

    num = 20_000
    mix = _three(t, seed, num, "independent")
    counts = np.array(list(mix.corpus_counts().values()))
    assert counts.sum() == num
    share = counts / num
    sigma = np.sqrt(mix.p * (1 - mix.p) / num)
    assert np.all(np.abs(share - mix.p) <= 4 * sigma + 1e-12), (share, mix.p)
    assert np.all(np.abs(share - mix.p) < 0.01)
    assert chisquare(counts, mix.p * num).pvalue > 1e-3
    # the schedule is the same draw, slot by slot
    assert np.bincount(mix._mix(0).choice, minlength=3).tolist() == counts.tolist()


@pytest.mark.parametrize("t", [1.0, 2.0, 5.0, INF])
def test_stratified_shares_are_exact(t):
    """Default draw: every epoch's share is within 1 / num_batches of p_k."""
    for seed, num in itertools.product(range(3), (7, 1000, 10_000)):
        mix = _three(t, seed, num, "stratified")
        counts = np.array(list(mix.corpus_counts().values()))
        assert counts.sum() == num
        assert np.all(np.abs(counts - mix.p * num) < 1), (counts, mix.p * num)
        assert np.bincount(mix._mix(0).choice, minlength=3).tolist() == counts.tolist()


def test_stratified_draws_are_unbiased():
    """Statistical test, fixed seeds 0..1999: the mean count over seeds is p_k · num_batches
    (within 4 standard errors), and the corpus of slot 0 is corpus k with frequency p_k."""
    p = np.array([0.55, 0.3, 0.15])
    num, runs = 7, 2000  # targets 3.85, 2.1, 1.05: rounding decides a lot
    counts = np.array(
        [stratified_counts(p, num, np.random.default_rng([s, 1])) for s in range(runs)]
    )
    assert set(counts.sum(axis=1).tolist()) == {num}
    assert np.all(np.abs(counts - p * num) < 1)
    sd = counts.std(axis=0) / math.sqrt(runs)
    assert np.all(np.abs(counts.mean(axis=0) - p * num) <= 4 * sd + 1e-9)
    subs = {n: budget([1]) for n in "abc"}
    first = np.zeros(3)
    for seed in range(runs):
        mix = MixtureSampler(subs, weights=p, num_batches=num, seed=seed)
        first[mix._mix(0).choice[0]] += 1
    share = first / runs
    assert np.all(np.abs(share - p) <= 4 * np.sqrt(p * (1 - p) / runs))


@given(
    st.lists(st.floats(0, 10), min_size=1, max_size=8).filter(lambda w: sum(w) > 0),
    st.integers(0, 500),
    st.integers(0, 2**32),
)
def test_stratified_counts_properties(weights, total, seed):
    p = np.asarray(weights) / sum(weights)
    counts = stratified_counts(p, total, np.random.default_rng(seed))
    assert counts.sum() == total
    assert np.all(counts >= np.floor(p * total) - 1e-9)
    assert np.all(counts <= np.ceil(p * total) + 1e-9)
    assert np.all(counts[p == 0] == 0)


def test_corpus_order_is_well_mixed():
    """The corpus of each slot is an i.i.d. draw: both halves of the epoch have the right shares."""
    mix = small_mix(num_batches=6000, temperature=INF)
    choice = mix._mix(0).choice
    for half in (choice[:3000], choice[3000:]):
        share = np.bincount(half, minlength=3) / 3000
        assert np.all(np.abs(share - 1 / 3) < 4 * math.sqrt(2 / 9 / 3000))


# ---------------------------------------------------------------------------------------- batches
def test_homogeneous_batches_and_global_indices():
    mix = small_mix(seed=5)
    lens = corpora()
    ranges = [(0, 40), (40, 49), (49, 52)]
    batches = list(mix)
    assert len(batches) == 30
    assert batches == expected_batches(mix)
    for batch in batches:
        owners = {k for k, (lo, hi) in enumerate(ranges) for i in batch if lo <= i < hi}
        assert len(owners) == 1
        k = owners.pop()
        assert len(batch) * max(int(lens[k][i - ranges[k][0]]) for i in batch) <= 16


def test_corpus_of_splits_global_indices():
    mix = small_mix()
    k, local = mix.corpus_of([0, 39, 40, 48, 49, 51])
    assert k.tolist() == [0, 0, 1, 1, 2, 2]
    assert local.tolist() == [0, 39, 0, 8, 0, 2]
    with pytest.raises(ValueError, match="indices must lie"):
        mix.corpus_of([52])


@given(
    sizes=st.lists(st.integers(1, 25), min_size=1, max_size=4),
    num_batches=st.integers(1, 40),
    world_size=st.integers(1, 3),
    drop_last=st.booleans(),
    seed=st.integers(0, 3),
    shuffle=st.booleans(),
)
def test_random_mixtures(sizes, num_batches, world_size, drop_last, seed, shuffle):
    lens = corpora(tuple(sizes), seed=seed)
    subs = {f"c{k}": budget(x, max_tokens=12, shuffle=shuffle) for k, x in enumerate(lens)}
    kw = {"temperature": 2.0, "num_batches": num_batches, "seed": seed, "drop_last": drop_last}
    ranks = [MixtureSampler(subs, rank=r, world_size=world_size, **kw) for r in range(world_size)]
    full = expected_batches(ranks[0], 0)
    outs = [list(s) for s in ranks]
    steps = len(ranks[0])
    assert all(len(o) == steps == len(s) for o, s in zip(outs, ranks, strict=True))
    for s in range(steps):
        for r in range(world_size):
            slot = s * world_size + r
            assert outs[r][s] == full[slot % num_batches]
    covered = steps * world_size
    assert covered == num_batches + ranks[0].repeated - ranks[0].dropped
    offsets = np.cumsum([0, *sizes])
    for batch in itertools.chain.from_iterable(outs):
        k = np.searchsorted(offsets, batch[0], side="right") - 1
        assert all(offsets[k] <= i < offsets[k + 1] for i in batch)


def test_any_strategy_works():
    subs = {
        "x": ChunkSampler(np.ones(10, np.int64), 3, seed=1),
        "y": budget([2, 3, 4]),
    }
    mix = MixtureSampler(subs, temperature=INF, num_batches=12)
    assert list(mix) == expected_batches(mix)


def test_cycles_are_fresh_sampler_epochs():
    mix = small_mix(num_batches=30)
    m = 30
    for epoch in (0, 1):
        sched = mix.epoch_schedule(epoch)
        for k, name in enumerate(mix.names):
            mine = sched.corpus == k
            sub_epochs = sched.sub_epoch[mine]
            assert np.all(np.diff(sub_epochs) >= 0)
            cycles = np.unique(sub_epochs)
            assert cycles.tolist() == list(range(epoch * m, epoch * m + cycles.size))
            # every complete cycle uses each of its epoch's batches exactly once
            for c in cycles[:-1]:
                plan, _ = mix.samplers[name].epoch_plan(int(c))
                assert sorted(sched.batch[mine][sub_epochs == c].tolist()) == list(range(len(plan)))


def test_stats_report_cycles_shares_and_passes():
    mix = small_mix(num_batches=60)
    st_ = mix.stats()
    assert st_["batches"] == 60
    counts = mix.corpus_counts()
    tiny = st_["corpora"]["c"]
    assert tiny["epoch_batches"] == 1  # 3 short sentences fit one batch
    assert tiny["cycles"] == counts["c"] == tiny["batches"]
    assert tiny["passes"] == pytest.approx(counts["c"])
    big = st_["corpora"]["a"]
    assert big["share"] == counts["a"] / 60
    assert big["cycles"] == math.ceil(big["batches"] / big["epoch_batches"])
    assert big["p"] == pytest.approx(1 / 3)
    assert [st_["corpora"][n]["offset"] for n in "abc"] == [0, 40, 49]
    json.dumps(st_)


def test_fixed_order_corpora_continue_across_epochs():
    """A non-shuffling corpus is one endless stream: over epochs its plan order repeats in turn."""
    mix = small_mix(sub_kw={"shuffle": False}, num_batches=17)
    for k, name in enumerate(mix.names):
        seen = []
        for epoch in range(4):
            sched = mix.epoch_schedule(epoch)
            seen.extend(sched.batch[sched.corpus == k].tolist())
        _, order = mix.samplers[name].epoch_plan(0)
        assert seen == np.resize(order, len(seen)).tolist()


def test_determinism_and_seed():
    assert list(small_mix(seed=3)) == list(small_mix(seed=3))
    assert list(small_mix(seed=3)) != list(small_mix(seed=4))
    mix = small_mix(seed=3)
    first = list(mix)
    mix.set_epoch(1)
    assert list(mix) != first


def test_default_num_batches_is_sum_of_batch_counts():
    mix = small_mix(num_batches=None)
    total = sum(len(s.epoch_plan(0)[0]) for s in mix.samplers.values())
    assert mix.num_batches == total == len(mix) == len(list(mix))


# ---------------------------------------------------------------------------------------- torch
def test_global_indices_address_a_concat_dataset():
    torch = pytest.importorskip("torch")
    from padless.torch import mixture_dataset

    lens = corpora()
    mix = small_mix(seed=2)
    data = {
        name: torch.utils.data.TensorDataset(
            torch.full((len(x),), k), torch.arange(len(x)), torch.as_tensor(x)
        )
        for k, (name, x) in enumerate(zip("abc", lens, strict=True))
    }
    plain = torch.utils.data.ConcatDataset([data[n] for n in "abc"])
    ds = mixture_dataset(data, mix)
    assert len(ds) == len(plain) == 52
    loader = torch.utils.data.DataLoader(ds, batch_sampler=mix)
    sched = mix.epoch_schedule(0)
    for j, (corpus, local, length) in enumerate(loader):
        assert torch.all(corpus == corpus[0])
        k = int(corpus[0])
        assert k == sched.corpus[j]
        sub = mix.samplers[mix.names[k]]
        plan, _ = sub.epoch_plan(int(sched.sub_epoch[j]))
        assert local.tolist() == plan[int(sched.batch[j])].tolist()
        assert length.tolist() == lens[k][local.numpy()].tolist()
        for i, g in enumerate(plan[int(sched.batch[j])] + mix.corpus_offsets[k]):
            assert plain[int(g)][1] == local[i]


def test_mixture_dataset_checks():
    pytest.importorskip("torch")
    from padless.torch import mixture_dataset

    mix = small_mix()
    good = {"a": list(range(40)), "b": list(range(9)), "c": list(range(3))}
    with pytest.raises(ValueError, match=r"datasets\['b'\] must have the 9"):
        mixture_dataset({**good, "b": [0]}, mix)
    with pytest.raises(ValueError, match="missing \\['c'\\]"):
        mixture_dataset({"a": good["a"], "b": good["b"]}, mix)
    with pytest.raises(TypeError, match="datasets must be a dict"):
        mixture_dataset([good["a"]], mix)
    assert len(mixture_dataset(good)) == 52


# ---------------------------------------------------------------------------------------- ranks
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("drop_last", [False, True])
def test_equal_rank_counts(world_size, drop_last):
    kw = {"num_batches": 30, "world_size": world_size, "drop_last": drop_last, "seed": 1}
    ranks = [small_mix(rank=r, **kw) for r in range(world_size)]
    outs = [list(s) for s in ranks]
    counts = {len(o) for o in outs} | {len(s) for s in ranks}
    assert len(counts) == 1
    steps = counts.pop()
    if drop_last:
        assert steps == 30 // world_size and ranks[0].dropped == 30 - steps * world_size
    else:
        assert steps == -(-30 // world_size) and ranks[0].repeated == steps * world_size - 30
    full = expected_batches(ranks[0])
    for r, out in enumerate(outs):
        assert out == [full[(s * world_size + r) % 30] for s in range(steps)]


# ---------------------------------------------------------------------------------------- resume
def _resume_tail(make, position_batches, consumed=None):
    s = make()
    it = iter(s)
    head = list(itertools.islice(it, position_batches))
    state = s.state_dict(consumed=consumed)
    snapshot = json.loads(json.dumps(state))
    t = make()
    t.load_state_dict(state)
    assert state == snapshot  # not mutated
    return head, list(t)


@pytest.mark.parametrize("epoch", [0, 3])
@pytest.mark.parametrize("shuffle", [True, False])
def test_resume_at_every_position(epoch, shuffle):
    """Exact resume mid-epoch at every position, including across the tiny corpus's cycles."""

    def make():
        s = small_mix(sub_kw={"shuffle": shuffle}, num_batches=24, seed=7)
        s.set_epoch(epoch)
        return s

    full = list(make())
    assert make().stats()["corpora"]["c"]["cycles"] >= 3
    for p in range(len(full) + 1):
        head, tail = _resume_tail(make, p)
        assert head + tail == full, p


def test_resume_with_consumed_behind_prefetch():
    def make():
        return small_mix(num_batches=20, seed=3)

    full = list(make())
    head, tail = _resume_tail(make, 9, consumed=6)
    assert head == full[:9] and tail == full[6:]


def test_state_after_full_epoch_and_set_epoch():
    s = small_mix(num_batches=10)
    list(s)
    assert s.state_dict()["position"] == 10
    s.set_epoch(1)
    assert s.state_dict()["position"] == 0 and s.state_dict()["epoch"] == 1


def test_state_is_refused_for_other_settings():
    state = small_mix(temperature=INF).state_dict()
    small_mix(temperature=2.0).load_state_dict(state)  # weights may change (test_resume_change)
    with pytest.raises(ValueError, match="settings differ .*num_batches"):
        small_mix(num_batches=31).load_state_dict(state)
    with pytest.raises(ValueError, match="settings differ .*sampler_seeds"):
        small_mix(sub_kw={"seed": 1}).load_state_dict(state)
    with pytest.raises(ValueError, match="seed=0"):
        small_mix(seed=1).load_state_dict(state)
    # a corpus's sampler under another budget: named (the message gave the samplers' digests)
    subs = {
        n: budget(lens, max_tokens=32 if n == "b" else 16)
        for n, lens in zip("abc", corpora(), strict=True)
    }
    other = MixtureSampler(subs, temperature=INF, num_batches=30)
    with pytest.raises(ValueError, match="the sampler of corpus 'b' differs .*1 of 3 corpora"):
        other.load_state_dict(state)
    assert set(state) == {
        "version",
        "seed",
        "epoch",
        "position",
        "world_size",
        "fingerprint",
        "drop_last",
        "settings",
    }


def test_fingerprint_does_not_depend_on_resolving_num_batches():
    a, b = small_mix(num_batches=None), small_mix(num_batches=None)
    len(a)
    assert a.state_dict()["fingerprint"] == b.state_dict()["fingerprint"]


# ---------------------------------------------------------------------------------------- errors
def _subs():
    return {"a": budget([1, 2, 3]), "b": budget([4, 5])}


@pytest.mark.parametrize(
    ("kw", "exc", "match"),
    [
        ({"weights": [1, -1]}, ValueError, r"weights\['b'\] must be a non-negative"),
        ({"weights": [0, 0]}, ValueError, "must not all be zero"),
        ({"weights": [1, math.nan]}, ValueError, "non-negative finite"),
        ({"weights": [1]}, ValueError, "must hold 2 weights"),
        ({"weights": {"a": 1, "z": 1}}, ValueError, r"missing \['b'\], unknown \['z'\]"),
        ({"weights": [1, "x"]}, TypeError, r"weights\['b'\] must be a number"),
        ({"weights": 3}, TypeError, "weights must be a dict"),
        ({"temperature": 0}, ValueError, "temperature must be a positive"),
        ({"temperature": -1.0}, ValueError, "temperature must be a positive"),
        ({"temperature": math.nan}, ValueError, "temperature must be a positive"),
        ({"temperature": True}, TypeError, "temperature must be"),
        ({"temperature": "hot"}, TypeError, "temperature must be"),
        ({"unit": "words"}, ValueError, "unit must be one of 'sentences', 'tokens', got 'words'"),
        ({"draw": "iid"}, ValueError, "draw must be one of 'stratified', 'independent'"),
        ({"num_batches": 0}, ValueError, "num_batches must be a positive int, got 0"),
        ({"seed": -1}, ValueError, "seed must be a non-negative int"),
        ({"rank": 2, "world_size": 2}, ValueError, "rank must be < world_size=2"),
        ({"drop_last": 1}, TypeError, "drop_last must be a bool"),
    ],
)
def test_argument_errors(kw, exc, match):
    with pytest.raises(exc, match=match):
        MixtureSampler(_subs(), **kw)


def test_sampler_errors():
    with pytest.raises(TypeError, match="samplers must be a dict"):
        MixtureSampler([budget([1])])
    with pytest.raises(ValueError, match="at least one corpus"):
        MixtureSampler({})
    with pytest.raises(TypeError, match="keys must be corpus names"):
        MixtureSampler({1: budget([1])})
    with pytest.raises(TypeError, match=r"samplers\['a'\] must be a padless sampler"):
        MixtureSampler({"a": [1, 2]})
    with pytest.raises(ValueError, match=r"samplers\['a'\] has an empty corpus"):
        MixtureSampler({"a": budget(np.zeros(0, np.int64)), "b": budget([1])})
    with pytest.raises(ValueError, match="world_size=1 .*shards.*got world_size=2"):
        MixtureSampler({"a": budget([1, 2], world_size=2, rank=0)})


def test_tokens_unit_with_no_tokens():
    with pytest.raises(ValueError, match="at least one token"):
        MixtureSampler({"a": budget([0, 0])}, unit="tokens")


def test_corpus_with_an_empty_epoch_is_reported():
    subs = {"a": budget([9, 9], max_tokens=4, oversize="skip"), "b": budget([1])}
    mix = MixtureSampler(subs, weights=[1, 1], num_batches=5)
    with pytest.raises(ValueError, match="corpus 'a' has an epoch with no batches"):
        list(mix)


def test_stateful_loader_with_prefetching_workers():
    """Resume behind a DataLoader whose worker prefetches: the delivered count decides."""
    torch = pytest.importorskip("torch")
    from padless.torch import StatefulLoader, mixture_dataset

    def make():
        mix = small_mix(num_batches=20, seed=6)
        data = {n: list(range(size)) for n, size in zip(mix.names, mix.corpus_sizes, strict=True)}
        ds = mixture_dataset(data, mix)
        loader = torch.utils.data.DataLoader(
            ds, batch_sampler=mix, num_workers=1, prefetch_factor=4, collate_fn=list
        )
        return mix, StatefulLoader(loader)

    mix, loader = make()
    full = list(loader)
    mix, loader = make()
    it = iter(loader)
    head = [next(it) for _ in range(7)]
    state = loader.state_dict()
    assert state["position"] == 7 and mix._yielded > 7  # the worker ran ahead
    del it
    _, resumed = make()
    resumed.load_state_dict(state)
    assert head + list(resumed) == full


def _strategies():
    """Every padless sampler strategy present, over one corpus, built with world_size=1."""
    from importlib import import_module

    makers = {"budget": lambda x, **kw: budget(x, **kw)}
    for module, cls, kw in [
        ("padless.planners.exact", "ExactLengthSampler", {"batch_size": 3}),
        ("padless.planners.buckets", "BucketSampler", {"num_buckets": 2, "batch_size": 3}),
        ("padless.planners.packing", "PackingSampler", {"capacity": 16, "oversize": "drop"}),
    ]:
        try:
            klass = getattr(import_module(module), cls)
        except (ImportError, AttributeError):
            continue
        makers[cls] = lambda x, klass=klass, kw=kw, **more: klass(x, **kw, **more)
    return makers


def test_every_strategy_mixes():
    makers = _strategies()
    lens = corpora((30, 12, 5), seed=2)
    subs = {
        name: make(x, seed=k)
        for k, ((name, make), x) in enumerate(zip(makers.items(), itertools.cycle(lens)))
    }
    mix = MixtureSampler(subs, temperature=INF, num_batches=25, seed=1)
    assert list(mix) == expected_batches(mix)
    half = MixtureSampler(subs, temperature=INF, num_batches=25, seed=1)
    it = iter(half)
    head = list(itertools.islice(it, 11))
    state = half.state_dict()
    again = MixtureSampler(subs, temperature=INF, num_batches=25, seed=1)
    again.load_state_dict(state)
    assert head + list(again) == list(mix)


def test_corpora_a_mixture_cannot_deliver_are_refused_when_it_is_built():
    """Windowed plans, optimizer steps and skips of a corpus: refused by the constructor,
    naming the corpus and the setting. Pieces and warm-ups mix (tests/test_mixture_pieces.py):
    the mixture yields their codes."""
    from padless import Decomposition, Packing, PlanSampler, Schedule

    cases = {
        "plans its epochs in windows": budget([1, 2, 3] * 40, window=50),
        "plans its epochs in windows \\(window='histogram'": budget([1, 2], window="histogram"),
    }
    skipped = budget([1, 2, 3] * 10)
    skipped.skip(2)
    cases.update(
        {  # each once had no effect on the mixture's batches
            "optimizer steps \\(batches_per_step=Schedule.constant\\(2\\)": budget(
                [1, 2, 3] * 10, batches_per_step=2
            ),
            "optimizer steps \\(tokens_per_step=Schedule.constant\\(40\\) over budgets of 16": (
                budget([1, 2, 3] * 10, tokens_per_step=40)
            ),
            "batches left out by skip\\(\\).*call skip\\(\\) on the MixtureSampler": skipped,
        }
    )
    for message, sub in cases.items():
        with pytest.raises(ValueError, match=f"samplers\\['a'\\].*{message}"):
            MixtureSampler({"a": sub, "b": budget([1])}, weights=[1, 0], num_batches=3)
    coded = {
        'oversize="split" cuts': PackingSampler([9, 2, 3], capacity=4, oversize="split"),
        'oversize="truncate" cuts': PackingSampler([9, 2, 3], capacity=4, oversize="truncate"),
        "Decomposition yields the codes": PlanSampler(
            [9, 2, 3], Decomposition(min_length=1, max_length=4, tokens_per_batch=8)
        ),
        "a warm-up": PackingSampler(
            [3, 2, 3], capacity=Schedule.piecewise([0, 5], [2, 4]), rows_per_batch=2
        ),
    }
    for message, sub in coded.items():
        mix = MixtureSampler({"a": sub, "b": budget([1])}, weights=[1, 0], num_batches=3)
        assert re.search(f"corpus 'a': .*{message}", mix.needs_pieces() or "")
    # split packing whose sequences all fit: plain indices, mixed as usual
    fits = PackingSampler([4, 2, 3], capacity=4, oversize="split")
    mix = MixtureSampler({"a": fits, "b": budget([1])}, weights=[1, 0], num_batches=3)
    assert mix.needs_pieces() is None
    assert sorted(i for b in mix for i in b) == [0, 1, 2]
    assert Packing(capacity=4, oversize="split").needs_pieces(np.array([4, 2])) is None
