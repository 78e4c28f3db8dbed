"""LMStream: kernels, bijection, modes, coverage per rank, epochs, resume, files and errors."""

from __future__ import annotations

import copy
import json
import pickle

import numpy as np
import pytest

from padless import _kernels as K
from padless.core import _rng
from padless.streams.lm import LMStream

# --------------------------------------------------------------------------- helpers


def positions(n: int) -> np.ndarray:
    """A corpus whose token at position i is i, so batches show where they were cut."""
    return np.arange(n, dtype=np.int64)


def run(stream: LMStream) -> list[tuple[np.ndarray, np.ndarray]]:
    batches = list(stream)
    assert len(batches) == len(stream) or stream._pending is None
    return batches


def all_ranks(tokens, world_size: int, **kw) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    return [list(LMStream(tokens, rank=r, world_size=world_size, **kw)) for r in range(world_size)]


def same_batches(a, b) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(xa, xb) and np.array_equal(ya, yb)
        for (xa, ya), (xb, yb) in zip(a, b, strict=True)
    )


# --------------------------------------------------------------------------- bijection

BIJECTION_SIZES = sorted(
    {1, 2, 3} | {m for k in range(1, 21) for m in (2**k - 1, 2**k, 2**k + 1) if m >= 1}
)


@pytest.mark.parametrize("seed", [0, 7])
def test_feistel_is_a_permutation_for_every_listed_size(seed):
    keys = K.feistel_round_keys(int(_rng.key(seed, 0, _rng.LM_ORDER)))
    for n in BIJECTION_SIZES:
        image = K.feistel_permute(np.arange(n, dtype=np.int64), n, keys)
        counts = np.bincount(image, minlength=n)
        assert image.min() >= 0 and counts.shape[0] == n, n
        assert (counts == 1).all(), f"not a permutation at n={n}"


def test_feistel_matches_reference_and_is_not_identity():
    rng = np.random.default_rng(3)
    for n in [1, 2, 5, 17, 1000, 65537, 3_000_001]:
        keys = K.feistel_round_keys(int(rng.integers(1 << 62)))
        ids = rng.integers(0, n, size=min(n, 300)).astype(np.int64)
        np.testing.assert_array_equal(
            K.feistel_permute(ids, n, keys), K.feistel_permute_reference(ids, n, keys)
        )
    keys = K.feistel_round_keys(5)
    image = K.feistel_permute(np.arange(1000, dtype=np.int64), 1000, keys)
    assert (image != np.arange(1000)).mean() > 0.9


def test_feistel_depends_on_the_key():
    a = K.feistel_permute(np.arange(500, dtype=np.int64), 500, K.feistel_round_keys(1))
    b = K.feistel_permute(np.arange(500, dtype=np.int64), 500, K.feistel_round_keys(2))
    assert not np.array_equal(a, b)


# --------------------------------------------------------------------------- gather kernels


@pytest.mark.parametrize(
    "src_dtype, out_dtype", [(np.uint16, np.int64), (np.uint32, np.int64), (np.uint16, np.uint16)]
)
def test_gather_kernels_match_references(src_dtype, out_dtype):
    rng = np.random.default_rng(11)
    src = rng.integers(0, np.iinfo(src_dtype).max, 5000).astype(src_dtype)
    for rows, w in [(1, 1), (3, 7), (8, 64)]:
        starts = rng.integers(0, src.shape[0] - w - 1, rows).astype(np.int64)
        got = (np.empty((rows, w), out_dtype), np.empty((rows, w), out_dtype))
        want = (np.empty((rows, w), out_dtype), np.empty((rows, w), out_dtype))
        K.lm_gather(src, starts, *got)
        K.lm_gather_reference(src, starts, *want)
        assert same_batches([got], [want])
        n = (src.shape[0] - 1 - 3) // w
        keys = K.feistel_round_keys(int(rng.integers(1 << 62)))
        first = int(rng.integers(0, 2 * n))
        K.lm_random_batch(src, first, n, 3, keys, *got)
        K.lm_random_batch_reference(src, first, n, 3, keys, *want)
        assert same_batches([got], [want])


