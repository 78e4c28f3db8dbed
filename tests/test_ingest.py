"""The ingest kernels (eos_offsets, gather_tokens, segment_positions) and RawTokens."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from padless import _kernels as K
from padless.io.tokens import RawTokens, open_tokens

DTYPES = [np.dtype(t) for t in ("uint8", "int8", "int16", "uint16", "int32", "uint32", "int64")]


def token_arrays(dtype: np.dtype, max_size: int = 300) -> st.SearchStrategy[np.ndarray]:
    """Tokens drawn from a few values (so eos is frequent), near the dtype's ends included."""
    info = np.iinfo(dtype)
    values = st.sampled_from(sorted({0, 1, 2, info.min, info.max, info.max - 1}))
    return st.lists(values, max_size=max_size).map(lambda v: np.array(v, dtype=dtype))


# --------------------------------------------------------------------------- eos_offsets


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@settings(max_examples=15)
@given(data=st.data())
def test_eos_offsets_matches_reference(dtype, data):
    tokens = data.draw(token_arrays(dtype))
    info = np.iinfo(dtype)
    eos = data.draw(st.sampled_from([0, 1, info.min, info.max]))
    got = K.eos_offsets(tokens, eos)
    assert got.dtype == np.int64
    assert np.array_equal(got, K.eos_offsets_reference(tokens, eos))
    # the documents tile the tokens and each but the last ends with eos
    docs = [tokens[a:b] for a, b in zip(got[:-1], got[1:], strict=True)]
    assert sum(len(d) for d in docs) == len(tokens) and all(len(d) for d in docs)
    assert all(d[-1] == eos for d in docs[:-1])


@pytest.mark.parametrize(
    ("tokens", "want"),
    [
        ([], [0]),  # empty: no documents
        ([3, 4, 5], [0, 3]),  # no eos: one document, the whole file
        ([0, 3, 4], [0, 1, 3]),  # eos first: a document of just eos
        ([3, 4, 0], [0, 3]),  # eos last: its end is the file's end, not added twice
        ([3, 0, 0, 0, 4], [0, 2, 3, 4, 5]),  # consecutive eos: one-token documents
        ([0], [0, 1]),
        ([0, 0], [0, 1, 2]),
    ],
)
def test_eos_offsets_edge_cases(tokens, want):
    assert K.eos_offsets(np.array(tokens, dtype=np.uint16), 0).tolist() == want


def test_eos_offsets_do_not_depend_on_the_thread_count():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 300, 5 << 20, dtype=np.uint16)  # 5 parts of 2**20 at most
    tokens[-1] = 7  # the last document has no eos
    want = K.eos_offsets_reference(tokens[:5000], 7)
    assert np.array_equal(K.eos_offsets(tokens[:5000], 7, threads=3), want)
    runs = [K.eos_offsets(tokens, 7, threads=t) for t in (1, 2, 3, 4, 7, None)]
    ends = np.flatnonzero(tokens == 7) + 1
    assert np.array_equal(runs[0], np.concatenate([[0], ends]))  # last token is eos
    assert all(np.array_equal(r, runs[0]) for r in runs[1:])


def test_eos_offsets_errors():
    tokens = np.array([1, 2, 3], dtype=np.uint8)
    with pytest.raises(ValueError, match=r"eos must be a token of dtype uint8 \(in \[0, 255\]\)"):
        K.eos_offsets(tokens, 256)
    with pytest.raises(ValueError, match="got -1"):
        K.eos_offsets(tokens, -1)
    with pytest.raises(TypeError, match="eos must be an integer token id"):
        K.eos_offsets(tokens, 1.0)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        K.eos_offsets(tokens, 1, threads=0)
    with pytest.raises(TypeError, match="dtypes uint8, int8"):
        K.eos_offsets(np.ones(3, np.float32), 1)
    with pytest.raises(TypeError, match="1-D numpy array"):
        K.eos_offsets(np.ones((2, 2), np.int32), 1)


# --------------------------------------------------------------------------- gather_tokens


