"""Groups that stay together in packing (``plan_groups``, ``Packing.plan_groups``): every item
once, every group whole in one row, no row over capacity (in the plan and after the collate),
deterministic from (seed, epoch); forms that cannot honour groups refuse them by name."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from padless import Packing, batch_loss_tokens, plan_groups

items = st.lists(
    st.tuples(st.integers(1, 12), st.integers(0, 9), st.integers(1, 6)), min_size=0, max_size=40
)


def _arrays(data):
    """(lengths, groups, prefix) with the prefix equal within a group (the group's own)."""
    lengths = np.array([d[0] for d in data], dtype=np.int64)
    groups = np.array([d[1] for d in data], dtype=np.int64)
    prompt = {g: p for _, g, p in reversed(data)}
    prefix = np.array([prompt[g] for g in groups], dtype=np.int64)
    return lengths, groups, prefix


@settings(max_examples=40, deadline=None)
@given(items, st.booleans(), st.integers(1, 3), st.integers(0, 5))
def test_every_item_once_groups_whole_rows_within_capacity(data, shared, per, seed):
    lengths, groups, prefix = _arrays(data)
    pre = prefix if shared else None
    sizes = {}
    for g in set(groups.tolist()):
        m = groups == g
        sizes[g] = int(lengths[m].sum()) + (int(prefix[m][0]) if shared else 0)
    cap = max([30, *sizes.values()])
    plan = plan_groups(lengths, groups, capacity=cap, prefix=pre, rows_per_batch=per, seed=seed)
    assert sorted(plan.indices.tolist()) == list(range(lengths.size))
    row_of_group: dict[int, int] = {}
    for r, row in enumerate(plan.rows):
        used = sum(sizes[g] for g in set(groups[row].tolist()))
        assert used <= cap
        for g in groups[row].tolist():
            assert row_of_group.setdefault(g, r) == r  # never in two rows
        # a row lists each group's items consecutively, in increasing index order
        runs = [g for k, g in enumerate(groups[row].tolist()) if k == 0 or groups[row][k - 1] != g]
        assert len(runs) == len(set(runs))
        for g in set(runs):
            idx = row[groups[row] == g]
            assert np.all(np.diff(idx) > 0)
    assert plan.info["executed_tokens"] == sum(sizes.values())
    assert plan.info["real_tokens"] == plan.real_tokens == int(lengths.sum())
    if plan.num_rows:
        assert plan.info["efficiency"] == sum(sizes.values()) / (plan.num_rows * cap)
    assert all(len(plan.batch_rows(b)) <= per for b in range(len(plan)))
    again = plan_groups(lengths, groups, capacity=cap, prefix=pre, rows_per_batch=per, seed=seed)
    assert np.array_equal(plan.indices, again.indices)
    assert np.array_equal(plan.offsets, again.offsets)
    loss = batch_loss_tokens(plan, lengths, prefix=shared)
    assert int(loss.sum()) == plan.info["loss_tokens"]
    assert int(loss.sum()) == int(lengths.sum()) - (0 if shared else lengths.size)


@settings(max_examples=20, deadline=None)
@given(items, st.integers(0, 3))
def test_after_the_collate_every_group_is_in_one_row_of_capacity(data, seed):
    pytest.importorskip("torch")
    from padless.torch import collate_groups

    lengths, groups, prefix = _arrays(data)
    lengths = np.maximum(lengths, 1)
    prefix = np.maximum(prefix, 1)
    cap = 64
    plan = plan_groups(lengths, groups, capacity=cap, prefix=prefix, rows_per_batch=2, seed=seed)
    collate = collate_groups(cap, attention_mask=None)
    for b in range(len(plan)):
        idx = plan[b].tolist()
        samples = [
            {
                "group": int(groups[i]),
                "prompt_ids": [7] * int(prefix[i]),
                "completion_ids": [1 + i % 50] * int(lengths[i]),
            }
            for i in idx
        ]
        batch = collate(samples)
        assert batch["input_ids"].shape == (len(plan.batch_rows(b)), cap)  # the planned rows
        rows_of = batch["target_index"] // cap
        for g in set(batch["completion_group"].tolist()):
            assert (
                len(
                    set(
                        rows_of[batch["completion_group"][batch["target_completion"]] == g].tolist()
                    )
                )
                == 1
            )
        assert batch["loss_tokens"] == int(batch_loss_tokens(plan, lengths, prefix=True)[b])


def test_the_spec_path_takes_its_settings_and_matches_the_function():
    lengths, groups = [5, 4, 6, 6, 3, 2], [0, 0, 1, 1, 2, 2]
    spec = Packing(capacity=12, rows_per_batch=2)
    a = spec.plan_groups(lengths, groups, seed=3, epoch=1)
    b = plan_groups(lengths, groups, capacity=12, rows_per_batch=2, seed=3, epoch=1)
    assert np.array_equal(a.indices, b.indices) and np.array_equal(a.offsets, b.offsets)
    other = [plan_groups(lengths, groups, capacity=12, seed=3, epoch=e).indices for e in range(6)]
    assert len({tuple(o.tolist()) for o in other}) > 1  # the epoch reshuffles rows


def test_a_group_over_capacity_is_named_or_dropped():
    with pytest.raises(
        ValueError,
        match=r"group 7 has 13 tokens \(2 items, its prompt once\), more than capacity=12",
    ):
        plan_groups([4, 4, 1], [7, 7, 3], capacity=12, prefix=[5, 5, 1])
    plan = plan_groups([4, 4, 1], [7, 7, 3], capacity=12, prefix=[5, 5, 1], oversize="drop")
    assert plan.skipped.tolist() == [0, 1] and plan.indices.tolist() == [2]
    assert plan.info["dropped"] == 1 and plan.info["tokens_lost"] == 13


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (
            Packing(capacity=16, oversize="split"),
            "groups= cannot be honoured with oversize='split'",
        ),
        (Packing(capacity=16, oversize="truncate"), "oversize='truncate'"),
        (Packing(capacity=(16, 16)), "capacity=\\(16, 16\\)"),
        (Packing(capacity=16, max_per_row=2), "max_per_row=2"),
        (Packing(capacity=16, context_parallel=2), "context_parallel=2"),
    ],
)
def test_forms_that_cannot_honour_groups_refuse_them(spec, match):
    with pytest.raises(ValueError, match=match):
        spec.plan_groups([3, 4], [0, 0])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"groups": [0, 1]}, ValueError, r"groups must hold one value per item \(3"),
        ({"groups": [0.5, 1, 1]}, TypeError, "groups must hold ints"),
        (
            {"groups": [0, 0, 1], "prefix": [2, 3, 1]},
            ValueError,
            "prefix must be equal within a group",
        ),
        ({"groups": [0, 0, 1], "prefix": [-1, -1, 1]}, ValueError, "prefix must be >= 1"),
        ({"groups": [0, 0, 1], "prefix": [0, 0, 1]}, ValueError, "got 0 at item 0"),
        ({"groups": [0, 0, 1], "oversize": "split"}, ValueError, "oversize"),
    ],
)
def test_bad_arguments_name_the_parameter(kwargs, error, match):
    with pytest.raises(error, match=match):
        plan_groups([1, 2, 3], capacity=8, **kwargs)


