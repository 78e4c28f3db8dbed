"""Hostile input for the token stores, their kernels, TokenDataset and the writer.

Mutated ``.idx``/``.bin`` pairs, cache files that are links, pipes or lies, paths that are not
files, indices that are floats or wrap, plans that do not fit, and writer input that does not fit
its dtype: each is a clean ValueError/TypeError (or the right answer), never a crash, a hang, a
wrapped number, a silent truncation, or a change to a file the user owns. Crash-prone fuzzing
and the cases that could hang run in child processes with a timeout.
"""

from __future__ import annotations

import os
import struct
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import padless
from padless.io.indexed import IndexedDataset, write_indexed
from padless.io.tokens import RawTokens
from padless.torch import TokenDataset, collate_packed, collate_padded

sys.path.insert(0, str(Path(__file__).parent))
from _procs import run_group  # noqa: E402

DOCS = [[1, 2, 3], [[4], [5, 6]], [], [[], [9]], [7] * 20]


def _child(code: str, *args: str, timeout: float = 60) -> str:
    # the environment as it is: the child imports the padless this test runs against
    proc = run_group([sys.executable, "-c", textwrap.dedent(code), *args], timeout)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return proc.stdout


# --------------------------------------------------------------------------- fuzzed pairs

FUZZ = """
import os, random, struct, sys
import numpy as np
from padless import _kernels as K
from padless.io.indexed import IndexedDataset, write_indexed

root, seed, cases = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bases = []
for fmt, dt in [("megatron", "uint16"), ("fairseq", "int32"), ("megatron", "int64"),
                ("fairseq", "uint8"), ("megatron", "uint8")]:
    p = os.path.join(root, f"base_{fmt}_{dt}")
    write_indexed([[1, 2, 3], [[4], [5, 6]], [], [[], [9]], [7] * 20], p, dtype=dt, format=fmt)
    bases.append((p, 34 if fmt == "megatron" else 26))
p = os.path.join(root, "base_multimodal")
write_indexed([[1, 2], [[3], [4, 5]]], p, dtype="uint16")
with open(p + ".idx", "ab") as f:
    f.write(bytes([0, 1, 2]))  # one int8 mode per sequence
bases.append((p, 34))
rng = random.Random(seed)
outcomes = {"open": 0, "serve": 0, "ok": 0}
for case in range(cases):
    base, head = rng.choice(bases)
    idx = bytearray(open(base + ".idx", "rb").read())
    tokens = bytearray(open(base + ".bin", "rb").read())
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(6)
        if kind == 0:  # a pointer or document-index entry
            at = rng.randrange(head, len(idx) - 8)
            v = rng.choice([-1, -8, -2**63, 2**63 - 1, 2**62, 0, 1, 2, 3, 4, 6, 1000, 2**31])
            idx[at:at + 8] = struct.pack("<q", v)
        elif kind == 1:  # a sequence length
            at = rng.randrange(head, len(idx) - 4)
            v = rng.choice([-1, -2**31, 2**31 - 1, 0, 1, 2, 7, 100])
            idx[at:at + 4] = struct.pack("<i", v)
        elif kind == 2:  # a header count
            at = rng.choice([18, 26])
            v = rng.choice([0, 1, 2, 5, 2**31, 2**62, 2**63, 2**64 - 1])
            idx[at:at + 8] = struct.pack("<Q", v)
        elif kind == 3:
            idx[17] = rng.randrange(12)  # the dtype code
        elif kind == 4:
            tokens = tokens[: rng.randint(0, len(tokens))]
        else:
            idx = idx[: rng.randint(len(idx) - 12, len(idx))]
    p = os.path.join(root, "case")
    open(p + ".idx", "wb").write(idx)
    open(p + ".bin", "wb").write(tokens)
    for documents in (False, True):
        try:
            ds = IndexedDataset(p, documents=documents)
        except (ValueError, TypeError):
            outcomes["open"] += 1
            continue
        try:
            n = len(ds)
            lengths = np.asarray(ds.lengths, np.int64)
            starts = ds.starts(np.arange(n))
            for i in range(n):
                assert len(ds[i]) == lengths[i]  # each item inside the .bin, as long as said
            if ds.dtype in K.ingest.TOKEN_DTYPES:
                out = np.empty(int(lengths.sum()), np.int64)
                dest = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
                K.gather_tokens(ds.tokens, starts, lengths, dest, out, -1)
                want = [np.asarray(ds[i], np.int64) for i in range(n)]
                assert np.array_equal(out, np.concatenate(want) if want else out)
            outcomes["ok"] += 1
        except (ValueError, TypeError):
            outcomes["serve"] += 1
print(outcomes)
"""