@st.composite
def gathers(draw, dtype):
    """Tokens, a valid batch of items (starts, lengths, dest) and the output's size."""
    tokens = draw(token_arrays(dtype, 200))
    n = len(tokens)
    items = draw(st.integers(0, 6))
    starts, lengths, dest, at = [], [], [], 0
    for _ in range(items):
        s = draw(st.integers(0, n))
        length = draw(st.integers(0, n - s))
        at += draw(st.integers(0, 5))  # a gap before the item (padding)
        starts.append(s)
        lengths.append(length)
        dest.append(at)
        at += length
    size = at + draw(st.integers(0, 5))
    as64 = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
    return tokens, as64(starts), as64(lengths), as64(dest), size


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("out_dtype", ["int64", "int32"])
@settings(max_examples=10)
@given(data=st.data())
def test_gather_tokens_matches_reference(dtype, out_dtype, data):
    tokens, starts, lengths, dest, size = data.draw(gathers(dtype))
    if out_dtype == "int32" and dtype in (np.uint32, np.int64):
        tokens = (tokens % 1000).astype(dtype)  # values int32 holds (out of range: below)
    pad = data.draw(st.sampled_from([-1, 0, 2**31 - 1]))
    got = np.full(size, 99, dtype=out_dtype)
    want = np.full(size, 99, dtype=out_dtype)
    K.gather_tokens(tokens, starts, lengths, dest, got, pad)
    K.gather_tokens_reference(tokens, starts, lengths, dest, want, pad)
    assert np.array_equal(got, want)


def test_gather_tokens_reads_a_memmap_and_fills_a_2d_batch(tmp_path):
    tokens = np.arange(1000, dtype=np.uint16)
    tokens.tofile(tmp_path / "t.bin")
    mm = np.memmap(tmp_path / "t.bin", dtype=np.uint16, mode="r")
    batch = np.empty((2, 8), dtype=np.int64)
    K.gather_tokens(
        mm, np.array([10, 500]), np.array([5, 8]), np.array([0, 8]), batch.reshape(-1), 0
    )
    assert batch.tolist() == [[10, 11, 12, 13, 14, 0, 0, 0], list(range(500, 508))]


BAD_GATHERS = [
    # (starts, lengths, dest, message)
    ([0, 5], [2, -1], [0, 4], r"item 1: lengths\[1\] must be >= 0, got -1"),
    ([0, -3], [2, 1], [0, 4], r"item 1: starts\[1\] must be >= 0, got -3"),
    ([0, 8], [2, 3], [0, 4], r"item 1: starts\[1\] \+ lengths\[1\] = 8 \+ 3 must be <= the 10"),
    ([0, 2], [2, 1], [-1, 4], r"item 0: dest\[0\] must be >= 0, got -1"),
    ([0, 2], [3, 1], [0, 2], r"item 1: dest\[1\] = 2 must be >= the end of item 0, 3"),
    ([0, 2], [2, 1], [4, 0], r"item 1: dest\[1\] = 0 must be >= the end of item 0, 6"),
    ([0, 2], [2, 3], [0, 6], r"item 1: dest\[1\] \+ lengths\[1\] = 6 \+ 3 must be <= out's 8"),
    ([0], [1, 2], [0], "the same size"),
    ([2**62], [2**62], [0], r"item 0: starts\[0\] \+ lengths\[0\]"),  # no wrap past int64
]


@pytest.mark.parametrize(("starts", "lengths", "dest", "message"), BAD_GATHERS)
def test_gather_tokens_bounds_are_checked_before_writing(starts, lengths, dest, message):
    tokens = np.arange(10, dtype=np.int16)
    out = np.full(8, 7, dtype=np.int64)
    a = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
    with pytest.raises(ValueError, match=message):
        K.gather_tokens(tokens, a(starts), a(lengths), a(dest), out, -1)
    assert (out == 7).all()  # nothing written


