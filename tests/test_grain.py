"""padless.grain: the contract through real Grain (0.2.18) pipelines.

Every item once per epoch over the ranks Grain's ShardOptions name, equal steps per rank,
resume == uninterrupted (through Grain's own get_state/set_state, JSON and its Orbax
CheckpointHandler), elastic resume (a state taken at one world size restored at another,
packed and mixed), the packed element format equal to Grain's BestFit packer's, and errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

grain = pytest.importorskip("grain")

import padless  # noqa: E402
from padless import FixedShapes, MixtureSampler, Packing, TokenBudget  # noqa: E402
from padless.grain import (  # noqa: E402
    Collate,
    EpochBatches,
    PlanBatches,
    sampler,
    shard_of,
)


def docs(lengths, seed=0):
    """Token arrays of the given lengths (token k of record i is i * 1000 + k: traceable)."""
    return [np.arange(n, dtype=np.int32) + i * 1000 for i, n in enumerate(lengths)]


def shard(i, n, drop=False):
    return grain.sharding.ShardOptions(shard_index=i, shard_count=n, drop_remainder=drop)


def rank_batches(lengths, spec, world, **options):
    """Each rank's batches of one epoch, through PlanBatches (indices form)."""
    return [
        [
            b.tolist()
            for b in PlanBatches(sampler(lengths, spec, shard_options=shard(r, world), **options))
        ]
        for r in range(world)
    ]


def check_once(batches, n, repeated):
    """``batches`` (all ranks, one epoch) hold every item of ``range(n)`` once, apart from the
    tail policy's ``repeated`` whole repeated batches."""
    unique = {tuple(b) for b in batches}
    items = sorted(i for b in unique for i in b)
    assert items == list(range(n))
    assert len(batches) - len(unique) == repeated


lengths_st = st.lists(st.integers(1, 64), min_size=1, max_size=120)


@settings(max_examples=15)
@given(
    lengths=lengths_st,
    world=st.integers(1, 5),
    packed=st.booleans(),
    seed=st.integers(0, 3),
)
def test_properties_every_item_once_and_equal_steps_per_rank(lengths, world, packed, seed):
    spec = Packing(capacity=64, rows_per_batch=2) if packed else TokenBudget(max_tokens=96)
    per_rank = rank_batches(lengths, spec, world, seed=seed)
    assert len({len(r) for r in per_rank}) == 1  # equal steps per rank
    s = sampler(lengths, spec, shard_options=shard(0, world), seed=seed)
    list(s)
    check_once([b for r in per_rank for b in r], len(lengths), s.repeated)


def test_drop_remainder_maps_to_drop_last():
    lengths = [5] * 7
    s = sampler(lengths, TokenBudget(max_tokens=5), shard_options=shard(1, 3, drop=True))
    assert shard_of(shard(1, 3, drop=True)) == (1, 3, True)
    assert s.drop_last and len(s) == 2  # 7 batches over 3 ranks: the last step dropped
    per_rank = rank_batches(lengths, TokenBudget(max_tokens=5), 3)
    assert [len(r) for r in per_rank] == [3, 3, 3]  # completed with repeats instead


def collated_run(it, count=None):
    out = []
    for element in it:
        out.append({k: v.copy() for k, v in element.items()})
        if count is not None and len(out) == count:
            break
    return out


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k])


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.lognormal(4.0, 0.8, 400).astype(np.int64) + 1, 256)
    return lengths, docs(lengths)


def test_resume_equals_uninterrupted_across_epochs(corpus):
    lengths, records = corpus
    spec = Packing(capacity=256, rows_per_batch=4)
    ds = PlanBatches(sampler(lengths, spec, seed=3), records, num_epochs=2)
    full = collated_run(iter(ds))
    per_epoch = len(sampler(lengths, spec, seed=3))
    assert len(full) > per_epoch  # two epochs
    for cut in (0, 5, per_epoch - 1, per_epoch, per_epoch + 3, len(full)):
        it = iter(ds)
        head = collated_run(it, cut) if cut else []
        state = json.loads(json.dumps(it.get_state()))  # JSON, as Grain's checkpoints hold it
        fresh = iter(ds)
        fresh.set_state(state)
        same(head + collated_run(fresh), full)


