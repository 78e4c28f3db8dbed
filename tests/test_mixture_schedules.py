"""MixtureSampler with weights that change over the steps (issue 28, "Mixtures over time")."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from padless import Schedule
from padless.sampling.mixing import MixtureSampler, temperature_probabilities
from padless.sampling.shortcuts import TokenBudgetSampler
from tests.contract.factories import FACTORIES
from tests.contract.test_contract import _digest
from tests.golden.test_golden_samplers import GOLDEN

ANNEAL = Schedule.piecewise([0, 300], [0.7, 0.1])


def subs(sizes=(400, 300, 12), seed=0, shuffle=True):
    rng = np.random.default_rng(seed)
    return {
        name: TokenBudgetSampler(rng.integers(1, 20, n), max_tokens=40, seed=i, shuffle=shuffle)
        for i, (name, n) in enumerate(zip("abc", sizes, strict=True))
    }


def mix(weights=None, num_batches=1000, **kw):
    if weights is None:
        weights = {"a": ANNEAL, "b": 0.2, "c": Schedule.piecewise([0, 300], [0.1, 0.7])}
    return MixtureSampler(
        subs(shuffle=kw.pop("shuffle", True)), weights=weights, num_batches=num_batches, **kw
    )


def corpus_of_slots(m, epoch=None):
    return m.epoch_schedule(m.epoch if epoch is None else epoch).corpus


# ---------------------------------------------------------------------------------- the draws
@pytest.mark.parametrize("draw", ["stratified", "independent"])
def test_draws_follow_the_scheduled_probabilities_per_phase(draw):
    m = mix(num_batches=8000, world_size=2, draw=draw, seed=5)
    steps, corpus = m.slot_steps(), corpus_of_slots(m)
    assert steps.tolist() == (np.arange(8000) // 2).tolist()
    for lo, hi in ((0, 300), (300, 4000)):
        sel = corpus[(steps >= lo) & (steps < hi)]
        p = m.probabilities_at([lo])[0]
        n = sel.size
        share = np.bincount(sel, minlength=3) / n
        if draw == "stratified":  # each phase's counts are p·n rounded up or down
            assert np.all(np.abs(share - p) < 1 / n + 1e-12)
        else:  # four binomial standard deviations
            assert np.all(np.abs(share - p) <= 4 * np.sqrt(p * (1 - p) / n) + 1e-12)


def test_a_ramp_draws_each_step_with_its_probabilities():
    ramp = Schedule.cosine(0.9, 0.1, steps=2000)
    m = mix({"a": ramp, "b": 0.1, "c": 0.0}, num_batches=6000, world_size=1, seed=2)
    steps, corpus = m.slot_steps(), corpus_of_slots(m)
    assert not np.any(corpus == 2)  # weight 0: never drawn
    p_a = m.probabilities_at(steps)[:, 0]
    for lo in range(0, 6000, 1000):
        sel = slice(lo, lo + 1000)
        expected, got = p_a[sel].sum(), np.count_nonzero(corpus[sel] == 0)
        sd = math.sqrt((p_a[sel] * (1 - p_a[sel])).sum())
        assert abs(got - expected) <= 4 * sd + 1


def test_steps_continue_across_epochs_and_the_probabilities_follow():
    m = mix(num_batches=250, world_size=2)  # 125 steps per epoch: the anneal starts in epoch 2
    assert m.steps_per_epoch == 125
    m.set_epoch(2)
    assert m.first_step() == 250 and m.slot_steps()[0] == 250
    corpus = corpus_of_slots(m)
    before, after = corpus[: 2 * 50], corpus[2 * 50 :]  # steps 250..299, then 300..374
    assert np.count_nonzero(before == 0) > np.count_nonzero(after == 0) * 2


def test_temperature_applies_to_the_scheduled_weights():
    m = mix(temperature=2.0)
    w = np.array([[0.7, 0.2, 0.1], [0.1, 0.2, 0.7]])
    expected = [temperature_probabilities(row, 2.0) for row in w]
    assert np.allclose(m.probabilities_at([0, 300]), expected)
    const = MixtureSampler(subs(), weights=[0.7, 0.2, 0.1], temperature=2.0, num_batches=10)
    assert np.allclose(const.p, expected[0])
    uniform = MixtureSampler(subs(), weights=[1, 0, 3], temperature=float("inf"), num_batches=10)
    assert uniform.p.tolist() == [0.5, 0.0, 0.5]


def test_a_corpus_runs_out_in_its_heavy_phase_and_starts_its_next_epoch():
    m = mix(num_batches=1000)
    st_ = m.stats()["corpora"]["c"]  # 12 short sequences: a few batches per epoch, weight 0.7
    assert st_["cycles"] > 10 and st_["passes"] > 10
    offset = m.corpus_offsets[2]
    drawn = [b for b in m if min(b) >= offset]
    assert len(drawn) == st_["batches"] and all(max(b) < offset + 12 for b in drawn)


# ---------------------------------------------------------------------------------- resume
def batches(m, epochs=(0, 1)):
    out = []
    for e in epochs:
        m.set_epoch(e)
        out.extend((e, tuple(b)) for b in m)
    return out


@settings(max_examples=8, deadline=None)
@given(
    world=st.integers(1, 3),
    stop=st.integers(0, 200),
    draw=st.sampled_from(["stratified", "independent"]),
    shuffle=st.booleans(),
)
def test_resume_at_any_position_is_the_uninterrupted_run(world, stop, draw, shuffle):
    kw = {"num_batches": 240, "world_size": world, "draw": draw, "shuffle": shuffle}
    weights = {"a": Schedule.linear(0.9, 0.1, steps=90, begin=20), "b": ANNEAL, "c": 0.2}
    every = {r: batches(mix(weights, rank=r, **kw)) for r in range(world)}
    cut = min(stop, len(every[0]))
    for r in range(world):
        first = mix(weights, rank=r, **kw)
        got = []
        for e in (0, 1):
            first.set_epoch(e)
            for b in first:
                if len(got) == cut:
                    break
                got.append((e, tuple(b)))
            if len(got) == cut:
                break
        state = first.state_dict(consumed=sum(1 for g in got if g[0] == first.epoch))
        resumed = mix(weights, rank=r, **kw)
        resumed.load_state_dict(state)
        rest = []
        for e in range(resumed.epoch, 2):
            resumed.set_epoch(e)
            rest.extend((e, tuple(b)) for b in resumed)
        assert got + rest == every[r]


def test_elastic_resume_keeps_what_was_delivered_and_continues_the_steps():
    weights = {"a": Schedule.linear(0.9, 0.1, steps=100), "b": 0.3, "c": ANNEAL}
    two = [mix(weights, num_batches=600, world_size=2, rank=r) for r in range(2)]
    before = two[0].epoch_schedule(0)
    its = [iter(s) for s in two]
    for _ in range(40):  # 40 steps at world size 2: positions 0..79
        for it in its:
            next(it)
    state = two[0].state_dict()
    assert state["position"] == 80
    three = [mix(weights, num_batches=600, world_size=3, rank=r) for r in range(3)]
    for s in three:
        s.load_state_dict(state)
    after = three[0].epoch_schedule(0)
    for field in ("corpus", "sub_epoch", "batch"):
        assert np.array_equal(getattr(after, field)[:80], getattr(before, field)[:80])
    steps = three[0].slot_steps()
    assert steps[79] == 39 and steps[80] == 40 and steps[83] == 41
    ranks = [list(s) for s in three]
    assert len({len(r) for r in ranks}) == 1
    delivered = [b for step in zip(*ranks, strict=True) for b in step]
    rebuilt = []
    for k, e, b in zip(after.corpus[80:], after.sub_epoch[80:], after.batch[80:], strict=True):
        plan, _ = three[0].samplers[three[0].names[k]].epoch_plan(int(e))
        rebuilt.append((plan[int(b)] + three[0].corpus_offsets[k]).tolist())
    assert delivered[: len(rebuilt)] == rebuilt
    # each corpus continues its own stream: no batch of it repeated or skipped
    for k in range(3):
        pairs = list(
            zip(after.sub_epoch[after.corpus == k], after.batch[after.corpus == k], strict=True)
        )
        assert len(set(pairs)) == len(pairs)


def test_a_corpus_that_does_not_shuffle_keeps_its_world_size_under_weight_schedules():
    """A non-shuffling corpus's one order continues across epochs from the batches earlier
    epochs drew of it, recounted at the world size the current epoch starts at: an epoch run at
    1 rank, resumed at 4 for the next, repeated 6 of its batches (at 4 then 1: never used 6).
    Refused at load, naming both world sizes and the corpus; the same world size resumes."""
    weights = {"a": Schedule.piecewise([0, 6], [1.0, 4.0]), "b": 0.5, "c": 0.5}
    one = mix(weights, num_batches=60, shuffle=False)
    list(one)
    saved = one.state_dict()
    four = mix(weights, num_batches=60, shuffle=False, world_size=4)
    with pytest.raises(ValueError, match=r"world_size=1 .* world_size=4, and corpus 'a' does"):
        four.load_state_dict(saved)
    again = mix(weights, num_batches=60, shuffle=False)
    again.load_state_dict(saved)
    again.set_epoch(1)
    one.set_epoch(1)
    assert list(again) == list(one)
    # shuffling corpora: an elastic resume is fine
    shuffled = mix(weights, num_batches=60)
    list(shuffled)
    mix(weights, num_batches=60, world_size=4).load_state_dict(shuffled.state_dict())


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_equal_steps_per_rank(world):
    lens = {len(list(mix(num_batches=301, world_size=world, rank=r))) for r in range(world)}
    assert lens == {-(-301 // world)}


# ---------------------------------------------------------------------------------- constant
def test_constant_weights_draw_exactly_as_numbers():
    f = next(f for f in FACTORIES if f.name == "mixture")
    assert _digest(f) == GOLDEN["mixture"]
    numbers = MixtureSampler(subs(), weights=[0.5, 0.3, 0.2], num_batches=200, world_size=2)
    consts = MixtureSampler(
        subs(),
        weights={
            "a": Schedule.constant(0.5),
            "b": Schedule.piecewise([0, 9], [0.3, 0.3]),
            "c": {"kind": "constant", "value": 0.2},
        },
        num_batches=200,
        world_size=2,
    )
    assert consts.weight_schedules is None
    assert list(numbers) == list(consts)
    assert numbers.state_dict()["fingerprint"] == consts.state_dict()["fingerprint"]


# ---------------------------------------------------------------------------------- stats, state
def test_stats_report_the_shares_per_phase():
    m = mix(num_batches=1000, world_size=2)
    stats = m.stats()
    phases = stats["phases"]
    assert [(p["first_step"], p["end_step"]) for p in phases] == [(0, 300), (300, 500)]
    assert sum(p["batches"] for p in phases) == 1000
    corpus = corpus_of_slots(m)
    for p, sel in zip(phases, (corpus[:600], corpus[600:]), strict=True):
        for k, name in enumerate("abc"):
            assert p["corpora"][name]["batches"] == np.count_nonzero(sel == k)
            assert abs(p["corpora"][name]["share"] - p["corpora"][name]["p"]) < 1 / p["batches"]
    assert phases[1]["corpora"]["c"]["p"] == pytest.approx(0.7)
    assert stats["weights"][0] == ANNEAL.as_dict()
    assert stats["corpora"]["a"]["p"] == pytest.approx((0.7 * 300 + 0.1 * 200) / 500)
    ramp = mix({"a": Schedule.linear(0.1, 0.9, steps=400, begin=50), "b": 0.5, "c": 0.1})
    bins = ramp.stats()["phases"]
    assert bins[0]["first_step"] == 0 and bins[-1]["end_step"] == 1000 and 10 < len(bins) <= 18
    ps = [b["corpora"]["a"]["p"] for b in bins]
    assert ps == sorted(ps)


def test_a_state_under_other_weights_goes_on_with_them():
    state = mix().state_dict()
    mix().load_state_dict(state)
    other = {"a": Schedule.piecewise([0, 301], [0.7, 0.1]), "b": 0.2, "c": 0.1}
    for changed in (mix(other), mix(temperature=2.0)):
        changed.load_state_dict(state)  # resume across a change (test_resume_change)
        assert changed.state_dict()["changes"][0]["position"] == state["position"]


@pytest.mark.parametrize(
    ("weights", "exc", "match"),
    [
        (
            {"a": Schedule.linear(1.0, -1.0, steps=5), "b": 1, "c": 1},
            ValueError,
            r"weights\['a'\] must never be negative",
        ),
        ({"a": {"kind": "ramp"}, "b": 1, "c": 1}, ValueError, r"weights\['a'\]\['kind'\]"),
        ({"a": "x", "b": 1, "c": 1}, TypeError, r"weights\['a'\] must be a number, a Schedule"),
        (ANNEAL, TypeError, "weights must be a dict name -> weight"),
        (
            {
                "a": Schedule.piecewise([0, 10], [1, 0]),
                "b": Schedule.linear(1.0, 0.0, steps=5),
                "c": 0,
            },
            ValueError,
            r"not all zero at every step; at step 10",
        ),
    ],
)
def test_weight_errors_name_the_parameter(weights, exc, match):
    with pytest.raises(exc, match=match):
        MixtureSampler(subs(), weights=weights, num_batches=10)


def test_stratified_rows_round_each_phase_without_bias():
    from padless.sampling.mixing import _stratified_rows

    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(4), size=5)
    probs[1] = [0.0, 0.5, 0.5, 0.0]
    lens = np.array([7, 3, 1, 10, 2])
    reps = 4000
    counts = _stratified_rows(np.tile(probs, (reps, 1)), np.tile(lens, reps), rng)
    counts = counts.reshape(reps, 5, 4)
    target = probs * lens[:, None]
    assert np.all(counts.sum(axis=2) == lens)
    assert np.all((counts == np.floor(target)) | (counts == np.ceil(target)))
    assert np.all(counts[:, 1, [0, 3]] == 0)
    assert np.allclose(counts.mean(axis=0), target, atol=0.05)


def test_states_no_run_writes_are_refused_when_loaded():
    """An edited state's elastic parts (positions that decrease, or a part past the state's
    position) and an epoch whose steps pass the schedules' 2**62: refused by load_state_dict
    (or set_epoch), naming the entry; they failed at the first batch, or delivered a made-up
    order."""
    lens = np.random.default_rng(8).integers(1, 1000, 3000)

    def mix():
        a = TokenBudgetSampler(lens[:2000], max_tokens=2048, seed=1)
        b = TokenBudgetSampler(lens[2000:], max_tokens=2048, seed=2)
        weights = {"a": Schedule.piecewise([0, 10], [0.9, 0.1]), "b": 0.5}
        return MixtureSampler({"a": a, "b": b}, seed=1, world_size=2, weights=weights)

    m = mix()
    it = iter(m)
    for _ in range(5):
        next(it)
    state = m.state_dict()
    for elastic, words in (
        ([[3, 4], [5, 2]], r"positions must not decrease, got 2 after 4"),
        ([[3, 40]], r"part ending at position 40, past the state's position"),
    ):
        with pytest.raises(ValueError, match=words):
            mix().load_state_dict({**state, "elastic": elastic})
    with pytest.raises(ValueError, match=r"epoch 1180591620717411303424 .* past 2\*\*62"):
        mix().load_state_dict({**state, "epoch": 2**70})
    with pytest.raises(ValueError, match=r"past 2\*\*62"):
        mix().set_epoch(2**70)
    plain = TokenBudgetSampler(lens, max_tokens=2048, seed=1, world_size=2, balance=True)
    it = iter(plain)
    for _ in range(5):
        next(it)
    with pytest.raises(ValueError, match=r"past the state's position"):
        TokenBudgetSampler(
            lens, max_tokens=2048, seed=1, world_size=2, balance=True
        ).load_state_dict({**plain.state_dict(), "elastic": [[3, 40]]})