def test_what_the_shared_prompt_collates_cannot_lay_out_is_refused_when_planned():
    """An empty prompt or completion under ``prefix=`` (collate_groups and PreferenceCollator
    refuse them at the batch that holds them): refused by the plan, naming the item."""
    with pytest.raises(ValueError, match="empty completion at item 1"):
        plan_groups([3, 0, 1], [0, 0, 1], capacity=8, prefix=[2, 2, 1])
    with pytest.raises(ValueError, match=r"prefix must be >= 1 .* got 0 at item 2"):
        plan_groups([3, 1, 1], [0, 0, 1], capacity=8, prefix=[2, 2, 0])
    assert plan_groups([0, 1, 1], [0, 0, 1], capacity=8).info["groups"] == 2  # whole sequences


def test_dpo_pairs_at_16k_fill_and_never_split():
    """The issue's figure at a test's size: preference-like pairs in rows of 16,384 tokens."""
    rng = np.random.default_rng(0)
    n = 3000
    prompt = np.clip(rng.lognormal(5.5, 0.9, n), 8, 6000).astype(np.int64)
    base = rng.lognormal(5.8, 0.7, n)
    chosen = np.clip(base * rng.lognormal(0, 0.2, n), 4, 4000).astype(np.int64)
    rejected = np.clip(base * rng.lognormal(0, 0.2, n), 4, 4000).astype(np.int64)
    lengths = np.stack([prompt + chosen, prompt + rejected], 1).reshape(-1)
    groups = np.repeat(np.arange(n), 2)
    plan = plan_groups(lengths, groups, capacity=16384)
    assert plan.info["efficiency"] >= 0.97
    row = np.empty(2 * n, np.int64)
    for r, items in enumerate(plan.rows):
        row[items] = r
    assert np.array_equal(row[0::2], row[1::2])  # 0 split pairs


