"""Dataset decomposition (issue 28): binary pieces, dense one-length batches, curricula."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import padless
from padless import Decomposition, PlanSampler
from padless.planners.decomposition import (
    _allot,
    _split_counts,
    curriculum_order,
    decompose,
    grow_odds,
    piece_bounds,
    piece_numbers,
)

LENGTHS = np.random.default_rng(3).lognormal(4.0, 1.0, 800).astype(np.int64).clip(0, 700)


def spec(**kw) -> Decomposition:
    base = {"min_length": 8, "max_length": 128, "tokens_per_batch": 512}
    return Decomposition(**{**base, **kw})


def by_doc(plan) -> dict[int, list[tuple[int, int]]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for d, a, b in zip(plan.indices, plan.piece_start, plan.piece_stop, strict=True):
        out.setdefault(int(d), []).append((int(a), int(b)))
    return {d: sorted(v) for d, v in out.items()}


# ------------------------------------------------------------------ the decomposition
@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 5000), min_size=1, max_size=40),
    st.integers(0, 10),
)
def test_pieces_tile_each_document_largest_first(sizes, log_max):
    m = 1 << log_max
    doc, start, length = decompose(np.array(sizes), m)
    for i, size in enumerate(sizes):
        mine = np.flatnonzero(doc == i)
        assert np.all(np.diff(mine) == 1)  # documents in order, contiguous
        lens, starts = length[mine], start[mine]
        assert lens.sum() == size and np.array_equal(starts, np.cumsum(lens) - lens)  # tiled
        assert np.all(np.diff(lens) <= 0) and np.all(lens <= m)  # largest first, <= max
        assert np.all(lens & (lens - 1) == 0) and np.all(lens > 0)  # powers of two
        assert lens.size == size // m + bin(size % m).count("1")
        assert len(set((lens[lens < m]).tolist())) == int(np.sum(lens < m))  # one per bit
    # the codes' piece numbers give the pieces back
    numbers = piece_numbers(start, m)
    lo, hi = piece_bounds(np.array(sizes)[doc], numbers, m)
    assert np.array_equal(lo, start) and np.array_equal(hi, start + length)


def test_kept_pieces_tile_the_kept_tokens_and_drops_are_counted():
    s = spec()
    plan = s.plan(LENGTHS, seed=1, epoch=2)
    pieces = by_doc(plan)
    dropped = dropped_tokens = 0
    for i, size in enumerate(LENGTHS.tolist()):
        _, _, length = decompose(np.array([size]), s.max_length)
        kept = length[length >= s.min_length]
        dropped += int((length < s.min_length).sum())
        dropped_tokens += int(length[length < s.min_length].sum())
        got = pieces.get(i, [])
        assert [b - a for a, b in got] == kept.tolist()  # the same pieces, each once
        assert not got or (
            got[0][0] == 0 and all(x[1] == y[0] for x, y in zip(got, got[1:], strict=False))
        )
    assert plan.info["dropped_pieces"] == dropped and plan.info["dropped_tokens"] == dropped_tokens
    assert plan.info["pieces"] == dropped + plan.indices.size
    assert set(plan.skipped.tolist()) == set(range(LENGTHS.size)) - set(pieces)


def test_every_batch_is_dense_with_the_same_tokens():
    s = spec()
    plan = s.plan(LENGTHS, seed=4)
    stats = plan.stats(LENGTHS)
    assert stats.padding_fraction == 0.0 and stats.padded_slots == stats.real_tokens
    tails: dict[int, int] = {}
    for b in range(len(plan)):
        lens = plan.piece_lengths[plan.offsets[b] : plan.offsets[b + 1]]
        k = int(lens[0])
        assert np.all(lens == k)  # one length per batch
        if lens.size != s.tokens_per_batch // k:
            assert lens.size < s.tokens_per_batch // k
            tails[k] = tails.get(k, 0) + 1
    assert all(v == 1 for v in tails.values())  # at most one short batch per bucket
    counts = plan.info["bucket_batches"]
    assert sum(counts.values()) == len(plan) and set(counts) <= {str(1 << k) for k in range(3, 8)}


def test_leftovers_drop_keeps_full_batches_only():
    s = spec(leftovers="drop")
    plan = s.plan(LENGTHS)
    assert np.all(plan.sizes * plan.piece_lengths[plan.offsets[:-1]] == s.tokens_per_batch)
    partial = spec().plan(LENGTHS)
    assert plan.info["leftover_pieces"] == partial.indices.size - plan.indices.size > 0
    assert plan.info["leftover_tokens"] == partial.real_tokens - plan.real_tokens
    covered = set(plan.indices.tolist())
    assert set(plan.skipped.tolist()) == set(range(LENGTHS.size)) - covered


def test_keep_short_keeps_every_token_in_buckets_of_their_own():
    plan = spec(keep_short=True).plan(LENGTHS)
    assert plan.info["dropped_pieces"] == 0 and plan.real_tokens == int(LENGTHS.sum())
    assert plan.stats(LENGTHS).padding_fraction == 0.0
    assert int(plan.piece_lengths.min()) == 1  # 1-token pieces batched as (512, 1) blocks
    assert plan.skipped.tolist() == np.flatnonzero(LENGTHS == 0).tolist()


def test_codes_and_pieces_dataset_serve_the_planned_tokens():
    s = spec(min_length=1)
    docs = [np.arange(int(n)) + 1000 * i for i, n in enumerate(LENGTHS[:60])]
    sampler = PlanSampler(LENGTHS[:60], s, seed=2)
    ds = sampler.pieces(docs)  # the spec's, through the sampler
    plan, order = sampler.epoch_plan(0)
    for b, batch in zip(order.tolist(), sampler, strict=True):
        lo, hi = plan.offsets[b], plan.offsets[b + 1]
        for code, d, a, z in zip(
            batch, plan.indices[lo:hi], plan.piece_start[lo:hi], plan.piece_stop[lo:hi], strict=True
        ):
            assert np.array_equal(ds[code], docs[d][a:z])
    rows = s.pieces([{"input_ids": list(range(13)), "id": 7}])
    assert rows[1] == {"input_ids": [8, 9, 10, 11], "id": 7}  # 13 = 8 + 4 + 1
    with pytest.raises(IndexError, match="fewer pieces"):
        s.pieces([[1, 2, 3]])[5]


def test_collate_stacks_dense_blocks_and_refuses_unequal_lengths():
    from padless.torch import collate_for

    pytest.importorskip("torch")
    s = spec()
    sampler = PlanSampler(LENGTHS, s, seed=0)
    docs = [list(range(int(n))) for n in LENGTHS]
    ds, collate = sampler.pieces(docs), collate_for(sampler, pad_id=0)
    assert padless.torch.collate_for(s, pad_id=0).equal_lengths
    batch = next(iter(sampler))
    out = collate([ds[c] for c in batch])
    assert out["input_ids"].shape == (len(batch), s.max_length)  # natural: longest first
    assert bool(out["attention_mask"].all())
    with pytest.raises(ValueError, match="pieces of one length"):
        collate([[1, 2], [3]])


# ------------------------------------------------------------------ curricula
def buckets_of(plan) -> np.ndarray:
    return np.log2(plan.piece_lengths[plan.offsets[:-1]]).astype(int)


def test_natural_is_shuffled_with_a_full_longest_batch_first():
    s = spec()
    for seed in range(3):
        plan = s.plan(LENGTHS, seed=seed)
        b = buckets_of(plan)
        assert b[0] == b.max() and plan.sizes[0] == s.tokens_per_batch // s.max_length
        assert np.any(np.diff(b) < 0)  # not sorted
    assert s.plan(LENGTHS, seed=0) != s.plan(LENGTHS, seed=0, epoch=1)
    assert s.plan(LENGTHS, seed=5, epoch=3) == s.plan(LENGTHS, seed=5, epoch=3)


def test_short_to_long_never_shortens():
    plan = spec(curriculum="short_to_long").plan(LENGTHS, seed=1)
    assert np.all(np.diff(buckets_of(plan)) >= 0)


def test_grow_odds_are_olmo_cores():
    for n in range(1, 7):
        for i in range(n):
            start = n - i
            e = [start + j if start + j <= n else start - ((start + j) % n) for j in range(n)]
            assert grow_odds("grow_linear", n)[i].tolist() == e
            assert grow_odds("grow_p2", n)[i].tolist() == [2 ** (x - 1) for x in e]


@pytest.mark.parametrize("kind", ["grow_p2", "grow_linear"])
def test_grow_cycles_hold_their_share_and_grow_short_to_long(kind):
    sizes_per_bucket = [90, 61, 40, 33]
    bucket_of = np.repeat(np.arange(4), sizes_per_bucket)
    cycles = 3
    order = curriculum_order(
        kind, bucket_of, np.ones_like(bucket_of), cycles, np.random.default_rng(0)
    )
    assert sorted(order.tolist()) == list(range(bucket_of.size)) and bucket_of[order[0]] == 3
    per_cycle = np.array([_split_counts(n, cycles) for n in sizes_per_bucket])  # (bucket, cycle)
    bounds = np.concatenate([[0], np.cumsum(per_cycle.sum(axis=0))])
    for c in range(cycles):
        part = bucket_of[order[bounds[c] : bounds[c + 1]]].copy()
        if c == 0:  # undo the swap of the longest batch to the front for the counts' sake
            part = bucket_of[np.sort(order[bounds[0] : bounds[1]])]
        assert np.bincount(part, minlength=4).tolist() == per_cycle[:, c].tolist()
        where = np.arange(part.size)
        mean_at = [where[part == b].mean() for b in range(4)]
        assert mean_at[0] < mean_at[-1] == max(mean_at)  # short early, the longest last
    # the odds' centre of mass moves to later sub-cycles bucket by bucket
    odds = grow_odds(kind, 6)
    centre = (odds * np.arange(6)).sum(axis=1) / odds.sum(axis=1)
    assert np.all(np.diff(centre) > 0)


def test_allot_sums_exactly_and_split_counts_match_olmo():
    for total in range(0, 40):
        for odds in ([1], [4, 2, 1], [1, 2, 4, 8], [3, 3]):
            got = _allot(total, np.array(odds))
            assert got.sum() == total and np.all(
                np.abs(got - total * np.array(odds) / sum(odds)) < 1
            )
    assert _split_counts(10, 4).tolist() == [3, 3, 2, 2]


# ------------------------------------------------------------------ sampler, errors
def test_sampler_keeps_the_curriculum_and_resumes_across_world_sizes():
    s = spec(curriculum="short_to_long")
    plan, order = PlanSampler(LENGTHS, s, seed=1).epoch_plan(0)
    assert order.tolist() == list(range(len(plan)))
    two = [PlanSampler(LENGTHS, s, seed=1, world_size=2, rank=r) for r in range(2)]
    first = [next(iter(x)) for x in two]
    state = json.loads(json.dumps(two[0].state_dict()))
    one = PlanSampler(LENGTHS, s, seed=1)
    one.load_state_dict(state)
    rest = list(one)
    values = PlanSampler(LENGTHS, s, seed=1).planner.values(plan)
    every = [values[plan.offsets[b] : plan.offsets[b + 1]].tolist() for b in range(len(plan))]
    assert first + rest == every


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"max_length": 300}, "max_length must be a power of two"),
        ({"min_length": 0}, "min_length must be a positive int"),
        ({"min_length": 256}, "min_length must be <= max_length=128"),
        ({"tokens_per_batch": 600}, "tokens_per_batch must be a multiple of max_length=128"),
        ({"curriculum": "grow"}, "curriculum must be one of"),
        ({"cycles": 3}, "cycles applies to the grow_p2 and grow_linear"),
        ({"cycles": 0, "curriculum": "grow_p2"}, "cycles must be a positive int"),
        ({"leftovers": "merge"}, "leftovers must be one of"),
        ({"max_length": 2**31}, "max_length must be <= 2\\*\\*30"),
    ],
)
def test_errors_name_the_parameter(kw, match):
    with pytest.raises(ValueError, match=match):
        spec(**kw)


def test_refusals_of_forms_it_lacks():
    with pytest.raises(ValueError, match="balance must be False"):
        PlanSampler(LENGTHS, spec(), balance=True)
    with pytest.raises(ValueError, match="window must be None with Decomposition"):
        PlanSampler(LENGTHS, spec(), window=100)
    with pytest.raises(ValueError, match="lengths must be 1-D"):
        spec().plan(np.stack([LENGTHS, LENGTHS], axis=1))
    with pytest.raises(ValueError, match="no stream form|stream"):
        padless.StreamBatcher([[1, 2]], spec(), buffer=4)


def test_plan_saves_and_loads_as_a_piece_plan(tmp_path):
    plan = spec().plan(LENGTHS, seed=3)
    plan.save(tmp_path / "p.npz", spec=spec())
    again = padless.BatchPlan.load(tmp_path / "p.npz")
    assert isinstance(again, padless.PiecePlan) and again == plan
    assert again.info["spec"]["strategy"] == "decomposition"
