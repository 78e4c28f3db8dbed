"""Histogram plans (``window="histogram"``): the global token-budget plan's batch shapes and
padding, cut on the lengths' histogram; each epoch's sequences assigned to them by a keyed
bijection per width; memory-mapped lengths planned where they are."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import padless
from padless.planners import histogram as H


def _shapes(sampler, lengths, multiple):
    widths = -(-np.asarray(lengths) // multiple) * multiple
    return sorted((len(b), int(widths[b].max())) for b in sampler)


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 300), min_size=1, max_size=400),
    max_tokens=st.integers(304, 3000),
    max_sentences=st.sampled_from([None, 3, 16]),
    multiple_of=st.sampled_from([1, 2, 8]),
    pad=st.sampled_from([1, 8]),
    seed=st.integers(0, 5),
)
def test_the_global_plans_shapes_and_padding(
    lengths, max_tokens, max_sentences, multiple_of, pad, seed
):
    spec = padless.TokenBudget(
        max_tokens=max_tokens,
        max_sentences=max_sentences,
        multiple_of=multiple_of,
        pad_to_multiple_of=pad,
    )
    lens = np.array(lengths)
    whole = padless.PlanSampler(lens, spec, seed=seed)
    hist = padless.PlanSampler(lens, spec, seed=seed, window="histogram")
    assert _shapes(hist, lens, pad) == _shapes(whole, lens, pad)
    a, b = whole.stats(), hist.stats()
    for key in ("batches", "padding_fraction", "real_tokens", "padded_slots", "skipped"):
        assert a[key] == b[key], key
    assert sorted(i for batch in hist for i in batch) == list(range(lens.size))


def test_epochs_draw_other_members_and_orders():
    lens = np.random.default_rng(1).integers(1, 50, 3000)
    s = padless.PlanSampler(lens, padless.TokenBudget(max_tokens=400), window="histogram", seed=3)
    first = list(s)
    s.set_epoch(1)
    second = list(s)
    assert sorted(map(sorted, first)) != sorted(map(sorted, second))  # members change
    assert sorted(i for b in second for i in b) == list(range(lens.size))
    fixed = padless.PlanSampler(
        lens, padless.TokenBudget(max_tokens=400), window="histogram", seed=3, shuffle=False
    )
    one = list(fixed)
    fixed.set_epoch(1)
    assert list(fixed) == one  # shuffle=False: every epoch the epoch-0 plan, in plan order
    assert one == sorted(one, key=lambda b: lens[b].max())


def test_memory_mapped_lengths_are_planned_where_they_are(tmp_path, monkeypatch):
    lens = np.random.default_rng(2).integers(1, 200, 20_000).astype(np.int32)
    path = tmp_path / "lengths.npy"
    np.save(path, lens)
    spec = padless.TokenBudget(max_tokens=1000)
    in_memory = padless.PlanSampler(lens, spec, window="histogram", seed=1)
    monkeypatch.setattr(H, "IN_MEMORY", 1000)  # the index goes to a temporary file
    mapped = padless.PlanSampler(path, spec, window="histogram", seed=1)
    assert isinstance(mapped.planner.lengths, np.memmap)
    assert isinstance(mapped.planner.index, np.memmap)
    assert list(mapped) == list(in_memory)
    state = mapped.state_dict()
    again = padless.PlanSampler(path, spec, window="histogram", seed=1)
    again.load_state_dict(state)
    mapped.planner.close()


def test_oversize_is_refused_by_index_or_dropped_and_counted():
    lens = np.array([3, 9, 2, 12, 4])
    with pytest.raises(ValueError, match=r"index 1 has length 9, which exceeds max_tokens=8"):
        padless.PlanSampler(lens, padless.TokenBudget(max_tokens=8), window="histogram")
    s = padless.PlanSampler(
        lens, padless.TokenBudget(max_tokens=8, oversize="drop"), window="histogram"
    )
    assert sorted(i for b in s for i in b) == [0, 2, 4] and s.stats()["skipped"] == 2


@pytest.mark.parametrize(
    "make, error, match",
    [
        (
            lambda: padless.PlanSampler(
                [3, 4], padless.TokenBudget(max_tokens=8, max_cost=9.0), window="histogram"
            ),
            ValueError,
            "histogram form",
        ),
        (
            lambda: padless.PlanSampler(
                [3, 4], padless.Packing(capacity=8, oversize="split"), window="histogram"
            ),
            ValueError,
            "histogram form",
        ),
        (
            lambda: padless.PlanSampler(
                np.array([[3, 4], [1, 2]]), padless.TokenBudget(max_tokens=8), window="histogram"
            ),
            ValueError,
            "1-D lengths",
        ),
        (
            lambda: padless.PlanSampler([3, 4], padless.TokenBudget(max_tokens=8), window="all"),
            ValueError,
            "'histogram'",
        ),
        (
            lambda: padless.PlanSampler(
                np.array([3, 1 << 26]), padless.TokenBudget(), window="histogram"
            ),
            ValueError,
            r"below 2\*\*25 .* position \[1\]",
        ),
        (
            lambda: padless.PlanSampler(
                np.array([3, -1]), padless.TokenBudget(max_tokens=8), window="histogram"
            ),
            ValueError,
            r"got -1 at position \[1\]",
        ),
    ],
)
def test_what_it_cannot_plan_is_refused_by_name(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_balance_and_elastic_resume_keep_every_sequence_once():
    lens = np.random.default_rng(4).integers(1, 400, 5000)
    spec = padless.TokenBudget(max_tokens=2000)

    def ranks(world):
        return [
            padless.PlanSampler(
                lens, spec, window="histogram", balance=True, seed=2, rank=r, world_size=world
            )
            for r in range(world)
        ]

    first = ranks(4)
    its = [iter(s) for s in first]
    got = [next(it) for _ in range(5) for it in its]
    state = first[0].state_dict()
    later = ranks(3)
    for s in later:
        s.load_state_dict(state)
    for step in zip(*[list(s) for s in later], strict=True):
        got.extend(step)
    total = first[0].stats()["batches"]
    items = [i for b in got[:total] for i in b]
    assert sorted(items) == list(range(lens.size))
    assert later[0].stats()["imbalance"] < 1.1


def test_the_readme_recipe_keeps_the_budget(tmp_path, monkeypatch):
    import re
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "data.md").read_text()
    at = text.index('**Global quality at any size, for a token budget**: `window="histogram"`')
    code = re.search(r"```python\n(.*?)```", text[at:], re.S).group(1)
    lens = np.random.default_rng(6).integers(1, 3000, 5000).astype(np.int32)
    np.save(tmp_path / "lengths.npy", lens)
    monkeypatch.chdir(tmp_path)
    scope = {"np": np, "padless": padless, "rank": 0, "world_size": 1}
    exec(compile(code, "docs/data.md:Large corpora (histogram)", "exec"), scope)
    batches = list(scope["sampler"])
    assert all(len(b) * lens[b].max() <= 4096 for b in batches)
    assert sorted(i for b in batches for i in b) == list(range(lens.size))


@pytest.mark.parametrize("rows_per_batch, max_per_row", [(1, None), (3, 5)])
def test_packing_rows_are_the_global_plans(rows_per_batch, max_per_row):
    from padless.planners.packing import next_fit_rows

    lens = np.random.default_rng(7).integers(1, 300, 3000)
    spec = padless.Packing(capacity=512, rows_per_batch=rows_per_batch, max_per_row=max_per_row)
    whole = padless.PlanSampler(lens, spec, seed=2)
    hist = padless.PlanSampler(lens, spec, seed=2, window="histogram")
    want = sorted(sorted(lens[r].tolist()) for r in whole.epoch_plan(0)[0].rows)
    got = []
    for b in hist:
        row_of = next_fit_rows(lens[b], capacity=512, max_per_row=max_per_row)
        got += [sorted(lens[np.array(b)[row_of == k]].tolist()) for k in range(row_of.max() + 1)]
    assert sorted(got) == want  # the collate rebuilds the same rows from the batch alone
    assert hist.stats()["efficiency"] == whole.stats()["efficiency"]
    assert sorted(i for b in hist for i in b) == list(range(lens.size))


def test_the_index_placed_by_two_threads_is_the_stable_order_by_width():
    # past 2**22 sequences each of two threads places the widths holding half of them
    lengths = np.random.default_rng(11).integers(1, 300, (1 << 22) + 1000).astype(np.int32)
    planner = H.HistogramPlanner(padless.TokenBudget(max_tokens=600), lengths, threads=2)
    assert planner.threads == 2
    expected = np.argsort(lengths, kind="stable")
    assert np.array_equal(np.asarray(planner.index), expected)
