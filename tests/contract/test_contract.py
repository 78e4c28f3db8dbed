"""The contract every padless sampler keeps, run over every factory in ``factories.py``."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .factories import FACTORIES, LENGTHS, Factory

# Each list holds every factory the test applies to, chosen by the factory's declared attributes.
ALL = [pytest.param(f, id=f.name) for f in FACTORIES]
ELASTIC = [pytest.param(f, id=f.name) for f in FACTORIES if f.elastic]
BATCH_SAMPLERS = [pytest.param(f, id=f.name) for f in FACTORIES if f.batch_sampler]


def with_balance(factories: list) -> list:
    """``(factory, balance)`` cases: balance off for every factory, on where it has the option."""
    return [
        pytest.param(p.values[0], balance, id=f"{p.id}-{balance}")
        for p in factories
        for balance in ((False, True) if p.values[0].balance else (False,))
    ]


def build(f: Factory, world: int, rank: int = 0, **options):
    return f(seed=3, rank=rank, world_size=world, **options)


def epoch_batches(f: Factory, world: int, epoch: int = 0, **options) -> list[list]:
    """Every rank's batches of one epoch, rank by rank."""
    out = []
    for r in range(world):
        s = build(f, world, r, **options)
        s.set_epoch(epoch)
        out.append(list(s))
    return out


def reference(f: Factory, epoch: int = 0, **options) -> Counter:
    """The epoch's batches as one process sees them (world size 1, no repeats)."""
    (only,) = epoch_batches(f, 1, epoch, **options)
    return Counter(f.key(b) for b in only)


# ------------------------------------------------------------------ coverage and steps
@pytest.mark.parametrize(("f", "balance"), with_balance(ALL))
def test_every_unit_once_per_epoch(f: Factory, balance: bool):
    opts = {"balance": balance, "drop_last": False}
    (single,) = epoch_batches(f, 1, 1, **opts)
    if f.units is not None:
        units = sorted(u for b in single for u in f.units(b))
        s = build(f, 1, **opts)
        s.set_epoch(1)
        if f.all_units is not None:
            expected = f.all_units(s)
        else:
            plan, _ = s.epoch_plan(1)
            expected = sorted(set(range(LENGTHS.shape[0])) - set(plan.skipped.tolist()))
        assert units == expected
    if not f.elastic:
        return  # its batches depend on the world size (LM sequential streams)
    # at 3 ranks: the same batches, each once, plus fewer than 3 documented repeats
    ranks = epoch_batches(f, 3, 1, **opts)
    got = Counter(f.key(b) for r in ranks for b in r)
    ref = Counter(f.key(b) for b in single)
    assert not ref - got
    extra = got - ref
    s = build(f, 3, **opts)
    s.set_epoch(1)
    assert sum(extra.values()) == s.repeated < 3


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world", [2, 5])
@pytest.mark.parametrize("f", ALL)
def test_equal_steps_on_every_rank(f: Factory, world: int, drop_last: bool):
    samplers = [build(f, world, r, drop_last=drop_last) for r in range(world)]
    lens = {len(s) for s in samplers}
    counts = {len(list(s)) for s in samplers}
    assert len(lens) == 1 and lens == counts
    if not f.elastic:
        return
    ref = sum(reference(f, drop_last=drop_last).values())
    s, one = samplers[0], build(f, 1, drop_last=drop_last)
    total = len(s) * world
    assert total == ref + s.repeated - (s.dropped - one.dropped)


# ------------------------------------------------------------------ determinism
def _digest(f: Factory) -> str:
    h = hashlib.sha256()
    for epoch in (0, 1):
        for r in epoch_batches(f, 2, epoch):
            for b in r:
                h.update(repr(f.key(b)).encode())
    return h.hexdigest()[:16]