def test_packed_elements_are_grain_packing_output(corpus):
    lengths, records = corpus
    spec = Packing(capacity=256, rows_per_batch=4)
    for element, batch in zip(
        PlanBatches(sampler(lengths, spec, seed=1), records),
        PlanBatches(sampler(lengths, spec, seed=1)),
        strict=True,
    ):
        assert element["inputs"].shape == (4, 256) and element["inputs"].dtype == np.int32
        seg, pos = element["inputs_segment_ids"], element["inputs_positions"]
        assert seg.dtype == np.int32 and pos.dtype == np.int32
        placed = []
        for row in range(4):
            for s in range(1, int(seg[row].max(initial=0)) + 1):
                at = np.flatnonzero(seg[row] == s)
                tokens = element["inputs"][row, at]
                i = int(tokens[0]) // 1000
                assert at.tolist() == list(range(at[0], at[0] + lengths[i]))  # contiguous
                np.testing.assert_array_equal(tokens, records[i])
                np.testing.assert_array_equal(pos[row, at], np.arange(lengths[i]))
                placed.append(i)
        assert sorted(placed) == sorted(batch.tolist())
        assert (element["inputs"][seg == 0] == 0).all() and (pos[seg == 0] == 0).all()


def test_a_row_is_what_grain_best_fit_packs():
    # documents 5 and 3 fill one row of 8 in both packers, in that order
    records = [np.array([1, 2, 3, 4, 5], np.int32), np.array([6, 7, 8], np.int32)]
    ours = next(iter(PlanBatches(sampler([5, 3], Packing(capacity=8), shuffle=False), records)))
    source = grain.MapDataset.source(records).map(lambda x: {"inputs": x}).to_iter_dataset()
    packed = grain.experimental.BestFitPackIterDataset(
        source, length_struct={"inputs": 8}, num_packing_bins=2, shuffle_bins=False
    ).batch(1)
    theirs = next(iter(packed))
    assert ours.keys() == theirs.keys()
    for k in ours:
        assert ours[k].dtype == theirs[k].dtype, k
        np.testing.assert_array_equal(ours[k], theirs[k])


def test_fixed_shapes_elements_take_a_shape_of_the_set(corpus):
    lengths, records = corpus
    shapes = padless.shape_set(lengths, 3, max_tokens=1024)
    spec = FixedShapes(shapes=shapes)
    seen = set()
    for element in PlanBatches(sampler(lengths, spec, seed=0), records):
        shape = element["inputs"].shape
        assert shape in {tuple(s) for s in spec.shapes}
        seg = element["inputs_segment_ids"]
        assert set(np.unique(seg).tolist()) <= {0, 1}
        seen.add(shape)
    assert len(seen) >= 2


@pytest.mark.parametrize("balance", [False, True])
def test_elastic_resume_every_item_once(corpus, balance):
    lengths, _ = corpus
    spec = Packing(capacity=256, rows_per_batch=2)
    whole = [b.tolist() for b in PlanBatches(sampler(lengths, spec, seed=5, balance=balance))]
    for a, b, steps in ((4, 3, 7), (2, 5, 11), (3, 1, 0)):
        its = [
            iter(
                PlanBatches(
                    sampler(lengths, spec, seed=5, balance=balance, shard_options=shard(r, a))
                )
            )
            for r in range(a)
        ]
        before = [next(it).tolist() for _ in range(steps) for it in its]
        states = [it.get_state() for it in its]
        assert len({json.dumps(s, sort_keys=True) for s in states}) == 1  # global positions
        after = []
        for r in range(b):
            it = iter(
                PlanBatches(
                    sampler(lengths, spec, seed=5, balance=balance, shard_options=shard(r, b))
                )
            )
            it.set_state(json.loads(json.dumps(states[0])))
            after.append([x.tolist() for x in it])
        assert len({len(x) for x in after}) == 1
        delivered = before + [x for r in after for x in r]
        check_once(delivered, len(lengths), len(delivered) - len({tuple(x) for x in delivered}))
        assert {tuple(x) for x in delivered} == {tuple(x) for x in whole}


def mixture(world=1, rank=0):
    a = padless.PackingSampler([30, 20, 50, 10, 40, 25] * 5, capacity=64, rows_per_batch=2)
    b = padless.PackingSampler([60, 5, 7, 33] * 6, capacity=64, rows_per_batch=2)
    return MixtureSampler({"a": a, "b": b}, seed=2, rank=rank, world_size=world)


