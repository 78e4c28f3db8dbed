"""Resume across a change of settings: a state saved under one budget, capacity, balance or world
size loads into a sampler with others and the epoch goes on with nothing repeated or lost; the
state keeps the epoch's changes, so a later resume is exact; what cannot change is refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import padless
from padless import Schedule
from padless.sampling.mixing import MixtureSampler

LENGTHS = np.random.default_rng(7).integers(1, 300, 500)
N = LENGTHS.size

# each family: settings a run may move between (same strategy), and the budget check of a batch
FAMILIES = {
    "token_budget": [padless.TokenBudget(max_tokens=t) for t in (600, 1500, 4000)],
    "buckets": [
        padless.Buckets(num_buckets=4, max_tokens=1200),
        padless.Buckets(num_buckets=8, max_tokens=600),
    ],
    "exact_length": [padless.ExactLength(batch_size=b) for b in (2, 5)],
    "packing": [
        padless.Packing(capacity=512),
        padless.Packing(capacity=1024, rows_per_batch=2),
        padless.Packing(capacity=384, max_per_row=4),
    ],
    "packing_cp": [
        padless.Packing(capacity=512, context_parallel=2),
        padless.Packing(capacity=1024, context_parallel=2, rows_per_batch=2),
        padless.Packing(capacity=512),
    ],
    "packing_split": [
        padless.Packing(capacity=128, oversize="split"),
        padless.Packing(capacity=128, oversize="split", rows_per_batch=3),
    ],
}


def _sampler(spec, *, rank=0, world=1, balance=False, drop_last=False):
    return padless.PlanSampler(
        LENGTHS, spec, seed=4, rank=rank, world_size=world, balance=balance, drop_last=drop_last
    )


def _in_parts(parts):
    """An epoch run in ``parts``, each ``(ranks, steps)``: a fresh sampler per rank, loaded with
    the state rank 0 saved after the part before it had run its ``steps`` steps (the last part
    runs to the epoch's end). Returns the global batches in slot order and the last part's
    rank 0."""
    got, state, last = [], None, None
    for k, (ranks, steps) in enumerate(parts):
        if state is not None:
            for s in ranks:
                s.load_state_dict(state)
        last = ranks[0]
        its = [iter(s) for s in ranks]
        final = k == len(parts) - 1
        count = 0
        while final or count < steps:
            try:
                step = [next(it) for it in its]
            except StopIteration:
                break
            got.extend(step)
            count += 1
        state = ranks[0].state_dict()
    return got, last


def _run(parts, *, drop_last=False):
    """``_in_parts`` of PlanSamplers: ``(spec, world, balance, steps)`` each."""
    return _in_parts(
        [
            (
                [
                    _sampler(spec, rank=r, world=world, balance=balance, drop_last=drop_last)
                    for r in range(world)
                ],  # fmt: skip
                steps,
            )
            for spec, world, balance, steps in parts
        ]
    )


def _slots(sampler):
    """The epoch's batch slots: those delivered before its changes and the rest's."""
    figures = sampler.stats()
    return figures["batches"] + figures.get("delivered_before_change", 0)


def _check_once(got, sampler, split_at=None):
    """Every item (or split piece) in exactly one batch, once the tail's repeats are left out."""
    batches = got[: _slots(sampler)]
    codes = np.array([c for b in batches for c in b], dtype=np.int64)
    assert np.unique(codes).size == codes.size, "an item was repeated"
    if split_at is None:
        assert np.array_equal(np.sort(codes), np.arange(N)), "an item was lost"
    else:
        pieces = -(-LENGTHS // split_at)
        want = np.concatenate([i + np.arange(p) * N for i, p in enumerate(pieces)])
        assert np.array_equal(np.sort(codes), np.sort(want)), "a piece was lost"


@pytest.mark.parametrize("family", sorted(FAMILIES))
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_random_changes_repeat_and_lose_nothing(family, data):
    specs = FAMILIES[family]
    parts = []
    for _ in range(data.draw(st.integers(2, 4), label="parts")):
        parts.append(
            (
                data.draw(st.sampled_from(specs)),
                data.draw(st.integers(1, 4), label="world"),
                data.draw(st.booleans(), label="balance"),
                data.draw(st.integers(0, 6), label="steps"),
            )
        )
    got, last = _run(parts)
    _check_once(got, last, split_at=128 if family == "packing_split" else None)
    # the batches after the last change keep its budget
    spec = parts[-1][0]
    tail = got[sum(p[3] * p[1] for p in parts[:-1]) : _slots(last)]
    if isinstance(spec, padless.TokenBudget):
        assert all(len(b) * LENGTHS[b].max() <= spec.max_tokens for b in tail)


@pytest.mark.parametrize("family", ["token_budget", "packing_split"])
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_a_later_resume_after_a_change_is_exact(family, data):
    """Saved after a change, the state carries it: loading it anywhere later gives the batches
    the run would have had."""
    a, b = FAMILIES[family][:2]
    world = data.draw(st.integers(1, 3))
    cut = data.draw(st.integers(0, 5))
    first = _sampler(a, world=world)
    it = iter(first)
    for _ in range(cut):
        next(it)
    state = first.state_dict()
    ranks = [_sampler(b, rank=r, world=world) for r in range(world)]
    for s in ranks:
        s.load_state_dict(state)
    want = [list(s) for s in ranks]
    later = data.draw(st.integers(0, len(want[0])))
    for rank in range(world):
        s = _sampler(b, rank=rank, world=world)
        s.load_state_dict(state)
        it = iter(s)
        received = [next(it) for _ in range(later)]
        saved = s.state_dict()
        assert len(saved["changes"]) == 1
        again = _sampler(b, rank=rank, world=world)
        again.load_state_dict(saved)
        assert received + list(again) == want[rank]


def test_a_budget_change_plans_the_rest_with_the_new_budget():
    small, large = FAMILIES["token_budget"][0], FAMILIES["token_budget"][2]
    s = _sampler(small)
    it = iter(s)
    head = [next(it) for _ in range(20)]
    t = _sampler(large)
    t.load_state_dict(s.state_dict())
    left = len(t)
    rest = list(t)
    assert all(len(b) * LENGTHS[b].max() <= 600 for b in head)
    assert max(len(b) * LENGTHS[b].max() for b in rest) > 600  # the larger budget is used
    assert left == len(rest) and t.stats()["changes"] == 1
    assert t.stats()["delivered_before_change"] == 20
    _check_once(head + rest, t)


def test_the_next_epoch_starts_from_scratch_with_the_new_settings():
    small, large = FAMILIES["token_budget"][0], FAMILIES["token_budget"][2]
    s = _sampler(small)
    it = iter(s)
    next(it)
    t = _sampler(large)
    t.load_state_dict(s.state_dict())
    list(t)
    t.set_epoch(1)
    fresh = _sampler(large)
    fresh.set_epoch(1)
    assert list(t) == list(fresh)
    assert "changes" not in t.state_dict()


@pytest.mark.parametrize("change", ["balance", "world"])
def test_a_change_at_the_end_of_an_epoch_run_into_its_repeats_saves_a_loadable_state(change):
    """4 ranks end an epoch of 21 batches at position 24 (the last step's repeats); loaded under
    other settings the epoch is over, and the state saved then loads again (its change was
    kept at 24, past the position 21: the sampler refused its own state)."""
    spec = padless.TokenBudget(max_tokens=2000)
    done = [_sampler(spec, rank=r, world=4) for r in range(4)]
    for s in done:
        list(s)
    saved = done[0].state_dict()
    total = len(done[0].epoch_plan(0)[1])
    assert total % 4 and saved["position"] > total  # the tail's repeats ran past the end

    def other(rank=0):
        return (
            _sampler(spec, world=4, balance=True)
            if change == "balance"
            else (_sampler(spec, rank=rank, world=3))
        )

    resumed = other()
    resumed.load_state_dict(saved)
    # the repeats already run are counted (the position was put back to 21: repeated said 0)
    assert resumed.repeated == done[0].repeated == saved["position"] - total
    assert list(resumed) == []
    again = other()
    again.load_state_dict(resumed.state_dict())
    assert list(again) == [] and again.state_dict() == resumed.state_dict()
    assert again.repeated == done[0].repeated
    for s in (resumed, again):
        s.set_epoch(1)
    fresh = other()
    fresh.set_epoch(1)
    assert list(again) == list(resumed) == list(fresh)


def test_repeats_run_before_a_change_are_counted_after_it():
    """Two ranks end an epoch of 21 Buckets batches at position 22 (one repeat); the state loaded
    under a larger budget still counts that repeat (it said 0) and its rest is empty."""
    lengths = np.random.default_rng(0).integers(1, 60, 120)

    def ranks(budget):
        spec = padless.Buckets(num_buckets=4, max_tokens=budget)
        return [padless.PlanSampler(lengths, spec, seed=0, rank=r, world_size=2) for r in (0, 1)]

    ran = ranks(256)
    for s in ran:
        list(s)
    saved = ran[0].state_dict()
    assert (saved["position"], ran[0].repeated) == (22, 1)
    for s in ranks(512):
        s.load_state_dict(saved)
        assert (s.repeated, s.dropped, list(s)) == (1, 0, [])
        assert s.state_dict()["position"] == 22


@pytest.mark.parametrize("change", [{"max_tokens": 512}, {"balance": True}])
def test_an_epoch_run_into_repeats_at_4_ranks_loads_at_2_under_other_settings(change):
    """4 ranks end 21 batches at position 24 (3 repeats); 2 ranks under other settings load it
    (the position is past the end at 2 ranks, 22, but the part at 4 ran to 24: it was refused
    once the position was kept) and count the 3 repeats; the epoch is over."""
    lengths = np.random.default_rng(0).integers(1, 60, 120)

    def make(rank, world, max_tokens=256, balance=False):
        spec = padless.Buckets(num_buckets=4, max_tokens=max_tokens)
        return padless.PlanSampler(
            lengths, spec, seed=0, rank=rank, world_size=world, balance=balance
        )

    ran = [make(r, 4) for r in range(4)]
    for s in ran:
        list(s)
    saved = ran[0].state_dict()
    assert (saved["position"], ran[0].repeated) == (24, 3)
    for rank in (0, 1):
        s = make(rank, 2, **change)
        s.load_state_dict(saved)
        assert (s.repeated, list(s)) == (3, [])
        again = make(rank, 2, **change)
        again.load_state_dict(s.state_dict())
        assert (again.repeated, list(again)) == (3, [])


def test_loss_tokens_count_the_batches_before_the_change():
    small, large = FAMILIES["token_budget"][0], FAMILIES["token_budget"][2]
    s = _sampler(small, world=2)
    it = iter(s)
    next(it)
    state = s.state_dict()
    t = _sampler(large, world=2)
    t.load_state_dict(state)
    # repeats at the tail are the epoch's first batches: the ones delivered before the change
    total, mine = t.loss_tokens(0)
    first = next(iter(t))
    assert mine == [int((LENGTHS[first] - 1).sum())]
    assert total >= mine[0]


def test_split_packing_at_another_capacity_with_pieces_left_is_refused():
    s = _sampler(padless.Packing(capacity=128, oversize="split"))
    it = iter(s)
    for _ in range(30):
        next(it)
    t = _sampler(padless.Packing(capacity=256, oversize="split"))
    with pytest.raises(ValueError, match="only some of their pieces"):
        t.load_state_dict(s.state_dict())
    assert list(t) == list(_sampler(padless.Packing(capacity=256, oversize="split")))


def test_decomposition_keeps_its_pieces_across_a_curriculum_change():
    lengths = np.random.default_rng(3).integers(1, 2000, 300)
    make = lambda c: padless.PlanSampler(  # noqa: E731
        lengths,
        padless.Decomposition(min_length=1, max_length=256, tokens_per_batch=1024, curriculum=c),
        seed=2,
    )
    s = make("natural")
    it = iter(s)
    head = [next(it) for _ in range(10)]
    t = make("short_to_long")
    t.load_state_dict(s.state_dict())
    codes = [c for b in head + list(t) for c in b]
    full = [c for b in make("natural") for c in b]
    assert sorted(codes) == sorted(full) and len(set(codes)) == len(codes)


@pytest.mark.parametrize(
    "other, match",
    [
        (lambda: _sampler(padless.Packing(capacity=512)), "strategy"),
        (
            lambda: padless.PlanSampler(
                LENGTHS, padless.TokenBudget(max_tokens=900), seed=4, shuffle=False
            ),
            "shuffle",
        ),
        (lambda: padless.PlanSampler(LENGTHS, padless.TokenBudget(max_tokens=900)), "seed"),
        (
            lambda: padless.PlanSampler(LENGTHS[:-1], padless.TokenBudget(max_tokens=900), seed=4),
            "data differ",
        ),
        (
            lambda: padless.PlanSampler(
                LENGTHS, padless.TokenBudget(max_tokens=900), seed=4, window=100
            ),
            "saved by a sampler with window=None, this PlanSampler has window=100",
        ),
    ],
)
def test_what_cannot_change_is_refused_by_name(other, match):
    s = _sampler(padless.TokenBudget(max_tokens=600))
    it = iter(s)
    next(it)
    state = s.state_dict()
    target = other()
    with pytest.raises(ValueError, match=match):
        target.load_state_dict(state)


@pytest.mark.parametrize("saved_form", [100, "histogram"])
@pytest.mark.parametrize("loading_form", [None, 50, "histogram"])
def test_a_state_of_another_epoch_form_is_refused_naming_both(saved_form, loading_form):
    """A windowed or histogram state into a sampler of another form: refused naming both forms
    (a whole sampler said only that the settings differ); the same form loads it."""

    def make(window):
        return padless.PlanSampler(
            LENGTHS, padless.TokenBudget(max_tokens=900), seed=4, window=window
        )

    s = make(saved_form)
    it = iter(s)
    next(it)
    state = s.state_dict()
    assert state["window"] == saved_form
    same = make(saved_form)
    same.load_state_dict(state)
    assert list(same) == list(it)
    if loading_form == saved_form:
        return
    with pytest.raises(ValueError, match=rf"window={saved_form!r}, this PlanSampler has window="):
        make(loading_form).load_state_dict(state)


def test_edited_or_missing_settings_are_refused():
    s = _sampler(padless.TokenBudget(max_tokens=600))
    next(iter(s))
    state = s.state_dict()
    t = _sampler(padless.TokenBudget(max_tokens=900))
    edited = {**state, "settings": {**state["settings"], "spec": {"max_tokens": 700}}}
    with pytest.raises(ValueError, match="do not agree"):
        t.load_state_dict(edited)
    forged = {**state, "settings": {"spec": {}, "config": {}}}
    with pytest.raises(ValueError, match="does not match its fingerprint"):
        t.load_state_dict(forged)
    older = {k: v for k, v in state.items() if k != "settings"}  # saved before states said
    with pytest.raises(ValueError, match="settings differ"):
        t.load_state_dict(older)
    t.load_state_dict(state)  # a refused load changed nothing
    assert t.state_dict()["changes"][0]["position"] == 1


# ------------------------------------------------------------------------ mixtures

MIX_LENGTHS = np.random.default_rng(8).integers(1, 100, 500)
WEIGHTS = [
    {"a": 0.8, "b": 0.2},
    None,  # by size
    {"a": Schedule.piecewise([0, 15], [0.1, 0.9]), "b": 0.5},
    {"a": Schedule.linear(0.0, 1.0, steps=40), "b": Schedule.constant(0.3)},
]


def _corpora():
    return {
        "a": padless.TokenBudgetSampler(MIX_LENGTHS[:200], max_tokens=300, seed=1),
        "b": padless.TokenBudgetSampler(MIX_LENGTHS[200:], max_tokens=300, seed=2),
    }


def _mix(weights, world=1, rank=0, **kw):
    return MixtureSampler(
        _corpora(), weights=weights, num_batches=90, seed=5, world_size=world, rank=rank, **kw
    )


def _stream(name):
    """A corpus's batches in the order a mixture uses them (its epochs one after another),
    as global indices."""
    sub, off = _corpora()[name], 0 if name == "a" else 200
    epoch = 0
    while True:
        sub.set_epoch(epoch)
        for batch in sub:
            yield [i + off for i in batch]
        epoch += 1


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_mixture_weight_changes_continue_every_corpus_where_it_was(data):
    """Weights change at random points (and the world size with them): every corpus's batches
    are its stream's, in order, none repeated or skipped."""
    parts = []
    for _ in range(data.draw(st.integers(2, 4), label="parts")):
        weights = data.draw(st.sampled_from(WEIGHTS), label="weights")
        world = data.draw(st.integers(1, 3), label="world")
        steps = data.draw(st.integers(0, 12), label="steps")
        parts.append(([_mix(weights, world, r) for r in range(world)], steps))
    got, _ = _in_parts(parts)
    got = got[:90]  # the tail's repeats left out
    assert len(got) == 90
    for name in ("a", "b"):
        mine = [b for b in got if (b[0] < 200) == (name == "a")]
        stream = _stream(name)
        assert mine == [next(stream) for _ in mine]


def test_mixture_weights_after_the_change_are_the_new_ones():
    first = _mix({"a": 0.95, "b": 0.05})
    it = iter(first)
    head = [next(it) for _ in range(30)]
    later = _mix({"a": 0.05, "b": 0.95})
    later.load_state_dict(first.state_dict())
    rest = list(later)
    share = lambda batches: np.mean([b[0] < 200 for b in batches])  # noqa: E731
    assert share(head) > 0.8 and share(rest) < 0.2
    assert sum(later.corpus_counts().values()) == 90
    assert later.state_dict()["changes"][0]["settings"]["weights"] == [0.95, 0.05]


def test_mixture_changes_that_cannot_be_honoured_are_refused():
    state = _mix({"a": 1, "b": 1}).state_dict()
    with pytest.raises(ValueError, match="num_batches"):
        MixtureSampler(
            _corpora(), weights={"a": 2, "b": 1}, num_batches=91, seed=5
        ).load_state_dict(state)
    corpora = _corpora()
    corpora["b"] = padless.TokenBudgetSampler(MIX_LENGTHS[200:], max_tokens=301, seed=2)
    with pytest.raises(ValueError, match="samplers"):
        MixtureSampler(corpora, weights={"a": 2, "b": 1}, num_batches=90, seed=5).load_state_dict(
            state
        )
    fixed = {
        "a": padless.TokenBudgetSampler(MIX_LENGTHS[:200], max_tokens=300, seed=1, shuffle=False),
        "b": padless.TokenBudgetSampler(MIX_LENGTHS[200:], max_tokens=300, seed=2),
    }
    saved = MixtureSampler(fixed, weights={"a": 1, "b": 1}, num_batches=90, seed=5).state_dict()
    with pytest.raises(ValueError, match="does not shuffle"):
        MixtureSampler(fixed, weights={"a": 2, "b": 1}, num_batches=90, seed=5).load_state_dict(
            saved
        )


def test_the_docs_example_runs():
    import re
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "schedules.md").read_text()
    at = text.index("\n## Resume across a change of settings\n")
    code = re.search(r"```python\n(.*?)```", text[at:], re.S).group(1)
    exec(compile(code, "docs/schedules.md: resume across a change", "exec"), {"__name__": "doc"})


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda s: {**s, "changes": "x"}, "must be a list"),
        (lambda s: {**s, "changes": [1]}, "must hold"),
        (lambda s: {**s, "changes": [{**s["changes"][0], "position": -1}]}, "int >= 0"),
        (lambda s: {**s, "changes": [{**s["changes"][0], "world_size": 0}]}, "int >= 1"),
        (lambda s: {**s, "changes": [{**s["changes"][0], "position": 10**6}]}, "past the state"),
        (
            lambda s: {**s, "changes": [{**s["changes"][0], "settings": {"spec": {}}}]},
            "must hold 'spec' and 'config'",
        ),
        (
            lambda s: {
                **s,
                "changes": [
                    {**s["changes"][0], "settings": {**s["changes"][0]["settings"], "spec": []}}
                ],
            },
            "do not make",
        ),
        (
            lambda s: {**s, "changes": [{**s["changes"][0], "elastic": [[0, 1]]}]},
            "elastic",
        ),
    ],
)
def test_hostile_change_records_are_refused_by_name(edit, match):
    s = _sampler(padless.TokenBudget(max_tokens=600))
    it = iter(s)
    for _ in range(3):
        next(it)
    t = _sampler(padless.TokenBudget(max_tokens=900))
    t.load_state_dict(s.state_dict())
    saved = t.state_dict()
    fresh = _sampler(padless.TokenBudget(max_tokens=900))
    with pytest.raises(ValueError, match=match):
        fresh.load_state_dict(edit(saved))
    assert list(fresh) == list(_sampler(padless.TokenBudget(max_tokens=900)))  # unchanged


