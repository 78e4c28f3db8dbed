"""Groups in the samplers (issue 42): ``PlanSampler(..., groups=)`` and the keyword samplers.

Every batch holds whole groups (a group's items next to each other, in increasing index order),
never over the budget after the collate (padded: rows x longest; packed: capacity per row),
every index once per epoch, equal steps per rank, deterministic, resumable (exactly, elastically,
across a change of settings); what cannot honour groups refuses them when built, by name.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import padless
from padless import Packing, PlanSampler, TokenBudget
from tests.contract.factories import Factory
from tests.contract.test_contract import check_union, run_elastic

# (length, group id) per item; ids drawn from a small range so groups have several items, in
# any position (a group's items need not be adjacent)
items = st.lists(st.tuples(st.integers(1, 30), st.integers(-3, 12)), min_size=1, max_size=50)


def _arrays(data: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    return np.array([d[0] for d in data], np.int64), np.array([d[1] for d in data], np.int64)


def _members(groups: np.ndarray) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, g in enumerate(groups.tolist()):
        out.setdefault(g, []).append(i)
    return out


def _padded_budget(lengths: np.ndarray, groups: np.ndarray, extra: int) -> int:
    """A budget every group fits alone (count x longest), ``extra`` tokens more."""
    worst = max(len(m) * int(lengths[m].max()) for m in _members(groups).values())
    return worst + extra


def _check_whole(batch: list[int], groups: np.ndarray, members: dict[int, list[int]]) -> None:
    """The batch holds whole groups, each as one run of its items in increasing index order."""
    ids = groups[batch].tolist()
    runs = [g for k, g in enumerate(ids) if k == 0 or ids[k - 1] != g]
    assert len(runs) == len(set(runs)), f"a group's items are not adjacent: {ids}"
    at = 0
    for g in runs:
        m = members[g]
        assert batch[at : at + len(m)] == m
        at += len(m)


def _epoch(make, world: int, epoch: int = 0) -> list[list[list[int]]]:
    out = []
    for r in range(world):
        s = make(rank=r, world_size=world)
        s.set_epoch(epoch)
        out.append(list(s))
    return out


def _check_epoch(ranks: list[list[list[int]]], plan_batches: list[list[int]], n: int) -> None:
    """Equal steps per rank; every delivered batch one of the plan's; the plan's batches hold
    every index once; repeats (the tail's) fewer than the world size."""
    assert len({len(r) for r in ranks}) == 1, "ranks must run the same number of steps"
    planned = Counter(tuple(b) for b in plan_batches)
    assert max(planned.values(), default=1) == 1
    flat = [i for b in plan_batches for i in b]
    assert sorted(flat) == list(range(n))
    got = Counter(tuple(b) for r in ranks for b in r)
    assert not got - planned - Counter({k: v - 1 for k, v in got.items()})  # only planned ones
    assert not planned - got, "a planned batch was never delivered"
    assert sum((got - planned).values()) < len(ranks)


@settings(max_examples=30, deadline=None)
@given(items, st.integers(0, 60), st.integers(1, 3), st.booleans(), st.integers(0, 3))
def test_token_budget_groups_whole_within_the_padded_budget(data, extra, world, balance, seed):
    lengths, groups = _arrays(data)
    budget = _padded_budget(lengths, groups, extra)
    members = _members(groups)

    def make(**o):
        return PlanSampler(
            lengths, TokenBudget(max_tokens=budget), groups=groups, seed=seed, balance=balance, **o
        )

    ranks = _epoch(make, world)
    for batch in (b for r in ranks for b in r):
        _check_whole(batch, groups, members)
        assert len(batch) * int(lengths[batch].max()) <= budget  # padded: rows x longest
    plan, _ = make().epoch_plan(0)
    _check_epoch(ranks, [b.tolist() for b in plan], lengths.size)
    assert _epoch(make, world) == ranks  # deterministic from (seed, epoch)


@settings(max_examples=30, deadline=None)
@given(items, st.integers(0, 40), st.integers(1, 3), st.integers(1, 3), st.integers(0, 3))
def test_packing_groups_whole_in_rows_within_capacity(data, extra, per, world, seed):
    lengths, groups = _arrays(data)
    members = _members(groups)
    capacity = max(int(lengths[m].sum()) for m in members.values()) + extra

    def make(**o):
        spec = Packing(capacity=capacity, rows_per_batch=per)
        return PlanSampler(lengths, spec, groups=groups, seed=seed, **o)

    ranks = _epoch(make, world)
    for batch in (b for r in ranks for b in r):
        _check_whole(batch, groups, members)
    plan, _ = make().epoch_plan(0)
    for row in plan.rows:
        assert int(lengths[row].sum()) <= capacity
        for g in set(groups[row].tolist()):
            assert set(members[g]) <= set(row.tolist())  # a group in one row
    _check_epoch(ranks, [b.tolist() for b in plan], lengths.size)


@settings(max_examples=20, deadline=None)
@given(items, st.integers(0, 40), st.booleans(), st.integers(1, 8))
def test_resume_equals_no_interruption(data, extra, packed, k):
    lengths, groups = _arrays(data)
    spec = (
        Packing(capacity=max(int(lengths[groups == g].sum()) for g in set(groups)) + extra)
        if packed
        else TokenBudget(max_tokens=_padded_budget(lengths, groups, extra))
    )
    whole = list(PlanSampler(lengths, spec, groups=groups, seed=5))
    first = PlanSampler(lengths, spec, groups=groups, seed=5)
    it = iter(first)
    got = [b for _, b in zip(range(k), it, strict=False)]
    state = json.loads(json.dumps(first.state_dict()))
    again = PlanSampler(lengths, spec, groups=groups, seed=5)
    again.load_state_dict(state)
    assert got + list(again) == whole


def _factory(lengths: np.ndarray, groups: np.ndarray, spec) -> Factory:
    return Factory(
        "groups",
        lambda **o: PlanSampler(lengths, spec, groups=groups, **o),
        all_units=lambda s: list(range(lengths.size)),
    )


@settings(max_examples=15, deadline=None)
@given(items, st.booleans(), st.booleans(), st.integers(0, 6))
def test_elastic_resume_2_then_3_loses_and_repeats_nothing(data, packed, balance, steps):
    lengths, groups = _arrays(data)
    if packed:
        spec = Packing(capacity=max(int(lengths[groups == g].sum()) for g in set(groups)) + 5)
    else:
        spec = TokenBudget(max_tokens=_padded_budget(lengths, groups, 20))
    f = _factory(lengths, groups, spec)
    delivered, widest = run_elastic(f, [(2, steps), (3, 0)], balance)
    check_union(f, delivered, widest, balance, False)


def test_a_change_of_budget_mid_epoch_keeps_groups_whole_and_loses_nothing():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 200, 400)
    groups = rng.permutation(400) // 2  # pairs whose items lie apart
    members = _members(groups)
    first = PlanSampler(lengths, TokenBudget(max_tokens=800), groups=groups, seed=1)
    it = iter(first)
    got = [next(it) for _ in range(10)]
    state = first.state_dict()
    wider = PlanSampler(lengths, TokenBudget(max_tokens=1200), groups=groups, seed=1)
    wider.load_state_dict(state)
    rest = list(wider)
    for batch in got + rest:
        _check_whole(batch, groups, members)
    assert all(len(b) * int(lengths[b].max()) <= 1200 for b in rest)
    flat = sorted(i for b in got + rest for i in b)
    assert set(flat) == set(range(400))
    assert len(flat) - 400 < max(len(b) for b in got + rest)  # only the tail's repeats