def test_gather_tokens_value_and_dtype_errors():
    one = np.array([0], dtype=np.int64)
    out = np.full(3, 7, dtype=np.int32)
    for tokens in (np.array([1, 2**31], np.uint32), np.array([1, -(2**31) - 1], np.int64)):
        with pytest.raises(ValueError, match="item 0 holds a token outside int32's range"):
            K.gather_tokens(tokens, one, np.array([2]), one, out, 0)
        assert (out == 7).all()
    fits = np.array([1, 2**31 - 1], np.uint32)
    K.gather_tokens(fits, one, np.array([2]), one, out, 0)
    assert out.tolist() == [1, 2**31 - 1, 0]
    with pytest.raises(ValueError, match=r"pad must fit out's dtype int32"):
        K.gather_tokens(fits, one, one, one, out, 2**31)
    with pytest.raises(TypeError, match="out must be an int64 or int32 array, got uint16"):
        K.gather_tokens(fits, one, one, one, np.zeros(3, np.uint16), 0)
    with pytest.raises(TypeError):  # read-only out: never a silent copy
        ro = np.zeros(3, np.int64)
        ro.flags.writeable = False
        K.gather_tokens(fits, one, one, one, ro, 0)
    with pytest.raises(TypeError, match="tokens must be an array of uint8"):
        K.gather_tokens(np.ones(3, np.float64), one, one, one, np.zeros(3, np.int64), 0)


# --------------------------------------------------------------------------- segment_positions


@settings(max_examples=20)
@given(
    st.lists(st.integers(0, 20), max_size=12),
    st.sampled_from(["int64", "int32", "uint32", "uint16"]),
    st.integers(-5, 5),
)
def test_segment_positions_matches_reference(lengths, dtype, start):
    lens = np.array(lengths, dtype=dtype)
    got = np.full(sum(lengths), -9, np.int64)
    want = got.copy()
    K.segment_positions(lens, got, start)
    K.segment_positions_reference(lens, want, start)
    assert np.array_equal(got, want)


def test_segment_positions_errors():
    with pytest.raises(ValueError, match=r"sum\(lengths\) = 5 entries, got 4"):
        K.segment_positions(np.array([2, 3]), np.zeros(4, np.int64))
    with pytest.raises(ValueError, match=r"lengths\[1\] must be >= 0, got -1"):
        K.segment_positions(np.array([2, -1]), np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="exceeds int64"):
        K.segment_positions(np.array([3]), np.zeros(3, np.int64), 2**63 - 2)
    with pytest.raises(TypeError):  # int32 out: never a converted copy
        K.segment_positions(np.array([2]), np.zeros(2, np.int32))


# --------------------------------------------------------------------------- RawTokens


def write(path, docs, dtype, eos):
    tokens = np.concatenate([np.array([*d, eos], dtype=dtype) for d in docs])
    tokens.tofile(path)
    return tokens


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_raw_tokens_round_trip(tmp_path, dtype):
    info = np.iinfo(dtype)
    eos = int(info.max)
    docs = [[1, 2, 3], [], [int(info.min), 5], [6] * 40]
    tokens = write(tmp_path / "c.bin", docs, dtype, eos)
    store = RawTokens(tmp_path / "c.bin", dtype=dtype, eos=eos)
    assert len(store) == 4 and store.dtype == dtype and store.path == str(tmp_path / "c.bin")
    assert store.lengths.tolist() == [4, 1, 3, 41] and store.lengths.dtype == np.int64
    for i, d in enumerate(docs):
        assert store[i].tolist() == [*d, eos]
    assert np.array_equal(store.tokens, tokens) and not store.tokens.flags.writeable
    starts = store.starts(np.array([3, 0, 2]))
    assert starts.tolist() == [8, 0, 5] and starts.dtype == np.int64
    assert store[-1].tolist() == [6] * 40 + [eos]
    with pytest.raises(IndexError):
        store[4]
    with pytest.raises(ValueError, match=r"items must be in \[0, 4\).*items\[1\] = 4"):
        store.starts(np.array([0, 4]))
    assert open_tokens(tmp_path / "c.bin", dtype=dtype, eos=eos).lengths.tolist() == [4, 1, 3, 41]


def test_raw_tokens_last_document_without_eos_and_empty_file(tmp_path):
    np.array([5, 0, 6, 7], np.uint16).tofile(tmp_path / "a.bin")
    store = RawTokens(tmp_path / "a.bin", dtype="uint16", eos=0)
    assert [d.tolist() for d in store] == [[5, 0], [6, 7]]
    (tmp_path / "e.bin").write_bytes(b"")
    empty = RawTokens(tmp_path / "e.bin", dtype="uint16", eos=0)
    assert len(empty) == 0 and empty.tokens.size == 0 and empty.lengths.size == 0


