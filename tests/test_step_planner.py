"""The step planner (issue 42): plan_step's properties, its errors, the step_fit kernel against
its reference, and split_rollout with real torch tensors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import padless
from padless._kernels import step as KS
from padless.planners.step import plan_step

lengths_st = st.lists(st.integers(1, 60), min_size=0, max_size=40)


def check_valid(plan: padless.StepPlan, lengths: list[int], cap: int, form: str) -> None:
    lens = np.asarray(lengths, dtype=np.int64)
    world, m = plan.world_size, plan.num_micro_batches
    # every item exactly once
    assert sorted(plan.indices.tolist()) == list(range(lens.size))
    # the same number of micro-batches on every rank
    assert plan.offsets.size == world * m + 1
    assert plan.tokens.shape == plan.costs.shape == plan.loss_tokens.shape == (world, m)
    for rank in range(world):
        batches = plan.micro_batches(rank)
        assert len(batches) == m
        for k, idx in enumerate(batches):
            got = lens[idx]
            assert (
                plan.lengths[plan.offsets[rank * m + k] : plan.offsets[rank * m + k + 1]].tolist()
                == got.tolist()
            )
            tokens = int(got.sum()) if form == "packed" else int(got.size * got.max(initial=0))
            assert tokens == plan.tokens[rank, k] <= cap  # the cap after the collate
            assert plan.loss_tokens[rank, k] == int(got.sum())
    assert plan.total_loss_tokens == int(lens.sum())


@given(
    lengths=lengths_st,
    world=st.integers(1, 5),
    cap=st.integers(60, 150),
    form=st.sampled_from(["packed", "padded"]),
    quadratic=st.sampled_from([0.0, 0.05]),
    step=st.integers(0, 3),
)
@settings(max_examples=60, deadline=None)
def test_every_item_once_under_the_cap_and_equal_counts(lengths, world, cap, form, quadratic, step):
    cost = None if quadratic == 0 else padless.Cost(linear=1.0, quadratic=quadratic)
    plan = plan_step(lengths, world_size=world, max_tokens=cap, cost=cost, form=form, step=step)
    check_valid(plan, lengths, cap, form)
    # the fewest micro-batches the tokens allow, or more only where they would not fit
    if lengths:
        need = -(-sum(lengths) // (world * cap)) if form == "packed" else 1
        assert plan.num_micro_batches >= need
    # deterministic from (seed, step)
    again = plan_step(lengths, world_size=world, max_tokens=cap, cost=cost, form=form, step=step)
    assert np.array_equal(plan.indices, again.indices)
    assert np.array_equal(plan.offsets, again.offsets)


@given(
    sizes=st.lists(st.integers(1, 8), min_size=1, max_size=30),
    world=st.integers(1, 4),
    cap=st.integers(8, 40),
    form=st.sampled_from(["packed", "padded"]),
    seed=st.integers(0, 3),
)
@settings(max_examples=50, deadline=None)
def test_groups_stay_whole_in_one_micro_batch(sizes, world, cap, form, seed):
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(len(sizes)), sizes)  # group g holds sizes[g] sequences
    lengths = rng.integers(1, 5, groups.size)
    rng.shuffle(groups)
    tokens = np.bincount(groups, weights=lengths) if form == "packed" else None
    widest = np.zeros(len(sizes), dtype=np.int64)
    np.maximum.at(widest, groups, lengths)
    need = tokens if tokens is not None else np.bincount(groups) * widest
    if need.max() > cap:
        with pytest.raises(ValueError, match="group .* over max_tokens"):
            plan_step(lengths, world_size=world, max_tokens=cap, groups=groups, form=form)
        return
    plan = plan_step(lengths, world_size=world, max_tokens=cap, groups=groups, form=form, seed=seed)
    check_valid(plan, lengths.tolist(), cap, form)
    where = {}
    for rank in range(world):
        for k, idx in enumerate(plan.micro_batches(rank)):
            ids = groups[idx]
            for g in set(ids.tolist()):
                assert g not in where, f"group {g} split"
                where[g] = (rank, k)
            # a group's sequences sit side by side in its micro-batch
            assert (np.diff(ids) != 0).sum() == len(set(ids.tolist())) - 1 if ids.size else True
    assert len(where) == len(sizes)


def test_slots_are_balanced_and_the_cap_binds_on_rollout_lengths():
    rng = np.random.default_rng(0)
    lengths = (
        np.clip(rng.lognormal(np.log(200), 0.6, 2048), 16, 1024)
        + np.clip(rng.lognormal(np.log(500), 1.0, 2048), 1, 3072)
    ).astype(np.int64)
    for cap in (16384, 4500, int(lengths.max())):
        plan = plan_step(lengths, world_size=16, max_tokens=cap)
        assert plan.tokens.max() <= cap
        assert plan.slot_balance < 1.005, (cap, plan)
        padded = plan_step(lengths, world_size=16, max_tokens=cap, form="padded")
        assert padded.tokens.max() <= cap
        assert padded.slot_balance < 1.02, (cap, padded)
        # no fewer micro-batches are possible by the tokens, and at most one more is used
        low = -(-int(lengths.sum()) // (16 * cap))
        assert low <= plan.num_micro_batches <= low + 1
    # a model-shaped cost (slime's coeff·L + L²) balances that cost
    plan = plan_step(
        lengths, world_size=16, max_tokens=6000, cost=padless.Cost(linear=4096.0, quadratic=1.0)
    )
    assert plan.slot_balance < 1.01


def test_seed_and_step_choose_the_ranks_of_each_slot():
    lengths = np.arange(1, 201)
    plans = [
        plan_step(lengths, world_size=4, max_tokens=1000, seed=s, step=t)
        for s, t in ((0, 0), (0, 1), (1, 0))
    ]
    for plan in plans:
        check_valid(plan, lengths.tolist(), 1000, "packed")
    # the same bins, other ranks: the sorted per-slot costs agree, the rank order differs
    assert all(
        np.array_equal(np.sort(p.costs, axis=0), np.sort(plans[0].costs, axis=0)) for p in plans
    )
    assert not np.array_equal(plans[0].offsets, plans[1].offsets) or not np.array_equal(
        plans[0].indices, plans[1].indices
    )


def test_min_micro_batches_multiple_and_empty_micro_batches():
    plan = plan_step([5, 3], world_size=3, max_tokens=10)
    assert plan.num_micro_batches == 1 and plan.num_empty == 1  # two items, three ranks
    check_valid(plan, [5, 3], 10, "packed")
    plan = plan_step(
        [5, 3, 7, 2], world_size=2, max_tokens=10, min_micro_batches=3, micro_batch_multiple=2
    )
    assert plan.num_micro_batches == 4
    check_valid(plan, [5, 3, 7, 2], 10, "packed")
    plan = plan_step([], world_size=2, max_tokens=10)
    assert plan.num_micro_batches == 1 and plan.indices.size == 0 and plan.num_empty == 2
    # an RL loop whose filter left no rollout passes groups=[] (float to numpy): planned alike
    grouped = plan_step([], world_size=2, max_tokens=10, groups=[], loss_tokens=[])
    assert grouped.num_micro_batches == 1 and grouped.indices.size == 0


def test_loss_tokens_and_cu_seqlens():
    lengths = [10, 20, 30, 40]
    loss = [5, 0, 30, 1]
    plan = plan_step(lengths, world_size=2, max_tokens=50, loss_tokens=loss)
    assert plan.total_loss_tokens == 36
    assert plan.slot_loss_tokens.sum() == 36
    for rank in range(2):
        for k, idx in enumerate(plan.micro_batches(rank)):
            assert plan.loss_tokens[rank, k] == sum(loss[i] for i in idx)
            cu = plan.cu_seqlens(rank, k)
            assert cu.dtype == np.int32
            assert (
                cu.tolist() == np.concatenate([[0], np.cumsum(np.asarray(lengths)[idx])]).tolist()
            )


def test_padded_form_counts_rows_times_longest():
    lengths = [100, 90, 12, 10, 10, 9, 8, 50]
    plan = plan_step(lengths, world_size=2, max_tokens=120, form="padded")
    check_valid(plan, lengths, 120, "padded")
    # the long ones never share: 100 and 90 each need 100·2 > 120
    for rank in range(2):
        for idx in plan.micro_batches(rank):
            assert not {0, 1} <= set(idx.tolist())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"lengths": [10, 200, 5]}, ValueError, r"lengths\[1\] = 200 is over max_tokens=100"),
        ({"lengths": [10, 200, 5], "form": "padded"}, ValueError, r"lengths\[1\] = 200"),
        ({"lengths": [10, 0]}, ValueError, r"lengths must be positive .* lengths\[1\] = 0"),
        ({"lengths": [[1, 2]]}, ValueError, "lengths must be a 1-D array"),
        ({"lengths": [1.5]}, TypeError, "lengths must be ints"),
        ({"world_size": 0}, ValueError, "world_size must be a positive int, got 0"),
        ({"world_size": 2.0}, TypeError, "world_size must be an int"),
        ({"max_tokens": -3}, ValueError, "max_tokens must be a positive int"),
        ({"form": "rows"}, ValueError, "form must be one of 'packed', 'padded', got 'rows'"),
        ({"groups": [1, 2]}, ValueError, r"groups must be 1-D with one id per sequence \(3\)"),
        ({"groups": [1.0, 2.0, 3.0]}, TypeError, "groups must be ints or strings"),
        (
            {"groups": ["a", "b", "a"], "lengths": [60, 10, 50]},
            ValueError,
            r"group 'a' \(sequences \[0, 2\]\) holds 110 tokens, over max_tokens=100",
        ),
        (
            {"loss_tokens": [1, 2]},
            ValueError,
            r"loss_tokens must have one count per sequence \(3\)",
        ),
        (
            {"loss_tokens": [1, 30, 2]},
            ValueError,
            r"loss_tokens\[1\] = 30 must be in \[0, lengths\[1\] = 20\]",
        ),
        ({"cost": "flops"}, TypeError, "cost must be a padless.Cost"),
        ({"min_micro_batches": 0}, ValueError, "min_micro_batches must be a positive int"),
        ({"micro_batch_multiple": 0}, ValueError, "micro_batch_multiple must be a positive int"),
        ({"seed": -1}, ValueError, "seed must be a non-negative int"),
        ({"world_size": 2**23}, ValueError, "at most 2..22 micro-batches .* world_size=8388608"),
        ({"step": -1}, ValueError, "step must be a non-negative int"),
    ],
)
def test_errors_name_the_parameter_the_rule_and_the_value(kwargs, error, match):
    args = {"lengths": [10, 20, 30], "world_size": 2, "max_tokens": 100} | kwargs
    with pytest.raises(error, match=match):
        plan_step(**args)


def test_plan_reading_errors():
    plan = plan_step([1, 2, 3], world_size=2, max_tokens=4)
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\), got 2"):
        plan.micro_batches(2)
    with pytest.raises(ValueError, match=r"k must be in"):
        plan.cu_seqlens(0, plan.num_micro_batches)
    with pytest.raises(dataclasses_frozen()):
        plan.world_size = 3  # type: ignore[misc]
    with pytest.raises(ValueError):
        plan.indices[0] = 1


def dataclasses_frozen() -> type[Exception]:
    import dataclasses

    return dataclasses.FrozenInstanceError


# ------------------------------------------------------------------ the kernel


@given(
    sizes=st.lists(st.integers(0, 30), max_size=30),
    costs_seed=st.integers(0, 10),
    world=st.integers(1, 3),
    slots=st.integers(0, 3),
    multiple=st.integers(1, 2),
    capacity=st.integers(30, 45),
    order=st.sampled_from(["down", "any", "alternate"]),
    polish=st.sampled_from([0.0, 5e-3, 0.2, float("inf")]),
    scale=st.sampled_from([1, 1 << 19]),
)
@settings(max_examples=100, deadline=None)
def test_step_fit_kernel_equals_its_reference(
    sizes, costs_seed, world, slots, multiple, capacity, order, polish, scale
):
    # "down" is the planner's order (the L2 bound); "alternate" keeps parking bins (large, small,
    # large, ...: the kernel's tree fallback); "any" as drawn. Rooms under 2**18 go through the
    # kernel's queues per room (the tight rule; least cost where each item costs its size),
    # scaled past it through its heaps
    sizes = [s * scale for s in sizes]
    capacity *= scale
    if order == "down":
        sizes = sorted(sizes, reverse=True)
    elif order == "alternate":
        ranked = sorted(sizes)
        sizes = [ranked[-1 - i // 2] if i % 2 == 0 else ranked[i // 2] for i in range(len(sizes))]
    s = np.array(sizes, dtype=np.int64)
    rng = np.random.default_rng(costs_seed)
    costs = s.astype(np.float64) if costs_seed == 0 else np.round(rng.random(s.size) * 4, 1)
    if costs_seed == 1:  # the step planner's model-shaped costs
        costs = s * (24.0 + s / scale)
    args = (s, costs, world * slots, world * multiple, capacity, world, polish)
    got = KS.step_fit(*args)
    want = KS.step_fit_reference(*args)
    assert got[1] == want[1]
    for a, b in zip(got[:1] + got[2:], want[:1] + want[2:], strict=True):
        assert np.array_equal(a, b)
    bin_of, bins, load, tokens = got
    # the placement respects the capacity; the bins come numbered by cost, whole slots
    assert bins % world == 0 and bins >= world * slots
    assert np.array_equal(tokens, np.bincount(bin_of, weights=s, minlength=bins).astype(np.int64))
    assert tokens.max(initial=0) <= capacity
    assert np.all(np.diff(load) <= 0)


def test_step_fit_tight_rule_packs_where_least_cost_cannot():
    # 4 bins of 10: least cost spreads 6,6,5,5 and then 4,4 find no room of 4+; best fit pairs them
    sizes = np.array([6, 6, 5, 5, 4, 4, 5, 5], dtype=np.int64)
    bin_of, bins, load, tokens = KS.step_fit(sizes, sizes.astype(np.float64), 4, 1, 10, 1, 0.0)
    assert bins == 4
    assert tokens.tolist() == [10, 10, 10, 10] and load.tolist() == [10.0] * 4


def test_step_fit_skips_counts_below_the_bound_and_evens_slots():
    # five items over half the cap: no two share a bin, so 2 bins cannot hold them; the kernel
    # starts at the bound (6 bins: whole slots of 3) and gives what trying up from 2 gives
    sizes = np.array([9, 8, 8, 7, 6, 1], dtype=np.int64)
    costs = sizes.astype(np.float64)
    got = KS.step_fit(sizes, costs, 3, 3, 10, 3, 5e-3)
    assert got[1] == 6
    want = KS.step_fit_reference(sizes, costs, 3, 3, 10, 3, 5e-3)
    assert got[1] == want[1] and np.array_equal(got[0], want[0])
    # the slot polish: the best fit leaves the last slot at (10, 8); placed again it is (9, 9)
    sizes = np.array([10, 10, 7, 6, 5, 5, 4, 4, 3, 2, 2], dtype=np.int64)
    costs = sizes.astype(np.float64)
    bins_, count, load, _ = KS.step_fit(sizes, costs, 2, 2, 10, 2, np.inf)
    assert count == 6 and load.tolist()[4:] == [10.0, 8.0]
    bins_, count, load, _ = KS.step_fit(sizes, costs, 2, 2, 10, 2, 5e-3)
    assert count == 6 and load.tolist()[4:] == [9.0, 9.0]


# ------------------------------------------------------------------ torch


def test_split_rollout_packs_exactly_the_rollouts_tokens():
    torch = pytest.importorskip("torch")
    from padless.torch import split_rollout

    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 12, 23)
    prompt = np.minimum(lengths, rng.integers(1, 5, 23))
    width = 16
    ids = torch.zeros((23, width), dtype=torch.int64)
    mask = torch.zeros((23, width), dtype=torch.int64)
    seqs = []
    for i, n in enumerate(lengths.tolist()):
        # verl's layout: the prompt left-padded to 4, the response right-padded
        start = 4 - int(prompt[i])
        tokens = torch.from_numpy(rng.integers(1, 1000, n))
        ids[i, start : start + n] = tokens
        mask[i, start : start + n] = 1
        seqs.append(tokens)
    logp = torch.randn(23, width, 3)
    adv = torch.randn(23)
    plan = plan_step(lengths, world_size=3, max_tokens=40, loss_tokens=lengths - prompt)
    seen = {}
    for rank in range(3):
        padded = split_rollout(
            {"input_ids": ids, "attention_mask": mask, "logp": logp, "adv": adv}, plan, rank
        )
        listed = split_rollout({"input_ids": seqs, "adv": adv}, plan, rank)
        assert len(padded) == len(listed) == plan.num_micro_batches
        for k, (mb, mb2) in enumerate(zip(padded, listed, strict=True)):
            idx = mb["indices"].tolist()
            assert idx == plan.micro_batch(rank, k).tolist()
            assert mb["input_ids"].shape == (1, int(lengths[idx].sum()))
            assert mb["input_ids"].shape[1] <= 40
            assert torch.equal(mb["input_ids"], mb2["input_ids"])
            assert mb["logp"].shape == (1, int(lengths[idx].sum()), 3)
            assert torch.equal(mb["adv"], adv[idx])
            assert mb["cu_seqlens"].dtype == torch.int32
            assert mb["cu_seqlens"].tolist() == plan.cu_seqlens(rank, k).tolist()
            assert mb["loss_tokens"] == int((lengths - prompt)[idx].sum())
            assert mb["step_loss_tokens"] == int((lengths - prompt).sum())
            cu = mb["cu_seqlens"].tolist()
            for j, i in enumerate(idx):
                a, b = cu[j], cu[j + 1]
                assert torch.equal(mb["input_ids"][0, a:b], seqs[i])
                assert mb["position_ids"][0, a:b].tolist() == list(range(b - a))
                assert torch.equal(mb["logp"][0, a:b], logp[i][mask[i].bool()])
                seen[i] = seen.get(i, 0) + 1
    assert seen == dict.fromkeys(range(23), 1)


def test_split_rollout_errors():
    torch = pytest.importorskip("torch")
    from padless.torch import split_rollout

    plan = plan_step([3, 2], world_size=1, max_tokens=8)
    good = [torch.arange(3), torch.arange(2)]
    with pytest.raises(ValueError, match=r"entry 1 holds 4 tokens but the plan's lengths\[1\] = 2"):
        split_rollout({"input_ids": [torch.arange(3), torch.arange(4)]}, plan, 0)
    with pytest.raises(ValueError, match=r"row 0 holds 2 tokens"):
        split_rollout(
            {"input_ids": torch.ones(2, 3), "attention_mask": torch.tensor([[1, 1, 0], [1, 1, 0]])},
            plan,
            0,
        )
    with pytest.raises(TypeError, match="plan must be a padless.StepPlan"):
        split_rollout({"input_ids": good}, "plan", 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rank must be in"):
        split_rollout({"input_ids": good}, plan, 1)
    with pytest.raises(ValueError, match=r"batch\['adv'\] must be a tensor whose first dimension"):
        split_rollout({"input_ids": good, "adv": torch.zeros(5)}, plan, 0)
    with pytest.raises(ValueError, match="no token field"):
        split_rollout({"adv": torch.zeros(2)}, plan, 0)
    wide = plan_step([3, 2], world_size=3, max_tokens=8)
    rank = next(r for r in range(3) if wide.micro_batch(r, 0).size == 0)
    empty = split_rollout({"input_ids": good}, wide, rank)
    assert empty[0]["input_ids"].shape == (1, 0) and empty[0]["cu_seqlens"].tolist() == [0]
