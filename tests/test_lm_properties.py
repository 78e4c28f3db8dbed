"""Hypothesis properties of LMStream over random corpus sizes, batch sizes, steps and ranks."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from padless import _kernels as K
from padless.streams.lm import LMStream


@st.composite
def streams(draw):
    kw = dict(
        batch_size=draw(st.integers(1, 5)),
        num_steps=draw(st.integers(1, 9)),
        mode=draw(st.sampled_from(["random", "sequential"])),
        seed=draw(st.integers(0, 2**32)),
        world_size=draw(st.integers(1, 3)),
        drop_last=draw(st.booleans()),
    )
    probe = LMStream(np.arange(10**5), **kw)
    n_tokens = probe.min_tokens + draw(st.integers(0, 300))
    epoch = draw(st.integers(0, 5))
    return n_tokens, kw, epoch


def _ranks(n_tokens, kw, epoch):
    out = []
    for rank in range(kw["world_size"]):
        stream = LMStream(np.arange(n_tokens, dtype=np.int64), rank=rank, **kw)
        stream.set_epoch(epoch)
        batches = list(stream)
        assert len(batches) == len(stream) >= 1
        out.append(batches)
    assert len({len(b) for b in out}) == 1, "ranks must yield equal counts"
    return stream, out


@given(streams())
def test_y_is_x_shifted_and_coverage_is_exact(case):
    n_tokens, kw, epoch = case
    stream, ranks = _ranks(n_tokens, kw, epoch)
    b, t, w = kw["batch_size"], kw["num_steps"], kw["world_size"]
    o = stream.offset
    assert 0 <= o < t
    for batches in ranks:
        for x, y in batches:
            np.testing.assert_array_equal(y, x + 1)  # corpus[i] = i, so this is the shift
            assert x.min() > o - 1 and y.max() <= n_tokens - 1
    if kw["mode"] == "random":
        n = (n_tokens - 1 - o) // t
        slots = [ranks[g % w][g // w] for g in range(len(ranks[0]) * w)]
        for x, _ in slots:
            assert ((x[:, 0] - o) % t == 0).all() and x.shape[1] == t
        total = n // b if kw["drop_last"] else -(-n // b)
        used = min(total, len(slots))
        ys = np.sort(np.concatenate([y.ravel() for _, y in slots[:used]]))
        assert np.unique(ys).shape[0] == ys.shape[0]  # no target twice
        if kw["drop_last"]:
            assert all(x.shape[0] == b for x, _ in slots)
            assert len(slots) == (total // w) * w
        else:
            np.testing.assert_array_equal(ys, np.arange(o + 1, o + n * t + 1))
            for g in range(total, len(slots)):  # the tail repeats the first batches
                np.testing.assert_array_equal(slots[g][0], slots[g - total][0])
    else:
        length = (n_tokens - 1 - o) // (w * b)
        ys = []
        for r, batches in enumerate(ranks):
            starts = o + (r * b + np.arange(b)) * length
            np.testing.assert_array_equal(batches[0][0][:, 0], starts)
            col = 0
            for x, y in batches:
                np.testing.assert_array_equal(x[:, 0], starts + col)  # rows continue
                col += x.shape[1]
                ys.append(y.ravel())
            assert col == (length // t) * t if kw["drop_last"] else col == length
        ys = np.sort(np.concatenate(ys))
        if not kw["drop_last"]:
            np.testing.assert_array_equal(ys, np.arange(o + 1, o + w * b * length + 1))
        else:
            assert np.unique(ys).shape[0] == ys.shape[0] == w * b * (length // t) * t


@given(streams(), st.data())
def test_resume_at_a_random_position_equals_the_uninterrupted_run(case, data):
    n_tokens, kw, epoch = case
    tokens = (np.arange(n_tokens) * 7919 % 65521).astype(np.uint16)
    rank = data.draw(st.integers(0, kw["world_size"] - 1))
    full_stream = LMStream(tokens, rank=rank, **kw)
    full_stream.set_epoch(epoch)
    full = list(full_stream)
    p = data.draw(st.integers(0, len(full)))
    first = LMStream(tokens, rank=rank, **kw)
    first.set_epoch(epoch)
    it = iter(first)
    for _ in range(p):
        next(it)
    second = LMStream(tokens, rank=rank, **kw)
    second.load_state_dict(first.state_dict())
    rest = list(second)
    assert len(rest) == len(full) - p
    for (x, y), (fx, fy) in zip(rest, full[p:], strict=True):
        np.testing.assert_array_equal(x, fx)
        np.testing.assert_array_equal(y, fy)


@given(st.integers(1, 5000), st.integers(0, 2**64 - 1))
def test_feistel_is_a_permutation_for_random_sizes_and_keys(n, key):
    keys = K.feistel_round_keys(key)
    image = K.feistel_permute(np.arange(n, dtype=np.int64), n, keys)
    assert (np.bincount(image, minlength=n) == 1).all()
    some = np.arange(0, n, max(n // 50, 1), dtype=np.int64)
    np.testing.assert_array_equal(image[some], K.feistel_permute_reference(some, n, keys))