@pytest.mark.parametrize("seed", [0, 1])
def test_fuzzed_pairs_open_serve_or_refuse_cleanly(tmp_path, seed):
    out = _child(FUZZ, str(tmp_path), str(seed), "300")
    counts = eval(out.strip().splitlines()[-1])  # the child's last line: its outcome counts
    assert counts["ok"] > 0 and counts["open"] > 0 and counts["serve"] > 0, counts


def _megatron(tmp_path: Path, head: bytes, body: bytes = b"", tokens: bytes = b"") -> str:
    prefix = str(tmp_path / "h")
    Path(prefix + ".idx").write_bytes(head + body)
    Path(prefix + ".bin").write_bytes(tokens)
    return prefix


@pytest.mark.parametrize("count", [2**62, 2**63, 2**64 - 1, 2**31])
def test_huge_header_counts_are_refused_by_size(tmp_path, count):
    magic = b"MMIDIDX\x00\x00" + struct.pack("<QB", 1, 8)
    head = magic + struct.pack("<QQ", count, 2)
    prefix = _megatron(tmp_path, head, bytes(64), bytes(16))
    with pytest.raises(ValueError, match=f"fits neither layout.*S = {count}"):
        IndexedDataset(prefix)


# --------------------------------------------------------------------------- indices


@pytest.fixture
def pair(tmp_path: Path) -> IndexedDataset:
    return write_indexed(DOCS, str(tmp_path / "c"), dtype="uint16")


def test_uint64_and_python_indices_beyond_int64_are_named_not_wrapped(pair, tmp_path):
    big = np.array([2**63], np.uint64)
    with pytest.raises(ValueError, match=r"got items\[0\] = 9223372036854775808"):
        pair.starts(big)
    raw = tmp_path / "r.bin"
    np.array([5, 0, 6, 0], np.uint16).tofile(raw)
    with pytest.raises(ValueError, match=r"got items\[0\] = 9223372036854775808"):
        RawTokens(raw, dtype="uint16", eos=0).starts(big)
    dataset = TokenDataset(pair)
    for hostile in (big, [2**63], [2**64 + 1, 0], [1, 2**63]):
        with pytest.raises(ValueError, match=r"index (9223372036854775808|18446744073\d+) is"):
            dataset.__getitems__(hostile)
    with pytest.raises(ValueError, match="non-negative, got -1"):
        dataset.__getitems__([-1, 2**63])
    with pytest.raises(ValueError, match=r"got items\[1\] = 9223372036854775813"):
        pair.starts([1, 2**63 + 5])


@pytest.mark.parametrize("indices", [[1.5, 0.2], [1.0], [True], ["1"], [[0, 1]]])
def test_token_dataset_refuses_indices_that_are_not_item_ints(pair, indices):
    dataset = TokenDataset(pair)
    with pytest.raises((TypeError, ValueError), match="indices"):
        dataset.__getitems__(indices)
    sampler = padless.PackingSampler(pair.lengths, capacity=8, oversize="split", seed=0)
    with pytest.raises((TypeError, ValueError), match="indices"):
        TokenDataset(pair, plan=sampler).__getitems__(indices)