# --------------------------------------------------------------------------- random mode


def test_random_y_is_x_shifted_and_rows_are_aligned_subsequences():
    t = 8
    stream = LMStream(positions(1000), batch_size=5, num_steps=t, seed=2)
    o = stream.offset
    for x, y in stream:
        assert x.dtype == np.int64 and x.shape == (5, t) and y.shape == x.shape
        np.testing.assert_array_equal(y, x + 1)
        np.testing.assert_array_equal(np.diff(x, axis=1), 1)
        assert ((x[:, 0] - o) % t == 0).all()


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_random_drop_last_false_targets_every_token_once_with_repeats_only_in_the_tail(
    world_size,
):
    n_tokens, b, t = 1016, 4, 7  # the last step needs repeats for world sizes 2 and 3
    kw = dict(batch_size=b, num_steps=t, seed=5, drop_last=False)
    ranks = all_ranks(positions(n_tokens), world_size, **kw)
    ref = LMStream(positions(n_tokens), world_size=world_size, **kw)
    o, n = ref.offset, (n_tokens - 1 - ref.offset) // t
    total = -(-n // b)
    assert {len(r) for r in ranks} == {len(ref)}
    slots = [ranks[g % world_size][g // world_size] for g in range(len(ref) * world_size)]
    ys = np.concatenate([y.ravel() for _, y in slots[:total]])
    np.testing.assert_array_equal(np.sort(ys), np.arange(o + 1, o + n * t + 1))
    # slots past the epoch's batches repeat its first batches
    assert ref.repeated == len(slots) - total
    assert (ref.repeated > 0) == (world_size > 1)
    for g in range(total, len(slots)):
        assert same_batches([slots[g]], [slots[g - total]])
    # the one smaller batch is the epoch's last
    sizes = [x.shape[0] for x, _ in slots[:total]]
    assert sizes[:-1] == [b] * (total - 1) and sizes[-1] == n - b * (total - 1)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_random_drop_last_true_gives_full_batches_and_disjoint_rank_targets(world_size):
    n_tokens, b, t = 1001, 4, 7
    kw = dict(batch_size=b, num_steps=t, seed=5, drop_last=True)
    ranks = all_ranks(positions(n_tokens), world_size, **kw)
    ref = LMStream(positions(n_tokens), world_size=world_size, **kw)
    n = (n_tokens - 1 - ref.offset) // t
    assert len(ref) == (n // b) // world_size
    ys = []
    for batches in ranks:
        assert len(batches) == len(ref)
        for x, y in batches:
            assert x.shape == (b, t)
            ys.append(y.ravel())
    all_y = np.concatenate(ys)
    assert np.unique(all_y).shape[0] == all_y.shape[0] == len(ref) * world_size * b * t
    assert ref.stats()["targets"] == all_y.shape[0]
    assert ref.dropped == n // b - len(ref) * world_size + (1 if n % b else 0)


def test_random_ranks_interleave_the_single_process_batch_order():
    kw = dict(batch_size=3, num_steps=5, seed=9, drop_last=True)
    single = list(LMStream(positions(800), **kw))
    for world_size in (2, 3):
        ranks = all_ranks(positions(800), world_size, **kw)
        for r, batches in enumerate(ranks):
            assert same_batches(batches, single[r::world_size][: len(batches)])


def test_epochs_and_seeds_change_offsets_and_orders():
    stream = LMStream(positions(5000), batch_size=4, num_steps=16, seed=1)
    offsets = {stream.offset_of(e) for e in range(20)}
    assert len(offsets) > 1 and offsets <= set(range(16))
    firsts = []
    for epoch in range(2):
        stream.set_epoch(epoch)
        firsts.append([(x[:, 0] - stream.offset) // 16 for x, _ in stream])
    order0, order1 = (np.concatenate(f) for f in firsts)
    assert not np.array_equal(order0[: len(order1)], order1[: len(order0)])
    other = LMStream(positions(5000), batch_size=4, num_steps=16, seed=2)
    assert not same_batches(list(other), list(LMStream(positions(5000), **_kw(stream))))


def _kw(stream: LMStream) -> dict:
    return dict(batch_size=stream.batch_size, num_steps=stream.num_steps, seed=stream.seed)


def test_seed_one_epoch_zero_differs_from_seed_zero_epoch_one():
    a = LMStream(positions(3000), batch_size=4, num_steps=8, seed=1)
    b = LMStream(positions(3000), batch_size=4, num_steps=8, seed=0)
    b.set_epoch(1)
    assert not same_batches(list(a), list(b))


# --------------------------------------------------------------------------- sequential mode


@pytest.mark.parametrize("world_size", [1, 2])
@pytest.mark.parametrize("drop_last", [True, False])
def test_sequential_continuity_and_coverage(world_size, drop_last):
    n_tokens, b, t = 997, 3, 6
    kw = dict(batch_size=b, num_steps=t, seed=4, mode="sequential", drop_last=drop_last)
    ranks = all_ranks(positions(n_tokens), world_size, **kw)
    ref = LMStream(positions(n_tokens), world_size=world_size, **kw)
    o = ref.offset
    length = (n_tokens - 1 - o) // (world_size * b)
    ys = []
    for r, batches in enumerate(ranks):
        assert len(batches) == len(ref)
        x0 = batches[0][0]
        np.testing.assert_array_equal(x0[:, 0], o + (r * b + np.arange(b)) * length)
        for (x, _), (nx, _) in zip(batches[:-1], batches[1:], strict=True):
            assert x.shape == (b, t)
            np.testing.assert_array_equal(nx[:, 0], x[:, -1] + 1)  # row i continues row i
        for x, y in batches:
            np.testing.assert_array_equal(y, x + 1)
            ys.append(y.ravel())
        last_cols = batches[-1][0].shape[1]
        assert last_cols == (t if drop_last or length % t == 0 else length % t)
    ys = np.sort(np.concatenate(ys))
    if drop_last:
        assert ys.shape[0] == (length // t) * t * world_size * b
        assert np.unique(ys).shape[0] == ys.shape[0]
    else:
        np.testing.assert_array_equal(ys, np.arange(o + 1, o + world_size * b * length + 1))


def test_sequential_offsets_change_between_epochs():
    stream = LMStream(positions(2000), batch_size=2, num_steps=32, mode="sequential")
    starts = set()
    for epoch in range(12):
        stream.set_epoch(epoch)
        x, _ = next(iter(stream))
        assert x[0, 0] == stream.offset
        starts.add(int(x[0, 0]))
    assert len(starts) > 1


# --------------------------------------------------------------------------- dtypes and sources


@pytest.mark.parametrize("out_dtype", ["int32", "uint16"])
def test_out_dtype_gives_the_same_values(out_dtype):
    tokens = np.random.default_rng(0).integers(0, 60000, 3000).astype(np.uint16)
    for mode in ("random", "sequential"):
        base = list(LMStream(tokens, batch_size=4, num_steps=9, mode=mode))
        small = list(LMStream(tokens, batch_size=4, num_steps=9, mode=mode, out_dtype=out_dtype))
        assert all(x.dtype == np.dtype(out_dtype) for x, _ in small)
        assert same_batches(base, [(x.astype(np.int64), y.astype(np.int64)) for x, y in small])


def test_batches_are_fresh_arrays():
    x0, _ = next(iter(LMStream(positions(500), batch_size=2, num_steps=4)))
    kept = x0.copy()
    for _ in LMStream(positions(500), batch_size=2, num_steps=4):
        pass
    np.testing.assert_array_equal(x0, kept)


@pytest.mark.parametrize("populate", [True, False])
def test_npy_raw_and_memmap_sources_match_the_array(tmp_path, populate):
    tokens = np.random.default_rng(1).integers(0, 2**32 - 1, 4000, dtype=np.uint32)
    np.save(tmp_path / "c.npy", tokens)
    tokens.tofile(tmp_path / "c.bin")
    kw = dict(batch_size=3, num_steps=11, seed=3, populate=populate)
    want = list(LMStream(tokens, **kw))
    assert same_batches(list(LMStream(tmp_path / "c.npy", **kw)), want)
    assert same_batches(list(LMStream(str(tmp_path / "c.bin"), dtype="uint32", **kw)), want)
    mm = np.load(tmp_path / "c.npy", mmap_mode="r")
    assert same_batches(list(LMStream(mm, **kw)), want)
    # same fingerprint whatever the source
    assert LMStream(mm, **kw).state_dict() == LMStream(tokens, **kw).state_dict()


def test_pickled_file_stream_remaps_and_keeps_its_state(tmp_path):
    tokens = np.arange(3000, dtype=np.uint16)
    tokens.tofile(tmp_path / "c.u16")
    stream = LMStream(tmp_path / "c.u16", dtype=np.uint16, batch_size=2, num_steps=5)
    stream.set_epoch(3)
    it = iter(stream)
    next(it)
    clone = pickle.loads(pickle.dumps(stream))
    assert clone.epoch == 3 and clone.state_dict() == stream.state_dict()
    clone.load_state_dict(stream.state_dict())
    assert same_batches(list(clone), list(it))


# --------------------------------------------------------------------------- resume

RESUME_CASES = [
    ("random", 2, True),
    ("random", 2, False),
    ("random", 1, False),
    ("sequential", 2, False),
    ("sequential", 1, True),
]


@pytest.mark.parametrize("mode, world_size, drop_last", RESUME_CASES)
def test_resume_equals_uninterrupted_run_at_every_position(mode, world_size, drop_last):
    tokens = np.random.default_rng(2).integers(0, 1000, 700).astype(np.uint16)
    kw = dict(batch_size=3, num_steps=5, mode=mode, seed=8, world_size=world_size)
    kw["drop_last"] = drop_last
    for rank in range(world_size):
        stream = LMStream(tokens, rank=rank, **kw)
        stream.set_epoch(2)
        full = list(stream)
        assert len(full) == len(stream) >= 3
        for p in range(len(full) + 1):
            first = LMStream(tokens, rank=rank, **kw)
            first.set_epoch(2)
            it = iter(first)
            for _ in range(p):
                next(it)
            state = json.loads(json.dumps(first.state_dict()))
            assert state["position"] == p * world_size and state["epoch"] == 2
            saved = copy.deepcopy(state)
            second = LMStream(tokens, rank=rank, **kw)
            second.load_state_dict(state)
            assert state == saved  # not mutated
            assert len(second) == len(full) - p
            assert same_batches(list(second), full[p:])


def test_consumed_counts_what_the_loop_received():
    stream = LMStream(positions(900), batch_size=2, num_steps=5, world_size=2, rank=1)
    it = iter(stream)
    for _ in range(4):
        next(it)
    assert stream.state_dict()["position"] == 8
    assert stream.state_dict(consumed=2)["position"] == 4
    with pytest.raises(ValueError, match="consumed must be <= the 4 batches yielded so far"):
        stream.state_dict(consumed=5)


def test_iteration_clears_the_loaded_position_and_set_epoch_resets_it():
    stream = LMStream(positions(900), batch_size=2, num_steps=5)
    full = list(stream)
    state = stream.state_dict()
    assert state["position"] == len(full)
    stream.set_epoch(1)
    assert stream.state_dict()["position"] == 0
    state["position"] = 3
    with pytest.raises(ValueError, match=r"state is of epoch 0 .* set_epoch\(1\) was called"):
        stream.load_state_dict(state)  # it would repeat epoch 0 under epoch 1's name
    stream = LMStream(positions(900), batch_size=2, num_steps=5)
    stream.load_state_dict(state)
    assert stream.epoch == 0 and len(stream) == len(full) - 3
    assert stream.state_dict()["position"] == 3
    assert same_batches(list(stream), full[3:])
    assert len(stream) == len(full)  # cleared: the next pass is whole
    stream.load_state_dict(state)
    with pytest.raises(ValueError, match=r"set_epoch\(4\) after loading a state of epoch 0"):
        stream.set_epoch(4)  # would skip the rest of epoch 0
    state["position"] = len(full)  # at its epoch's end: the next epoch starts at 0
    stream.load_state_dict(state)
    stream.set_epoch(1)
    assert len(list(stream)) == len(full) and stream.state_dict()["epoch"] == 1


def test_random_state_resumes_at_another_world_size():
    kw = dict(batch_size=2, num_steps=5, seed=3, drop_last=True)
    single = list(LMStream(positions(900), **kw))
    first = LMStream(positions(900), world_size=2, rank=0, **kw)
    it = iter(first)
    for _ in range(5):
        next(it)
    state = first.state_dict()
    assert state["position"] == 10
    rest = all_ranks(positions(900), 3, **kw)
    for r in range(3):
        s = LMStream(positions(900), world_size=3, rank=r, **kw)
        s.load_state_dict(state)
        rest[r] = list(s)
        assert same_batches(rest[r], single[10 + r :: 3][: len(rest[r])])


def test_resume_refusals():
    kw = dict(batch_size=2, num_steps=5)
    stream = LMStream(positions(900), **kw)
    state = stream.state_dict()
    with pytest.raises(ValueError, match="fingerprint"):
        LMStream(positions(901), **kw).load_state_dict(state)
    with pytest.raises(ValueError, match="fingerprint"):
        LMStream(positions(900), batch_size=3, num_steps=5).load_state_dict(state)
    with pytest.raises(ValueError, match="seed=0, this LMStream has seed=1"):
        LMStream(positions(900), seed=1, **kw).load_state_dict(state)
    with pytest.raises(ValueError, match=r"state\['position'\] must be <="):
        stream.load_state_dict({**state, "position": 10**6})
    seq = LMStream(positions(900), mode="sequential", world_size=2, **kw)
    with pytest.raises(ValueError, match="world_size=1 in sequential mode|equal world_size=1"):
        LMStream(positions(900), mode="sequential", **kw).load_state_dict(seq.state_dict())
    with pytest.raises(ValueError, match="missing keys"):
        stream.load_state_dict({"seed": 0})


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(batch_size=0, num_steps=4), ValueError, "batch_size must be a positive int, got 0"),
        (dict(batch_size=2, num_steps=-1), ValueError, "num_steps must be a positive int, got -1"),
        (dict(batch_size=2.0, num_steps=4), TypeError, "batch_size must be an int"),
        (dict(batch_size=2, num_steps=4, mode="shuffle"), ValueError, "mode must be one of"),
        (dict(batch_size=2, num_steps=4, rank=2, world_size=2), ValueError, "rank must be <"),
        (dict(batch_size=2, num_steps=4, seed=-1), ValueError, "seed must be a non-negative"),
        (dict(batch_size=2, num_steps=4, drop_last=1), TypeError, "drop_last must be a bool"),
        (dict(batch_size=2, num_steps=4, out_dtype="float32"), ValueError, "out_dtype must be"),
        (dict(batch_size=2, num_steps=4, dtype="int32"), ValueError, "dtype must match"),
    ],
)
def test_argument_errors_name_parameter_rule_and_value(kwargs, error, message):
    with pytest.raises(error, match=message):
        LMStream(positions(1000), **kwargs)


def test_too_short_corpus_says_how_many_tokens_are_needed():
    with pytest.raises(ValueError, match="needs at least 50 tokens, got 49"):
        LMStream(positions(49), batch_size=4, num_steps=10)  # 10 * (4 + 1)
    with pytest.raises(ValueError, match="needs at least 20 tokens, got 19"):
        LMStream(positions(19), batch_size=4, num_steps=10, drop_last=False)
    with pytest.raises(ValueError, match="needs at least 14 tokens, got 13"):
        LMStream(positions(13), batch_size=4, num_steps=10, mode="sequential", drop_last=False)
    with pytest.raises(ValueError, match="too short"):
        LMStream(np.zeros(0, np.uint16), batch_size=1, num_steps=1)
    # exactly the minimum works at every offset
    minimal = [("random", True, 50), ("random", False, 20), ("sequential", True, 50)]
    for mode, drop_last, n in minimal + [("sequential", False, 14)]:
        stream = LMStream(positions(n), batch_size=4, num_steps=10, mode=mode, drop_last=drop_last)
        assert stream.min_tokens == n
        for epoch in range(30):
            stream.set_epoch(epoch)
            assert len(list(stream)) == len(stream) >= 1


def test_token_type_errors(tmp_path):
    with pytest.raises(TypeError, match="float dtype float32"):
        LMStream(np.ones(100, np.float32), batch_size=1, num_steps=4)
    with pytest.raises(TypeError, match="integer dtype"):
        LMStream(np.ones(100, bool), batch_size=1, num_steps=4)
    with pytest.raises(ValueError, match=r"tokens must be 1-D, got shape \(10, 10\)"):
        LMStream(np.ones((10, 10), np.int64), batch_size=1, num_steps=4)
    with pytest.raises(TypeError, match="tokens must be a 1-D integer numpy array"):
        LMStream(3.5, batch_size=1, num_steps=4)
    with pytest.raises(ValueError, match="native byte order"):
        LMStream(np.arange(100, dtype=">u2"), batch_size=1, num_steps=4)
    with pytest.raises(ValueError, match="safe cast"):
        LMStream(np.arange(100, dtype=np.uint32), batch_size=1, num_steps=4, out_dtype="int32")
    path = tmp_path / "c.bin"
    np.arange(101, dtype=np.uint16).tofile(path)
    with pytest.raises(TypeError, match="dtype is required for a raw token file"):
        LMStream(path, batch_size=1, num_steps=4)
    with pytest.raises(TypeError, match="float dtype float16"):
        LMStream(path, dtype=np.float16, batch_size=1, num_steps=4)
    with pytest.raises(ValueError, match="multiple of the uint32 itemsize 4, got 202 bytes"):
        LMStream(path, dtype=np.uint32, batch_size=1, num_steps=4)
    with pytest.raises(ValueError, match="must be an existing file"):
        LMStream(tmp_path / "missing.bin", dtype=np.uint16, batch_size=1, num_steps=4)
    np.save(tmp_path / "f.npy", np.ones(100, np.float64))
    with pytest.raises(TypeError, match="float dtype float64"):
        LMStream(tmp_path / "f.npy", batch_size=1, num_steps=4)
    np.save(tmp_path / "i.npy", np.ones(100, np.int32))
    with pytest.raises(ValueError, match="must match the .npy file's dtype int32"):
        LMStream(tmp_path / "i.npy", dtype=np.int64, batch_size=1, num_steps=4)
    (tmp_path / "bad.npy").write_bytes(b"not numpy at all")
    with pytest.raises(ValueError, match="not a valid .npy file"):
        LMStream(tmp_path / "bad.npy", batch_size=1, num_steps=4)


def test_stats_and_repr():
    stream = LMStream(positions(1001), batch_size=4, num_steps=7, world_size=3, drop_last=False)
    stats = stream.stats()
    assert stats["coverage"] == 1.0 and stats["batches_per_rank"] == len(stream)
    assert stats["targets"] == ((1000 - stream.offset) // 7) * 7
    assert "mode='random'" in repr(stream) and "tokens=1001" in repr(stream)


def test_negative_token_ids_are_refused():
    """Issue 13.7: a corpus with a negative id fails clearly when that batch is made."""
    tokens = np.arange(200, dtype=np.int32)
    tokens[50] = -3
    stream = LMStream(tokens, batch_size=2, num_steps=8, mode="sequential", drop_last=False)
    with pytest.raises(ValueError, match="tokens must be non-negative token ids, got -3"):
        list(stream)


def test_tail_and_oversize_counts_have_two_keys():
    """Issue 13.7: the tail policy's "dropped" and a plan's own "dropped" do not overwrite."""
    from padless import PackingSampler

    s = PackingSampler([5, 30, 6, 7, 2], capacity=8, oversize="drop", world_size=2, drop_last=True)
    st = s.stats()
    assert st["dropped"] == s.dropped and st["plan_dropped"] == 1


# --------------------------------------------------------------------------- raw .npy and stores


def test_raw_npy_without_header_reads_with_dtype(tmp_path):
    tokens = np.random.default_rng(2).integers(0, 50000, 3001, dtype=np.uint16)
    tokens.tofile(tmp_path / "part-0.npy")  # OLMo: a raw memmap named .npy
    kw = dict(batch_size=3, num_steps=11, seed=5)
    want = list(LMStream(tokens, **kw))
    stream = LMStream(tmp_path / "part-0.npy", dtype="uint16", **kw)
    assert same_batches(list(stream), want)
    assert same_batches(list(pickle.loads(pickle.dumps(stream))), want)
    with pytest.raises(ValueError, match="looks like a raw token file.*pass dtype="):
        LMStream(tmp_path / "part-0.npy", **kw)
    with pytest.raises(ValueError, match="multiple of the uint32 itemsize 4, got 6002 bytes"):
        LMStream(tmp_path / "part-0.npy", dtype="uint32", batch_size=1, num_steps=4)


def test_stream_over_a_token_store(tmp_path):
    from padless.io.tokens import RawTokens

    tokens = np.random.default_rng(3).integers(1, 1000, 4000, dtype=np.int32)
    tokens[::97] = 0
    tokens.tofile(tmp_path / "c.bin")
    store = RawTokens(tmp_path / "c.bin", dtype="int32", eos=0)
    kw = dict(batch_size=2, num_steps=13, seed=1, out_dtype="int32")
    want = list(LMStream(tokens, **kw))
    stream = LMStream(store, **kw)
    assert same_batches(list(stream), want) and "RawTokens(" in repr(stream)
    blob = pickle.dumps(stream)
    assert len(blob) < 4000  # the store pickles as its path, not its tokens
    assert same_batches(list(pickle.loads(blob)), want)
    with pytest.raises(ValueError, match="dtype must match the tokens array's dtype int32"):
        LMStream(store, dtype="uint16", **kw)


def test_a_real_npy_is_found_by_its_content_under_any_name(tmp_path):
    """A ``np.save``d file renamed (``shard-000.tokens``) is read by its header, as RawTokens
    reads it: its 128 header bytes are not trained on."""
    tokens = np.arange(1, 1001, dtype=np.uint16)
    path = tmp_path / "shard-000.tokens"
    with open(path, "wb") as fh:
        np.save(fh, tokens)
    kw = {"batch_size": 2, "num_steps": 8, "mode": "sequential", "seed": 0}
    for dtype in (None, "uint16"):
        stream = LMStream(path, dtype=dtype, **kw)
        assert stream.num_tokens == 1000
        want = list(LMStream(tokens, **kw))
        for (x, y), (wx, wy) in zip(stream, want, strict=True):
            np.testing.assert_array_equal(x, wx)
            np.testing.assert_array_equal(y, wy)
    with pytest.raises(ValueError, match="must match the .npy file's dtype uint16"):
        LMStream(path, dtype="int32", **kw)


def test_a_truncated_npy_is_named_with_its_sizes(tmp_path):
    path = tmp_path / "part-00000.npy"
    np.save(path, np.arange(10_000, dtype=np.uint16))
    with open(path, "r+b") as fh:
        fh.truncate(5000)
    with pytest.raises(ValueError, match=r"part-00000.npy' is truncated: .* promises 10000 tokens"):
        LMStream(path, batch_size=1, num_steps=4)
