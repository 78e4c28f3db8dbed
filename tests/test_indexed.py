"""Megatron/fairseq indexed datasets: round trips, files built byte by byte, hostile files."""

from __future__ import annotations

import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from padless.io.indexed import IndexedDataset, write_indexed

MAGIC = b"MMIDIDX\x00\x00"
# The formats' tables as their readers hold them (written out here, not imported).
MEGATRON = {1: "u1", 2: "i1", 3: "i2", 4: "i4", 5: "i8", 6: "f8", 7: "f4", 8: "u2"}
FAIRSEQ = {**MEGATRON, 7: "f8", 9: "u4", 10: "u8"}
INT_DTYPES = {
    "megatron": ["uint8", "int8", "int16", "uint16", "int32", "int64"],
    "fairseq": ["uint8", "int8", "int16", "uint16", "int32", "int64", "uint32", "uint64"],
}


def spec_read(prefix: Path, fmt: str) -> tuple[list[np.ndarray], list[int] | None]:
    """A reader written from the format alone: the sequences, and Megatron's document index."""
    idx = (prefix.parent / (prefix.name + ".idx")).read_bytes()
    data = (prefix.parent / (prefix.name + ".bin")).read_bytes()
    assert idx[:9] == MAGIC
    assert struct.unpack("<Q", idx[9:17])[0] == 1
    code = idx[17]
    (n,) = struct.unpack("<Q", idx[18:26])
    if fmt == "megatron":
        (d,) = struct.unpack("<Q", idx[26:34])
        offset = 34
        assert len(idx) == 34 + 12 * n + 8 * d
        dtype = np.dtype(MEGATRON[code])
    else:
        d, offset = 0, 26
        assert len(idx) == 26 + 12 * n
        dtype = np.dtype(FAIRSEQ[code])
    sizes = np.frombuffer(idx, np.int32, n, offset)
    pointers = np.frombuffer(idx, np.int64, n, offset + 4 * n)
    docs = np.frombuffer(idx, np.int64, d, offset + 12 * n).tolist() if fmt == "megatron" else None
    seqs = [
        np.frombuffer(data, dtype, int(k), int(p)) for k, p in zip(sizes, pointers, strict=True)
    ]
    return seqs, docs


def megatron_bytes(sizes, pointers, docs, code=8, version=1, modes=None) -> bytes:
    head = MAGIC + struct.pack("<QBQQ", version, code, len(sizes), len(docs))
    body = np.asarray(sizes, "<i4").tobytes() + np.asarray(pointers, "<i8").tobytes()
    body += np.asarray(docs, "<i8").tobytes()
    if modes is not None:
        body += np.asarray(modes, "i1").tobytes()
    return head + body


def fairseq_bytes(sizes, pointers, code=8) -> bytes:
    head = MAGIC + struct.pack("<QBQ", 1, code, len(sizes))
    return head + np.asarray(sizes, "<i4").tobytes() + np.asarray(pointers, "<i8").tobytes()


def pair(tmp_path: Path, idx: bytes, tokens: bytes, name: str = "c") -> Path:
    (tmp_path / f"{name}.idx").write_bytes(idx)
    (tmp_path / f"{name}.bin").write_bytes(tokens)
    return tmp_path / name


def docs_of(rng: np.random.Generator, dtype: str, n: int = 7) -> list:
    info = np.iinfo(dtype)
    out: list = []
    for k in range(n):
        if k % 3 == 1:  # a document split into sentences
            out.append([rng.integers(info.min, info.max, int(m), dtype, True) for m in (2, 0, 5)])
        else:
            out.append(rng.integers(info.min, info.max, int(rng.integers(0, 9)), dtype, True))
    out.append([])  # an empty document: one empty sequence
    return out


def split(doc) -> list:
    return doc if isinstance(doc, list) and doc and not np.isscalar(doc[0]) else [doc]


def flat(docs: list) -> list[np.ndarray]:
    return [np.asarray(s) for d in docs for s in split(d)]