def test_mixture_resumes_exactly_and_elastically():
    la, lb = [30, 20, 50, 10, 40, 25] * 5, [60, 5, 7, 33] * 6
    records = {"a": docs(la), "b": [x + 500 for x in docs(lb)]}
    ds = PlanBatches(mixture(), records, num_epochs=2)
    full = collated_run(iter(ds))
    it = iter(ds)
    head = collated_run(it, 9)
    again = iter(ds)
    again.set_state(json.loads(json.dumps(it.get_state())))
    same(head + collated_run(again), full)
    # elastic: 2 ranks for 3 steps, then 3 ranks: the epoch's batches as at one rank
    whole = [b.tolist() for b in PlanBatches(mixture())]
    its = [iter(PlanBatches(mixture(2, r))) for r in range(2)]
    before = [next(i).tolist() for _ in range(3) for i in its]
    state = its[0].get_state()
    after = []
    for r in range(3):
        i = iter(PlanBatches(mixture(3, r)))
        i.set_state(state)
        after.append([x.tolist() for x in i])
    assert len({len(x) for x in after}) == 1
    assert {tuple(x) for x in before + [y for z in after for y in z]} == {tuple(x) for x in whole}


def test_epoch_batches_is_a_map_dataset_of_one_epoch(corpus):
    lengths, records = corpus
    spec = Packing(capacity=256, rows_per_batch=2)
    for r in range(3):
        s = sampler(lengths, spec, seed=4, shard_options=shard(r, 3))
        ds = EpochBatches(s, records)
        assert len(ds) == len(s)
        same([ds[i] for i in range(len(ds))], collated_run(iter(PlanBatches(s, records))))
        same([ds[len(ds)]], [ds[0]])  # wraps, as Grain's sources do
    s = sampler(lengths, spec, seed=4)
    one = EpochBatches(s, epoch=1)
    s.set_epoch(1)
    assert [one[i].tolist() for i in range(len(one))] == [b for b in s]
    # Grain's own iterator over it resumes by index
    it = iter(EpochBatches(s, records).to_iter_dataset())
    head = collated_run(it, 4)
    state = it.get_state()
    fresh = iter(EpochBatches(s, records).to_iter_dataset())
    fresh.set_state(state)
    same(head + collated_run(fresh), collated_run(iter(EpochBatches(s, records).to_iter_dataset())))


def test_grain_checkpoint_handler_and_downstream_ops(tmp_path, corpus):
    from etils import epath

    lengths, records = corpus
    spec = Packing(capacity=256, rows_per_batch=2)
    ds = PlanBatches(sampler(lengths, spec, seed=9), records).map(lambda e: e["inputs"].sum())
    full = list(iter(ds))
    it = iter(ds)
    head = [next(it) for _ in range(6)]
    handler = grain.checkpoint.CheckpointHandler()
    handler.save(epath.Path(tmp_path), item=it)
    fresh = handler.restore(epath.Path(tmp_path), item=iter(ds))
    assert head + list(fresh) == full
    # behind Grain's thread prefetch, the state is that of the last element handed out
    pre = grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=3)
    it = iter(pre)
    try:
        head = [next(it) for _ in range(5)]
        state = it.get_state()
    finally:
        it.close()
    fresh = iter(pre)
    try:
        fresh.set_state(state)
        assert head + list(fresh) == full
    finally:
        fresh.close()


def test_collate_refuses_records_not_planned(corpus):
    lengths, records = corpus
    spec = Packing(capacity=256)
    wrong = list(records)
    wrong[0] = wrong[0][:-1] if lengths[0] > 1 else np.zeros(2, np.int32)
    with pytest.raises(ValueError, match="record 0 has"):
        list(PlanBatches(sampler(lengths, spec, shuffle=False), wrong))
    with pytest.raises(ValueError, match="records holds 3 records, the lengths 400"):
        PlanBatches(sampler(lengths, spec), records[:3])
    with pytest.raises(TypeError, match="pass shard_options or rank, world_size"):
        sampler(lengths, spec, shard_options=shard(0, 2), rank=1, world_size=2)
    with pytest.raises(TypeError, match="shard_options must be a grain.sharding.ShardOptions"):
        sampler(lengths, spec, shard_options=(0, 2))
    with pytest.raises(ValueError, match="records must name the mixture's corpora"):
        PlanBatches(mixture(), {"b": [], "a": []})
    with pytest.raises(ValueError, match="num_epochs"):
        PlanBatches(sampler(lengths, spec), num_epochs=0)
    with pytest.raises(ValueError, match="one length per record"):
        Collate(spec, lengths=np.ones((3, 2)))
    pairs = np.stack([lengths, lengths], axis=1)
    with pytest.raises(ValueError, match="one length per record; these lengths have shape"):
        PlanBatches(sampler(pairs, TokenBudget(max_tokens=512)), records)
    with pytest.raises(ValueError, match="state must be a padless.grain iterator state"):
        iter(PlanBatches(sampler(lengths, spec))).set_state({"next_index": 3})