def test_single_items_are_ints_and_fit_the_out_dtype(pair, tmp_path):
    dataset = TokenDataset(pair)
    for bad in (1.7, True, "1"):
        with pytest.raises(TypeError, match="index must be an int"):
            dataset[bad]
        with pytest.raises(TypeError, match="index must be an int"):
            pair[bad]
    raw = tmp_path / "r.bin"
    np.array([5, 0, 6, 0], np.uint16).tofile(raw)
    with pytest.raises(TypeError, match="bool"):
        RawTokens(raw, dtype="uint16", eos=0)[True]
    wide = write_indexed([[2**31 + 5, 1]], str(tmp_path / "w"), dtype="int64")
    with pytest.raises(ValueError, match="2147483653, outside out_dtype=int32"):
        TokenDataset(wide, out_dtype="int32")[0]
    with pytest.raises(ValueError, match="outside int32"):
        TokenDataset(wide, out_dtype="int32").__getitems__([0])
    assert TokenDataset(wide)[0].tolist() == [2**31 + 5, 1]


def test_stores_of_values_the_kernels_cannot_serve_are_refused_up_front(tmp_path):
    wide = write_indexed(
        [np.array([2**63 + 5], np.uint64)], str(tmp_path / "u"), dtype="uint64", format="fairseq"
    )
    with pytest.raises(TypeError, match=r"u\.bin.*uint64"):
        TokenDataset(wide)


# --------------------------------------------------------------------------- plans


def test_a_plan_that_never_splits_serves_no_pieces_and_no_long_items(pair):
    lengths = pair.lengths  # 3, 1, 2, 0, 0, 1, 20
    for oversize in ("drop", "truncate"):
        sampler = padless.PackingSampler(lengths, capacity=8, oversize=oversize, seed=0)
        dataset = TokenDataset(pair, plan=sampler)
        with pytest.raises(ValueError, match="out of range.*yields no codes of pieces"):
            dataset.__getitems__([len(pair) + 1])  # piece 1 of item 1 in a split plan
    dropping = TokenDataset(pair, plan=padless.PackingSampler(lengths, capacity=8, oversize="drop"))
    with pytest.raises(ValueError, match="holds 20 tokens, more than capacity=8"):
        dropping.__getitems__([6])  # collate_packed refuses it too: never cut silently
    with pytest.raises(ValueError, match="more than capacity"):
        collate_packed(8)([np.arange(20)])
    truncating = padless.PackingSampler(lengths, capacity=8, oversize="truncate")
    got = TokenDataset(pair, plan=truncating).__getitems__([6, 0])
    want = collate_packed(truncating)([truncating.pieces(list(_items(pair)))[c] for c in [6, 0]])
    _same(got, want)


def _items(store: IndexedDataset) -> list[np.ndarray]:
    return [np.asarray(store[i], np.int64) for i in range(len(store))]


def _same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert got[key].dtype == value.dtype and torch.equal(got[key], value), key
        else:
            assert got[key] == value, key


@pytest.mark.parametrize("batch", [[], [3], [3, 4], [6], [6, 3, 13, 20]])
def test_empty_batches_empty_documents_and_split_pieces_equal_the_collates(pair, batch):
    items = _items(pair)
    n = len(pair)
    padded = [c for c in batch if c < n]
    want = collate_padded(pad_id=0)([items[c] for c in padded])
    _same(TokenDataset(pair).__getitems__(padded), want)
    sampler = padless.PackingSampler(pair.lengths, capacity=8, oversize="split", seed=0)
    pieces = sampler.pieces(items)
    for options in ({}, {"flatten": True}):
        got = TokenDataset(pair, plan=sampler, **options).__getitems__(batch)
        _same(got, collate_packed(sampler, **options)([pieces[c] for c in batch]))


def test_a_piece_past_its_item_is_refused(pair):
    sampler = padless.PackingSampler(pair.lengths, capacity=8, oversize="split", seed=0)
    dataset = TokenDataset(pair, plan=sampler)
    with pytest.raises(ValueError, match="asks for tokens from 24 of item 6, which holds 20"):
        dataset.__getitems__([3 * len(pair) + 6])
    with pytest.raises(ValueError, match="non-negative"):
        dataset.__getitems__([-1])


# --------------------------------------------------------------------------- raw files