def test_determinism_across_processes():
    here = {f.name: _digest(f) for f in FACTORIES}
    code = (
        "import json; from tests.contract.test_contract import _digest; "
        "from tests.contract.factories import FACTORIES; "
        "print(json.dumps({f.name: _digest(f) for f in FACTORIES}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="."
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == here


# ------------------------------------------------------------------ resume
@pytest.mark.parametrize(("world", "drop_last"), [(1, False), (3, False), (2, True)])
@pytest.mark.parametrize(("f", "balance"), with_balance(ALL))
def test_resume_at_every_position(f: Factory, balance: bool, world: int, drop_last: bool):
    opts = {"balance": balance, "drop_last": drop_last}
    full = epoch_batches(f, world, 1, **opts)
    steps = len(full[0])
    for k in range(steps + 1):
        first = build(f, world, 0, **opts)
        first.set_epoch(1)
        it = iter(first)
        for _ in range(k):
            next(it)
        state = json.loads(json.dumps(first.state_dict()))
        for r in range(world):
            again = build(f, world, r, **opts)
            again.load_state_dict(state)
            assert len(again) == steps - k
            assert [f.key(b) for b in again] == [f.key(b) for b in full[r][k:]]


class _Keys:
    """A map-style dataset whose item ``i`` is ``i``: any batch of keys comes back as it went in."""

    def __getitem__(self, key: int) -> int:
        return key


@pytest.mark.parametrize("f", BATCH_SAMPLERS)
def test_resume_through_a_dataloader_with_workers(f: Factory):
    """Workers prefetch, so the sampler runs ahead of the loop; the state saved mid-epoch is
    still the loop's position, and a resumed loader (workers again) delivers exactly the rest."""
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from padless.torch import StatefulLoader

    def loader(workers: int) -> StatefulLoader:
        return StatefulLoader(DataLoader(_Keys(), batch_sampler=build(f, 1), num_workers=workers))

    full = [b.tolist() for b in loader(0)]
    k = len(full) // 2
    first, got = loader(2), []
    for batch in first:
        got.append(batch.tolist())
        if len(got) == k:
            break
    assert first.sampler.state_dict()["position"] > k  # the workers' prefetch ran ahead
    state = first.state_dict()
    assert state["position"] == k
    again = loader(2)
    again.load_state_dict(state)
    assert got + [b.tolist() for b in again] == full


# ------------------------------------------------------------------ elastic resume
def run_elastic(f: Factory, plan: list[tuple[int, int]], balance: bool, drop_last: bool = False):
    """Run an epoch through world sizes and step counts; return the delivered batches."""
    delivered = []
    state = None
    for i, (world, steps) in enumerate(plan):
        last = i == len(plan) - 1
        ranks = [build(f, world, r, balance=balance, drop_last=drop_last) for r in range(world)]
        for s in ranks:
            s.set_epoch(2)
            if state is not None:
                s.load_state_dict(state)
        its = [iter(s) for s in ranks]
        taken = 0
        while last or taken < steps:
            batch = [next(it, None) for it in its]
            if all(b is None for b in batch):
                break
            assert all(b is not None for b in batch), "ranks must stop at the same step"
            delivered.extend(batch)
            taken += 1
        state = json.loads(json.dumps(ranks[0].state_dict()))
        for other in ranks[1:]:
            assert other.state_dict() == ranks[0].state_dict()
    # the part that reaches the end completes its last step with repeats (fewer than its width)
    return delivered, max(world for world, _ in plan)


def check_union(f: Factory, delivered: list, widest: int, balance: bool, drop_last: bool):
    ref = reference(f, 2, balance=balance, drop_last=drop_last)
    got = Counter(f.key(b) for b in delivered)
    extra = got - ref
    missing = ref - got
    if drop_last:
        assert not extra and sum(missing.values()) < widest
    else:
        assert not missing, f"lost {sum(missing.values())} batches"
        assert sum(extra.values()) < widest, f"repeated {sum(extra.values())} batches"


@pytest.mark.parametrize(("f", "balance"), with_balance(ELASTIC))
def test_elastic_resume_8_4_16(f: Factory, balance: bool):
    delivered, widest = run_elastic(f, [(8, 3), (4, 5), (16, 0)], balance)
    check_union(f, delivered, widest, balance, False)


@pytest.mark.parametrize("f", ELASTIC)
@settings(max_examples=max(5, settings.default.max_examples // 6))  # x 13 factories
@given(
    st.lists(st.tuples(st.integers(1, 9), st.integers(0, 12)), min_size=1, max_size=4),
    st.booleans(),
    st.booleans(),
)
def test_elastic_resume_any_world_sizes(f: Factory, plan, balance: bool, drop_last: bool):
    """Issue 13 item 1: any sequence of world sizes loses and repeats nothing."""
    balance = balance and f.balance
    delivered, widest = run_elastic(f, plan, balance, drop_last)
    check_union(f, delivered, widest, balance, drop_last)


def test_issue_13_balance_elastic_example():
    """The reported case: 4 ranks x 10 steps with balance, then 2 ranks: nothing lost or repeated."""
    from padless import TokenBudgetSampler

    lengths = np.random.default_rng(0).integers(1, 500, 20000)

    def make(world, rank):
        return TokenBudgetSampler(
            lengths, max_tokens=4096, balance=True, world_size=world, rank=rank
        )

    seen = []
    ranks = [make(4, r) for r in range(4)]
    its = [iter(s) for s in ranks]
    for _ in range(10):
        for it in its:
            seen.extend(next(it))
    state = ranks[0].state_dict()
    for r in range(2):
        s = make(2, r)
        s.load_state_dict(state)
        for b in s:
            seen.extend(b)
    counts = np.bincount(np.array(seen), minlength=lengths.size)
    repeated_batches = make(2, 0)
    repeated_batches.load_state_dict(state)
    assert (counts == 0).sum() == 0
    assert (counts > 1).sum() <= max(len(b) for b in make(1, 0))  # at most one tail repeat


# ------------------------------------------------------------------ refused states
@pytest.mark.parametrize("f", ALL)
def test_refuses_positions_past_the_end_and_other_tail_policy(f: Factory):
    s = build(f, 2, drop_last=False)
    state = s.state_dict()
    for position in (10**12, 10**30):
        with pytest.raises(ValueError, match="position"):
            build(f, 2, drop_last=False).load_state_dict({**state, "position": position})
    with pytest.raises(ValueError, match="drop_last"):
        build(f, 2, drop_last=False).load_state_dict({**state, "drop_last": True})
    fresh = build(f, 2, drop_last=False)
    fresh.load_state_dict(state)  # the original still loads
    assert len(fresh) == len(build(f, 2, drop_last=False))


@pytest.mark.parametrize("f", ELASTIC)
def test_a_finished_epoch_at_a_wide_world_loads_anywhere(f: Factory):
    """A state saved at the end of an epoch run by many ranks (position in the repeats) loads
    at a single rank, and that rank's state loads again."""
    delivered, _ = run_elastic(f, [(7, 10_000), (1, 0), (3, 0)], False)
    check_union(f, delivered, 7, False, False)