def test_batches_per_step_and_skip_and_balance_work_with_groups():
    lengths = np.random.default_rng(1).integers(1, 100, 300)
    groups = np.arange(300) // 3
    s = padless.TokenBudgetSampler(
        lengths, max_tokens=600, groups=groups, world_size=2, balance=True, batches_per_step=4
    )
    sizes = [len(step) for step in s.steps(s)]
    assert sizes[:-1] == [2] * (len(sizes) - 1) and sum(sizes) == len(s)
    total, per_rank = s.loss_tokens(0)
    assert total > 0 and len(per_rank) == 2
    before = len(s)
    s.skip(2)  # two global batches: one step of each rank
    rest = list(s)
    assert len(rest) == len(s) == before - 1
    members = _members(groups)
    for batch in rest:
        _check_whole(batch, groups, members)


def test_oversize_drop_leaves_whole_groups_out():
    lengths = np.array([5, 5, 1, 1, 9, 9])
    groups = np.array([0, 0, 1, 1, 2, 2])
    s = PlanSampler(lengths, TokenBudget(max_tokens=12, oversize="drop"), groups=groups, seed=0)
    plan, _ = s.epoch_plan(0)
    assert plan.skipped.tolist() == [4, 5]
    assert sorted(i for b in s for i in b) == [0, 1, 2, 3]
    p = PlanSampler(lengths, Packing(capacity=12, oversize="drop"), groups=groups)
    assert sorted(i for b in p for i in b) == [0, 1, 2, 3]


def test_a_cost_budget_with_groups():
    lengths = np.random.default_rng(2).integers(1, 300, 200)
    groups = np.arange(200) // 2
    cost = padless.Cost(quadratic=1e-3, linear=1.0)
    spec = TokenBudget(max_tokens=4000, cost=cost, max_cost=2500.0)
    s = PlanSampler(lengths, spec, groups=groups, balance=True)
    for b in s:
        longest = int(lengths[b].max())
        assert len(b) * float(cost.of(np.array([longest]))[0]) <= 2500.0
        assert len(b) * longest <= 4000