@pytest.mark.parametrize("fmt", ["megatron", "fairseq"])
def test_round_trip_every_dtype(tmp_path: Path, fmt: str) -> None:
    rng = np.random.default_rng(0)
    for dtype in INT_DTYPES[fmt]:
        docs = docs_of(rng, dtype)
        ds = write_indexed(docs, tmp_path / dtype, dtype=dtype, format=fmt)
        seqs = flat(docs)
        assert ds.format == fmt and ds.dtype == np.dtype(dtype) and len(ds) == len(seqs)
        assert ds.sequence_lengths.tolist() == [len(s) for s in seqs]
        assert all(np.array_equal(ds[i], s) and ds[i].dtype == dtype for i, s in enumerate(seqs))
        spec_seqs, spec_docs = spec_read(tmp_path / dtype, fmt)
        assert all(np.array_equal(a, b) for a, b in zip(spec_seqs, seqs, strict=True))
        if fmt == "megatron":
            counts = [len(split(d)) for d in docs]
            assert spec_docs == np.concatenate(([0], np.cumsum(counts))).tolist()
            whole = IndexedDataset(tmp_path / f"{dtype}.bin", documents=True)
            assert whole.num_documents == len(docs) == len(whole)
            for i, d in enumerate(docs):
                want = np.concatenate(split(d)) if len(d) else np.zeros(0)
                assert np.array_equal(whole[i], want.astype(dtype))
            assert whole.lengths.tolist() == [len(whole[i]) for i in range(len(docs))]
        else:
            assert spec_docs is None and ds.num_documents is None


def test_reads_files_built_byte_by_byte(tmp_path: Path) -> None:
    tokens = np.arange(10, dtype="<u2")
    # documents [0..2] + [3, 4] (two sentences), then [5..9]; pointers are byte offsets
    p = pair(tmp_path, megatron_bytes([3, 2, 5], [0, 6, 10], [0, 2, 3]), tokens.tobytes())
    ds = IndexedDataset(str(p) + ".idx")
    assert (ds.format, ds.num_sequences, ds.num_documents) == ("megatron", 3, 2)
    assert [ds[i].tolist() for i in range(3)] == [[0, 1, 2], [3, 4], [5, 6, 7, 8, 9]]
    assert ds.starts(np.array([2, 0])).tolist() == [5, 0] and ds[-1].tolist() == [5, 6, 7, 8, 9]
    docs = IndexedDataset(p, documents=True)
    assert docs.lengths.tolist() == [5, 5] and docs[0].tolist() == [0, 1, 2, 3, 4]
    mm = pair(tmp_path, megatron_bytes([3], [0], [0, 1], modes=[1]), tokens.tobytes(), "mm")
    assert IndexedDataset(mm).modes.tolist() == [1]
    fs = pair(tmp_path, fairseq_bytes([4, 6], [0, 16], code=9), np.arange(10, dtype="<u4").data)
    f = IndexedDataset(fs)
    assert f.format == "fairseq" and f.num_documents is None and f[1].tolist() == [4, 5, 6, 7, 8, 9]
    # an empty pair opens: no sequences, one document-index entry
    e = pair(tmp_path, megatron_bytes([], [], [0]), b"", "e")
    assert len(IndexedDataset(e)) == 0 and IndexedDataset(e, documents=True).lengths.size == 0


def test_open_maps_and_reads_nothing(tmp_path: Path) -> None:
    ds = write_indexed([np.arange(5), np.arange(3)], tmp_path / "c", dtype="int32")
    assert isinstance(ds.sequence_lengths, np.memmap) and isinstance(ds.pointers, np.memmap)
    assert isinstance(ds.document_index, np.memmap) and isinstance(ds.tokens, np.memmap)
    assert ds.lengths is ds.sequence_lengths and not ds.lengths.flags.writeable
    # an index of 10**7 sequences whose arrays are never written (a sparse file) opens at once:
    # the document index's first and last entries and the last sequence's end are checked,
    # nothing else is read
    n = 10**7
    with open(tmp_path / "big.idx", "wb") as f:
        f.write(MAGIC + struct.pack("<QBQQ", 1, 8, n, n + 1))
        f.truncate(34 + 20 * n)
        f.seek(34 + 20 * n)
        f.write(struct.pack("<q", n))  # the document index ends at S
    (tmp_path / "big.bin").write_bytes(b"")
    big = IndexedDataset(tmp_path / "big")
    assert len(big) == n and big.sequence_lengths.offset == 34