@pytest.mark.parametrize(
    ("spec", "answers"),
    [
        (padless.TokenBudget(max_tokens=300), True),
        (padless.TokenBudget(max_tokens=300, pad_to_multiple_of=8, max_sentences=5), True),
        (padless.TokenBudget(max_tokens=120, oversize="skip"), True),
        (
            padless.TokenBudget(max_tokens=300, cost=padless.Cost(quadratic=0.01), max_cost=9e2),
            False,
        ),
        (padless.Buckets(num_buckets=3, max_tokens=300), False),
        (padless.Packing(capacity=150, oversize="drop", rows_per_batch=2), True),
        (padless.Packing(capacity=250, max_per_row=3), True),
        (padless.Packing(capacity=150, oversize="split"), False),
        (
            padless.Packing(capacity=250, cost=padless.Cost(quadratic=0.01), max_row_cost=900.0),
            False,
        ),
        (padless.Packing(capacity=256, context_parallel=2), False),
    ],
    ids=lambda s: s.describe()[:40] if isinstance(s, padless.Spec) else str(s),
)
def test_a_named_plan_is_the_plan_gathered(spec, answers):
    """Planner.plan_named (the rest of an epoch planned with its sequences' corpus indices
    written as it sorts) equals the plan gathered where a strategy answers it; the others
    answer None (the caller gathers)."""
    lengths = np.random.default_rng(9).integers(1, 200, 500)
    planner = spec.bind(padless.lengths_of(lengths))
    names = np.sort(np.random.default_rng(1).choice(10_000, 500, replace=False)).astype(np.int64)
    named = planner.plan_named(3, 1, names)
    assert (named is not None) == answers
    if named is not None:
        plan = planner.plan(3, 1)
        assert np.array_equal(named.indices, names[plan.indices])
        assert np.array_equal(named.offsets, plan.offsets)
        assert np.array_equal(named.skipped, names[plan.skipped])
        if isinstance(plan, padless.core.plan.PackedPlan):  # the same rows and pieces
            assert np.array_equal(named.row_offsets, plan.row_offsets)
            assert np.array_equal(named.piece_lengths, plan.piece_lengths)
            assert named.info == plan.info