# ------------------------------------------------------------------ state and fingerprint
def test_a_state_saved_with_groups_loads_only_with_the_same_groups():
    lengths = np.random.default_rng(3).integers(1, 100, 100)
    pairs = np.arange(100) // 2
    spec = TokenBudget(max_tokens=400)
    s = PlanSampler(lengths, spec, groups=pairs)
    next(iter(s))
    state = s.state_dict()
    for other in (None, np.arange(100) // 4, pairs[::-1].copy()):
        with pytest.raises(ValueError, match="fingerprint|does not fit|differ"):
            PlanSampler(lengths, spec, groups=other).load_state_dict(state)
    plain = PlanSampler(lengths, spec)
    next(iter(plain))
    with pytest.raises(ValueError, match="fingerprint|does not fit|differ"):
        PlanSampler(lengths, spec, groups=pairs).load_state_dict(plain.state_dict())
    same = PlanSampler(lengths, spec, groups=pairs.tolist())
    same.load_state_dict(state)  # the same ids, as a list
    # a sampler without groups keeps the fingerprint it had (golden states stay valid)
    assert (
        plain.state_dict()["fingerprint"] == PlanSampler(lengths, spec).state_dict()["fingerprint"]
    )


# ------------------------------------------------------------------ refusals, by name
L = np.random.default_rng(4).integers(1, 50, 40)
G = np.arange(40) // 2


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (padless.ExactLength(batch_size=4), ["groups=", "exact_length", "TokenBudget", "Packing"]),
        (padless.Buckets(num_buckets=2, max_tokens=200), ["groups=", "buckets", "TokenBudget"]),
        (padless.FixedShapes(shapes=[(4, 64)]), ["groups=", "fixed_shapes", "Packing"]),
        (
            padless.Decomposition(max_length=64, tokens_per_batch=256, min_length=1),
            ["groups=", "decomposition"],
        ),
        (TokenBudget(max_tokens=200, multiple_of=2), ["groups=", "multiple_of=2"]),
        (Packing(capacity=128, oversize="split"), ["groups=", "oversize='split'"]),
        (Packing(capacity=128, max_per_row=4), ["groups=", "max_per_row=4"]),
        (
            Packing(capacity=padless.Schedule.piecewise([0, 2], [64, 128])),
            ["groups=", "capacity="],
        ),
    ],
    ids=lambda v: v.name if hasattr(v, "name") else None,
)
def test_specs_that_cannot_keep_groups_whole_refuse_them_when_built(spec, words):
    with pytest.raises(ValueError) as err:
        PlanSampler(L, spec, groups=G)
    for w in words:
        assert w in str(err.value)


def test_per_field_settings_and_sort_refuse_groups_by_name():
    pairs = np.stack([L, L + 1], axis=1)
    for spec, word in (
        (TokenBudget(max_tokens=(200, 200)), "max_tokens=[200, 200]"),
        (TokenBudget(max_tokens=400, sort="source_first"), "sort='source_first'"),
    ):
        with pytest.raises(ValueError, match="groups= cannot be honoured by TokenBudget") as err:
            PlanSampler(pairs, spec, groups=G)
        assert word in str(err.value)
    with pytest.raises(ValueError, match=r"\(N, F\) lengths"):
        PlanSampler(pairs, Packing(capacity=256), groups=G)
    # one budget over (N, F) lengths: a group budgeted on its widest item, in any field
    s = PlanSampler(pairs, TokenBudget(max_tokens=300), groups=G)
    for b in s:
        assert len(b) * int(pairs[b].max()) <= 300


@pytest.mark.parametrize("window", [16, "histogram"])
def test_windowed_and_histogram_forms_refuse_groups(window):
    with pytest.raises(ValueError, match=f"groups= cannot be honoured with window={window!r}"):
        PlanSampler(L, TokenBudget(max_tokens=200), groups=G, window=window)


def test_a_group_over_the_budget_is_named():
    lengths = np.array([3, 30, 4, 4, 2])
    groups = np.array([7, 7, 1, 1, 5])
    with pytest.raises(ValueError) as err:
        PlanSampler(lengths, TokenBudget(max_tokens=50), groups=groups)
    text = str(err.value)
    for w in ("group 7", "2 items", "longest 30", "60 tokens", "max_tokens=50", 'oversize="drop"'):
        assert w in text
    with pytest.raises(
        ValueError, match="group 1 has 2 items of longest 4: more than max_sentences=1"
    ):
        PlanSampler(lengths, TokenBudget(max_sentences=1), groups=groups)
    with pytest.raises(ValueError, match="group 7 has 33 tokens .*2 items.*capacity=32"):
        PlanSampler(lengths, Packing(capacity=32), groups=groups)


