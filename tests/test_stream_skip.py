"""Streams skip batches as samplers do: ``StreamBatcher.skip`` leaves batches out (planned and
consumed, not yielded), records the skip in its state and keeps it across resumes;
``StreamDataset.skip`` does it for a rank's loader, its steps mapped onto DataLoader workers by
the loader's turns (checked here against torch's DataLoader and torchdata's StatefulDataLoader,
including workers that run out before the others)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from padless import Packing, StreamBatcher, TokenBudget

LENGTHS = np.random.default_rng(0).integers(1, 30, 400).tolist()
SPEC = TokenBudget(max_tokens=64)


def batcher(lengths=LENGTHS, spec=SPEC, buffer=40, **kw):
    return StreamBatcher(lengths, spec, buffer=buffer, length=int, **kw)


def without(batches, *ranges):
    """``batches`` less those whose number lies in one of ``ranges``."""
    return [b for i, b in enumerate(batches) if not any(lo <= i < hi for lo, hi in ranges)]


def via_json(state):
    return json.loads(json.dumps(state))


# --------------------------------------------------------------------------- StreamBatcher

specs = st.sampled_from(
    [TokenBudget(max_tokens=64), TokenBudget(max_tokens=40), Packing(capacity=48, rows_per_batch=2)]
)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=0, max_size=160),
    buffer=st.integers(4, 24),
    spec=specs,
    ranges=st.lists(st.tuples(st.integers(0, 60), st.integers(1, 12)), min_size=1, max_size=3),
)
def test_skipped_steps_are_the_run_without_them(lengths, buffer, spec, ranges):
    every = list(batcher(lengths, spec, buffer))
    b = batcher(lengths, spec, buffer)
    pairs = [(a, a + n) for a, n in ranges]  # some past the end
    for pair in pairs:
        b.skip(steps=pair)
    assert list(b) == without(every, *pairs)
    left_out = len(every) - len(without(every, *pairs))
    assert b.stats()["skipped_batches"] == left_out
    assert b.stats()["batches"] == len(every) - left_out


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=0, max_size=160),
    buffer=st.integers(4, 24),
    spec=specs,
    at=st.integers(0, 30),
    n=st.integers(1, 10),
    save=st.integers(0, 40),
)
def test_next_batches_while_iterating_and_resume_anywhere(lengths, buffer, spec, at, n, save):
    every = list(batcher(lengths, spec, buffer))
    b = batcher(lengths, spec, buffer)
    it = iter(b)
    got = [x for _, x in zip(range(at), it, strict=False)]
    b.skip(n)  # the next n batches: numbers len(got) .. len(got) + n - 1
    got += list(it)
    want = without(every, (len(got[:at]), len(got[:at]) + n))
    assert got == want
    # a state saved anywhere in the skipped run (before, inside or after the skip) resumes it
    again = batcher(lengths, spec, buffer)
    again.skip(steps=(min(at, len(every)), min(at, len(every)) + n))
    it = iter(again)
    head = [x for _, x in zip(range(save), it, strict=False)]
    state = via_json(again.state_dict())
    del it
    fresh = batcher(lengths, spec, buffer)
    fresh.load_state_dict(state)
    assert head + list(fresh) == want


def test_skip_survives_loading_an_earlier_checkpoint():
    every = list(batcher())
    b = batcher()
    it = iter(b)
    got = [next(it) for _ in range(5)]
    checkpoint = via_json(b.state_dict())  # before the spike
    del it
    assert "skips" not in checkpoint and checkpoint["before"] + checkpoint["emitted"] == 5
    # the spike at batches 20..24: load the checkpoint before it, skip, go on
    b.skip(steps=(18, 26))
    b.load_state_dict(checkpoint)
    assert b.state_dict()["skips"] == [[0, 18, 26]]
    assert got + list(b) == without(every, (18, 26))
    # or skip after loading; and the skip reaches the next resume through the state
    c = batcher()
    c.load_state_dict(checkpoint)
    c.skip(steps=(18, 26))
    it = iter(c)
    more = [next(it) for _ in range(15)]  # past the skip
    state = via_json(c.state_dict())
    del it
    assert state["skips"] == [[0, 18, 26]]
    d = batcher()
    d.load_state_dict(state)
    assert got + more + list(d) == without(every, (18, 26))


def test_skip_from_a_loaded_state_counts_from_the_epochs_start():
    every = list(batcher())
    b = batcher()
    it = iter(b)
    [next(it) for _ in range(7)]
    state = via_json(b.state_dict())
    del it
    c = batcher()
    c.load_state_dict(state)
    c.skip(3)  # the next 3 after the 7 yielded: batches 7, 8, 9
    assert c.state_dict()["skips"] == [[0, 7, 10]]
    assert list(c) == every[10:]


def test_skips_are_per_epoch():
    b = batcher()
    b.set_epoch(1)
    every = list(b)
    b.set_epoch(0)
    b.skip(steps=(0, 4))
    b.set_epoch(1)
    assert list(b) == every  # epoch 0's skip does not touch epoch 1
    b.skip(steps=(2, 3))
    assert list(b) == without(every, (2, 3))
    assert b.state_dict()["skips"] == [[0, 0, 4], [1, 2, 3]]


def test_skip_arguments_are_checked():
    b = batcher()
    for args, kw, err, match in [
        ((), {}, TypeError, "batches .* or steps"),
        ((2,), {"steps": (0, 1)}, TypeError, "batches .* or steps"),
        ((0,), {}, ValueError, "batches"),
        ((True,), {}, TypeError, "batches"),
        ((), {"steps": (3, 3)}, ValueError, "first < end"),
        ((), {"steps": (-1, 3)}, ValueError, r"steps\[0\]"),
        ((), {"steps": (0, 2.0)}, TypeError, r"steps\[1\]"),
        ((), {"steps": 4}, TypeError, "pair"),
    ]:
        with pytest.raises(err, match=match):
            b.skip(*args, **kw)
    assert "skips" not in b.state_dict()


def test_bad_skips_in_a_state_are_refused():
    b = batcher()
    for bad in ([[0, 3, 3]], [[0, 1]], "0-3", [[-1, 0, 2]]):
        state = dict(batcher().state_dict(), skips=bad)
        with pytest.raises(ValueError, match="skips"):
            b.load_state_dict(state)
    with pytest.raises(ValueError, match="before"):
        b.load_state_dict(dict(batcher().state_dict(), before=-1))


def test_state_without_the_count_loads_and_resumes_as_before():
    """A state saved before skips (no "before", no "skips") loads and resumes exactly; the
    epoch it resumes cannot number its batches, so a skip there is refused (the next epoch
    can skip)."""
    every = list(batcher())
    b = batcher()
    it = iter(b)
    got = [next(it) for _ in range(9)]
    old = b.state_dict()
    del it
    assert old.pop("before") > 0 and "skips" not in old
    c = batcher()
    c.load_state_dict(via_json(old))
    with pytest.raises(ValueError, match="did not count"):
        c.skip(steps=(20, 22))
    assert got + list(c) == every
    assert "before" not in c.state_dict()  # still not known in that epoch...
    c.set_epoch(1)
    c.skip(steps=(0, 2))  # ...and known again in the next
    with pytest.raises(ValueError, match="did not count"):
        d = batcher()
        d.skip(steps=(20, 22))
        d.load_state_dict(via_json(old))
    # an old state at an epoch's start or end needs no count
    e = batcher()
    e.load_state_dict(dict(batcher().state_dict()))
    e.skip(steps=(0, 1))
    assert list(e) == every[1:]


def test_skip_next_batches_at_the_end_of_a_loaded_epoch_is_refused():
    b = batcher()
    list(b)
    done = via_json(b.state_dict())
    assert done["done"] and done["before"] == len(list(batcher()))
    c = batcher()
    c.load_state_dict(done)
    with pytest.raises(ValueError, match="end of epoch 0"):
        c.skip(2)
    c.skip(steps=(0, 2))  # recorded; nothing of epoch 0 is left to leave out
    assert list(c) == []


# --------------------------------------------------------------------------- StreamDataset

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

from padless.torch import StreamDataset  # noqa: E402

sdl = pytest.importorskip("torchdata.stateful_dataloader")


def dataset(lengths=LENGTHS, **kw):
    return StreamDataset(lengths, SPEC, buffer=40, length=int, **kw)


def drain(loader, limit=None):
    """The loader's batches (the first ``limit``), its workers shut down whatever happens."""
    it = iter(loader)
    out = []
    try:
        for batch in it:
            out.append(batch)
            if limit is not None and len(out) == limit:
                break
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)
        if callable(shutdown):
            shutdown()
    return out


