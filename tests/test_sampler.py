"""The sampler base through TokenBudgetSampler: ranks, tail policy, balance, epochs, resume."""

import copy
import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from padless import TokenBudgetSampler, builtin_corpus


def make(lengths, **kw):
    kw.setdefault("max_tokens", 64)
    return TokenBudgetSampler(lengths, **kw)


def run_all_ranks(lengths, world_size, **kw):
    samplers = [make(lengths, rank=r, world_size=world_size, **kw) for r in range(world_size)]
    return samplers, [list(s) for s in samplers]


@given(
    st.integers(1, 300),
    st.integers(1, 9),
    st.booleans(),
    st.booleans(),
    st.integers(0, 5),
    st.integers(0, 3),
)
def test_ranks_cover_every_index_with_equal_counts(n, world, drop_last, balance, seed, epoch):
    lengths = np.random.default_rng(n).integers(1, 40, n)
    samplers, per_rank = run_all_ranks(
        lengths, world, drop_last=drop_last, balance=balance, seed=seed
    )
    for s in samplers:
        s.set_epoch(epoch)
    per_rank = [list(s) for s in samplers]
    counts = {len(b) for b in per_rank}
    assert len(counts) == 1  # every rank the same number of batches
    assert counts == {len(samplers[0])}
    plan, _ = samplers[0].epoch_plan(epoch)
    planned = Counter(tuple(b.tolist()) for b in plan)
    got = Counter(tuple(b) for rank in per_rank for b in rank)
    extra, missing = got - planned, planned - got
    s0 = samplers[0]
    assert sum(extra.values()) == s0.repeated
    assert sum(missing.values()) == s0.dropped
    if not drop_last:
        assert not missing
        seen = np.concatenate([np.array(b) for rank in per_rank for b in rank])
        assert set(seen.tolist()) == set(range(n))
        assert s0.repeated == len(per_rank[0]) * world - len(plan)
    else:
        assert not extra
        assert s0.dropped == len(plan) % world


@pytest.mark.parametrize("n", [1, 2, 7, 100, 1000])
def test_equal_counts_for_world_sizes_1_to_9(n):
    lengths = np.random.default_rng(0).integers(1, 60, n)
    for world in range(1, 10):
        for drop_last in (False, True):
            _, per_rank = run_all_ranks(lengths, world, drop_last=drop_last)
            assert len({len(b) for b in per_rank}) == 1


def test_one_batch_on_eight_ranks():
    samplers, per_rank = run_all_ranks([3, 4], 8)
    assert all(batches == [per_rank[0][0]] for batches in per_rank)
    assert samplers[0].repeated == 7
    samplers, per_rank = run_all_ranks([3, 4], 8, drop_last=True)
    assert all(b == [] for b in per_rank) and samplers[0].dropped == 1


def test_yields_lists_of_python_ints():
    batch = next(iter(make([5, 3, 8])))
    assert isinstance(batch, list) and all(type(i) is int for i in batch)


def test_epochs_change_membership_and_order():
    s = make(builtin_corpus(), max_tokens=2048)
    e0 = list(s)
    s.set_epoch(1)
    e1 = list(s)
    assert {frozenset(b) for b in e0} != {frozenset(b) for b in e1}
    assert [b[0] for b in e0[:20]] != [b[0] for b in e1[:20]]


def test_shuffle_false_repeats_epochs_in_plan_order():
    s = make(builtin_corpus(), max_tokens=2048, shuffle=False)
    e0 = list(s)
    s.set_epoch(3)
    assert list(s) == e0
    assert [len(b) for b in e0] == [len(b) for b in s.epoch_plan(0)[0]]