@pytest.mark.parametrize(
    ("bad", "error", "words"),
    [
        (np.arange(39), ValueError, "groups must hold one value per item (40"),
        (np.zeros((40, 1), np.int64), ValueError, "groups must hold one value per item"),
        (np.arange(40) / 2, TypeError, "groups must hold ints, got dtype float64"),
        (np.ones(40, bool), TypeError, "groups must hold ints"),
        (["a"] * 40, TypeError, "groups must hold ints"),
        (7, ValueError, "groups must hold one value per item"),
    ],
)
def test_bad_group_ids_name_the_parameter(bad, error, words):
    with pytest.raises(error) as err:
        PlanSampler(L, TokenBudget(max_tokens=200), groups=bad)
    assert words in str(err.value)


def test_negative_and_huge_ids_are_ids():
    ids = np.where(G % 2 == 0, -G - 1, G + 2**62)
    members = _members(ids)
    got = list(PlanSampler(L, TokenBudget(max_tokens=200), groups=ids, seed=2))
    assert sorted(i for b in got for i in b) == list(range(40))
    for batch in got:
        _check_whole(batch, ids, members)
    unsigned = PlanSampler(L, TokenBudget(max_tokens=200), groups=G.astype(np.uint64) + 2**63)
    assert sorted(i for b in unsigned for i in b) == list(range(40))


def test_the_stream_form_refuses_groups_by_name():
    with pytest.raises(TypeError) as err:
        padless.StreamBatcher(L.tolist(), TokenBudget(max_tokens=200), length=int, groups=G)
    text = str(err.value)
    assert "StreamBatcher" in text and "groups= cannot be honoured by the stream form" in text
    assert "PlanSampler(lengths, spec, groups=...)" in text


def test_a_stream_of_whole_groups_as_items_packs_each_group_in_one_row():
    """The way the refusal names: one stream item per group, its length its tokens."""
    pairs = [
        (list(range(int(a))), list(range(int(b)))) for a, b in zip(L[::2], L[1::2], strict=True)
    ]
    batcher = padless.StreamBatcher(
        pairs, Packing(capacity=128), buffer=8, length=lambda p: len(p[0]) + len(p[1])
    )
    rows = [row for batch in batcher for row in batch]
    assert sorted(map(id, (p for row in rows for p in row))) == sorted(map(id, pairs))
    assert all(sum(len(a) + len(b) for a, b in row) <= 128 for row in rows)


def _greedy_reference(lengths, groups, spec, seed, epoch):
    """The plain rule, group by group: the walk by increasing longest item (the planner's own
    order), a batch closed when the next group would pass a budget."""
    planner = spec.bind_groups(lengths, groups)
    plan = planner.plan(seed, epoch)
    walk = []  # the planner's group order, read off its plan
    for i in plan.indices.tolist():
        if not walk or walk[-1] != groups[i]:
            walk.append(int(groups[i]))
    cost = None if spec.max_cost is None else spec.cost or padless.Cost()
    batches, cur, n, widest = [], [], 0, 0
    for g in walk:
        m = np.flatnonzero(groups == g).tolist()
        n2, w2 = n + len(m), max(widest, int(lengths[m].max()))
        over = (spec.max_tokens is not None and n2 * w2 > spec.max_tokens) or (
            spec.max_sentences is not None and n2 > spec.max_sentences
        )
        if cost is not None:
            over = over or n2 * float(cost.of(np.array([w2]))[0]) > spec.max_cost
        if cur and over:
            batches.append(cur)
            cur, n2, w2 = [], len(m), int(lengths[m].max())
        cur, n, widest = cur + m, n2, w2
    if cur:
        batches.append(cur)
    return [b.tolist() for b in plan], batches


@settings(max_examples=40, deadline=None)
@given(
    items,
    st.integers(0, 80),
    st.one_of(st.none(), st.integers(4, 12)),
    st.booleans(),
    st.integers(0, 3),
)
def test_the_galloping_cut_is_the_greedy_rule(data, extra, most, cost, seed):
    lengths, groups = _arrays(data)
    sizes = [int((groups == g).sum()) for g in set(groups.tolist())]
    if most is not None and max(sizes) > most:
        most = max(sizes)
    budget = _padded_budget(lengths, groups, extra)
    model = padless.Cost(quadratic=0.01, linear=1.0) if cost else None
    max_cost = None
    if cost:
        per = [
            int((groups == g).sum()) * float(model.of(np.array([lengths[groups == g].max()]))[0])
            for g in set(groups.tolist())
        ]
        max_cost = max(per) + extra
    spec = TokenBudget(max_tokens=budget, max_sentences=most, cost=model, max_cost=max_cost)
    got, want = _greedy_reference(lengths, groups, spec, seed, 0)
    assert got == want