LOADERS = [DataLoader, sdl.StatefulDataLoader]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("make", LOADERS, ids=["DataLoader", "StatefulDataLoader"])
def test_dataset_skip_leaves_out_the_loaders_steps(make, workers):
    every = drain(make(dataset(), batch_size=None, num_workers=workers))
    ds = dataset()
    ds.skip(steps=(6, 12))  # 6 steps: a multiple of the workers
    got = drain(make(ds, batch_size=None, num_workers=workers))
    assert got == without(every, (6, 12))


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_loader_checkpoint_before_the_skip(workers):
    def loader(ds):
        return sdl.StatefulDataLoader(ds, batch_size=None, num_workers=workers)

    every = drain(loader(dataset()))
    first = loader(dataset())
    it = iter(first)
    head = [next(it) for _ in range(5)]
    checkpoint = first.state_dict()  # before the spike; workers have prefetched further
    if hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
    del it
    # resume from it in a fresh loader, skipping the spike's steps 10..13
    ds = dataset()
    ds.skip(steps=(10, 14))
    resumed = loader(ds)
    resumed.load_state_dict(checkpoint)
    it = iter(resumed)
    more = [next(it) for _ in range(3)]  # steps 5..7
    later = resumed.state_dict()  # the skip still ahead
    rest = drain(it) if workers else list(it)
    assert head + more + rest == without(every, (10, 14))
    # a checkpoint taken after the skip carries it in its workers' states: a fresh dataset
    # resumed from it (no skip called) keeps the skip where it was not yet passed
    again = loader(dataset())
    again.load_state_dict(later)
    assert head + more + drain(again) == without(every, (10, 14))


