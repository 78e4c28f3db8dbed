"""Groups composed with everything a sampler does (issue 42): every strategy x every form, and
for the cells that keep groups whole each layer on top (balance, batches_per_step, a mixture,
skip, resume, elastic resume, a torch DataLoader with its collate). Each cell either works (every
batch of whole groups, every index delivered) or is refused when it is built, naming groups and
the part that cannot honour them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import padless
from padless import Packing, PlanSampler, Schedule, TokenBudget
from padless.io.indexed import write_indexed
from padless.sampling.mixing import MixtureSampler
from padless.torch import TokenDataset, collate_for, collate_groups
from tests.contract.factories import Factory
from tests.contract.test_contract import check_union, run_elastic

N = 120
LENGTHS = np.random.default_rng(0).integers(2, 40, N)  # collate_groups: 2 tokens at least
GROUPS = np.random.default_rng(1).permutation(N) // 2  # pairs whose two items lie apart
MEMBERS: dict[int, list[int]] = {}
for _i, _g in enumerate(GROUPS.tolist()):
    MEMBERS.setdefault(_g, []).append(_i)

SPECS = {
    "token_budget": TokenBudget(max_tokens=240),
    "packing": Packing(capacity=128, rows_per_batch=2),
    "exact_length": padless.ExactLength(batch_size=4),
    "buckets": padless.Buckets(num_buckets=3, max_tokens=240),
    "fixed_shapes": padless.FixedShapes(shapes=[(8, 40), (16, 20)]),
    "decomposition": padless.Decomposition(tokens_per_batch=64, max_length=16, min_length=1),
}
KEEPS_GROUPS = ("token_budget", "packing")
FORMS = {"whole": {}, "window": {"window": 48}, "histogram": {"window": "histogram"}}


def _whole(batch: list[int], offset: int = 0) -> None:
    """Every group of the batch is in it whole, its items adjacent, in index order."""
    local = [i - offset for i in batch]
    at = 0
    while at < len(local):
        m = MEMBERS[int(GROUPS[local[at]])]
        assert local[at : at + len(m)] == m, f"group split or scattered in {local}"
        at += len(m)


def _within(name: str, batch: list[int]) -> None:
    if name == "token_budget":
        assert len(batch) * int(LENGTHS[batch].max()) <= 240
    else:  # packed: the rows of a batch, each of whole groups, hold at most 2 x capacity
        assert int(LENGTHS[batch].sum()) <= 2 * 128


def make(name: str, **options) -> PlanSampler:
    return PlanSampler(LENGTHS, SPECS[name], groups=GROUPS, seed=4, **options)


# ------------------------------------------------------------------ refused when built
@pytest.mark.parametrize("form", [*FORMS, "stream"])
@pytest.mark.parametrize("name", list(SPECS))
def test_each_cell_works_or_is_refused_when_built_naming_both_parts(name, form):
    if form == "stream":
        with pytest.raises(TypeError) as err:
            padless.StreamBatcher(LENGTHS.tolist(), SPECS[name], length=int, groups=GROUPS)
        assert "groups" in str(err.value) and "stream" in str(err.value)
        return
    if name in KEEPS_GROUPS and form == "whole":
        s = make(name, world_size=2)
        batches = list(s)
        for b in batches:
            _whole(b)
            _within(name, b)
        assert set(i for b in batches for i in b) | set(
            i for b in make(name, world_size=2, rank=1) for i in b
        ) == set(range(N))
        return
    with pytest.raises(ValueError) as err:
        make(name, **FORMS[form])
    text = str(err.value)
    assert "groups=" in text
    part = SPECS[name].name if form == "whole" else f"window={FORMS[form]['window']!r}"
    assert part in text, text


# ------------------------------------------------------------------ layers on the working cells
KEEPERS = pytest.mark.parametrize("name", KEEPS_GROUPS)


def _epoch(name: str, world: int, **options) -> list[list[list[int]]]:
    return [list(make(name, world_size=world, rank=r, **options)) for r in range(world)]


@KEEPERS
def test_balance(name):
    ranks = _epoch(name, 2, balance=True)
    assert len(ranks[0]) == len(ranks[1])
    for b in (b for r in ranks for b in r):
        _whole(b)
        _within(name, b)
    assert set(i for r in ranks for b in r for i in b) == set(range(N))


@KEEPERS
def test_batches_per_step(name):
    s = make(name, world_size=2, batches_per_step=Schedule.piecewise([0, 2], [2, 4]))
    steps = list(s.steps(s))
    assert [len(x) for x in steps[:3]] == [1, 1, 2][: len(steps)]
    for step in steps:
        for b in step:
            _whole(b)


@KEEPERS
def test_mixture(name):
    half = N // 2
    subs = {
        "a": PlanSampler(LENGTHS[:half], SPECS[name], groups=GROUPS[:half], seed=1),
        "b": PlanSampler(LENGTHS[half:], SPECS[name], groups=GROUPS[half:], seed=2),
    }
    mix = MixtureSampler(subs, temperature=1.0, num_batches=20, seed=3)
    for b in mix:
        ids = GROUPS[b]
        for g in set(ids.tolist()):  # a pair's items in one batch (ids may repeat across halves)
            part = [i for i in b if GROUPS[i] == g]
            mine = [i for i in range(N) if GROUPS[i] == g and (i < half) == (part[0] < half)]
            assert part == mine


@KEEPERS
def test_skip(name):
    full = _epoch(name, 2)
    s = [make(name, world_size=2, rank=r) for r in range(2)]
    for x in s:
        x.skip(steps=(1, 2))
    rest = [list(x) for x in s]
    for r in range(2):
        assert rest[r] == full[r][:1] + full[r][2:]
        for b in rest[r]:
            _whole(b)


@KEEPERS
def test_resume(name):
    whole = list(make(name))
    first = make(name)
    it = iter(first)
    got = [next(it) for _ in range(3)]
    again = make(name)
    again.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert got + list(again) == whole


@KEEPERS
@pytest.mark.parametrize("balance", [False, True])
def test_elastic_resume(name, balance):
    f = Factory(
        "groups",
        lambda **o: PlanSampler(LENGTHS, SPECS[name], groups=GROUPS, **o),
        all_units=lambda s: list(range(N)),
    )
    delivered, widest = run_elastic(f, [(2, 2), (3, 0)], balance)
    check_union(f, delivered, widest, balance, False)
    for b in delivered:
        _whole(b)


TOKENS = [torch.arange(1, int(n) + 1) for n in LENGTHS]


def test_dataloader_with_the_padded_collate_keeps_the_budget():
    s = make("token_budget")
    loader = DataLoader(TOKENS, batch_sampler=s, collate_fn=collate_for(s, pad_id=0))
    seen = 0
    for batch, planned in zip(loader, make("token_budget"), strict=True):
        rows, width = batch["input_ids"].shape
        assert rows == len(planned) and rows * width <= 240  # rows x longest, after the collate
        seen += rows
    assert seen == N


def test_dataloader_with_collate_groups_keeps_each_group_in_one_row():
    s = make("packing")
    samples = [{"group": int(g), "completion_ids": t} for g, t in zip(GROUPS, TOKENS, strict=True)]
    loader = DataLoader(samples, batch_sampler=s, collate_fn=collate_groups(128, prompt_key=None))
    for batch, planned in zip(loader, make("packing"), strict=True):
        assert batch["input_ids"].shape[0] <= 2 and batch["input_ids"].shape[1] == 128
        row = (batch["target_index"] // 128).tolist()
        sample = batch["target_completion"].tolist()
        rows_of: dict[int, set[int]] = {}
        for r, k in zip(row, sample, strict=True):
            rows_of.setdefault(int(GROUPS[planned[k]]), set()).add(r)
        assert all(len(v) == 1 for v in rows_of.values())  # a group in one row
        assert batch["executed_tokens"] == int(LENGTHS[planned].sum())


def test_collate_for_refuses_a_grouped_packing_sampler():
    # collate_packed re-cuts rows next fit by items, which may split a group across two rows
    # (11 of 29 batches on this corpus): refused, naming collate_groups, which keeps them whole
    lengths = np.random.default_rng(0).integers(1, 40, 400)
    s = PlanSampler(lengths, Packing(capacity=160, rows_per_batch=2), groups=np.arange(400) // 4)
    with pytest.raises(ValueError, match=r"groups=.*collate_groups\(160, prompt_key=None\)"):
        collate_for(s)
    assert "collate_packed" in repr(collate_for(s.spec))  # the spec alone has no groups


def test_token_dataset_refuses_a_grouped_packing_sampler_and_serves_a_grouped_budget(tmp_path):
    # TokenDataset cuts a packed batch into rows next fit by items as collate_packed does: the
    # same refusal when it is built; padded batches of whole groups it serves as planned
    lengths = np.random.default_rng(1).integers(1, 40, 200)
    docs = [np.arange(1, n + 1, dtype=np.int32) for n in lengths.tolist()]
    write_indexed(docs, tmp_path / "c", dtype=np.uint16)
    groups = np.arange(200) // 2
    packed = PlanSampler(lengths, Packing(capacity=160, rows_per_batch=2), groups=groups)
    with pytest.raises(ValueError, match=r"TokenDataset .*groups=.*collate_groups\(160"):
        TokenDataset(tmp_path / "c", plan=packed)
    padded = PlanSampler(lengths, TokenBudget(max_tokens=240), groups=groups, seed=3)
    served = TokenDataset(tmp_path / "c", plan=padded)
    for planned in padded:
        assert set(np.bincount(groups[planned]).tolist()) <= {0, 2}  # pairs whole
        rows, width = served.__getitems__(planned)["input_ids"].shape
        assert rows == len(planned) and rows * width <= 240


def test_the_padded_collate_rounding_widths_keeps_the_budget():
    spec = TokenBudget(max_tokens=240, pad_to_multiple_of=16)
    s = PlanSampler(LENGTHS, spec, groups=GROUPS, seed=4)
    collate = collate_for(s, pad_id=0)
    for planned in s:
        _whole(planned)
        rows, width = collate([TOKENS[i] for i in planned])["input_ids"].shape
        assert width % 16 == 0 and rows * width <= 240