def test_mapping_records_pack_every_key_and_split_pieces():
    lengths = [6, 3, 12]
    records = [
        {"input_ids": np.arange(n) + 10 * i, "labels": np.arange(n) + 10 * i + 1}
        for i, n in enumerate(lengths)
    ]
    spec = Packing(capacity=8, oversize="split")
    out = list(
        PlanBatches(
            sampler(lengths, spec, seed=0),
            records,
            keys=("input_ids", "labels"),
            pad={"input_ids": 0, "labels": -100},
        )
    )
    tokens = sorted(
        int(t) for e in out for t in e["input_ids"][e["input_ids_segment_ids"] > 0].ravel()
    )
    assert tokens == sorted(int(t) for r in records for t in r["input_ids"])
    for e in out:
        pad = e["labels_segment_ids"] == 0
        assert (e["labels"][pad] == -100).all()
        np.testing.assert_array_equal(e["labels"][~pad], e["input_ids"][~pad] + 1)


def test_a_capacity_warm_up_is_refused_when_built():
    spec = Packing(capacity=padless.Schedule.piecewise([0, 5], [4, 8]))
    with pytest.raises(ValueError, match="yields other codes"):
        PlanBatches(sampler([3, 5, 2], spec), docs([3, 5, 2]))


def test_records_as_a_grain_map_dataset(corpus):
    lengths, records = corpus
    spec = Packing(capacity=256, rows_per_batch=2)
    source = grain.MapDataset.source(records).map(lambda x: x.copy())
    same(
        collated_run(iter(PlanBatches(sampler(lengths, spec, seed=2), source))),
        collated_run(iter(PlanBatches(sampler(lengths, spec, seed=2), records))),
    )