def test_pickles_as_paths(tmp_path: Path) -> None:
    write_indexed([[1, 2], [[3], [4, 5]]], tmp_path / "c", dtype="uint8")
    ds = IndexedDataset(tmp_path / "c", documents=True)
    blob = pickle.dumps(ds)
    assert len(blob) < 400 and b"\x03\x04" not in blob
    back = pickle.loads(blob)
    assert back.documents and back[1].tolist() == [3, 4, 5]


def hostile(tmp_path: Path, idx: bytes, tokens: bytes = bytes(40), **kw) -> str:
    p = pair(tmp_path, idx, tokens, "h")
    with pytest.raises(ValueError) as info:
        ds = IndexedDataset(p, **kw)
        ds.starts(np.arange(len(ds)))
    return str(info.value)


def test_hostile_headers(tmp_path: Path) -> None:
    good = megatron_bytes([3, 2], [0, 6], [0, 1, 2])
    for cut in (0, 5, 17, 25, 30, 40, len(good) - 1):
        assert "truncated" in hostile(tmp_path, good[:cut])
    assert "fits neither layout" in hostile(tmp_path, good[:30] + bytes(4))
    assert "wrong magic" in hostile(tmp_path, b"TNTIDX\x00\x00" + good[8:])
    assert "wrong magic" in hostile(tmp_path, b"{" * 40)
    assert "version 2" in hostile(tmp_path, megatron_bytes([3], [0], [0, 1], version=2))
    assert "unknown dtype code 9" in hostile(tmp_path, megatron_bytes([3], [0], [0, 1], code=9))
    assert "unknown dtype code 11" in hostile(tmp_path, fairseq_bytes([3], [0], code=11))
    # counts that do not add up: one more sequence in the header than in the arrays
    lie = bytearray(good)
    lie[18:26] = struct.pack("<Q", 3)
    text = hostile(tmp_path, bytes(lie))
    assert "fits neither layout" in text and "Megatron needs" in text and "fairseq needs" in text
    with pytest.raises(FileNotFoundError, match="no such file"):
        IndexedDataset(tmp_path / "missing")
    (tmp_path / "folder.idx").mkdir()
    (tmp_path / "folder.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="not a regular file"):
        IndexedDataset(tmp_path / "folder")


def test_hostile_arrays(tmp_path: Path) -> None:
    # the .bin shorter than the last pointer + length
    assert "shorter than the last" in hostile(
        tmp_path, megatron_bytes([3, 2], [0, 6], [0, 2]), b"x" * 9
    )
    # a pointer past the .bin (not the last one): refused when served
    assert "inside the .bin" in hostile(tmp_path, megatron_bytes([3, 2], [1000, 6], [0, 2]))
    assert "multiple of 2" in hostile(tmp_path, megatron_bytes([3, 2], [1, 6], [0, 2]))
    assert "inside the .bin" in hostile(tmp_path, megatron_bytes([3, 2], [-8, 6], [0, 2]))
    assert "inside the .bin" in hostile(tmp_path, megatron_bytes([-3, 2], [0, 6], [0, 2]))
    docs = megatron_bytes([1, 1, 1], [0, 2, 4], [0, 2, 1, 3])
    assert "decreases at entry 2" in hostile(tmp_path, docs, documents=True)
    assert "start at 0" in hostile(tmp_path, megatron_bytes([1, 1], [0, 2], [1, 2]), documents=True)
    assert "end at S" in hostile(tmp_path, megatron_bytes([1, 1], [0, 2], [0, 1]), documents=True)
    apart = megatron_bytes([1, 1], [0, 4], [0, 2])
    assert "contiguous" in hostile(tmp_path, apart, documents=True)
    # apart but in two documents: fine
    assert IndexedDataset(
        pair(tmp_path, megatron_bytes([1, 1], [0, 4], [0, 1, 2]), bytes(8)), documents=True
    )[1].tolist() == [0]
    assert "no documents" in hostile(tmp_path, fairseq_bytes([1], [0]), bytes(2), documents=True)
    floats = pair(tmp_path, megatron_bytes([2], [0], [0, 1], code=7), bytes(8), "f")
    ds = IndexedDataset(floats)
    assert ds.lengths.tolist() == [2] and ds.dtype == np.float32
    with pytest.raises(ValueError, match="cannot be served"):
        ds.starts(np.array([0]))
    with pytest.raises(ValueError, match=r"in \[0, 1\), got items\[0\] = 1"):
        IndexedDataset(pair(tmp_path, megatron_bytes([2], [0], [0, 1]), bytes(4))).starts([1])


def test_writer_refusals(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="format='fairseq'"):
        write_indexed([[1]], tmp_path / "c", dtype="uint32")
    with pytest.raises(ValueError, match="integer dtype"):
        write_indexed([[1]], tmp_path / "c", dtype="float32")
    with pytest.raises(ValueError, match=r"document 1 holds the value 256"):
        write_indexed([[1], [255, 256]], tmp_path / "c", dtype="uint8")
    with pytest.raises(ValueError, match=r"document 0, sentence 1 holds the value -1"):
        write_indexed([[np.array([1]), np.array([-1])]], tmp_path / "c", dtype="uint16")
    with pytest.raises(ValueError, match="1-D"):
        write_indexed([np.zeros((2, 2), int)], tmp_path / "c", dtype="int32")
    with pytest.raises(ValueError, match="format must be"):
        write_indexed([[1]], tmp_path / "c", dtype="int32", format="lmdb")
    assert os.listdir(tmp_path) == []


def test_atomic(tmp_path: Path) -> None:
    old = write_indexed([[1, 2, 3]], tmp_path / "c", dtype="int32")
    before = {p: (tmp_path / p).read_bytes() for p in ("c.idx", "c.bin")}
    del old

    def failing(exc: BaseException):
        yield from (np.arange(3000) for _ in range(2000))  # more than one 8 MiB write
        raise exc

    for exc in (RuntimeError("disk on fire"), KeyboardInterrupt()):
        with pytest.raises(type(exc)):
            write_indexed(failing(exc), tmp_path / "c", dtype="int32")
        assert {p: (tmp_path / p).read_bytes() for p in os.listdir(tmp_path)} == before
    write_indexed([[7]], tmp_path / "c", dtype="int32")
    assert sorted(os.listdir(tmp_path)) == ["c.bin", "c.idx"]
    assert IndexedDataset(tmp_path / "c")[0].tolist() == [7]


def test_a_failed_idx_rename_puts_the_old_bin_back(tmp_path: Path, monkeypatch) -> None:
    """The .bin is renamed first; where the .idx rename then fails (a full disk), the new .bin
    stayed under the old .idx, which served other documents with no error."""
    import padless.io.indexed as indexed

    write_indexed([[1, 2, 3], [4, 5, 6, 7]], tmp_path / "c", dtype="uint16")
    before = {p: (tmp_path / p).read_bytes() for p in ("c.idx", "c.bin")}
    real, calls = os.replace, []

    def full_disk(src, dst):
        calls.append(dst)
        if str(dst).endswith(".idx"):
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(indexed.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_indexed([[9] * 6, [8] * 3], tmp_path / "c", dtype="uint16")
    monkeypatch.setattr(indexed.os, "replace", real)
    assert [str(c).rsplit(".", 1)[-1] for c in calls] == ["bin", "idx", "bin"]  # put back
    assert {p: (tmp_path / p).read_bytes() for p in os.listdir(tmp_path)} == before
    ds = IndexedDataset(tmp_path / "c")
    assert [ds[i].tolist() for i in range(len(ds))] == [[1, 2, 3], [4, 5, 6, 7]]


def test_arrow_equals_lists(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    rows = [[1, 2, 3], [], [40000, 5], [6]] * 3
    write_indexed(rows, tmp_path / "lists", dtype="uint16")
    want = [(tmp_path / f"lists.{s}").read_bytes() for s in ("idx", "bin")]
    big = pa.large_list(pa.int32())
    col = pa.chunked_array([pa.array(rows[:5], big), pa.array(rows[5:], big)])
    inputs = {
        "array": pa.array(rows),
        "sliced": pa.array([[9]] + rows + [[9]]).slice(1, len(rows)),
        "chunked": col,
        "table": pa.table({"input_ids": pa.array(rows), "x": list(range(len(rows)))}),
    }
    for name, value in inputs.items():
        column = "input_ids" if name == "table" else None
        write_indexed(value, tmp_path / name, dtype="uint16", column=column)
        got = [(tmp_path / f"{name}.{s}").read_bytes() for s in ("idx", "bin")]
        assert got == want, name
    with pytest.raises(ValueError, match="row 2 holds the value 40000"):
        write_indexed(pa.array(rows), tmp_path / "x", dtype="int8")
    with pytest.raises(ValueError, match="row 1 is null"):
        write_indexed(pa.array([[1], None]), tmp_path / "x", dtype="int8")
    with pytest.raises(ValueError, match="column="):
        write_indexed(inputs["table"], tmp_path / "x", dtype="int8")


def test_datasets_input(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = [[1, 2], [3], [], [4, 5, 6]]
    ds = datasets.Dataset.from_dict({"input_ids": rows})
    out = write_indexed(ds, tmp_path / "d", dtype="int32", column="input_ids")
    assert [out[i].tolist() for i in range(4)] == rows
    # an indices mapping (select, shuffle, filter) is followed: the rows as the user sees them
    out = write_indexed(ds.select([3, 1, 0]), tmp_path / "e", dtype="int32", column="input_ids")
    assert [out[i].tolist() for i in range(3)] == [rows[3], rows[1], rows[0]]
    out = write_indexed(ds["input_ids"], tmp_path / "f", dtype="int32")
    assert [out[i].tolist() for i in range(4)] == rows


sentences = st.lists(st.integers(0, 2**16 - 1), max_size=6)
documents = st.lists(st.one_of(sentences, st.lists(sentences, max_size=3)), max_size=6)


@settings(max_examples=15)
@given(docs=documents, fmt=st.sampled_from(["megatron", "fairseq"]))
def test_round_trip_property(tmp_path_factory: pytest.TempPathFactory, docs, fmt) -> None:
    where = tmp_path_factory.mktemp("p") / "c"
    ds = write_indexed(docs, where, dtype="uint16", format=fmt)
    parts = [split(d) for d in docs]
    seqs = [s for d in parts for s in d]
    assert [ds[i].tolist() for i in range(len(ds))] == seqs
    assert [s.tolist() for s in spec_read(where, fmt)[0]] == seqs
    if fmt == "megatron":
        whole = IndexedDataset(where, documents=True)
        assert [whole[i].tolist() for i in range(len(whole))] == [sum(d, []) for d in parts]


def test_chunked_passes_match_whole_arrays(tmp_path: Path, monkeypatch) -> None:
    import padless.io.indexed as indexed

    monkeypatch.setattr(indexed, "CHUNK", 3)  # every pass crosses many chunk boundaries
    monkeypatch.setattr(indexed, "WRITE_BYTES", 16)
    rng = np.random.default_rng(5)
    docs = [
        [rng.integers(0, 99, int(k)) for k in rng.integers(0, 4, int(m))] or rng.integers(0, 9, 2)
        for m in rng.integers(0, 5, 40)
    ]
    ds = write_indexed(docs, tmp_path / "c", dtype="int16")
    seqs, index = spec_read(tmp_path / "c", "megatron")
    assert all(np.array_equal(ds[i], s) for i, s in enumerate(seqs))
    whole = IndexedDataset(tmp_path / "c", documents=True)
    lens = [len(s) for s in seqs]
    assert whole.lengths.tolist() == [
        sum(lens[a:b]) for a, b in zip(index[:-1], index[1:], strict=True)
    ]
    for i, d in enumerate(docs):
        parts = d if isinstance(d, list) else [d]
        assert whole[i].tolist() == np.concatenate(parts).tolist()
    # a gap between documents is allowed, inside one it is refused, past a chunk boundary too
    idx = bytearray((tmp_path / "c.idx").read_bytes())
    n = len(seqs)
    inner = next(i for i in range(4, n) if i not in index)
    ptr = 34 + 4 * n + 8 * inner
    idx[ptr : ptr + 8] = struct.pack("<q", struct.unpack("<q", idx[ptr : ptr + 8])[0] + 2)
    (tmp_path / "c.idx").write_bytes(bytes(idx))
    with pytest.raises(ValueError, match=f"sequence {inner} does not follow"):
        IndexedDataset(tmp_path / "c", documents=True)


# --------------------------------------------------------------------------- issue 39


def _megatron_corpus(tmp_path: Path, n: int = 1000) -> tuple[Path, np.ndarray]:
    rng = np.random.default_rng(39)
    docs = [rng.integers(1, 60_000, int(k), dtype=np.uint16) for k in rng.integers(1, 60, n)]
    write_indexed(docs, tmp_path / "c", dtype="uint16")
    return tmp_path / "c", np.array([len(d) for d in docs])


def test_a_truncated_megatron_index_is_not_read_as_fairseq(tmp_path: Path) -> None:
    """Issue 39.1: a Megatron .idx cut to exactly 26 + 12*S bytes fits fairseq's size; its
    content does not (its first pointer is two lengths, its pointers do not end at the .bin's
    size), so it is refused naming both layouts, by every reader."""
    from padless import lengths_of
    from padless.io.tokens import open_tokens

    prefix, true = _megatron_corpus(tmp_path)
    idx = tmp_path / "c.idx"
    idx.write_bytes(idx.read_bytes()[: 26 + 12 * len(true)])
    for read in (IndexedDataset, open_tokens, lambda p: lengths_of(Path(f"{p}.idx"))):
        with pytest.raises(ValueError, match=r"fits neither layout.*Megatron.*fairseq") as info:
            read(prefix)
        assert "c.idx" in str(info.value) and "first pointer" in str(info.value)


def _fairseq(tmp_path: Path, sizes, pointers, nbytes: int, name: str = "f") -> Path:
    return pair(tmp_path, fairseq_bytes(sizes, pointers), bytes(nbytes), name)


@pytest.mark.parametrize(
    ("sizes", "pointers", "nbytes", "rule"),
    [
        ([2, 2, 2], [0, 4, 8], 12, None),  # valid: contiguous, ends at the .bin's end
        ([2, 1, 2], [0, 4, 8], 12, None),  # a gap between sequences: still ordered
        ([2, 2, 2], [0, 8, 4], 12, "decrease"),
        ([2, 2, 2], [0, 3, 8], 12, "multiple of 2"),
        ([2, 2, 2], [0, 4, 8], 14, "the .bin holds 14 bytes"),
        ([2, 2, 2], [4, 8, 12], 16, "first pointer"),
        ([3, 2, 2], [0, 4, 8], 12, "past the next sequence's pointer"),
        ([2, -2, 2], [0, 4, 8], 12, "negative"),
        ([2, 2, 2], [0, 4, 2**40], 12, "outside the .bin"),
        ([], [], 4, "the .bin holds 4 bytes"),
    ],
)
def test_fairseq_is_told_by_its_invariants(tmp_path: Path, sizes, pointers, nbytes, rule) -> None:
    prefix = _fairseq(tmp_path, sizes, pointers, nbytes)
    if rule is None:
        ds = IndexedDataset(prefix)
        assert ds.format == "fairseq" and ds.lengths.tolist() == sizes
        return
    with pytest.raises(ValueError, match=r"fits neither layout") as info:
        IndexedDataset(prefix)
    text = str(info.value)
    assert rule in text and "Megatron needs" in text and "fairseq:" in text, text


def test_fairseq_invariants_are_checked_across_chunks(tmp_path: Path, monkeypatch) -> None:
    import padless.io.indexed as indexed

    monkeypatch.setattr(indexed, "CHUNK", 3)
    sizes = [2] * 10
    pointers = [4 * i for i in range(10)]
    assert IndexedDataset(_fairseq(tmp_path, sizes, pointers, 40)).format == "fairseq"
    pointers[6] = pointers[5]  # sequence 5 runs past sequence 6's pointer, at a chunk boundary
    with pytest.raises(ValueError, match="sequence 5 ends at 24, past the next"):
        IndexedDataset(_fairseq(tmp_path, sizes, pointers, 40, "g"))


def test_megatron_document_count_must_fit_the_sequences(tmp_path: Path) -> None:
    tokens = bytes(20)
    for docs, why in (([0, 1], "end at S = 2"), ([1, 2], "start at 0"), ([], "start at 0")):
        p = pair(tmp_path, megatron_bytes([3, 2], [0, 6], docs), tokens, "d")
        with pytest.raises(ValueError, match="fits neither layout") as info:
            IndexedDataset(p)
        assert why in str(info.value) and "fairseq needs" in str(info.value)


def test_lengths_of_an_index_checks_what_it_returns(tmp_path: Path, monkeypatch) -> None:
    """Issue 39.5: lengths_of(Path(".idx")) promises [0, 2**31) and sequences inside the .bin,
    checked in chunks, without a copy (the result is still the .idx's memory map)."""
    import padless.io.indexed as indexed
    from padless import lengths_of
    from padless.io import lengths_from_file

    monkeypatch.setattr(indexed, "CHUNK", 2)
    good = pair(tmp_path, megatron_bytes([3, 2, 1], [0, 6, 10], [0, 3]), bytes(12), "ok")
    lengths = lengths_of(Path(f"{good}.idx"))
    assert isinstance(lengths, np.memmap) and lengths.tolist() == [3, 2, 1]
    cases = {
        "negative": (megatron_bytes([3, 2, -5, 1], [0, 6, 10, 10], [0, 4]), 12, "-5"),
        "oversize": (megatron_bytes([3, 2**30, 1], [0, 6, 10], [0, 3]), 12, "1073741824"),
        "misaligned": (megatron_bytes([1, 1, 1], [0, 3, 10], [0, 3]), 12, "multiple of 2"),
    }
    for name, (idx, nbytes, value) in cases.items():
        p = pair(tmp_path, idx, bytes(nbytes), name)
        with pytest.raises(ValueError, match="sequence") as info:
            lengths_of(Path(f"{p}.idx"))
        assert value in str(info.value) and f"{name}.idx" in str(info.value), name
    docs = pair(tmp_path, megatron_bytes([3, 2**30, 1], [0, 6, 10], [0, 1, 2, 3]), bytes(12), "d")
    with pytest.raises(ValueError, match="sequence 1 has pointer 6 and length 1073741824"):
        lengths_from_file(Path(f"{docs}.idx"), documents=True)
    # one document of two sequences of 2**30 tokens: 2**31, past lengths_of's range
    huge = pair(tmp_path, megatron_bytes([2**30, 2**30], [0, 2**31], [0, 2]), b"", "huge")
    os.truncate(f"{huge}.bin", 2**32)  # sparse: nothing is written, nothing is read
    assert lengths_of(Path(f"{huge}.idx")).tolist() == [2**30, 2**30]
    with pytest.raises(ValueError, match="document 0 holds 2147483648 tokens"):
        lengths_from_file(Path(f"{huge}.idx"), documents=True)


def _shrink_inside_last_page(path: Path) -> tuple[int, int]:
    """Cut ``path`` to a size inside its last page (a map reads zeros there, no SIGBUS)."""
    import mmap

    size = path.stat().st_size
    assert size % mmap.PAGESIZE >= 2, size
    os.truncate(path, size - 2)
    return size, size - 2


def test_a_bin_or_idx_that_shrinks_after_open_is_refused_when_served(tmp_path: Path) -> None:
    """Issue 39.4: a .bin or .idx cut after the pair was opened is noticed when an item is
    served (reading the cut part would read zeros, or kill the process with SIGBUS)."""
    import mmap

    n = mmap.PAGESIZE  # a .bin of 3.5 pages, an .idx inside one page
    docs = [np.arange(n // 4, dtype=np.uint16) for _ in range(7)]
    for name in ("idx", "bin"):
        prefix = tmp_path / name
        ds = write_indexed(docs, prefix, dtype="uint16")
        assert ds[6].tolist() == docs[6].tolist()
        had, has = _shrink_inside_last_page(tmp_path / f"{name}.{name}")
        for serve, item in ((ds.__getitem__, 6), (ds.starts, [0])):
            with pytest.raises(ValueError, match="shrank") as info:
                serve(item)
            text = str(info.value)
            assert f"{name}.{name}" in text and str(had) in text and str(has) in text
