"""StreamBatcher: every item exactly once, never over budget, max_wait and memory bounds,
determinism, exact resume at every batch for every spec and source kind, clear errors."""

from __future__ import annotations

import base64
import dataclasses
import json
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import padless
from padless import Buckets, ExactLength, Packing, StreamBatcher, TokenBudget, bucket_boundaries
from padless._kernels.streams import budget_round, budget_round_reference
from padless.planners._order import group_keys
from padless.streams import CHUNKS, MAX_WAIT, Piece

LENGTHS = np.minimum(np.random.default_rng(3).lognormal(2.5, 0.8, 600).astype(int) + 1, 90)
ITEMS = [(i, int(n)) for i, n in enumerate(LENGTHS)]  # (stream position, length)


def size(item):
    return item[1]


SPECS = {
    "budget": TokenBudget(max_tokens=100),
    "budget_mult": TokenBudget(max_tokens=100, max_sentences=9, multiple_of=4),
    "buckets": Buckets(num_buckets=4, max_tokens=120),
    "buckets_fixed": Buckets(boundaries=[10, 30], batch_size=5),
    "exact_merge": ExactLength(batch_size=3, leftovers="merge"),
    "exact_budget": ExactLength(max_tokens=64, oversize="drop"),
    "exact_drop": ExactLength(batch_size=4, leftovers="drop"),
    "packing_split": Packing(capacity=64, oversize="split"),
    "packing_rows": Packing(capacity=80, rows_per_batch=3, oversize="truncate"),
    "packing_drop": Packing(capacity=64, oversize="drop", max_per_row=3),
}


def entries(spec, batch):
    """The entries of a batch (rows flattened for packing)."""
    return [x for row in batch for x in row] if spec.name == "packing" else list(batch)


def key(batch):
    return json.dumps(batch, default=list)


class Stateful:
    """A stream with the ``datasets.IterableDataset`` state protocol: ``state_dict()`` is the
    position of the iteration in progress, ``load_state_dict()`` makes the next one start there.
    Counts the items it hands out (``reads``)."""

    def __init__(self, items):
        self.items = items
        self.pos = 0
        self.start = 0
        self.reads = 0
        self.epochs = []

    def set_epoch(self, epoch):
        self.epochs.append(epoch)

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.start = state["pos"]

    def __iter__(self):
        self.pos = self.start
        while self.pos < len(self.items):
            item = self.items[self.pos]
            self.pos += 1
            self.reads += 1
            yield item


# --------------------------------------------------------------------------- invariants


def check_batches(spec, batches, items, buffer):
    """Every kept item once, no batch over its limits, none wider than max_wait buffers."""
    seen = []
    for batch in batches:
        flat = entries(spec, batch)
        assert flat, "empty batch"
        lens = [x.stop - x.start if isinstance(x, Piece) else x[1] for x in flat]
        where = [(x.item if isinstance(x, Piece) else x)[0] for x in flat]
        assert max(where) - min(where) < MAX_WAIT * buffer + buffer // CHUNKS
        if spec.name == "token_budget":
            assert len(flat) * max(lens) <= spec.max_tokens
            assert spec.max_sentences is None or len(flat) <= spec.max_sentences
        elif spec.name == "buckets" and spec.max_tokens is not None:
            assert len(flat) * max(lens) <= spec.max_tokens
        elif spec.name == "buckets":
            assert len(flat) <= spec.batch_size
        elif spec.name == "packing":
            assert len(batch) <= spec.rows_per_batch
            for row in batch:
                used = [x.stop - x.start if isinstance(x, Piece) else x[1] for x in row]
                assert sum(used) <= spec.capacity
                assert spec.max_per_row is None or len(row) <= spec.max_per_row
        seen += [(x.item[0], x.piece) if isinstance(x, Piece) else (x[0], -1) for x in flat]
    assert len(seen) == len(set(seen)), "an entry came twice"
    return seen


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_item_once_within_limits(name):
    spec = SPECS[name]
    batcher = StreamBatcher(ITEMS, spec, buffer=40, length=size, seed=1)
    batches = list(batcher)
    seen = check_batches(spec, batches, ITEMS, 40)
    whole = sorted({i for i, _ in seen})
    stats = batcher.stats()
    if name != "packing_split":  # a split item's extra pieces come on top
        assert stats["peak_buffer"] <= 40
    assert stats["batches"] == len(batches)
    if name in ("packing_drop", "exact_budget"):  # longer than capacity / the budget alone
        assert whole == [i for i, n in ITEMS if n <= 64]
        assert stats["skipped"] == sum(n > 64 for _, n in ITEMS)
    elif name == "exact_drop":
        assert len(whole) + stats["skipped"] == len(ITEMS)
        assert stats["skipped"] > 0
    else:
        assert whole == list(range(len(ITEMS)))
        assert stats["skipped"] == 0
    if name == "packing_split":  # pieces of an item: 0..k-1, covering its tokens once
        pieces = {}
        for batch in batches:
            for x in entries(spec, batch):
                if isinstance(x, Piece):
                    pieces.setdefault(x.item[0], []).append((x.start, x.stop, x.piece, x.pieces))
        assert pieces
        for i, parts in pieces.items():
            parts.sort()
            assert [p[2] for p in parts] == list(range(parts[0][3]))
            assert parts[0][0] == 0 and parts[-1][1] == ITEMS[i][1]
            assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))
    if spec.name == "exact_length" and spec.leftovers != "merge":
        assert all(len({x[1] for x in batch}) == 1 for batch in batches)


