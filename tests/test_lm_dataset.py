"""padless.torch.LMDataset: an LMStream through DataLoader / StatefulDataLoader workers (issue 40).

The loop must receive exactly the stream's own batches in order, with 0 or 2 workers, and a fresh
loader loading ``loader.state_dict()`` must deliver exactly the rest of the epoch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from padless import LMStream, Schedule
from padless.torch import LMDataset, lm_tensors

torchdata = pytest.importorskip("torchdata.stateful_dataloader")
StatefulDataLoader = torchdata.StatefulDataLoader

# 1003 tokens: odd batch counts per rank (not a multiple of 2 workers) in most settings
TOKENS = np.arange(1003, dtype=np.int64) % 50_000


def _stream(**kw: Any) -> LMStream:
    args: dict[str, Any] = {"batch_size": 3, "num_steps": 8, "seed": 5}
    return LMStream(TOKENS, **{**args, **kw})


def _pairs(batches: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(x.numpy().copy(), y.numpy().copy()) for x, y in batches]


def _same(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for (gx, gy), (wx, wy) in zip(got, want, strict=True):
        np.testing.assert_array_equal(gx, wx)
        np.testing.assert_array_equal(gy, wy)


def _expected(epoch: int = 0, **kw: Any) -> list[Any]:
    s = _stream(**kw)
    s.set_epoch(epoch)
    return _pairs(lm_tensors(s))


def _take(it: Iterator[Any], n: int) -> list[Any]:
    return _pairs(next(it) for _ in range(n))


def _close(it: Any) -> None:
    """Stop a partly consumed loader iterator's workers now (none to stop without workers; no
    ``gc.collect()``: in the whole suite's heap each took about half a second)."""
    shutdown = getattr(it, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


pytestmark = pytest.mark.filterwarnings("ignore:.*set_vital", "ignore:This DataLoader will create")

LOADERS = {"DataLoader": DataLoader, "StatefulDataLoader": StatefulDataLoader}


# --------------------------------------------------------------------------- the stream's hook


@pytest.mark.parametrize("mode", ["random", "sequential"])
@pytest.mark.parametrize("every", [1, 2, 3, 5])
def test_shares_make_the_stream(mode: str, every: int) -> None:
    """``LMStream._share(w, W)`` over w = 0..W-1, interleaved, is the stream's own iteration."""
    want = list(_stream(mode=mode, world_size=2, rank=1, drop_last=False))
    s = _stream(mode=mode, world_size=2, rank=1, drop_last=False)
    shares = [list(s._share(w, every)) for w in range(every)]
    got = [shares[k % every][k // every] for k in range(len(want))]
    assert sum(map(len, shares)) == len(want)
    _same(got, want)


def test_share_state_is_the_last_batch() -> None:
    """A share's state is the position after its last batch; plain iteration is unchanged."""
    s = _stream()
    it = s._share(1, 3)
    next(it)
    next(it)  # steps 1 and 4
    t = _stream()
    for _ in zip(range(5), t, strict=False):
        pass
    assert s.state_dict() == t.state_dict()


def test_share_with_warmup_keeps_the_step_lengths() -> None:
    steps = Schedule.piecewise([0, 5], [4, 8])
    want = list(LMStream(TOKENS, num_steps=steps, tokens_per_batch=16, seed=2))
    s = LMStream(TOKENS, num_steps=steps, tokens_per_batch=16, seed=2)
    odd = list(s._share(1, 2))
    _same(odd, want[1::2])


# --------------------------------------------------------------------------- delivery in order


@pytest.mark.parametrize("loader", list(LOADERS))
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("mode", ["random", "sequential"])
@pytest.mark.parametrize("drop_last", [True, False])
@pytest.mark.parametrize("place", [(0, 1), (1, 2)])
def test_loader_delivers_the_stream(
    loader: str, workers: int, mode: str, drop_last: bool, place: tuple[int, int]
) -> None:
    rank, world = place
    kw = {"mode": mode, "drop_last": drop_last, "rank": rank, "world_size": world}
    want = _expected(**kw)
    ds = LMDataset(_stream(**kw))
    dl = LOADERS[loader](ds, batch_size=None, num_workers=workers)
    assert len(dl) == len(want)
    _same(_pairs(dl), want)


def test_batch_counts_are_not_multiples_of_the_workers() -> None:
    """The cases above include odd batch counts (the loaders' stop rule is exercised)."""
    counts = {
        len(_stream(mode=m, drop_last=d)) % 2
        for m in ("random", "sequential")
        for d in (False, True)
    }
    assert counts == {0, 1}


@pytest.mark.parametrize("workers", [4])
def test_more_workers_than_batches_and_a_warmup(workers: int) -> None:
    steps = Schedule.piecewise([0, 1], [4, 8])
    make = lambda: LMStream(TOKENS[:60], num_steps=steps, tokens_per_batch=16, seed=1)  # noqa: E731
    want = _pairs(lm_tensors(make()))
    assert 1 < len(want) < workers and want[0][0].shape != want[-1][0].shape
    _same(_pairs(DataLoader(LMDataset(make()), batch_size=None, num_workers=workers)), want)


def test_set_epoch_changes_the_order() -> None:
    ds = LMDataset(_stream())
    dl = DataLoader(ds, batch_size=None, num_workers=2)
    first = _pairs(dl)
    ds.set_epoch(1)
    assert ds.epoch == 1
    second = _pairs(dl)
    _same(second, _expected(1))
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(first, second, strict=False))


# --------------------------------------------------------------------------- resume


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("mode", ["random", "sequential"])
@pytest.mark.parametrize("drop_last", [True, False])
def test_resume_mid_epoch(workers: int, mode: str, drop_last: bool) -> None:
    kw = {"mode": mode, "drop_last": drop_last, "rank": 1, "world_size": 2}
    want = _expected(**kw)
    for cut in (0, 1, 4, len(want) - 1, len(want)):
        dl = StatefulDataLoader(LMDataset(_stream(**kw)), batch_size=None, num_workers=workers)
        it = iter(dl)
        head = _take(it, cut)
        state = dl.state_dict()
        _close(it)
        fresh = StatefulDataLoader(LMDataset(_stream(**kw)), batch_size=None, num_workers=workers)
        fresh.load_state_dict(state)
        _same(head + _pairs(fresh), want)


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_twice_and_into_the_next_epoch(workers: int) -> None:
    want = _expected(0) + _expected(1)
    n = len(want) // 2

    def run(state: Any, epoch: int, take: int | None) -> tuple[list[Any], Any]:
        ds = LMDataset(_stream())
        dl = StatefulDataLoader(ds, batch_size=None, num_workers=workers)
        if state is not None:
            dl.load_state_dict(state)
        ds.set_epoch(epoch)
        if take is None:
            return _pairs(dl), dl.state_dict()
        it = iter(dl)
        got = _take(it, take)
        state = dl.state_dict()
        _close(it)
        return got, state

    a, state = run(None, 0, 3)
    b, state = run(state, 0, 2)
    c, state = run(state, 0, None)  # the rest of epoch 0
    d, _ = run(state, 1, None)
    assert len(a + b + c) == n
    _same(a + b + c + d, want)


@pytest.mark.parametrize("workers", [0, 2])
def test_state_at_the_epoch_end_goes_on_with_the_next_epoch(workers: int) -> None:
    """A state saved right after the epoch's last batch (before the loader saw its end), loaded
    after ``set_epoch(e + 1)``: the next epoch, whole and in order (an odd batch count, so the
    loader's worker cycle goes on from the middle)."""
    whole = _expected(0)
    assert len(whole) % 2 == 1
    dl = StatefulDataLoader(LMDataset(_stream()), batch_size=None, num_workers=workers)
    it = iter(dl)
    _take(it, len(whole))
    state = dl.state_dict()
    _close(it)
    ds = LMDataset(_stream())
    fresh = StatefulDataLoader(ds, batch_size=None, num_workers=workers)
    fresh.load_state_dict(state)
    ds.set_epoch(1)
    _same(_pairs(fresh), _expected(1))


def test_state_mid_epoch_refused_for_the_next_epoch() -> None:
    dl = StatefulDataLoader(LMDataset(_stream()), batch_size=None, num_workers=2)
    it = iter(dl)
    _take(it, 3)
    state = dl.state_dict()
    _close(it)
    ds = LMDataset(_stream())
    fresh = StatefulDataLoader(ds, batch_size=None, num_workers=2)
    fresh.load_state_dict(state)
    ds.set_epoch(1)
    with pytest.raises(ValueError, match="skip the rest of"):
        _pairs(fresh)


@pytest.mark.parametrize("then", [0, 1, 3])
def test_rank_state_resumes_at_another_number_of_workers(then: int) -> None:
    want = _expected(mode="random", drop_last=False)
    dl = StatefulDataLoader(LMDataset(_stream(drop_last=False)), batch_size=None, num_workers=2)
    it = iter(dl)
    head = _take(it, 5)
    state = dl.state_dict()
    _close(it)
    ds = LMDataset(_stream(drop_last=False))
    ds.load_state_dict(LMDataset.rank_state(state))
    _same(head + _pairs(DataLoader(ds, batch_size=None, num_workers=then)), want)


def test_a_workers_state_elsewhere_is_refused() -> None:
    dl = StatefulDataLoader(LMDataset(_stream()), batch_size=None, num_workers=2)
    it = iter(dl)
    _take(it, 3)
    state = dl.state_dict()
    _close(it)
    worker_state = state["_snapshot"]["_worker_snapshots"]["worker_1"]["dataset_state"]
    assert worker_state["workers"] == 2
    ds = LMDataset(_stream())
    with pytest.raises(ValueError, match=r"worker 1 of num_workers=2.*rank_state"):
        ds.load_state_dict(worker_state)
    # a num_workers=0 state is the rank's position: it loads anywhere
    plain = ds.state_dict()
    assert plain["workers"] == 1
    ds.load_state_dict(plain)


def test_state_is_checked() -> None:
    ds = LMDataset(_stream())
    good = ds.state_dict()
    with pytest.raises(TypeError, match="state must be a dict"):
        ds.load_state_dict([])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"state\['stream'\]"):
        ds.load_state_dict({**good, "stream": None})
    with pytest.raises(ValueError, match=r"state\['next'\]"):
        ds.load_state_dict({**good, "next": 5})
    with pytest.raises(ValueError, match="fingerprint|does not fit"):
        LMDataset(_stream(num_steps=4)).load_state_dict(good)
    with pytest.raises(ValueError, match="snapshot_every_n_steps"):
        LMDataset.rank_state({"_snapshot": {}, "_steps_since_snapshot": 2})


def test_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match="stream must be a padless LMStream"):
        LMDataset([1, 2, 3])  # type: ignore[arg-type]
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="pin_memory"):
            LMDataset(_stream(), pin_memory=True)