def test_same_batches_in_another_process():
    s = make(builtin_corpus(), max_tokens=4096, seed=9, rank=1, world_size=3)
    here = list(s)
    code = (
        "import json, padless;"
        "s = padless.TokenBudgetSampler(padless.builtin_corpus(), max_tokens=4096, seed=9,"
        " rank=1, world_size=3);"
        "print(json.dumps(list(s)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == here


def test_balance_cuts_straggler_imbalance():
    lengths = builtin_corpus()
    plain = make(lengths, max_tokens=4096, world_size=8).stats()
    balanced = make(lengths, max_tokens=4096, world_size=8, balance=True).stats()
    assert balanced["imbalance"] < 1.05
    assert balanced["imbalance"] <= plain["imbalance"]
    # batches capped by count, not tokens, vary a lot in cost: balance matters there
    rough = make(lengths, max_tokens=None, max_sentences=64, world_size=8).stats()
    smooth = make(lengths, max_tokens=None, max_sentences=64, world_size=8, balance=True).stats()
    assert rough["imbalance"] > 1.1
    assert smooth["imbalance"] < 1.05


def test_balanced_schedule_still_covers_everything():
    lengths = builtin_corpus()
    samplers, per_rank = run_all_ranks(lengths, 8, max_tokens=4096, balance=True)
    seen = sorted(i for rank in per_rank for b in rank for i in b)
    assert set(seen) == set(range(lengths.size))
    plan, order = samplers[0].epoch_plan(0)
    repeats = sum(plan[b].size for b in order[: samplers[0].repeated])
    assert len(seen) - lengths.size == repeats


def test_resume_of_a_resume_and_next_epoch():
    lengths = np.random.default_rng(2).integers(1, 30, 200)
    full = list(make(lengths))
    s1 = make(lengths)
    it = iter(s1)
    head = [next(it) for _ in range(3)]
    s2 = make(lengths)
    s2.load_state_dict(s1.state_dict())
    it2 = iter(s2)
    middle = [next(it2) for _ in range(4)]
    s3 = make(lengths)
    s3.load_state_dict(s2.state_dict())
    assert head + middle + list(s3) == full
    # saved at the exact end of the epoch: nothing left, then the next epoch as usual
    s4 = make(lengths)
    s4.load_state_dict(s3.state_dict())
    assert list(s4) == []
    s4.set_epoch(1)
    fresh = make(lengths)
    fresh.set_epoch(1)
    assert list(s4) == list(fresh)


def test_iteration_after_resume_clears_the_position():
    lengths = np.random.default_rng(2).integers(1, 30, 200)
    s1 = make(lengths)
    it = iter(s1)
    next(it)
    s2 = make(lengths)
    s2.load_state_dict(s1.state_dict())
    rest = list(s2)
    assert len(list(s2)) == len(rest) + 1  # second pass starts at 0 again


def test_mismatched_state_is_refused_with_reason():
    lengths = np.arange(1, 50)
    state = make(lengths).state_dict()
    with pytest.raises(ValueError, match="the data differ") as info:
        make(lengths[::-1].copy()).load_state_dict(state)
    assert "settings" not in str(info.value)
    with pytest.raises(ValueError, match="the settings differ") as info:
        make(lengths, shuffle=False).load_state_dict(state)
    assert "data differ" not in str(info.value)
    make(lengths, max_tokens=65).load_state_dict(state)  # a budget may change (resume_change)
    with pytest.raises(ValueError, match="data differ .* and the settings differ"):
        make(lengths[:-1].copy(), max_tokens=65).load_state_dict(state)
    with pytest.raises(ValueError, match="seed"):
        make(lengths, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="missing keys"):
        make(lengths).load_state_dict({"version": 1})
    with pytest.raises(TypeError, match="must be a dict"):
        make(lengths).load_state_dict([1, 2])


def test_state_is_small_json_and_input_not_mutated():
    s = make(np.arange(1, 50), world_size=2)
    next(iter(s))
    state = s.state_dict()
    assert set(state) == {
        "version",
        "seed",
        "epoch",
        "position",
        "world_size",
        "fingerprint",
        "drop_last",
        "settings",  # the settings it was saved under: a resume may change some
    }
    assert len(json.dumps(state)) < 600
    assert json.loads(json.dumps(state)) == state
    frozen = copy.deepcopy(state)
    make(np.arange(1, 50), world_size=4).load_state_dict(state)
    assert state == frozen


def test_consumed_counts_what_the_loop_received():
    s = make(np.arange(1, 60))
    it = iter(s)
    for _ in range(5):
        next(it)  # a prefetching loader pulled 5
    assert s.state_dict(consumed=3)["position"] == 3
    with pytest.raises(ValueError, match="consumed must be <="):
        s.state_dict(consumed=6)


@pytest.mark.parametrize(
    ("kwargs", "exc", "message"),
    [
        ({"rank": 2, "world_size": 2}, ValueError, "rank must be < world_size=2, got 2"),
        ({"world_size": 0}, ValueError, "world_size must be a positive int, got 0"),
        ({"rank": -1}, ValueError, "rank must be a non-negative int, got -1"),
        ({"shuffle": "yes"}, TypeError, "shuffle must be a bool"),
        ({"seed": 1.5}, TypeError, "seed must be an int"),
        ({"max_tokens": 2}, ValueError, "index 0 has length 5, which exceeds max_tokens=2"),
    ],
)
def test_bad_sampler_arguments(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        make([5, 1], **kwargs)


def test_state_after_set_epoch_starts_the_new_epoch_at_zero():
    s = make(np.arange(1, 50))
    list(s)
    assert s.state_dict()["position"] == len(s)  # saved at the end of epoch 0
    s.set_epoch(1)
    state = s.state_dict()
    assert (state["epoch"], state["position"]) == (1, 0)


def test_a_forgotten_set_epoch_is_warned_of_once():
    """Iterating an epoch to its end and then again without set_epoch repeats its batches: a
    UserWarning says so, once; set_epoch (even with the same epoch) and a loaded state do not."""
    import warnings

    from padless import TokenBudgetSampler

    s = TokenBudgetSampler([3, 4, 5, 6, 2, 7], max_tokens=8)
    first = list(s)
    with pytest.warns(UserWarning, match="starts epoch 0 again.*call set_epoch"):
        assert list(s) == first
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(s)  # once per sampler
        t = TokenBudgetSampler([3, 4, 5, 6, 2, 7], max_tokens=8)
        list(t)
        t.set_epoch(0)
        list(t)  # the same epoch on purpose
        t.set_epoch(1)
        half = iter(t)
        next(half)
        state = t.state_dict()
        list(half)
        t.load_state_dict(state)
        list(t)  # a loaded state


def test_a_state_taken_from_a_sampler_that_workers_draw_ahead_warns_naming_exact_loaders():
    """A DataLoader with workers takes batches ahead of the loop: the sampler's own state then
    counts batches the loop never received; it says so, and names the loaders that count."""
    import warnings

    torch = pytest.importorskip("torch")
    from torchdata.stateful_dataloader import StatefulDataLoader

    from padless.torch import StatefulLoader

    lengths = [3, 4, 5, 6, 7, 2, 3, 9] * 20

    def received(loader, n):
        it = iter(loader)
        for _ in range(n):
            next(it)
        return it

    s = TokenBudgetSampler(lengths, max_tokens=10, seed=0)
    it = received(torch.utils.data.DataLoader(range(160), batch_sampler=s, num_workers=2), 3)
    with pytest.warns(UserWarning, match=r"num_workers=2.*StatefulDataLoader.*StatefulLoader"):
        assert s.state_dict()["position"] > 3
    del it
    # the exact loaders' states say nothing, and neither does a loader without workers
    exact = StatefulLoader(
        torch.utils.data.DataLoader(
            range(160), batch_sampler=TokenBudgetSampler(lengths, max_tokens=10), num_workers=2
        )
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        it2 = received(exact, 3)
        assert exact.state_dict()["position"] == 3
        del it2
        plain = TokenBudgetSampler(lengths, max_tokens=10, seed=0)
        it3 = received(torch.utils.data.DataLoader(range(160), batch_sampler=plain), 3)
        assert plain.state_dict()["position"] == 3
        del it3
    stateful = StatefulDataLoader(
        range(160), batch_sampler=TokenBudgetSampler(lengths, max_tokens=10), num_workers=2
    )
    it4 = received(stateful, 3)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        stateful.state_dict()
    assert not [w for w in seen if "state_dict()" in str(w.message)]
    del it4