def test_dataset_skip_in_process_through_the_dataset():
    every = list(dataset())
    ds = dataset()
    it = iter(ds)
    got = [next(it) for _ in range(4)]
    ds.skip(3)  # this process iterates the stream: its position is known (4)
    assert ds.state_dict()["skips"] == [[0, 4, 7]]
    got += list(it)
    assert got == without(every, (4, 7))
    # and from a state loaded into the dataset
    again = dataset()
    again.load_state_dict(via_json(_state_after(6)))
    again.skip(2)
    assert list(again) == every[8:]


def _state_after(n):
    ds = dataset()
    it = iter(ds)
    [next(it) for _ in range(n)]
    return ds.state_dict()


def test_dataset_skip_next_batches_needs_the_position():
    ds = dataset()
    with pytest.raises(ValueError, match=r"skip\(batches=3\) cannot tell .* steps=\(a, b\)"):
        ds.skip(3)  # nothing iterated here: the loader may run in workers, or be restored
    assert drain(sdl.StatefulDataLoader(ds, batch_size=None, num_workers=2), 1)
    with pytest.raises(ValueError, match="cannot tell"):
        ds.skip(1)  # a loader ran over it in workers: its position is not this process's


def test_dataset_skip_not_a_multiple_of_the_workers_is_refused():
    ds = dataset()
    ds.skip(steps=(4, 9))  # this process cannot know the loader's workers here...
    with pytest.raises(ValueError, match=r"leaves out 5 steps .* 2 DataLoader workers"):
        drain(DataLoader(ds, batch_size=None, num_workers=2))  # ...its workers refuse at once
    assert drain(DataLoader(ds, batch_size=None, num_workers=0))  # one worker: any range
    # a state loaded into the dataset tells the workers (its shard): refused at skip() time
    worker_state = {**_state_after(2), "shard": [1, 2]}
    other = dataset()
    other.load_state_dict(worker_state)
    with pytest.raises(ValueError, match=r"skip steps=\(4, 10\)"):
        other.skip(steps=(4, 9))


def uneven():
    """Lengths whose share for worker 0 of 3 packs into far fewer batches than the others'."""
    rs = np.random.default_rng(1)
    return [int(x) * (1 + i % 3) for i, x in enumerate(rs.integers(1, 10, 600))]


def worker_batches(lengths, workers):
    """Each worker's batches, as the StreamDataset's worker batchers form them."""
    from padless.torch._streams import _Strided

    out = []
    for w in range(workers):
        b = StreamBatcher(_Strided(lengths, w, workers), SPEC, buffer=40, length=int)
        b._shard = (w, workers)
        out.append(list(b))
    return out


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker")
@pytest.mark.parametrize("make", LOADERS, ids=["DataLoader", "StatefulDataLoader"])
def test_the_loaders_turns_pass_over_a_worker_that_ran_out(make):
    """The rule the worker mapping relies on: the loader (in order) asks the workers in turn
    0, 1, ..., W-1, 0, ...; a worker that has run out is passed over from then on. So step g is
    the g-th pair (local batch k, worker w) in the order (k, w) among the pairs that exist."""
    lengths, workers = uneven(), 3
    per = worker_batches(lengths, workers)
    assert len({len(p) for p in per}) == workers  # three different ends
    merged = [
        per[w][k] for k in range(max(map(len, per))) for w in range(workers) if k < len(per[w])
    ]
    assert drain(make(dataset(lengths), batch_size=None, num_workers=workers)) == merged


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker")
def test_a_skip_past_where_a_worker_runs_out_is_refused_before_a_batch_out_of_place():
    lengths, workers = uneven(), 3
    per = worker_batches(lengths, workers)
    every = drain(DataLoader(dataset(lengths), batch_size=None, num_workers=workers))
    end = min(len(p) * workers + w for w, p in enumerate(per))  # where the first worker ends
    # up to there every skip is exact
    ds = dataset(lengths)
    ds.skip(steps=(end - 9, end))
    assert drain(DataLoader(ds, batch_size=None, num_workers=workers)) == without(
        every, (end - 9, end)
    )
    # past it: refused by the worker that runs out, and what came before is in its place
    for first in (end - 3, end + 6):
        ds = dataset(lengths)
        ds.skip(steps=(first, first + 6))
        loader = DataLoader(ds, batch_size=None, num_workers=workers)
        it = iter(loader)
        got = []
        with pytest.raises(ValueError, match="past where DataLoader worker 0 .* runs out"):
            try:
                for batch in it:
                    got.append(batch)
            finally:
                it._shutdown_workers()
        assert got == without(every, (first, first + 6))[: len(got)]