@pytest.mark.parametrize("max_wait", [1, 2])
def test_max_wait_bounds_batches_and_replay(max_wait):
    spec = SPECS["budget"]
    b = StreamBatcher(Stateful(ITEMS), spec, buffer=40, length=size, max_wait=max_wait)
    batches = list(b)
    for batch in batches:
        where = [x[0] for x in batch]
        assert max(where) - min(where) < max_wait * 40
    source = Stateful(ITEMS)
    b = StreamBatcher(source, spec, buffer=40, length=size, max_wait=max_wait)
    it = iter(b)
    for _ in range(len(batches) // 2):
        next(it)
    state = b.state_dict()
    assert 0 <= source.pos - state["position"] <= max_wait * 40
    other = StreamBatcher(Stateful(ITEMS), spec, buffer=40, length=size, max_wait=max_wait + 1)
    with pytest.raises(ValueError, match="settings differ"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="max_wait must be a positive int"):
        StreamBatcher(ITEMS, spec, max_wait=0)


# A state saved by padless before ``window`` became ``max_wait`` (TokenBudget(max_tokens=10),
# buffer=8, window=4, before the first batch): its settings fingerprint must still match.
OLD_STATE = {"version": 1, "kind": "StreamBatcher", "fingerprint": "bfd5f09b-f637bed3",
             "seed": 0, "epoch": 0, "round": -1, "emitted": 0, "first": 0, "position": 0,
             "source": None, "waiting": "", "waiting_bits": 0, "pieces": [], "digest": "",
             "done": False}  # fmt: skip


def test_state_saved_before_the_rename_loads():
    lengths = [5, 3, 9, 3, 5, 1, 8, 9, 2, 5, 7, 7, 4, 6, 2, 8]
    spec = TokenBudget(max_tokens=10)
    b = StreamBatcher(lengths, spec, buffer=8, length=int, max_wait=4)
    state = b.state_dict()
    assert state.pop("shard") == [0, 1]  # added since: states without it still load
    assert state == OLD_STATE
    b.load_state_dict(dict(OLD_STATE))
    assert list(b) == list(StreamBatcher(lengths, spec, buffer=8, length=int))
    with pytest.raises(ValueError, match="settings differ"):
        StreamBatcher(lengths, spec, buffer=8, length=int, max_wait=3).load_state_dict(OLD_STATE)


def test_lengths_only_stream_and_int_length():
    spec = TokenBudget(max_tokens=200, multiple_of=8)
    lengths = LENGTHS.tolist()
    batches = list(StreamBatcher(lengths, spec, buffer=100, length=int))
    assert sorted(x for b in batches for x in b) == sorted(lengths)
    assert all(len(b) * max(b) <= 200 for b in batches)
    # numpy ints and a generator function are fine too
    again = list(StreamBatcher(lambda: iter(LENGTHS), spec, buffer=100, length=int))
    assert [list(map(int, b)) for b in again] == batches


def test_multiple_of_as_far_as_the_rule_allows():
    spec = TokenBudget(max_tokens=4096, multiple_of=8)
    lengths = np.random.default_rng(0).integers(5, 40, 5000).tolist()
    batches = list(StreamBatcher(lengths, spec, buffer=1000, length=int))
    sizes = np.array([len(b) for b in batches])
    assert (sizes % 8 == 0).mean() > 0.9


def test_tuple_lengths_budget_by_longest_field():
    rs = np.random.default_rng(2)
    pairs = [(i, int(a), int(b)) for i, (a, b) in enumerate(rs.integers(1, 40, (400, 2)))]
    spec = TokenBudget(max_tokens=120)
    batches = list(StreamBatcher(pairs, spec, buffer=40, length=lambda p: (p[1], p[2])))
    assert sorted(p for b in batches for p in b) == pairs
    assert all(len(b) * max(max(p[1], p[2]) for p in b) <= 120 for b in batches)
    exact = list(StreamBatcher(pairs, ExactLength(batch_size=2), buffer=40, length=lambda p: p[1:]))
    assert all(len({p[1:] for p in b}) == 1 for b in exact)
    assert sorted(p for b in exact for p in b) == pairs


def test_padding_close_to_a_global_sort():
    lengths = np.clip(np.random.default_rng(0).lognormal(np.log(23), 0.55, 60_000), 1, 1024)
    lengths = lengths.round().astype(np.int64)
    spec = TokenBudget(max_tokens=4096)
    batcher = StreamBatcher(lengths.tolist(), spec, buffer=10_000, length=int)
    batches = sum(1 for _ in batcher)
    stream = batcher.stats()["padding_fraction"]
    # sorting each buffer and emitting every batch: the naive way
    real = padded = 0
    for lo in range(0, lengths.size, 10_000):
        part = lengths[lo : lo + 10_000]
        figures = spec.plan(part).stats(part)
        real, padded = real + figures.real_tokens, padded + figures.padded_slots
    naive = 1 - real / padded
    assert stream < naive / 3
    assert batches <= 1.03 * len(spec.plan(lengths))  # the budget stays used


def test_buckets_fitted_on_the_first_buffer_then_kept():
    spec = Buckets(num_buckets=4, max_tokens=200)
    batcher = StreamBatcher(ITEMS, spec, buffer=80, length=size)
    assert batcher.boundaries is None
    it = iter(batcher)
    next(it)
    first = [n for _, n in ITEMS[:80]]
    assert batcher.boundaries.tolist() == bucket_boundaries(first, 4).tolist()
    assert batcher.state_dict()["boundaries"] == batcher.boundaries.tolist()
    list(it)
    assert batcher.boundaries.tolist() == bucket_boundaries(first, 4).tolist()


def test_packing_efficiency_and_full_rows():
    lengths = np.clip(np.random.default_rng(1).lognormal(np.log(23), 0.55, 20_000), 1, 1024)
    lengths = lengths.round().astype(np.int64).tolist()
    batcher = StreamBatcher(lengths, Packing(capacity=1024), buffer=2000, length=int)
    rows = [row for batch in batcher for row in batch]
    assert batcher.stats()["efficiency"] > 0.995
    assert sorted(x for row in rows for x in row) == sorted(lengths)


# --------------------------------------------------------------------------- determinism


def test_same_seed_same_batches_and_epochs_reshuffle():
    spec = SPECS["budget"]

    def run(seed, epoch):
        b = StreamBatcher(ITEMS, spec, buffer=40, length=size, seed=seed)
        b.set_epoch(epoch)
        return [key(x) for x in b]

    a = run(1, 0)
    assert a == run(1, 0)
    assert a != run(1, 1) and sorted(a) == sorted(run(1, 1))  # same batches, other order
    assert a != run(2, 0)


def test_set_epoch_reaches_the_source():
    source = Stateful(ITEMS)
    b = StreamBatcher(source, SPECS["budget"], buffer=40, length=size)
    b.set_epoch(3)
    list(b)
    assert source.epochs == [3]


# --------------------------------------------------------------------------- resume


@pytest.mark.parametrize("name", sorted(SPECS))
def test_resume_at_every_batch(name):
    spec = SPECS[name]
    items = ITEMS[:120]

    def make():
        b = StreamBatcher(items, spec, buffer=16, length=size, seed=5)
        b.set_epoch(2)
        return b

    full = [key(x) for x in make()]
    for cut in range(len(full) + 1):
        b = make()
        it = iter(b)
        got = [key(next(it)) for _ in range(cut)]
        state = json.loads(json.dumps(b.state_dict()))  # JSON-safe
        resumed = make()
        resumed.load_state_dict(state)
        assert got + [key(x) for x in resumed] == full, cut


@pytest.mark.parametrize("name", ["budget", "packing_split", "exact_merge", "buckets"])
def test_stateful_source_replays_at_most_max_wait_buffers(name):
    spec = SPECS[name]
    buffer = 24
    full = [key(x) for x in StreamBatcher(Stateful(ITEMS), spec, buffer=buffer, length=size)]
    for cut in range(0, len(full) + 1, 11):
        source = Stateful(ITEMS)
        b = StreamBatcher(source, spec, buffer=buffer, length=size)
        it = iter(b)
        got = [key(next(it)) for _ in range(cut)]
        state = b.state_dict()
        read = source.pos
        fresh = Stateful(ITEMS)
        resumed = StreamBatcher(fresh, spec, buffer=buffer, length=size)
        resumed.load_state_dict(state)
        assert got + [key(x) for x in resumed] == full, cut
        # the restore read again only the items since the oldest waiting one's chunk
        assert fresh.reads == len(ITEMS) - state["position"]
        assert 0 <= read - state["position"] <= MAX_WAIT * buffer
        if read > MAX_WAIT * buffer:
            assert state["position"] > 0  # ...not the stream from its start


def islice_n(it, n):
    out = []
    for _ in range(n):
        try:
            out.append(next(it))
        except StopIteration:
            break
    return out


def test_restart_after_a_restore_starts_from_the_beginning():
    source = Stateful(ITEMS)
    b = StreamBatcher(source, SPECS["budget"], buffer=24, length=size)
    full = [key(x) for x in b]
    it = iter(b)
    for _ in range(30):
        next(it)
    b.load_state_dict(b.state_dict())
    assert [key(x) for x in b] == full[30:]
    assert [key(x) for x in b] == full  # a new iteration of the epoch: from the start


def test_states_before_and_after():
    b = StreamBatcher(ITEMS, SPECS["budget"], buffer=24, length=size)
    fresh = b.state_dict()
    assert fresh["round"] == -1 and not fresh["done"]
    n = sum(1 for _ in b)
    done = b.state_dict()
    assert done["done"]
    again = StreamBatcher(ITEMS, SPECS["budget"], buffer=24, length=size)
    again.load_state_dict(done)
    assert list(again) == []
    again.load_state_dict(fresh)
    assert sum(1 for _ in again) == n
    b.set_epoch(1)  # another epoch: back to its start
    assert b.state_dict()["round"] == -1 and b.state_dict()["epoch"] == 1


def test_state_checks():
    b = StreamBatcher(ITEMS, SPECS["budget"], buffer=24, length=size, seed=1)
    it = iter(b)
    next(it)
    state = b.state_dict()
    other = StreamBatcher(ITEMS, TokenBudget(max_tokens=99), buffer=24, length=size, seed=1)
    with pytest.raises(ValueError, match="settings differ"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="seed=1"):
        StreamBatcher(ITEMS, SPECS["budget"], buffer=24, length=size, seed=2).load_state_dict(state)
    with pytest.raises(ValueError, match="settings differ"):
        StreamBatcher(ITEMS, SPECS["budget"], buffer=28, length=size, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="missing keys"):
        b.load_state_dict({"round": 0})
    with pytest.raises(TypeError, match="state must be a dict"):
        b.load_state_dict([1])
    bad = dict(state, emitted=-1)
    with pytest.raises(ValueError, match="emitted"):
        b.load_state_dict(bad)
    bad = dict(state, waiting="not base64!")
    fresh = StreamBatcher(ITEMS, SPECS["budget"], buffer=24, length=size, seed=1)
    fresh.load_state_dict(bad)
    with pytest.raises(ValueError, match="waiting"):
        list(fresh)
    short = StreamBatcher(ITEMS[:10], SPECS["budget"], buffer=24, length=size, seed=1)
    later = dict(state)
    if later["round"] > 1:  # a source that ended before the saved position
        short.load_state_dict(later)
        with pytest.raises(ValueError, match="fewer items"):
            list(short)
    assert state == b.state_dict()  # loading never changed the state


def test_one_shot_iterator_serves_one_epoch():
    b = StreamBatcher(iter(ITEMS), SPECS["budget"], buffer=24, length=size)
    assert sum(len(x) for x in b) == len(ITEMS)
    with pytest.raises(TypeError, match="one-shot"):
        list(b)
    g = StreamBatcher((x for x in ITEMS), SPECS["budget"], buffer=24, length=size)
    it = iter(g)
    next(it)
    with pytest.raises(TypeError, match="one-shot"):
        StreamBatcher((x for x in ITEMS), SPECS["budget"], buffer=24, length=size).load_state_dict(
            g.state_dict()
        )


# --------------------------------------------------------------------------- errors


def test_bad_arguments():
    with pytest.raises(TypeError, match="spec must be a padless planner spec"):
        StreamBatcher(ITEMS, {"max_tokens": 8})
    with pytest.raises(ValueError, match="buffer must be an int >= 4"):
        StreamBatcher(ITEMS, SPECS["budget"], buffer=3)
    with pytest.raises(ValueError, match="buffer must be a positive int"):
        StreamBatcher(ITEMS, SPECS["budget"], buffer=0)
    with pytest.raises(TypeError, match="length must be a callable"):
        StreamBatcher(ITEMS, SPECS["budget"], length=3)
    with pytest.raises(TypeError, match="source must be an iterable"):
        StreamBatcher(5, SPECS["budget"])
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        StreamBatcher(ITEMS, SPECS["budget"], seed=-1)


@pytest.mark.parametrize(
    ("lengths", "error", "match"),
    [
        ([3, 4, 2.5], TypeError, "position 2"),
        ([3, "x", 2], TypeError, "position 1"),
        ([3, 4, -1], ValueError, r"position 2 must lie in \[0, 2\*\*31\)"),
        ([3, 2**31], ValueError, "position 1"),
        ([3, True], TypeError, "position 1"),
        ([(1, 2), (1, 2, 3)], TypeError, "position 1"),
    ],
)
def test_bad_lengths_name_the_position(lengths, error, match):
    with pytest.raises(error, match=match):
        list(StreamBatcher(lengths, SPECS["budget"], buffer=8, length=lambda x: x))


def test_oversize_items():
    with pytest.raises(ValueError, match="position 3 has length 101, which exceeds max_tokens=100"):
        list(StreamBatcher([5, 6, 7, 101, 2], TokenBudget(max_tokens=100), length=int))
    b = StreamBatcher([5, 6, 7, 101, 2], TokenBudget(max_tokens=100, oversize="drop"), length=int)
    assert sorted(x for batch in b for x in batch) == [2, 5, 6, 7]
    assert b.stats()["skipped"] == 1
    with pytest.raises(ValueError, match="exceeds capacity=64"):
        list(StreamBatcher([5, 65], Packing(capacity=64), length=int))
    with pytest.raises(ValueError, match="position 1 is 0"):
        list(StreamBatcher([5, 0], ExactLength(max_tokens=64), length=int))
    b = StreamBatcher([5, 200, 6], ExactLength(batch_size=2, max_length=100), length=int)
    assert sorted(x for batch in b for x in batch) == [5, 6]
    # buckets and exact lengths never pass their budget either: refused, or dropped on request
    for spec in (Buckets(num_buckets=2, max_tokens=100), ExactLength(max_tokens=100)):
        with pytest.raises(ValueError, match="position 3 has length 101, which exceeds max_tokens"):
            list(StreamBatcher([5, 6, 7, 101, 2], spec, length=int))
        b = StreamBatcher([5, 6, 7, 101, 2], dataclasses.replace(spec, oversize="drop"), length=int)
        assert sorted(x for batch in b for x in batch) == [2, 5, 6, 7]
        assert b.stats()["skipped"] == 1


# --------------------------------------------------------------------------- properties


@settings(max_examples=40)
@given(
    st.lists(st.integers(0, 60), max_size=300),
    st.integers(4, 60),
    st.sampled_from(sorted(SPECS)),
    st.integers(0, 3),
)
def test_property_each_item_once_and_bounds(lengths, buffer, name, seed):
    spec = SPECS[name]
    if spec.name == "exact_length" and spec.max_tokens is not None:
        lengths = [n + 1 for n in lengths]
    items = list(enumerate(lengths))
    b = StreamBatcher(items, spec, buffer=buffer, length=size, seed=seed)
    batches = list(b)
    seen = check_batches(spec, batches, items, buffer)
    assert b.stats()["peak_buffer"] <= buffer or name == "packing_split"
    kept = {i for i, _ in seen}
    assert len(kept) + b.stats()["skipped"] == len(items)


@settings(max_examples=40)
@given(
    st.lists(st.integers(0, 60), min_size=1, max_size=200),
    st.integers(4, 30),
    st.sampled_from(sorted(SPECS)),
    st.data(),
)
def test_property_resume_anywhere(lengths, buffer, name, data):
    spec = SPECS[name]
    if spec.name == "exact_length" and spec.max_tokens is not None:
        lengths = [n + 1 for n in lengths]
    items = list(enumerate(lengths))
    full = [key(x) for x in StreamBatcher(Stateful(items), spec, buffer=buffer, length=size)]
    cut = data.draw(st.integers(0, len(full)))
    b = StreamBatcher(Stateful(items), spec, buffer=buffer, length=size)
    it = iter(b)
    got = [key(next(it)) for _ in range(cut)]
    resumed = StreamBatcher(Stateful(items), spec, buffer=buffer, length=size)
    resumed.load_state_dict(b.state_dict())
    assert got + [key(x) for x in resumed] == full


@settings(max_examples=60)
@given(
    st.lists(st.integers(0, 40), max_size=80),
    st.sampled_from([0, 30, 64, 100]),
    st.sampled_from([0, 3, 7]),
    st.sampled_from([1, 2, 4]),
    st.booleans(),
    st.sampled_from([0.0, 0.005, 0.2]),
    st.data(),
)
def test_budget_round_kernel_equals_reference(
    sizes, max_tokens, max_sentences, multiple, final, target, data
):
    sizes = np.array(sizes, dtype=np.int64)
    if max_tokens:
        sizes = np.minimum(sizes, max_tokens)
    late = np.array(data.draw(st.lists(st.booleans(), min_size=sizes.size, max_size=sizes.size)))
    late = late.astype(np.bool_).reshape(-1)
    keys, span = group_keys(sizes)
    args = (keys, span, sizes, late, max_tokens, max_sentences, multiple, final, target)
    for got, want in zip(budget_round(*args), budget_round_reference(*args), strict=True):
        assert np.array_equal(got, want)


@pytest.mark.parametrize(
    "spec",
    [
        padless.TokenBudget(max_tokens=4096, max_cost=6000.0, cost=padless.Cost(quadratic=1.0)),
        padless.Packing(capacity=512, max_row_cost=3000.0, cost=padless.Cost(quadratic=0.01)),
    ],
)
def test_cost_budgets_are_refused_not_ignored(spec):
    """A budget the stream cannot keep is refused up front, never silently broken."""
    with pytest.raises(ValueError, match="not supported by StreamBatcher"):
        padless.StreamBatcher(range(10), spec, length=int)


# --------------------------------------------------------------------------- issue 24: lengths


ROWS = [{"id": i, "input_ids": [7] * int(n)} for i, n in enumerate(LENGTHS[:60])]


def test_no_silent_length_default_for_dict_rows():
    """A dict row's len counts its keys: without length= it is a TypeError showing the fix."""
    spec = TokenBudget(max_tokens=100)
    with pytest.raises(
        TypeError, match=r'position 0 is a dict .*length=lambda row: len\(row\["input_ids"\]\)'
    ):
        list(StreamBatcher(ROWS, spec, buffer=8))
    with pytest.raises(TypeError, match="length=len on the item at stream position 0"):
        list(StreamBatcher(ROWS, spec, buffer=8, length=len))
    with pytest.raises(TypeError, match="position 0 is an int .*length=int"):
        list(StreamBatcher([3, 4], spec, buffer=8))
    # sequences of token ids need no length=: their len is the length
    tokens = [row["input_ids"] for row in ROWS]
    for items in (tokens, [np.array(t, np.int32) for t in tokens]):
        batches = list(StreamBatcher(items, spec, buffer=8))
        assert sorted(len(x) for b in batches for x in b) == sorted(map(len, tokens))
        assert all(len(b) * max(map(len, b)) <= 100 for b in batches)
    measured = list(StreamBatcher(ROWS, spec, buffer=8, length=lambda r: len(r["input_ids"])))
    assert all(len(b) * max(len(r["input_ids"]) for r in b) <= 100 for b in measured)


@pytest.mark.parametrize("bad", ["7", 2.5, True, None, np.float64(3.0), np.bool_(True)])
def test_int_length_takes_only_int_items(bad):
    with pytest.raises(TypeError, match=f"length=int .* stream position 2 is {type(bad).__name__}"):
        list(StreamBatcher([3, 4, bad, 5], TokenBudget(max_tokens=100), buffer=8, length=int))


def test_a_failing_length_names_the_item_position():
    rows = ROWS[:5] + [None] + ROWS[5:]
    with pytest.raises(TypeError, match="stream position 5 .*NoneType"):
        list(StreamBatcher(rows, TokenBudget(max_tokens=100), buffer=8,
                           length=lambda r: len(r["input_ids"])))  # fmt: skip
    with pytest.raises(ValueError, match=r"KeyError: 'ids' for the item at stream position 0"):
        list(StreamBatcher(ROWS, TokenBudget(max_tokens=100), buffer=8, length=lambda r: r["ids"]))


def _saved(items, cut, **kw):
    b = StreamBatcher(items, TokenBudget(max_tokens=100), buffer=40, length=int, **kw)
    it = iter(b)
    got = [next(it) for _ in range(cut)]
    return got, b.state_dict()


def test_state_refused_over_a_source_that_does_not_fit():
    lengths = [int(n) for n in LENGTHS]
    got, state = _saved(lengths, 60)
    chunk, rnd = 40 // CHUNKS, state["round"]
    assert state["position"] > 0 and rnd >= CHUNKS

    def resume(items):
        b = StreamBatcher(items, TokenBudget(max_tokens=100), buffer=40, length=int)
        b.load_state_dict(state)
        return list(b)

    assert got + resume(lengths) == list(StreamBatcher(lengths, TokenBudget(max_tokens=100),
                                                       buffer=40, length=int))  # fmt: skip
    # ends inside the saved round's chunk: a shorter round, not the saved one
    with pytest.raises(ValueError, match="does not fit the state"):
        resume(lengths[: rnd * chunk + 3])
    with pytest.raises(ValueError, match="fewer items"):  # ends before the saved position
        resume(lengths[: state["position"] + 3])
    raw = zlib.decompress(base64.b64decode(state["waiting"]))
    waiting = state["position"] + int(
        np.flatnonzero(np.unpackbits(np.frombuffer(raw, np.uint8)))[0]
    )
    for where in (waiting, rnd * chunk + 3):  # a waiting item, an item of the round's chunk
        other = list(lengths)
        other[where] += 1
        with pytest.raises(ValueError, match=r"does not fit the state: the items read again"):
            resume(other)


# --------------------------------------------------------------------------- issue 24: epochs


def test_a_state_belongs_to_its_epoch():
    lengths = [int(n) for n in LENGTHS[:300]]
    spec = TokenBudget(max_tokens=100)

    def make():
        return StreamBatcher(lengths, spec, buffer=40, length=int)

    b = make()
    b.set_epoch(1)
    it = iter(b)
    got = [next(it) for _ in range(20)]
    state = b.state_dict()
    late = make()
    late.load_state_dict(state)
    with pytest.raises(
        ValueError, match=r"set_epoch\(0\) after load_state_dict\(\) of a state of epoch 1"
    ):
        late.set_epoch(0)
    early = make()
    early.set_epoch(0)
    with pytest.raises(ValueError, match=r"state is of epoch 1, but set_epoch\(0\) was called"):
        early.load_state_dict(state)
    # the right loop: from the saved epoch, which the state may be given before or after
    ref = make()
    ref.set_epoch(1)
    full = list(ref)
    for order in ("load first", "epoch first"):
        again = make()
        if order == "epoch first":
            again.set_epoch(1)
        again.load_state_dict(state)
        again.set_epoch(1)
        assert got + list(again) == full
        again.set_epoch(2)  # the state was used: the next epoch is free
        assert sum(map(len, again)) == len(lengths)


def test_resume_loop_visits_every_item_once_per_epoch():
    """The documented loop (save the epoch, loop from it), stopped and resumed at every 7th batch
    of two epochs, visits each item exactly twice, in the uninterrupted order."""
    items = list(range(1, 121))
    spec, epochs = TokenBudget(max_tokens=300), 2

    def run(checkpoint, stop_at):
        batcher = StreamBatcher(items, spec, buffer=16, length=int)
        start = 0
        if checkpoint:
            batcher.load_state_dict(checkpoint["stream"])
            start = checkpoint["epoch"]
        steps = []
        for epoch in range(start, epochs):
            batcher.set_epoch(epoch)
            for batch in batcher:
                if len(steps) == stop_at:
                    return steps, checkpoint
                steps.append((epoch, tuple(batch)))
                checkpoint = {
                    "stream": json.loads(json.dumps(batcher.state_dict())),
                    "epoch": epoch,
                }
        return steps, checkpoint

    full, _ = run(None, -1)
    for stop in range(1, len(full), 7):
        first, checkpoint = run(None, stop)
        rest, _ = run(checkpoint, -1)
        assert first + rest == full, stop
        visits = [x for _, batch in first + rest for x in batch]
        assert sorted(visits) == sorted(items * epochs)


def test_pad_to_multiple_of_is_refused_for_now():
    try:
        spec = TokenBudget(max_tokens=4096, pad_to_multiple_of=8)
    except TypeError:
        pytest.skip("TokenBudget has no pad_to_multiple_of")
    with pytest.raises(ValueError, match=r"\['pad_to_multiple_of'\] are not supported"):
        StreamBatcher(range(10), spec, length=int)
    StreamBatcher(range(10), TokenBudget(max_tokens=4096, pad_to_multiple_of=1), length=int)


# --------------------------------------------------------------------------- issue 24: shuffles


def test_shuffled_datasets_stream_resumes_exactly():
    """The issue's case: 4,000 rows, a datasets shuffle buffer of 1000, max_wait=1, saved after 76
    batches (past max_wait × buffer): the shuffled stream is re-read from the epoch's start."""
    datasets = pytest.importorskip("datasets")
    from padless.streams._source import Source as _Source

    rs = np.random.default_rng(0)
    table = {"id": list(range(4000)), "n": rs.integers(1, 60, 4000).tolist()}
    base = datasets.Dataset.from_dict(table).to_iterable_dataset(num_shards=4)
    spec = TokenBudget(max_tokens=1024)

    def make():
        return StreamBatcher(base.shuffle(seed=0, buffer_size=1000), spec, buffer=1000,
                             length=lambda r: r["n"], max_wait=1)  # fmt: skip

    full = [[r["id"] for r in b] for b in make()]
    b = make()
    it = iter(b)
    got = [[r["id"] for r in next(it)] for _ in range(76)]
    state = b.state_dict()
    assert state["position"] >= 1000  # past max_wait × buffer: a seek would lose items
    resumed = make()
    resumed.load_state_dict(state)
    assert got + [[r["id"] for r in b] for b in resumed] == full
    # a shuffle anywhere in the chain takes the exact path; the exact transforms keep the seek
    shuffled = base.shuffle(seed=1, buffer_size=10)
    for ds in (shuffled, shuffled.map(lambda r: r), shuffled.take(100),
               datasets.interleave_datasets([base, shuffled])):  # fmt: skip
        assert _Source(ds).kind == "iterable"
    for ds in (base, base.map(lambda r: r), base.filter(lambda r: r["n"] > 3), base.skip(5),
               base.take(100), datasets.interleave_datasets([base, base.take(10)])):  # fmt: skip
        assert _Source(ds).kind == "stateful"