def test_raw_tokens_cache_is_written_once_and_reused(tmp_path):
    path = tmp_path / "c.bin"
    write(path, [[1, 2], [3]], np.uint16, 0)
    first = RawTokens(path, dtype="uint16", eos=0)
    cache = first.cache_path
    assert cache == f"{path}.uint16.eos0.offsets.npy" and os.path.isfile(cache)
    assert np.load(cache).tolist() == [0, 3, 5]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(["c.bin", os.path.basename(cache)])  # no temporary file left
    stamp = os.stat(cache).st_mtime_ns
    second = RawTokens(path, dtype="uint16", eos=0)
    assert isinstance(second.offsets, np.memmap)  # mapped from the file, not recomputed
    assert os.stat(cache).st_mtime_ns == stamp and second.lengths.tolist() == [3, 2]
    # another eos or dtype: another file
    assert RawTokens(path, dtype="uint16", eos=3).cache_path != cache
    # cache=False: neither read nor written
    fresh = RawTokens(path, dtype="uint16", eos=1, cache=False)
    assert fresh.cache_path is None and not os.path.exists(f"{path}.uint16.eos1.offsets.npy")


def test_raw_tokens_stale_or_foreign_cache_is_recomputed(tmp_path):
    path = tmp_path / "c.bin"
    write(path, [[1, 2], [3]], np.uint16, 0)
    cache = RawTokens(path, dtype="uint16", eos=0).cache_path
    # the tokens change (newer than the cache): recomputed and rewritten
    write(path, [[1], [2], [3, 4, 5]], np.uint16, 0)
    later = os.stat(cache).st_mtime_ns + 10**9
    os.utime(path, ns=(later, later))
    store = RawTokens(path, dtype="uint16", eos=0)
    assert store.lengths.tolist() == [2, 2, 4] and np.load(cache).tolist() == [0, 2, 4, 8]
    # foreign or corrupt files at the cache's name, newer than the tokens: never trusted
    bad = [
        np.array([0, 2, 8], np.int32),  # wrong dtype
        np.array([1, 2, 8], np.int64),  # first is not 0
        np.array([0, 2, 7], np.int64),  # last is not the token count
        np.array([0, 5, 4, 8], np.int64),  # decreasing
        np.array([0, 0, 2, 4, 8], np.int64),  # an empty document (an end before any token)
        np.array([0, 3, 8], np.int64),  # an end that does not follow an eos
        np.array([[0, 8]], np.int64),  # 2-D
    ]
    for offsets in bad:
        np.save(cache, offsets)
        assert RawTokens(path, dtype="uint16", eos=0).lengths.tolist() == [2, 2, 4], offsets
    with open(cache, "wb") as fh:
        fh.write(b"\x93NUMPY garbage")
    assert RawTokens(path, dtype="uint16", eos=0).lengths.tolist() == [2, 2, 4]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_raw_tokens_in_an_unwritable_folder_keep_offsets_in_memory(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    write(folder / "c.bin", [[1, 2], [3]], np.uint16, 0)
    folder.chmod(0o555)
    try:
        store = RawTokens(folder / "c.bin", dtype="uint16", eos=0)
        assert store.cache_path is None and store.lengths.tolist() == [3, 2]
        assert sorted(p.name for p in folder.iterdir()) == ["c.bin"]
    finally:
        folder.chmod(0o755)


def test_raw_tokens_pickle_maps_again(tmp_path):
    path = tmp_path / "c.bin"
    write(path, [[1, 2], [3] * 500], np.int32, -1)
    store = RawTokens(path, dtype="int32", eos=-1)
    blob = pickle.dumps(store)
    assert len(blob) < 500  # the path and settings, never the tokens
    clone = pickle.loads(blob)
    assert isinstance(clone.tokens, np.memmap) and clone.lengths.tolist() == [3, 501]
    assert clone[1].tolist() == [3] * 500 + [-1]


def test_raw_tokens_real_npy_header(tmp_path):
    tokens = np.array([4, 0, 5, 6, 0], np.uint16)
    np.save(tmp_path / "c.npy", tokens)
    store = RawTokens(tmp_path / "c.npy", eos=0)  # dtype from the header
    assert store.dtype == np.uint16 and [d.tolist() for d in store] == [[4, 0], [5, 6, 0]]
    assert RawTokens(tmp_path / "c.npy", dtype="uint16", eos=0).lengths.tolist() == [2, 3]
    with pytest.raises(ValueError, match="must match the .npy header's dtype uint16"):
        RawTokens(tmp_path / "c.npy", dtype="int32", eos=0)
    tokens.tofile(tmp_path / "raw.npy")  # an OLMo .npy: no header, needs dtype
    assert RawTokens(tmp_path / "raw.npy", dtype="uint16", eos=0).lengths.tolist() == [2, 3]
    with pytest.raises(TypeError, match="dtype is required for a raw token file"):
        RawTokens(tmp_path / "raw.npy", eos=0)


def test_raw_tokens_hostile_input(tmp_path):
    path = tmp_path / "c.bin"
    path.write_bytes(b"\x01\x00\x02")
    with pytest.raises(ValueError, match="multiple of the uint16 itemsize 2, got 3 bytes"):
        RawTokens(path, dtype="uint16", eos=0)
    with pytest.raises(TypeError, match="float dtype float32"):
        RawTokens(path, dtype="float32", eos=0)
    with pytest.raises(TypeError, match="must be one of uint8"):
        RawTokens(path, dtype="uint64", eos=0)
    with pytest.raises(ValueError, match=r"eos must be a token of dtype uint8 \(in \[0, 255\]\)"):
        RawTokens(path, dtype="uint8", eos=300)
    with pytest.raises(ValueError, match="must be an existing token file"):
        RawTokens(tmp_path / "missing.bin", dtype="uint8", eos=0)
    np.save(tmp_path / "f.npy", np.ones(4, np.float64))
    with pytest.raises(TypeError, match="float dtype float64"):
        RawTokens(tmp_path / "f.npy", eos=0)
    np.save(tmp_path / "t.npy", np.ones(100, np.uint16))
    (tmp_path / "t.npy").write_bytes((tmp_path / "t.npy").read_bytes()[:-10])
    with pytest.raises(ValueError, match="is truncated: its header promises 100 tokens"):
        RawTokens(tmp_path / "t.npy", eos=0)
    np.save(tmp_path / "m.npy", np.ones((2, 2), np.uint16))
    with pytest.raises(ValueError, match=r"must be 1-D, got shape \(2, 2\)"):
        RawTokens(tmp_path / "m.npy", eos=0)


def test_open_tokens_needs_eos_for_a_raw_file(tmp_path):
    np.array([1, 0], np.uint16).tofile(tmp_path / "c.bin")
    with pytest.raises(TypeError, match="eos is required for a raw token file"):
        open_tokens(tmp_path / "c.bin", dtype="uint16")
    with pytest.raises(TypeError, match="dtype is required"):
        open_tokens(tmp_path / "c.bin", eos=0)
    with pytest.raises(ValueError, match="documents=True is for an indexed dataset"):
        open_tokens(tmp_path / "c.bin", dtype="uint16", eos=0, documents=True)
    assert isinstance(open_tokens(tmp_path / "c.bin", dtype="uint16", eos=0), RawTokens)


def test_raw_tokens_keep_offsets_in_memory_when_the_cache_cannot_be_written(tmp_path):
    # a folder at the cache's name: the write fails as in a read-only folder (also for root)
    write(tmp_path / "c.bin", [[1, 2], [3]], np.uint16, 0)
    (tmp_path / "c.bin.uint16.eos0.offsets.npy").mkdir()
    store = RawTokens(tmp_path / "c.bin", dtype="uint16", eos=0)
    assert store.cache_path is None and store.lengths.tolist() == [3, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.bin", "c.bin.uint16.eos0.offsets.npy"]


# --------------------------------------------------------------------------- issue 39


def _unsampled_boundary(store: RawTokens) -> int:
    """An inner document end that the old cache check (64 sampled ends) never looked at."""
    inner = np.asarray(store.offsets[1:-1])
    picks = set(np.unique(np.linspace(0, inner.size - 1, 64).astype(np.int64)).tolist())
    return int(inner[next(i for i in range(inner.size) if i not in picks)])


def _corpus(path, n=300):
    rng = np.random.default_rng(39)
    docs = [rng.integers(1, 500, int(k)).tolist() for k in rng.integers(1, 20, n)]
    return write(path, docs, np.uint16, 0)


def test_raw_tokens_cache_sees_a_replace_with_same_size_and_restored_mtime(tmp_path):
    """Issue 39.2: `cp -p` (shutil.copy2) of a same-size file whose mtime is the old one over
    the tokens: the cache was not older, 64 sampled ends still followed an eos, and the old
    boundaries were served. The cache records the file's identity; the copy changes it."""
    import shutil

    path = tmp_path / "c.bin"
    tokens = _corpus(path)
    first = RawTokens(path, dtype="uint16", eos=0)
    assert len(first) == 300
    end = _unsampled_boundary(first)
    changed = tokens.copy()
    changed[end - 1] = 7  # two documents become one: the file has 299
    source = tmp_path / "new.bin"
    changed.tofile(source)
    before = os.stat(path)
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    shutil.copy2(source, path)  # same inode, same size, the old mtime
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns
    assert os.stat(path).st_ino == before.st_ino and os.stat(path).st_size == before.st_size
    again = RawTokens(path, dtype="uint16", eos=0)
    assert (
        len(again) == 299 and again.lengths.tolist() == np.diff(K.eos_offsets(changed, 0)).tolist()
    )
    assert np.load(first.cache_path).tolist() == np.asarray(again.offsets).tolist()  # rewritten


def test_raw_tokens_cache_sees_an_in_place_rewrite_by_its_sampled_hash(tmp_path, monkeypatch):
    """A rewrite in place that leaves size, mtime, ctime and inode as they were (a coarse clock):
    the digest of sampled blocks tells it."""
    import padless.io._files as files

    real = files.stamp_of
    monkeypatch.setattr(files, "stamp_of", lambda st: real(st)._replace(ctime_ns=0))
    path = tmp_path / "c.bin"
    tokens = _corpus(path)
    first = RawTokens(path, dtype="uint16", eos=0)
    end = _unsampled_boundary(first)
    before = os.stat(path)
    with open(path, "r+b") as fh:
        fh.seek(2 * (end - 1))
        fh.write(np.array([7], np.uint16).tobytes())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert len(RawTokens(path, dtype="uint16", eos=0)) == 299
    tokens[end - 1] = 7
    tokens.tofile(path)  # once more, with the clock frozen: the new cache is reused as valid
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert isinstance(RawTokens(path, dtype="uint16", eos=0).offsets, np.memmap)


def test_raw_tokens_never_trust_a_cache_without_identity(tmp_path):
    """A cache of the old format (the offsets alone) is recomputed, however plausible."""
    path = tmp_path / "c.bin"
    _corpus(path)
    store = RawTokens(path, dtype="uint16", eos=0)
    cache = store.cache_path
    merged = np.delete(np.asarray(store.offsets), 1 + 150)  # ends that all follow an eos
    np.save(cache, merged)
    os.utime(cache, ns=(2 * 10**18, 2 * 10**18))  # newer than the tokens
    again = RawTokens(path, dtype="uint16", eos=0)
    assert len(again) == 300 and again.cache_path == cache
    assert np.load(cache).tolist() == np.asarray(store.offsets).tolist()  # rewritten
    assert os.path.getsize(cache) > 128 + 8 * 301  # with the identity record after the offsets
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.bin", os.path.basename(cache)]


def test_raw_tokens_that_shrink_after_open_are_refused_when_served(tmp_path):
    import mmap

    path = tmp_path / "c.bin"
    page = mmap.PAGESIZE
    tokens = np.ones(7 * page // 4, np.uint16)  # 3.5 pages
    tokens[page // 4 :: page // 4] = 0
    tokens.tofile(path)
    store = RawTokens(path, dtype="uint16", eos=0, cache=False)
    last = len(store) - 1
    assert int(store[last][-1]) == 1
    os.truncate(path, tokens.nbytes - 2)  # inside the last page: the map would read a zero
    for serve in (lambda: store[last], lambda: store.starts([0])):
        with pytest.raises(ValueError, match="shrank") as info:
            serve()
        text = str(info.value)
        assert "c.bin" in text and str(tokens.nbytes) in text and str(tokens.nbytes - 2) in text
