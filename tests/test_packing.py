"""Packing: the best-fit kernel, plan_packing, PackedPlan, PieceDataset and PackingSampler."""

import hashlib
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from padless import _kernels as K
from padless import builtin_corpus
from padless.core.plan import PackedPlan
from padless.planners._order import length_order
from padless.planners.packing import PieceDataset, next_fit_rows, piece_of
from padless.sampling.shortcuts import PackingSampler, plan_packing

# capacities that are powers of two, one off them, and 8192·n + 1 (trl #3887)
EDGE_CAPACITIES = [1, 2, 3, 63, 64, 65, 127, 128, 129, 4095, 4096, 4097, 8193, 16385, 24577]


def sizes_for(capacity, draw_fracs):
    """Sizes in [0, capacity] spread over the whole range, from fractions in [0, 1]."""
    return np.array([round(f * capacity) for f in draw_fracs], dtype=np.int64)


def check_plan(plan, lengths, capacity, max_per_row=None, rows_per_batch=1):
    """Invariants every packing plan must satisfy; returns per-entry piece lengths."""
    sizes = lengths if lengths.ndim == 1 else lengths.max(axis=1)
    pieces = plan.piece_stop - plan.piece_start
    assert np.all(pieces >= 0)
    assert np.all(plan.piece_stop <= sizes[plan.indices])
    # rows within capacity and max_per_row, entries longest first
    for r in range(plan.num_rows):
        lo, hi = plan.rows.offsets[r], plan.rows.offsets[r + 1]
        assert hi > lo
        assert pieces[lo:hi].sum() <= capacity
        if max_per_row is not None:
            assert hi - lo <= max_per_row
        assert np.all(np.diff(pieces[lo:hi]) <= 0)
    # batches: groups of rows_per_batch rows (the last may hold fewer), indices = rows joined
    counts = np.diff(plan.row_offsets)
    assert np.all(counts[:-1] == rows_per_batch) if counts.size else True
    assert counts.size == 0 or 1 <= counts[-1] <= rows_per_batch
    assert np.array_equal(plan.offsets, plan.rows.offsets[plan.row_offsets])
    # the collate's next-fit cut gives back the planned rows of every batch
    for b in range(len(plan)):
        lo, hi = plan.offsets[b], plan.offsets[b + 1]
        rebuilt = next_fit_rows(pieces[lo:hi], capacity=capacity, max_per_row=max_per_row)
        planned = np.repeat(
            np.arange(counts[b]),
            np.diff(plan.rows.offsets[plan.row_offsets[b] : plan.row_offsets[b + 1] + 1]),
        )
        assert np.array_equal(rebuilt, planned)
    # figures
    assert plan.info["rows"] == plan.num_rows
    assert plan.info["real_tokens"] == int(pieces.sum())
    assert plan.efficiency == pytest.approx(plan.info["efficiency"])
    return pieces


def check_every_token_once(plan, sizes, capacity, skipped=()):
    """Each kept sequence is covered exactly once by its pieces, cut at multiples of capacity."""
    covered = {}
    for i, a, b in zip(
        plan.indices.tolist(), plan.piece_start.tolist(), plan.piece_stop.tolist(), strict=True
    ):
        covered.setdefault(i, []).append((a, b))
    expected = set(range(sizes.size)) - set(skipped)
    assert set(covered) == expected
    for i, ranges in covered.items():
        ranges.sort()
        assert ranges[0][0] == 0
        for (_, b0), (a1, _) in zip(ranges[:-1], ranges[1:], strict=True):
            assert b0 == a1  # contiguous, no overlap
        assert all(a % capacity == 0 for a, _ in ranges)
        assert ranges[-1][1] == min(int(sizes[i]), capacity) or ranges[-1][1] == sizes[i]


# ---------------------------------------------------------------------------------- kernels