def test_epoch_batches_split_over_grain_worker_processes(corpus):
    """mp_prefetch gives each worker process a slice of EpochBatches (set_slice): the batches
    come back whole, once each, in order."""
    from absl import flags

    if not flags.FLAGS.is_parsed():  # Grain's worker processes read its absl flags
        flags.FLAGS(["pytest"], known_only=True)
    lengths, records = corpus
    ds = EpochBatches(sampler(lengths, Packing(capacity=256, rows_per_batch=4), seed=0), records)
    want = collated_run(iter(ds.to_iter_dataset()))
    it = iter(ds.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    try:
        got = collated_run(it)
    finally:
        it.close()
    same(got, want)
    sliced = EpochBatches(sampler(lengths, Packing(capacity=256, rows_per_batch=4), seed=0))
    sliced.set_slice(slice(1, None, 3))
    assert [sliced[i].tolist() for i in range(len(sliced))] == [
        b.tolist()
        for b in list(
            EpochBatches(sampler(lengths, Packing(capacity=256, rows_per_batch=4), seed=0))
        )[1::3]
    ]


def test_a_skip_in_the_sampler_leaves_exactly_its_batches_out_of_the_grain_epoch():
    lengths = [3, 4, 5, 6, 7, 2, 3, 9] * 10
    full = [b.tolist() for b in PlanBatches(padless.TokenBudgetSampler(lengths, max_tokens=10))]
    skipping = padless.TokenBudgetSampler(lengths, max_tokens=10)
    skipping.skip(steps=(3, 6))
    assert [b.tolist() for b in PlanBatches(skipping)] == full[:3] + full[6:]


def test_a_mixture_of_lm_streams_is_refused_when_the_dataset_is_built():
    streams = {name: padless.LMStream(np.arange(400), num_steps=4, batch_size=2) for name in "ab"}
    with pytest.raises(TypeError, match="mixes LM streams.*iterate the mixture"):
        PlanBatches(MixtureSampler(streams))


def test_grouped_samplers_packed_refused_padded_served():
    # Grain's collate cuts a packed batch into rows next fit by items, which may split a group
    # (as collate_packed and TokenDataset do): refused when built; padded whole groups served
    lengths = np.random.default_rng(2).integers(1, 30, 120)
    records = [list(range(1, n + 1)) for n in lengths.tolist()]
    groups = np.arange(120) // 2
    packed = padless.PlanSampler(lengths, Packing(capacity=96, rows_per_batch=2), groups=groups)
    with pytest.raises(ValueError, match=r"grain.*groups=.*collate_groups\(96"):
        PlanBatches(packed, records)
    assert len(list(PlanBatches(packed))) == len(packed)  # index batches: no rows to cut
    padded = padless.PlanSampler(lengths, TokenBudget(max_tokens=200), groups=groups)
    for element, planned in zip(PlanBatches(padded, records), padded, strict=True):
        assert set(np.bincount(groups[planned]).tolist()) <= {0, 2}  # pairs whole
        assert element["inputs"].size <= 200


def test_a_batch_of_empty_sequences_stays_within_the_budget():
    """50 empty sequences fit max_tokens=8 (rows x longest = 0); the collate gave them one
    column each, 50 slots against the budget of 8."""
    lengths = np.array([0] * 50 + [3, 4, 5])
    spec = padless.TokenBudget(max_tokens=8)
    collate = padless.grain.Collate(spec)
    sizes = []
    for batch in padless.PlanSampler(lengths, spec, shuffle=False):
        out = collate([np.ones(int(lengths[i]), np.int32) for i in batch])
        assert out["inputs"].size <= 8 and out["inputs"].shape[0] == len(batch)
        sizes.append(len(batch))
    assert max(sizes) == 50


def test_a_rank_without_batches_ends_an_endless_iteration_with_an_error():
    """num_epochs=None over a rank whose epochs hold no batch (1 document, 2 ranks, the
    remainder dropped) spun through epochs forever: a ValueError after three empty epochs."""
    shards = grain.sharding.ShardOptions(0, 2, drop_remainder=True)
    s = padless.grain.sampler([3], padless.Packing(capacity=16), seed=0, shard_options=shards)
    it = iter(padless.grain.PlanBatches(s, [np.array([5, 6, 7], np.int32)], num_epochs=None))
    with pytest.raises(ValueError, match="no batches in epochs 0..2 .* pass num_epochs"):
        next(it)


def test_records_of_two_dtypes_batch_in_the_one_that_holds_both():
    """A uint16 record beside an int32 one with ids past 65535: int32, no id wrapped (the
    first record's dtype was taken: 70000 became 4464)."""
    docs = [np.array([1, 2, 3], np.uint16), np.array([70000, 70001, 70002, 70003], np.int32)]
    for spec in (padless.Packing(capacity=8), padless.TokenBudget(max_tokens=64)):
        s = padless.grain.sampler([3, 4], spec, seed=0, shuffle=False)
        got = [b["inputs"] for b in padless.grain.PlanBatches(s, docs)]
        assert all(b.dtype == np.int32 for b in got)
        assert 70003 in np.concatenate([b.ravel() for b in got])
    with pytest.raises(ValueError, match="no integer dtype holds together"):
        padless.grain.Collate(padless.TokenBudget(max_tokens=64))(
            [np.array([1], np.uint64), np.array([2], np.int64)]
        )


def test_split_pieces_of_mapping_records_slice_every_key_by_default():
    """keys=None packs every key of a record: its split pieces slice every key too (only
    'inputs'/'input_ids' were, so {'tokens'} records failed at the first batch)."""
    toks = [np.arange(1, 21, dtype=np.int32), np.arange(101, 106, dtype=np.int32)]
    spec = padless.Packing(capacity=16, rows_per_batch=2, oversize="split")
    for records in ([{"tokens": t} for t in toks], [{"input_ids": t, "labels": t} for t in toks]):
        s = padless.grain.sampler([20, 5], spec, seed=0)
        (batch,) = list(padless.grain.PlanBatches(s, records))
        key = next(iter(records[0]))
        assert sorted(batch[key][batch[key] > 0].tolist()) == sorted(np.concatenate(toks).tolist())


def test_an_endless_iteration_resumed_at_an_epochs_end_goes_on_with_the_next():
    """The empty-epoch guard meets a resume: a state saved after an epoch's last batch gives
    one empty epoch, then the next epoch's batches, as the uninterrupted run."""
    lengths = [3, 4, 5, 6]
    docs = [np.arange(1, n + 1, dtype=np.int32) for n in lengths]

    def make():
        s = padless.grain.sampler(lengths, padless.TokenBudget(max_tokens=8), seed=0)
        return iter(padless.grain.PlanBatches(s, docs, num_epochs=None))

    whole = make()
    first = [
        next(whole) for _ in range(len(padless.PlanSampler(lengths, TokenBudget(max_tokens=8))))
    ]
    state = whole.get_state()
    after = next(whole)
    resumed = make()
    resumed.set_state(json.loads(json.dumps(state)))
    got = next(resumed)
    assert first and all(np.array_equal(got[k], after[k]) for k in after)