@pytest.fixture
def raw(tmp_path: Path) -> Path:
    path = tmp_path / "tok.bin"
    np.array([5, 6, 0, 7, 0, 8, 9], np.uint16).tofile(path)
    return path


def _cache(path: Path) -> Path:
    return Path(f"{path}.uint16.eos0.offsets.npy")


def test_a_link_at_the_cache_name_is_never_written_through(raw, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    _cache(raw).symlink_to(victim)
    store = RawTokens(raw, dtype="uint16", eos=0)
    assert store.lengths.tolist() == [3, 2, 2] and store.cache_path is None
    assert victim.read_bytes() == b"precious" and _cache(raw).is_symlink()


def test_a_pipe_at_the_cache_name_does_not_block(raw):
    os.mkfifo(_cache(raw))
    code = """
    import sys
    from padless.io.tokens import RawTokens
    store = RawTokens(sys.argv[1], dtype="uint16", eos=0)
    print(store.lengths.tolist(), store.cache_path)
    """
    assert _child(code, str(raw), timeout=30).split() == ["[3,", "2,", "2]", "None"]


def _npy(header: str) -> bytes:
    text = header.encode() + b" " * (118 - len(header)) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize(
    "content",
    [
        b"garbage" * 20,
        _npy("{'descr': '<i8', 'fortran_order': False, 'shape': (4611686018427387904,), }"),
        _npy("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }") + bytes(16),
        _npy("{'descr': '>i8', 'fortran_order': False, 'shape': (3,), }") + bytes(24),
        _npy("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }") + bytes(12),
        _npy("{'descr': '<i8', 'fortran_order': False, 'shape': (1, 3), }") + bytes(24),
        b"\x93NUMPY\x01\x00\xff\xff" + b"{" * 65535,
    ],
)
def test_a_cache_that_lies_is_recomputed_without_warnings(raw, content):
    _cache(raw).write_bytes(content)
    os.utime(_cache(raw), (2e9, 2e9))  # newer than the tokens: read, then found wrong
    store = RawTokens(raw, dtype="uint16", eos=0)
    assert store.lengths.tolist() == [3, 2, 2] and store.offsets.tolist() == [0, 3, 5, 7]
    assert np.load(_cache(raw)).tolist() == [0, 3, 5, 7]  # rewritten, valid


def test_paths_that_are_not_regular_files_are_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path, why in ((tmp_path, "is a folder"), (fifo, "not a regular file")):
        with pytest.raises(ValueError, match=why):
            RawTokens(path, dtype="uint16", eos=0)
    with pytest.raises(ValueError, match="not a regular file"):  # never read forever
        RawTokens("/dev/zero", dtype="uint16", eos=0)
    with pytest.raises(ValueError, match="does not exist"):
        RawTokens(tmp_path / "missing.bin", dtype="uint16", eos=0)


@pytest.mark.parametrize(
    ("dtype", "error", "match"),
    [
        ("not-a-dtype", TypeError, "numpy integer dtype"),
        ("float32", TypeError, "float dtype"),
        ("complex64", TypeError, "complex dtype"),
        ("bool", TypeError, "integer dtype"),
        (object, TypeError, "integer dtype"),
        ("i4,i4", TypeError, "integer dtype"),
        (">u2", ValueError, "native byte order"),
        ("uint64", TypeError, "must be one of"),
    ],
)
def test_raw_dtypes_that_are_not_token_dtypes(raw, dtype, error, match):
    with pytest.raises(error, match=match):
        RawTokens(raw, dtype=dtype, eos=0)


@pytest.mark.parametrize("eos", [-1, 2**16, 2**40])
def test_eos_outside_the_dtype(raw, eos):
    with pytest.raises(ValueError, match=rf"in \[0, 65535\]\), got {eos}"):
        RawTokens(raw, dtype="uint16", eos=eos)


def test_a_size_that_is_not_a_multiple_of_the_itemsize(tmp_path):
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x02\x03")
    with pytest.raises(ValueError, match="multiple of the uint16 itemsize 2, got 3 bytes"):
        RawTokens(odd, dtype="uint16", eos=0)


# --------------------------------------------------------------------------- the writer


def test_python_ints_beyond_int64_are_written_exactly_or_named(tmp_path):
    out = write_indexed([[2**63 + 5, 1]], str(tmp_path / "u"), dtype="uint64", format="fairseq")
    assert out[0].tolist() == [2**63 + 5, 1]
    for items, dtype in (([[2**63 + 5, 1]], "int64"), ([[2**64]], "int64"), ([[-1, 1]], "uint16")):
        with pytest.raises(ValueError, match="document 0 holds the value .*outside"):
            write_indexed(items, str(tmp_path / "x"), dtype=dtype)
    with pytest.raises(ValueError, match="outside int64"):
        write_indexed([np.array([2**63], np.uint64)], str(tmp_path / "x"), dtype="int64")
    assert not list(tmp_path.glob("x*")) and not list(tmp_path.glob(".*"))


@pytest.mark.parametrize(
    ("items", "error", "match"),
    [
        ([[1.0, 2.0]], TypeError, "must hold integers, got dtype float64"),  # whole floats too
        ([[2**63 + 5, 1.0]], TypeError, "must hold integers"),
        ([[True, False]], TypeError, "dtype bool"),
        ([["ab", "cd"]], TypeError, "must hold integers"),
        (["abc"], ValueError, "document 0 must be a 1-D array"),
        ([[[[1]]]], ValueError, "document 0, sentence 0 must be a 1-D"),
        ([[[1, 2], 3]], ValueError, "document 0 must be a 1-D array of token ids"),
        ([None], ValueError, "document 0 must be a 1-D array"),
        ("abc", TypeError, "items must be an iterable"),
    ],
)
def test_writer_input_that_is_not_token_ids(tmp_path, items, error, match):
    with pytest.raises(error, match=match):
        write_indexed(items, str(tmp_path / "x"), dtype="int32")
    assert os.listdir(tmp_path) == []


def test_a_failing_writer_leaves_the_old_pair_and_no_temporaries(tmp_path):
    prefix = str(tmp_path / "c")
    write_indexed([[1, 2], [3]], prefix, dtype="uint16")
    before = {p: Path(prefix + p).read_bytes() for p in (".idx", ".bin")}

    def documents():
        yield [1, 2]
        yield [3]
        raise RuntimeError("the tokenizer broke")

    with pytest.raises(RuntimeError, match="tokenizer"):
        write_indexed(documents(), prefix, dtype="uint16")
    with pytest.raises(ValueError, match="document 1 holds the value 70000"):
        write_indexed([[1], [70000]], prefix, dtype="uint16")
    assert {p: Path(prefix + p).read_bytes() for p in (".idx", ".bin")} == before
    assert sorted(os.listdir(tmp_path)) == ["c.bin", "c.idx"]


def test_prefixes_that_cannot_name_a_pair(tmp_path):
    with pytest.raises(IsADirectoryError, match="is a folder: name the pair inside it"):
        write_indexed([[1]], tmp_path, dtype="int32")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        write_indexed([[1]], str(tmp_path / "file" / "x"), dtype="int32")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_indexed([[1]], str(tmp_path / "missing" / "x"), dtype="int32")
    assert os.listdir(tmp_path) == ["file"]
    assert not list(tmp_path.parent.glob(tmp_path.name + ".*"))  # nothing beside the folder


def test_rewriting_a_pair_that_is_being_read_keeps_the_reader_valid(tmp_path):
    prefix = str(tmp_path / "c")
    old = write_indexed([[1, 2], [3]], prefix, dtype="uint16")
    for suffix in (".idx", ".bin"):
        os.chmod(prefix + suffix, 0o444)
    tokens = old.tokens
    write_indexed([np.arange(1000) % 600] * 3, prefix, dtype="uint16")
    assert [old[i].tolist() for i in range(len(old))] == [[1, 2], [3]]
    assert tokens.tolist() == [1, 2, 3] and old.lengths.tolist() == [2, 1]
    new = IndexedDataset(prefix)
    assert len(new) == 3 and (os.stat(prefix + ".idx").st_mode & 0o777) == 0o444