@given(
    st.sampled_from(EDGE_CAPACITIES) | st.integers(1, 300),
    st.lists(st.floats(0, 1), max_size=150),
    st.sampled_from([0, 1, 2, 3, 7]),
    st.booleans(),
    st.floats(0.02, 1),
)
def test_best_fit_kernel_matches_reference(capacity, fracs, max_per_row, decreasing, scale):
    sizes = np.minimum(sizes_for(capacity, fracs) * np.float64(scale), capacity).astype(np.int64)
    if decreasing:
        sizes = np.sort(sizes)[::-1].copy()
    rows_a, n_a = K.best_fit_rows(sizes, capacity, max_per_row)
    rows_b, n_b = K.best_fit_rows_reference(sizes, capacity, max_per_row)
    assert n_a == n_b
    assert np.array_equal(rows_a, rows_b)
    # rows numbered in opening order, none over capacity or over the cap
    if sizes.size:
        assert np.array_equal(np.unique(rows_a), np.arange(n_a))
        top = np.maximum.accumulate(rows_a)
        assert top[0] == 0 and np.all(np.diff(top) <= 1)
        used = np.bincount(rows_a, weights=sizes, minlength=n_a)
        assert np.all(used <= capacity)
        if max_per_row:
            assert np.bincount(rows_a).max() <= max_per_row


@pytest.mark.parametrize("capacity", EDGE_CAPACITIES + [2**20, 2**20 + 1, 8192 * 7 + 1])
def test_best_fit_kernel_at_edge_capacities(capacity):
    rs = np.random.default_rng(capacity)
    # sizes right at the bit-word borders of the remaining-space tree, and around capacity / 2
    picks = {0, 1, capacity, capacity - 1, capacity // 2, capacity // 2 + 1, capacity // 64}
    picks |= {min(capacity, 64 * k + d) for k in (1, 2, 64) for d in (-1, 0, 1) if 64 * k + d >= 0}
    base = np.array(sorted(picks), dtype=np.int64)
    sizes = np.concatenate([base, rs.integers(0, capacity + 1, 200), rs.integers(0, 3, 50)])
    sizes = np.minimum(sizes, capacity)
    sizes = np.sort(sizes)[::-1].copy()
    for cap in (0, 3):
        rows_a, n_a = K.best_fit_rows(sizes, capacity, cap)
        rows_b, n_b = K.best_fit_rows_reference(sizes, capacity, cap)
        assert n_a == n_b and np.array_equal(rows_a, rows_b)
        assert np.all(np.bincount(rows_a, weights=sizes) <= capacity)


def test_best_fit_is_best_fit():
    # the 4 fits the rows left with 5 and 4 spaces: it takes the tighter (second) one, where
    # first fit would take the first
    sizes = np.array([5, 6, 4, 4], dtype=np.int64)
    rows, n = K.best_fit_rows(sizes, 10, 0)
    assert rows.tolist() == [0, 1, 1, 0] and n == 2
    assert K.best_fit_rows(np.array([4, 5, 5]), 10, 0)[0].tolist() == [0, 0, 1]
    # among equal remaining spaces, the row that reached it last
    sizes = np.array([7, 7, 3, 3], dtype=np.int64)
    assert K.best_fit_rows(sizes, 10, 0)[0].tolist() == [0, 1, 1, 0]


@given(
    arrays(np.int64, st.integers(0, 120), elements=st.integers(0, 9)),
    st.integers(0, 2**32),
)
def test_scatter_rows_matches_reference(row_of, key):
    num_rows = int(row_of.max()) + 1 if row_of.size else 0
    rank = np.random.default_rng(key).permutation(num_rows).astype(np.int64)
    values = np.arange(row_of.size, dtype=np.int64) * 3
    sizes = np.arange(row_of.size, dtype=np.int64)[::-1].copy()
    a = K.scatter_rows(row_of, rank, values, sizes)
    b = K.scatter_rows_reference(row_of, rank, values, sizes)
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x, y)


# ---------------------------------------------------------------------------------- planner

lengths_1d = arrays(np.int64, st.integers(0, 200), elements=st.integers(0, 70))


