"""Mixtures of corpora that warm up, split or decompose their sequences (issue 40).

A MixtureSampler yields a corpus's codes (``i + m · n_k``: item ``i``, piece or warm-up tag
``m``) as ``offset_k + i + m · N`` (``N``: the items of all corpora), so plain indices stay the
ConcatDataset's; ``mixture_dataset(datasets, mixture)`` serves the codes (through each corpus's
``pieces``, or a ``TokenDataset`` per corpus) and ``collate_for(mixture)`` lays them out. A
corpus that warms up follows the mixture's step of each batch (the step its weights are read
at).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import padless
from padless import Decomposition, MixtureSampler, Packing, PlanSampler, Schedule, TokenBudget
from padless.sampling.mixing import mixture_codes, split_codes
from padless.torch import TokenDataset, collate_for, mixture_dataset

RNG = np.random.default_rng(7)
LA = RNG.integers(1, 65, 120)
LB = RNG.integers(1, 90, 90)
# every token names its corpus, document and position: the batches can be read back
DOCS_A = [np.arange(int(n), dtype=np.int64) + 1000 * i + 1 for i, n in enumerate(LA)]
DOCS_B = [np.arange(int(n), dtype=np.int64) + 1000 * i + 500_001 for i, n in enumerate(LB)]
WARM = Schedule.piecewise([0, 4, 8], [16, 32, 64])


def warming(
    seed: int = 0, scheduled: bool = True, rank: int = 0, world_size: int = 1
) -> MixtureSampler:
    """Corpus a warms up, b splits its long documents; weights that change at step 6 (or
    constant ones, which draw the same corpora at every world size)."""
    a = PlanSampler(LA, Packing(capacity=WARM, rows_per_batch=2), seed=seed)
    b = PlanSampler(LB, Packing(capacity=64, rows_per_batch=2, oversize="split"), seed=seed)
    weights: dict = {"a": Schedule.piecewise([0, 6], [3.0, 1.0]), "b": 1.0}
    if not scheduled:
        weights = {"a": 3.0, "b": 1.0}
    return MixtureSampler(
        {"a": a, "b": b},
        weights=weights,
        num_batches=30,
        seed=seed,
        rank=rank,
        world_size=world_size,
    )


def tokens_of(batch: dict) -> list[int]:
    ids = batch["input_ids"]
    return ids[ids != 0].tolist()  # tokens are >= 1, padding 0


def test_codes_round_trip():
    offsets, sizes = (0, 5, 9), (5, 4, 3)
    coded = [mixture_codes(np.array([0, 4, 7, 13]), 0, 5, 12),
             mixture_codes(np.array([0, 3, 7]), 5, 4, 12),
             mixture_codes(np.array([2, 5]), 9, 3, 12)]  # fmt: skip
    assert coded[0].tolist() == [0, 4, 14, 27]  # 13 = 3 + 2 · 5 -> 0 + 3 + 2 · 12
    k, local = split_codes(np.concatenate(coded), offsets, sizes, True)
    assert k.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2]
    assert local.tolist() == [0, 4, 7, 13, 0, 3, 7, 2, 5]
    with pytest.raises(ValueError, match="lie in"):
        split_codes([12], offsets, sizes, False)  # plain indices: one past the corpora
    with pytest.raises(ValueError, match="passes int64"):
        mixture_codes(np.array([2**62]), 0, 1, 3)


def test_a_warm_up_inside_a_mixture_is_followed():
    """The issue's first case: a corpus warming up inside a mixture yields rows of its step's
    capacity (it was silently dropped: rows of the largest capacity from step 0)."""
    mix = warming()
    assert mix.needs_pieces() is not None and "'a'" in mix.needs_pieces()
    data = mixture_dataset({"a": DOCS_A, "b": DOCS_B}, mix)
    loader = torch.utils.data.DataLoader(data, batch_sampler=mix, collate_fn=collate_for(mix))
    steps = mix.slot_steps()
    corpus = mix.epoch_schedule(0).corpus
    seen_a = 0
    for step, batch in enumerate(loader):
        width = batch["input_ids"].shape[1]
        if corpus[step] == 0:
            assert width == int(WARM.values(np.array([steps[step]]))[0]), step
            seen_a += 1
        else:
            assert width == 64
    assert seen_a > 3


def test_each_batch_delivers_the_corpus_plan_batch_whole():
    """Whatever the step's form, a mixture batch holds exactly the tokens of the planned batch
    it was drawn from (every piece once, nothing else)."""
    mix = warming(seed=3)
    data = mixture_dataset({"a": DOCS_A, "b": DOCS_B}, mix)
    collate = collate_for(mix)
    schedule = mix.epoch_schedule(0)
    for slot, codes in enumerate(mix):
        k = int(schedule.corpus[slot])
        sub = mix.samplers[mix.names[k]]
        plan, _ = sub.epoch_plan(int(schedule.sub_epoch[slot]))
        b = int(schedule.batch[slot])
        pieces = sub.pieces((DOCS_A, DOCS_B)[k])  # the corpus's own pieces of the batch
        values = sub.planner.values(plan)[plan.offsets[b] : plan.offsets[b + 1]]
        want = sorted(t for c in values.tolist() for t in pieces[c].tolist())
        got = sorted(tokens_of(collate([data[c] for c in codes])))
        assert got == want, slot
        assert len(got) == len(set(got))


def test_resume_and_elastic_resume_keep_the_warm_up():
    mix = warming(seed=1)
    whole = list(mix)
    again = warming(seed=1)
    it = iter(again)
    first = [next(it) for _ in range(7)]
    state = json.loads(json.dumps(again.state_dict()))
    fresh = warming(seed=1)
    fresh.load_state_dict(state)
    assert first + list(fresh) == whole
    # at world size 2, then 3 ranks (constant weights: the same corpora drawn at any world
    # size): the same planned batches, each in the form of its position's step
    whole = list(warming(seed=1, scheduled=False))
    two = [warming(seed=1, scheduled=False, rank=r, world_size=2) for r in range(2)]
    its = [iter(s) for s in two]
    head = [next(i) for _ in range(4) for i in its]
    three = []
    for r in range(3):
        s = warming(seed=1, scheduled=False, rank=r, world_size=3)
        s.load_state_dict(two[0].state_dict())
        three.append(list(s))
    rest = [b for step in zip(*three, strict=False) for b in step]

    def planned(batch: list[int]) -> tuple[int, tuple[int, ...]]:
        # the corpus and documents of a batch, whatever its step's form
        k, local = split_codes(batch, mix.corpus_offsets, mix.corpus_sizes, True)
        return int(k[0]), tuple(sorted(set((local % mix.corpus_sizes[int(k[0])]).tolist())))

    assert {planned(b) for b in head + rest} == {planned(b) for b in whole}
    # each batch after the resume is in the form of its position's step at 3 ranks: 4 steps
    # of 2 ranks, then step 4 + i for the i-th batch of every rank
    data = mixture_dataset({"a": DOCS_A, "b": DOCS_B}, mix)
    collate = collate_for(mix)
    for r in range(3):
        for i, codes in enumerate(three[r]):
            k, _ = split_codes(codes, mix.corpus_offsets, mix.corpus_sizes, True)
            width = collate([data[c] for c in codes])["input_ids"].shape[1]
            want = int(WARM.values(np.array([4 + i]))[0]) if k[0] == 0 else 64
            assert width == want, (r, i)


def test_a_token_dataset_per_corpus_serves_a_mixture(tmp_path):
    """A warm-up's rows, split pieces and plain items of two token files, each batch built by
    its corpus's TokenDataset: the batches collate_for(mixture) builds from the items."""
    padless.write_indexed(DOCS_A, tmp_path / "a", dtype=np.int32)
    padless.write_indexed(DOCS_B, tmp_path / "b", dtype=np.int32)
    warm = Schedule.piecewise([0, 6], [16, 32])  # a warms up and splits
    a = PlanSampler(LA, Packing(capacity=warm, rows_per_batch=2, oversize="split"), seed=2)
    b = PlanSampler(LB, Packing(capacity=32, rows_per_batch=2, oversize="split"), seed=2)
    mix = MixtureSampler({"a": a, "b": b}, num_batches=25, seed=2)
    files = mixture_dataset(
        {"a": TokenDataset(tmp_path / "a", plan=a), "b": TokenDataset(tmp_path / "b", plan=b)},
        mix,
    )
    items = mixture_dataset({"a": DOCS_A, "b": DOCS_B}, mix)
    collate = collate_for(mix)
    count = 0
    for codes in mix:
        built, want = files.__getitems__(codes), collate([items[c] for c in codes])
        for key in ("input_ids", "labels", "position_ids", "seq_idx", "cu_seqlens"):
            assert torch.equal(built[key], want[key]), key
        count += int(max(codes) >= len(LA) + len(LB))  # a split piece came through
    assert count > 0