def test_the_row_search_fills_large_groups_and_the_collate_finds_its_rows_again():
    """Groups of a quarter row: best fit leaves gaps; the search's rows are fewer, and next
    fit over a batch's groups (the collate) gives back exactly the planned rows."""
    torch = pytest.importorskip("torch")
    from padless.planners.packing import fill_rows
    from padless.torch import collate_groups

    rng = np.random.default_rng(7)
    n, g, cap = 300, 4, 1024
    prompt = rng.integers(20, 90, n)
    comp = np.clip(rng.lognormal(3.8, 0.5, (n, g)), 4, 120).astype(np.int64)
    lengths, groups, prefix = comp.reshape(-1), np.repeat(np.arange(n), g), np.repeat(prompt, g)
    plain = plan_groups(lengths, groups, capacity=cap, prefix=prefix, search=False)
    plan = plan_groups(lengths, groups, capacity=cap, prefix=prefix, rows_per_batch=3, seed=2)
    assert plan.num_rows < plain.num_rows
    assert plan.info["efficiency"] > plain.info["efficiency"]
    collate = collate_groups(cap, attention_mask=None)
    for b in range(len(plan)):
        rows = plan.batch_rows(b)
        idx = plan[b].tolist()
        batch = collate(
            [
                {
                    "group": int(groups[i]),
                    "prompt_ids": [1] * int(prefix[i]),
                    "completion_ids": [2] * int(lengths[i]),
                }
                for i in idx
            ]
        )
        got_rows = batch["target_index"][batch["completion_loss_tokens"].cumsum(0) - 1] // cap
        planned = np.concatenate([np.full(len(r), k) for k, r in enumerate(rows)])
        assert got_rows.tolist() == planned.tolist()
        assert torch.equal(
            batch["group_ids"], torch.tensor(list(dict.fromkeys(groups[idx].tolist())))
        )
    # the builder alone: every item once, no row over capacity
    sizes = np.sort(prefix[::g] + comp.sum(1))[::-1].copy()
    row_of, num = fill_rows(sizes, cap)
    assert row_of.min() == 0 and row_of.max() == num - 1
    assert np.bincount(row_of, weights=sizes).max() <= cap


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=60), st.integers(50, 120))
def test_fill_rows_places_every_item_once_within_capacity(sizes, cap):
    from padless.planners.packing import fill_rows

    arr = np.sort(np.array(sizes, dtype=np.int64))[::-1].copy()
    row_of, num = fill_rows(arr, cap)
    assert row_of.shape == arr.shape and row_of.min() == 0 and row_of.max() == num - 1
    assert np.bincount(row_of, weights=arr, minlength=num).max() <= cap
    assert num >= -(-int(arr.sum()) // cap)