@given(
    lengths_1d,
    st.sampled_from([70, 71, 64, 65, 127, 128, 129, 200]),
    st.sampled_from([None, 1, 2, 3, 5]),
    st.integers(1, 4),
    st.integers(0, 3),
    st.integers(0, 3),
)
def test_plan_invariants(lengths, capacity, max_per_row, rows_per_batch, seed, epoch):
    lengths = np.minimum(lengths, capacity)
    plan = plan_packing(
        lengths,
        capacity=capacity,
        max_per_row=max_per_row,
        rows_per_batch=rows_per_batch,
        seed=seed,
        epoch=epoch,
    )
    # every index exactly once, whole
    assert np.array_equal(np.sort(plan.indices), np.arange(lengths.size))
    assert np.all(plan.piece_start == 0) and np.array_equal(plan.piece_stop, lengths[plan.indices])
    assert plan.skipped.size == 0
    check_plan(plan, lengths, capacity, max_per_row, rows_per_batch)
    assert len(plan) == -(-plan.num_rows // rows_per_batch)


@given(
    arrays(np.int64, st.integers(0, 120), elements=st.integers(0, 300)),
    st.sampled_from([1, 2, 3, 31, 32, 33, 64, 100]),
    st.sampled_from([None, 1, 4]),
    st.integers(1, 3),
    st.integers(0, 5),
)
def test_split_covers_every_piece_once(lengths, capacity, max_per_row, rows_per_batch, seed):
    plan = plan_packing(
        lengths,
        capacity=capacity,
        max_per_row=max_per_row,
        rows_per_batch=rows_per_batch,
        oversize="split",
        seed=seed,
    )
    pieces = check_plan(plan, lengths, capacity, max_per_row, rows_per_batch)
    check_every_token_once(plan, lengths, capacity)
    assert pieces.sum() == lengths.sum()
    long = lengths > capacity
    assert plan.info["split"] == int(long.sum())
    assert plan.info["pieces"] == int((-(-lengths[long] // capacity)).sum())
    assert plan.info["tokens_lost"] == 0
    # codes decode to (index, piece) with the piece starting at piece · capacity
    decoded = [piece_of(c, lengths.size) for c in plan.codes.tolist()] if lengths.size else []
    assert [i for i, _ in decoded] == plan.indices.tolist()
    assert [k * capacity for _, k in decoded] == plan.piece_start.tolist()


@given(
    arrays(np.int64, st.integers(0, 120), elements=st.integers(0, 300)),
    st.sampled_from([1, 7, 64, 100]),
    st.sampled_from(["truncate", "drop"]),
)
def test_truncate_and_drop_report_what_is_lost(lengths, capacity, oversize):
    plan = plan_packing(lengths, capacity=capacity, oversize=oversize)
    check_plan(plan, lengths, capacity)
    long = np.flatnonzero(lengths > capacity)
    if oversize == "truncate":
        assert np.array_equal(np.sort(plan.indices), np.arange(lengths.size))
        assert np.array_equal(plan.piece_stop, np.minimum(lengths, capacity)[plan.indices])
        assert plan.info["truncated"] == long.size
        assert plan.info["tokens_lost"] == int((lengths[long] - capacity).sum())
    else:
        assert np.array_equal(plan.skipped, long)
        assert np.array_equal(np.sort(plan.indices), np.setdiff1d(np.arange(lengths.size), long))
        assert plan.info["dropped"] == long.size
        assert plan.info["tokens_lost"] == int(lengths[long].sum())
    assert plan.info["oversize_count"] == long.size
    assert plan.real_tokens == int(np.minimum(lengths, capacity).sum()) - (
        0 if oversize == "truncate" else long.size * capacity
    )


@given(
    lengths_1d, st.sampled_from([70, 64, 65, 129]), st.sampled_from([None, 2]), st.integers(0, 9)
)
def test_rows_are_those_of_the_reference_kernel(lengths, capacity, max_per_row, seed):
    """The planner places items exactly as the plain reference would, in its own walk order."""
    lengths = np.minimum(lengths, capacity)
    plan = plan_packing(lengths, capacity=capacity, max_per_row=max_per_row, seed=seed, epoch=2)
    order, _ = length_order(lengths, seed, 2)
    walk = order[::-1]
    row_of, num_rows = K.best_fit_rows_reference(lengths[walk], capacity, max_per_row or 0)
    expected = Counter(tuple(walk[row_of == r].tolist()) for r in range(num_rows))
    assert Counter(tuple(r.tolist()) for r in plan.rows) == expected


@pytest.mark.parametrize("capacity", EDGE_CAPACITIES[3:] + [8192 * 2 + 1, 8192 * 4 + 1])
def test_edge_capacities_on_lengths_around_them(capacity):
    rs = np.random.default_rng(capacity)
    lengths = np.concatenate(
        [
            [capacity, capacity - 1, 1, capacity // 2, capacity // 2 + 1, capacity // 2 - 1],
            rs.integers(1, capacity + 1, 300),
            rs.integers(1, 40, 300),
            [0, 0],
        ]
    ).astype(np.int64)
    for max_per_row in (None, 4):
        plan = plan_packing(lengths, capacity=capacity, max_per_row=max_per_row, rows_per_batch=3)
        assert np.array_equal(np.sort(plan.indices), np.arange(lengths.size))
        check_plan(plan, lengths, capacity, max_per_row, 3)
    split = plan_packing(lengths * 3, capacity=capacity, oversize="split")
    check_every_token_once(split, lengths * 3, capacity)


def test_empty_one_and_zero_length():
    empty = plan_packing([], capacity=8)
    assert (len(empty), empty.num_rows, empty.efficiency, empty.indices.size) == (0, 0, 1.0, 0)
    one = plan_packing([8], capacity=8)
    assert [r.tolist() for r in one.rows] == [[0]] and one.efficiency == 1.0
    zeros = plan_packing([0, 0, 0], capacity=4)
    assert [sorted(r.tolist()) for r in zeros.rows] == [[0, 1, 2]] and zeros.efficiency == 0.0
    capped = plan_packing([0, 0, 0], capacity=4, max_per_row=2)
    assert capped.num_rows == 2
    # zero-length sequences fill the fullest row, even a full one
    plan = plan_packing([4, 2, 0], capacity=4)
    assert sorted(r.tolist() for r in plan.rows) == [[0, 2], [1]]


def test_one_per_row_and_two_fields():
    plan = plan_packing([3, 1, 2], capacity=8, max_per_row=1)
    assert plan.num_rows == 3 and all(r.size == 1 for r in plan.rows)
    pairs = np.array([[3, 5], [4, 1], [2, 2]])  # sizes: max over fields = 5, 4, 2
    plan = plan_packing(pairs, capacity=7)
    check_plan(plan, pairs, 7)
    assert sorted(sorted(r.tolist()) for r in plan.rows) == [[0, 2], [1]]


def test_oversize_error_names_index_and_length():
    with pytest.raises(ValueError, match=r"index 2 has length 9, which exceeds capacity=8"):
        plan_packing([3, 8, 9, 10], capacity=8)
    with pytest.raises(ValueError, match=r"index 2 has length 9.*capacity=8"):
        PackingSampler([3, 8, 9, 10], capacity=8)


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        ({"capacity": 0}, ValueError, "capacity must be a positive int, got 0"),
        ({"capacity": -4}, ValueError, "capacity must be a positive int, got -4"),
        ({"capacity": 8.0}, TypeError, "capacity must be an int, got float"),
        ({"capacity": True}, TypeError, "capacity must be an int, got bool"),
        ({"capacity": None}, TypeError, "capacity must be an int, got None"),
        ({"capacity": 2**28 + 1}, ValueError, "capacity must be <= 268435456.*got 268435457"),
        ({"capacity": 8, "max_per_row": 0}, ValueError, "max_per_row must be a positive int"),
        ({"capacity": 8, "rows_per_batch": 0}, ValueError, "rows_per_batch must be a positive"),
        ({"capacity": 8, "oversize": "discard"}, ValueError, "oversize must be one of 'error'"),
        ({"capacity": 8, "seed": -1}, ValueError, "seed must be a non-negative int, got -1"),
        ({"capacity": 8, "epoch": 1.5}, TypeError, "epoch must be an int"),
    ],
)
def test_bad_arguments(kwargs, exc, message):
    with pytest.raises(exc, match=message):
        plan_packing([1, 2, 3], **kwargs)
    if "epoch" not in kwargs:
        with pytest.raises(exc, match=message):
            PackingSampler([1, 2, 3], **kwargs)


def test_bad_lengths():
    with pytest.raises(ValueError, match=r"whole numbers in \[0, 2\*\*31\)"):
        plan_packing([3, -1], capacity=8)
    with pytest.raises(TypeError, match="integers"):
        plan_packing([True, False], capacity=8)


# ---------------------------------------------------------------------------------- determinism


def _digest(plan):
    h = hashlib.sha256()
    for arr in (plan.indices, plan.rows.offsets, plan.row_offsets, plan.piece_start):
        h.update(arr.tobytes())
    return h.hexdigest()[:16]


def test_small_plan_is_pinned():
    plan = plan_packing([6, 2, 5, 3, 7, 1, 4, 4, 8, 2], capacity=8, rows_per_batch=2, seed=3)
    assert [[r.tolist() for r in plan.batch_rows(b)] for b in range(len(plan))] == GOLDEN_SMALL


def test_builtin_corpus_plan_is_pinned():
    plan = plan_packing(builtin_corpus("en"), capacity=1024, rows_per_batch=4, seed=1, epoch=2)
    assert (plan.num_rows, len(plan), _digest(plan)) == GOLDEN_BIBLE


def test_split_plan_is_pinned():
    lengths = np.random.default_rng(0).lognormal(4.0, 1.0, 3000).astype(np.int64) + 1
    plan = plan_packing(lengths, capacity=257, max_per_row=8, oversize="split", seed=5)
    assert (plan.num_rows, plan.info["pieces"], _digest(plan)) == GOLDEN_SPLIT


def test_same_seed_same_plan_and_epochs_change_row_order():
    lengths = builtin_corpus("en")
    a = plan_packing(lengths, capacity=512, seed=7, epoch=1)
    assert plan_packing(lengths, capacity=512, seed=7, epoch=1) == a
    b = plan_packing(lengths, capacity=512, seed=7, epoch=2)
    assert b != a
    assert not np.array_equal(a.indices[: a.offsets[20]], b.indices[: b.offsets[20]])
    # seed and epoch are never added: (1, 0) and (0, 1) differ
    c = plan_packing(lengths, capacity=512, seed=1, epoch=0)
    d = plan_packing(lengths, capacity=512, seed=0, epoch=1)
    assert c != d


def test_efficiency_on_builtin_corpus():
    lengths = builtin_corpus("en")
    for capacity in (512, 1024, 2048):
        plan = plan_packing(lengths, capacity=capacity)
        assert plan.efficiency >= 0.995, (capacity, plan.efficiency)


# ---------------------------------------------------------------------------------- PackedPlan


def test_packed_plan_save_load_eq_repr_stats(tmp_path):
    lengths = np.array([9, 3, 5, 2, 20, 1], dtype=np.int64)
    plan = plan_packing(lengths, capacity=8, rows_per_batch=2, oversize="split", seed=2)
    path = tmp_path / "plan.npz"
    plan.save(path)
    back = PackedPlan.load(path)
    assert back == plan and back.info == plan.info
    assert back != plan_packing(lengths, capacity=8, rows_per_batch=2, oversize="split", seed=3)
    assert "rows=" in repr(plan) and "capacity=8" in repr(plan)
    stats = plan.stats(lengths)
    assert stats.padded_slots == plan.num_rows * 8
    assert stats.real_tokens == int(lengths.sum())
    assert stats.padding_fraction == pytest.approx(1 - plan.efficiency)
    assert stats.sentences == plan.indices.size
    with pytest.raises(ValueError, match="6 sequences"):
        plan.stats([1, 2])
    plan.save(tmp_path / "base.npz")
    from padless.core.plan import BatchPlan

    BatchPlan([0], [0, 1]).save(tmp_path / "flat.npz")
    with pytest.raises(ValueError, match="not a padless packing plan"):
        PackedPlan.load(tmp_path / "flat.npz")
    with pytest.raises(IndexError):
        plan.batch_rows(len(plan))
    assert [r.tolist() for r in plan.batch_rows(-1)] == [
        r.tolist() for r in plan.batch_rows(len(plan) - 1)
    ]


def test_packed_plan_checks_its_arrays():
    with pytest.raises(ValueError, match="row_offsets must run from 0"):
        PackedPlan([0, 1], [0, 1, 2], [0, 1], [0, 0], [1, 1], capacity=2, num_sequences=2)
    with pytest.raises(ValueError, match="one entry per index"):
        PackedPlan([0, 1], [0, 2], [0, 1], [0], [1, 1], capacity=2, num_sequences=2)


def test_next_fit_rows_checks():
    assert next_fit_rows([], capacity=3).tolist() == []
    assert next_fit_rows([1, 1, 1], capacity=3, max_per_row=2).tolist() == [0, 0, 1]
    with pytest.raises(ValueError, match="item 1 has 4 tokens"):
        next_fit_rows([1, 4], capacity=3)
    with pytest.raises(ValueError, match="sizes must be 1-D"):
        next_fit_rows([[1]], capacity=3)


# ---------------------------------------------------------------------------------- pieces


def test_piece_dataset_slices_sequences_and_mappings():
    seqs = [list(range(10)), [7, 8], []]
    ds = PieceDataset(seqs, capacity=4)
    assert [ds[c] for c in (0, 3, 6, 1, 2)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9], [7, 8], []]
    dicts = [{"input_ids": np.arange(6), "labels": np.arange(6) + 1, "id": 3}]
    dds = PieceDataset(dicts, capacity=4, keys=("input_ids", "labels"))
    item = dds[1]
    assert item["input_ids"].tolist() == [4, 5] and item["labels"].tolist() == [5, 6]
    assert item["id"] == 3
    with pytest.raises(IndexError, match="code 9 asks for tokens from 12"):
        ds[9]
    with pytest.raises(ValueError, match="code must be a non-negative int"):
        ds[-1]
    with pytest.raises(TypeError, match="code must be an int"):
        ds[1.0]
    with pytest.raises(ValueError, match="num_sequences must equal len"):
        PieceDataset(seqs, capacity=4, num_sequences=2)
    with pytest.raises(TypeError, match="keys must be a sequence of str"):
        PieceDataset(seqs, capacity=4, keys="input_ids")
    with pytest.raises(TypeError, match="num_sequences is required"):
        PieceDataset(iter(seqs), capacity=4)
    assert len(ds) == 3


# ---------------------------------------------------------------------------------- sampler


def make(lengths, **kw):
    kw.setdefault("capacity", 64)
    return PackingSampler(lengths, **kw)


@given(
    st.integers(1, 150),
    st.integers(1, 9),
    st.booleans(),
    st.booleans(),
    st.integers(1, 3),
    st.integers(0, 3),
)
def test_ranks_equal_counts_and_coverage(n, world, drop_last, balance, rows_per_batch, epoch):
    lengths = np.random.default_rng(n).integers(0, 50, n)
    kw = {"drop_last": drop_last, "balance": balance, "rows_per_batch": rows_per_batch}
    samplers = [make(lengths, rank=r, world_size=world, **kw) for r in range(world)]
    for s in samplers:
        s.set_epoch(epoch)
    per_rank = [list(s) for s in samplers]
    assert len({len(b) for b in per_rank}) == 1 and len(per_rank[0]) == len(samplers[0])
    plan, _ = samplers[0].epoch_plan(epoch)
    planned = Counter(tuple(b.tolist()) for b in plan)
    got = Counter(tuple(b) for rank in per_rank for b in rank)
    assert sum((got - planned).values()) == samplers[0].repeated
    assert sum((planned - got).values()) == samplers[0].dropped
    if not drop_last:
        assert {i for rank in per_rank for b in rank for i in b} == set(range(n))


def test_yields_lists_of_python_ints_that_rebuild_rows():
    lengths = builtin_corpus("en")[:3000]
    s = make(lengths, capacity=256, rows_per_batch=4, max_per_row=12, seed=2)
    plan, order = s.epoch_plan(0)
    for k, batch in enumerate(s):
        assert type(batch) is list and all(type(i) is int for i in batch)
        rows = next_fit_rows(lengths[batch], capacity=256, max_per_row=12)
        b = int(order[k])
        expected = [r.tolist() for r in plan.batch_rows(b)]
        got = [np.array(batch)[rows == r].tolist() for r in range(rows.max() + 1)]
        assert got == expected


def test_split_sampler_yields_codes_and_pieces_rebuild_every_sequence():
    rs = np.random.default_rng(4)
    seqs = [rs.integers(0, 1000, int(n)).tolist() for n in rs.integers(1, 90, 60)]
    lengths = [len(x) for x in seqs]
    s = make(lengths, capacity=32, oversize="split", rows_per_batch=2, seed=1)
    ds = s.pieces(seqs)
    parts: dict[int, list[tuple[int, list[int]]]] = {}
    for batch in s:
        items = [ds[c] for c in batch]
        assert all(len(x) <= 32 for x in items)
        rows = next_fit_rows([len(x) for x in items], capacity=32)
        assert rows.max() < 2
        for c, x in zip(batch, items, strict=True):
            i, k = piece_of(c, len(seqs))
            parts.setdefault(i, []).append((k, x))
    for i, ps in parts.items():
        assert sorted(k for k, _ in ps) == list(range(len(ps)))
        assert [t for _, x in sorted(ps) for t in x] == seqs[i]
    assert set(parts) == set(range(len(seqs)))


def test_balance_uses_real_tokens():
    lengths = np.random.default_rng(5).integers(1, 300, 2000)
    s = make(lengths, capacity=512, rows_per_batch=2, balance=True, world_size=4)
    plan, _ = s.epoch_plan(0)
    costs = s.planner.costs(plan)
    assert costs.sum() == lengths.sum()
    assert costs.tolist() == [
        int(plan.piece_lengths[a:b].sum())
        for a, b in zip(plan.offsets[:-1], plan.offsets[1:], strict=True)
    ]
    stats = s.stats()
    assert stats["imbalance"] < 1.01
    assert stats["efficiency"] == plan.efficiency and stats["padded_slots"] == plan.num_rows * 512


def test_shuffle_false_and_epochs():
    lengths = np.random.default_rng(6).integers(1, 60, 300)
    fixed = make(lengths, shuffle=False)
    first = list(fixed)
    fixed.set_epoch(3)
    assert list(fixed) == first
    plan, _ = fixed.epoch_plan(0)
    assert first == [b.tolist() for b in plan]
    moving = make(lengths)
    e0 = list(moving)
    moving.set_epoch(1)
    assert list(moving) != e0


def test_state_refuses_other_packing_settings():
    lengths = np.random.default_rng(4).integers(1, 60, 100)
    state = make(lengths, capacity=64).state_dict()
    for other in (make(lengths, capacity=65), make(lengths, capacity=64, max_per_row=3)):
        other.load_state_dict(state)  # a change a run may make: the epoch goes on with it
        assert other.state_dict()["changes"][0]["settings"]["spec"]["capacity"] == 64
    with pytest.raises(ValueError, match="settings differ .* shuffle"):
        make(lengths, capacity=64, shuffle=False).load_state_dict(state)


GOLDEN_SMALL = [[[8], [6, 7]], [[0, 1], [9]], [[4, 5], [2, 3]]]
GOLDEN_BIBLE = (958, 240, "4991653a2863fb4e")
GOLDEN_SPLIT = (1048, 386, "31faa78797c6ffb4")