def test_what_cannot_serve_a_mixture_is_refused_when_built(tmp_path):
    a = PlanSampler(LA, Packing(capacity=64, rows_per_batch=2))
    b = PlanSampler(LB, TokenBudget(max_tokens=128))
    mix = MixtureSampler({"a": a, "b": b})
    with pytest.raises(ValueError, match="corpus 'a' .* and corpus 'b' .* collate differently"):
        collate_for(mix)
    padless.write_indexed(DOCS_A, tmp_path / "a", dtype=np.int32)
    with pytest.raises(TypeError, match="build one per corpus .*mixture_dataset"):
        TokenDataset(tmp_path / "a", plan=mix)
    other = PlanSampler(LA, Packing(capacity=64, rows_per_batch=2))
    split = MixtureSampler({"a": PlanSampler(LA, Packing(capacity=32, oversize="split")), "b": b})
    with pytest.raises(ValueError, match="planned by another sampler"):
        mixture_dataset({"a": TokenDataset(tmp_path / "a", plan=other), "b": DOCS_B}, split)


def test_a_decomposing_corpus_mixes():
    spec = Decomposition(tokens_per_batch=64, max_length=16, min_length=4)
    a, b = PlanSampler(LA, spec), PlanSampler(LB, spec)
    mix = MixtureSampler({"a": a, "b": b}, num_batches=20, seed=4)
    data = mixture_dataset({"a": DOCS_A, "b": DOCS_B}, mix)
    for codes in mix:
        pieces = [data[c] for c in codes]
        assert len({len(p) for p in pieces}) == 1  # a batch of pieces of one length
        corpus = {int(p[0]) > 500_000 for p in pieces}
        assert len(corpus) == 1


@given(
    sizes=st.lists(st.integers(1, 40), min_size=2, max_size=4),
    codes=st.lists(st.integers(0, 10**6), min_size=1, max_size=20),
    k=st.integers(0, 3),
)
def test_mixture_codes_invert(sizes, codes, k):
    k = k % len(sizes)
    offsets = tuple(int(x) for x in np.concatenate([[0], np.cumsum(sizes)[:-1]]))
    total = int(sum(sizes))
    coded = mixture_codes(np.array(codes, dtype=np.int64), offsets[k], sizes[k], total)
    got_k, local = split_codes(coded, offsets, tuple(sizes), True)
    assert (got_k == k).all() and local.tolist() == codes


def test_the_docs_example_runs(tmp_path, monkeypatch):
    """docs/schedules.md's mixture-warmup example, as written: the issue's first run (a mixture
    of warming-up packed corpora served from Megatron pairs through a TokenDataset per corpus,
    resumed across a weight change)."""
    import re
    from pathlib import Path

    text = (Path(__file__).parent.parent / "docs" / "schedules.md").read_text()
    code = re.search(r"<!-- example: mixture-warmup -->\n```python\n(.*?)```", text, re.S)
    assert code is not None
    monkeypatch.chdir(tmp_path)
    scope: dict = {"__name__": "docs_mixture_warmup"}
    exec(compile(code.group(1), "docs/schedules.md", "exec"), scope)
    assert scope["step"] == scope["resumed"].num_batches - 1 > 20  # the epoch ran to its end


def test_a_skip_in_a_warming_up_mixture_leaves_out_exactly_its_batches():
    """A skip leaves out the batches at its positions; every other batch keeps the form of its
    position's step (a skip does not move the mixture's schedule)."""
    whole = list(warming(seed=5))
    mix = warming(seed=5)
    mix.skip(steps=(3, 7))
    assert list(mix) == whole[:3] + whole[7:]


def test_a_coded_mixture_through_dataloader_workers():
    """The MixtureDataset (corpora's pieces) pickles into workers and serves the same batches."""
    mix = warming(seed=6)
    data = mixture_dataset({"a": DOCS_A, "b": DOCS_B}, mix)
    collate = collate_for(mix)
    inline = [tokens_of(b) for b in torch.utils.data.DataLoader(data, batch_sampler=mix,
                                                                 collate_fn=collate)]  # fmt: skip
    workers = torch.utils.data.DataLoader(
        data, batch_sampler=mix, collate_fn=collate, num_workers=2
    )
    assert [tokens_of(b) for b in workers] == inline
