"""Reading lengths from files: text (plain, gz, zst), tokenizers, npy/npz, Arrow, Parquet, HF folders."""

import gzip
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from padless import lengths_of
from padless.io import lengths_from_file, lengths_from_files
from padless.io.readers import lengths_from_arrow, lengths_from_text

LINES = ["the quick  brown fox", "", "  jumps\tover ", "the lazy dog\r", "héllo wörld ✓", "x"]


def write_packed(path: Path, raw: bytes) -> Path:
    """Write ``raw`` as is, gzip- or zstd-compressed by the path's suffix."""
    if path.name.endswith(".gz"):
        raw = gzip.compress(raw)
    elif path.name.endswith(".zst"):
        import zstandard

        raw = zstandard.ZstdCompressor().compress(raw)
    path.write_bytes(raw)
    return path


def write_text(path: Path, lines=LINES, final_newline=True) -> Path:
    text = "\n".join(lines) + ("\n" if final_newline else "")
    path.write_bytes(text.encode("utf-8"))
    return path


def expected(mode: str, lines=LINES) -> list[int]:
    out = []
    for line in lines:
        raw = line.encode("utf-8")
        if mode == "whitespace":
            out.append(len(raw.split()))
        else:
            body = line[:-1] if line.endswith("\r") else line
            out.append(len(body) if mode == "chars" else len(body.encode("utf-8")))
    return out


@pytest.mark.parametrize("mode", ["whitespace", "chars", "bytes"])
@pytest.mark.parametrize("final_newline", [True, False])
def test_text_counts_match_python(tmp_path, mode, final_newline):
    path = write_text(tmp_path / "a.txt", final_newline=final_newline)
    assert lengths_from_text(path, tokenizer=mode).tolist() == expected(mode)


@pytest.mark.parametrize("suffix", [".txt", ".txt.gz", ".txt.zst"])
def test_text_across_piece_boundaries(tmp_path, monkeypatch, suffix):
    import padless.io.readers as R

    monkeypatch.setattr(R, "_CHUNK", 7)  # streamed pieces (.gz/.zst)
    monkeypatch.setattr(R, "_MAPPED_PIECE", 5)  # mapped pieces, when progress is asked for
    rs = np.random.default_rng(0)
    lines = [
        " ".join("w" * int(k) for k in rs.integers(1, 6, rs.integers(0, 8))) + "\r" * (i % 3 == 0)
        for i in range(200)
    ]
    path = write_packed(tmp_path / f"b{suffix}", ("\n".join(lines) + "\n").encode())
    for mode in ("whitespace", "bytes", "chars"):
        want = expected(mode, lines)
        assert lengths_from_text(path, tokenizer=mode).tolist() == want
        assert lengths_from_text(path, tokenizer=mode, progress=lambda b, n: None).tolist() == want


def test_compressed_text(tmp_path):
    import zstandard

    raw = ("\n".join(LINES) + "\n").encode()
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(raw))
    (tmp_path / "a.txt.zst").write_bytes(zstandard.ZstdCompressor().compress(raw))
    want = expected("whitespace")
    assert lengths_from_text(tmp_path / "a.txt.gz").tolist() == want
    assert lengths_from_text(tmp_path / "a.txt.zst").tolist() == want


def test_empty_text_file(tmp_path):
    (tmp_path / "e.txt").write_bytes(b"")
    assert lengths_from_text(tmp_path / "e.txt").shape == (0,)


def test_hf_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "the": 1, "quick": 2, "fox": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    model = tmp_path / "tokenizer.json"
    tok.save(str(model))
    path = write_text(tmp_path / "a.txt", ["the quick fox", "", "the, fox"])
    assert lengths_from_text(path, tokenizer=f"hf:{model}").tolist() == [3, 0, 3]


def test_sentencepiece_tokenizer(tmp_path):
    import sentencepiece as spm

    corpus = write_text(tmp_path / "corpus.txt", ["hello world this is a test"] * 50 + ["abc def"])
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(tmp_path / "m"),
        vocab_size=20,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "m.model"))
    lines = ["hello world", "", "a test abc"]
    path = write_text(tmp_path / "a.txt", lines)
    got = lengths_from_text(path, tokenizer=f"spm:{tmp_path / 'm.model'}")
    assert got.tolist() == [len(sp.encode(x)) for x in lines]


def test_bad_tokenizer_and_missing_model(tmp_path):
    path = write_text(tmp_path / "a.txt")
    with pytest.raises(ValueError, match="tokenizer must be one of"):
        lengths_from_text(path, tokenizer="words")
    with pytest.raises(FileNotFoundError, match="tokenizer model not found"):
        lengths_from_text(path, tokenizer="spm:/nope.model")


def test_parallel_text_files_give_two_columns(tmp_path):
    a = write_text(tmp_path / "train.en", ["a b", "c"])
    b = write_text(tmp_path / "train.es", ["x", "y z w"])
    assert lengths_from_files([a, b]).tolist() == [[2, 1], [1, 3]]
    c = write_text(tmp_path / "short.es", ["x"])
    with pytest.raises(ValueError, match="same number of lines"):
        lengths_from_files([a, c])


def test_npy_npz_and_token_corpus(tmp_path):
    np.save(tmp_path / "l.npy", np.array([3, 1, 4], dtype=np.int32))
    assert lengths_from_file(tmp_path / "l.npy").tolist() == [3, 1, 4]
    assert lengths_of(tmp_path / "l.npy").tolist() == [3, 1, 4]
    np.savez(tmp_path / "p.npz", en=np.array([1, 2]), es=np.array([3, 4]))
    assert lengths_from_file(tmp_path / "p.npz", fields=["en", "es"]).tolist() == [[1, 3], [2, 4]]
    with pytest.raises(ValueError, match="choose with fields"):
        lengths_from_file(tmp_path / "p.npz")
    with pytest.raises(ValueError, match="fields must be among"):
        lengths_from_file(tmp_path / "p.npz", fields=["fr"])
    np.save(tmp_path / "tok.npy", np.arange(10, dtype=np.uint16))
    np.save(tmp_path / "off.npy", np.array([0, 4, 4, 10]))
    got = lengths_from_file(tmp_path / "tok.npy", offsets=tmp_path / "off.npy")
    assert got.tolist() == [4, 0, 6]
    np.save(tmp_path / "bad.npy", np.array([0, 4, 11]))
    with pytest.raises(ValueError, match="corpus holds 10 tokens"):
        lengths_from_file(tmp_path / "tok.npy", offsets=tmp_path / "bad.npy")
    np.savez(tmp_path / "corpus.npz", tokens=np.arange(5), offsets=np.array([0, 2, 5]))
    assert lengths_from_file(tmp_path / "corpus.npz").tolist() == [2, 3]


def _table():
    import pyarrow as pa

    return pa.table(
        {
            "input_ids": pa.array([[1, 2, 3], [], [4]], type=pa.list_(pa.int32())),
            "text": ["a b c", "", " d "],
            "n": pa.array([7, 8, 9], type=pa.int64()),
        }
    )


def test_arrow_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = _table()
    pq.write_table(table, tmp_path / "t.parquet")
    with (
        pa.OSFile(str(tmp_path / "t.arrow"), "wb") as sink,
        pa.ipc.new_file(sink, table.schema) as w,
    ):
        w.write_table(table)
    for name in ("t.parquet", "t.arrow"):
        path = tmp_path / name
        assert lengths_from_arrow(path, column="input_ids").tolist() == [3, 0, 1]
        assert lengths_from_arrow(path, column="text").tolist() == [3, 0, 1]
        assert lengths_from_arrow(path, column="text", tokenizer="chars").tolist() == [5, 0, 3]
        assert lengths_from_arrow(path, column="n").tolist() == [7, 8, 9]
    with pytest.raises(ValueError, match="choose one with column"):
        lengths_from_arrow(tmp_path / "t.parquet")
    with pytest.raises(ValueError, match="column must be one of"):
        lengths_from_arrow(tmp_path / "t.parquet", column="labels")


def save_hf_dataset(folder: Path, table) -> None:
    """The layout of datasets' save_to_disk: Arrow IPC stream files listed in state.json."""
    import pyarrow as pa

    folder.mkdir(parents=True)
    half = table.num_rows // 2
    names = []
    for i, part in enumerate((table.slice(0, half), table.slice(half))):
        name = f"data-{i:05d}-of-00002.arrow"
        with pa.OSFile(str(folder / name), "wb") as sink:
            with pa.ipc.new_stream(sink, part.schema) as writer:
                writer.write_table(part)
        names.append({"filename": name})
    (folder / "state.json").write_text(json.dumps({"_data_files": names}))
    (folder / "dataset_info.json").write_text("{}")


def test_saved_hf_dataset_and_dataset_dict(tmp_path):
    save_hf_dataset(tmp_path / "ds", _table())
    assert lengths_from_file(tmp_path / "ds", column="input_ids").tolist() == [3, 0, 1]
    save_hf_dataset(tmp_path / "dd" / "train", _table())
    (tmp_path / "dd" / "dataset_dict.json").write_text(json.dumps({"splits": ["train"]}))
    assert lengths_from_file(tmp_path / "dd", column="input_ids").tolist() == [3, 0, 1]
    with pytest.raises(ValueError, match="split must be one of"):
        lengths_from_file(tmp_path / "dd", column="input_ids", split="test")
    with pytest.raises(ValueError, match="not a saved Hugging Face dataset"):
        lengths_from_file(tmp_path, column="x")


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="no such file"):
        lengths_from_file("/nonexistent/file.txt")


def test_progress_reports_bytes_and_lines(tmp_path, monkeypatch):
    import padless.io.readers as R

    monkeypatch.setattr(R, "_MAPPED_PIECE", 64)
    lines = [f"line {i} " + "x " * (i % 7) for i in range(100)]
    path = write_text(tmp_path / "p.txt", lines)
    seen = []
    got = lengths_from_text(path, progress=lambda b, n: seen.append((b, n)))
    assert len(seen) > 1
    assert sum(b for b, _ in seen) == path.stat().st_size
    assert sum(n for _, n in seen) == got.size == 100


# --------------------------------------------------------------------------- compiled counter


MODES = ("whitespace", "chars", "bytes")


def kernel_counts(pieces: list[bytes], mode: str, capacity: int = 8) -> list[int]:
    """Feed ``pieces`` to the compiled counter as one text, growing the output as the reader does."""
    from padless.io import _text_kernels as TK

    m = TK.MODES[mode]
    state, flags = TK.new_state(m), np.zeros(TK.BLOCK, np.uint8)
    out, n, last = np.empty(capacity, np.int64), 0, None
    for piece in pieces:
        arr = np.frombuffer(piece, np.uint8)
        done = 0
        while True:
            used, n, nul = TK.count_lines(arr[done:], m, out, n, state, flags)
            assert nul == -1
            done += used
            if done == arr.size:
                break
            out = np.concatenate([out[:n], np.empty(out.size + TK.BLOCK + 8, np.int64)])
        if piece:
            last = piece[-1]
    tail = TK.finish(m, state, last)
    return out[:n].tolist() + ([] if tail is None else [tail])


def reference(data: bytes, mode: str) -> list[int]:
    from padless.io import _text_kernels as TK

    return TK.count_lines_reference(data, TK.MODES[mode])


# text-like bytes: whitespace, newlines, CR, UTF-8 lead and continuation bytes, anything but NUL
text_bytes = st.binary(max_size=300).map(lambda b: b.replace(b"\0", b"\n")) | st.lists(
    st.sampled_from(
        [
            b" ",
            b"\t",
            b"\n",
            b"\r",
            b"\r\n",
            b"\x0b",
            b"\x0c",
            b"a",
            b"\xc3\xa9",
            b"\xe2\x9c\x93",
            b"\x80",
            b"\xff",
        ]
    ),
    max_size=200,
).map(b"".join)


@given(text_bytes, st.lists(st.integers(0, 300), max_size=4), st.sampled_from(MODES))
def test_kernel_matches_reference_on_any_split(data, cuts, mode):
    bounds = [0, *sorted(min(c, len(data)) for c in cuts), len(data)]
    pieces = [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    assert kernel_counts(pieces, mode) == reference(data, mode)


def test_reference_is_bytes_split_per_line():
    data = b"a b\r\n\n  x\t\x0by \r\nlast"
    assert reference(data, "whitespace") == [len(x.split()) for x in data.split(b"\n")]
    assert reference("é a\r\n".encode(), "chars") == [3]
    assert reference("é a\r\n".encode(), "bytes") == [4]


def test_kernel_blocks_and_growth_on_long_input():
    from padless.io import _text_kernels as TK

    rs = np.random.default_rng(3)
    alphabet = np.frombuffer(b"ab \t\n\r\xc3\xa9", np.uint8)
    data = alphabet[rs.integers(0, alphabet.size, 5 * TK.BLOCK + 13)].tobytes()
    for mode in MODES:
        want = reference(data, mode)
        assert kernel_counts([data], mode) == want
        assert kernel_counts([data[: TK.BLOCK - 1], data[TK.BLOCK - 1 :]], mode) == want


def test_kernel_stops_at_the_first_nul():
    from padless.io import _text_kernels as TK

    for mode in MODES:
        m = TK.MODES[mode]
        buf = np.frombuffer(b"a b\nc\0d\0", np.uint8)
        out = np.empty(TK.BLOCK + 16, np.int64)
        _, n, nul = TK.count_lines(buf, m, out, 0, TK.new_state(m), np.zeros(TK.BLOCK, np.uint8))
        assert nul == 5


# --------------------------------------------------------------------------- text files


@given(text_bytes, st.sampled_from(MODES), st.sampled_from([".txt", ".gz", ".zst"]))
def test_text_files_count_like_bytes_split(data, mode, suffix):
    with tempfile.TemporaryDirectory() as tmp:
        path = write_packed(Path(tmp) / f"t{suffix}", data)
        assert lengths_from_text(path, tokenizer=mode).tolist() == reference(data, mode)


@pytest.mark.parametrize(
    ("raw", "words", "nbytes"),
    [
        (b"a b\r\nc\r\n", [2, 1], [3, 1]),  # CRLF
        (b"a b\nc", [2, 1], [3, 1]),  # no final newline
        (b"a b\r", [2], [3]),  # a last \r, no newline
        (b"\n\n\nx\n\n", [0, 0, 0, 1, 0], [0, 0, 0, 1, 0]),  # empty lines
        (b"\r\n", [0], [0]),
        (b"", [], []),
    ],
)
@pytest.mark.parametrize("suffix", [".txt", ".txt.gz", ".txt.zst"])
def test_line_ends(tmp_path, raw, words, nbytes, suffix):
    path = write_packed(tmp_path / f"e{suffix}", raw)
    assert lengths_from_text(path).tolist() == words
    assert lengths_from_text(path, tokenizer="bytes").tolist() == nbytes


def test_many_short_lines_grow_the_output(tmp_path):
    path = tmp_path / "short.txt"
    path.write_bytes(b"x\n\n" * 100_000)
    got = lengths_from_text(path)
    assert got.dtype == np.int64 and got.shape == (200_000,)
    assert got[::2].min() == 1 and got[1::2].max() == 0


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_compressed_text_is_streamed_in_pieces(tmp_path, monkeypatch, suffix):
    import padless.io.readers as R

    monkeypatch.setattr(R, "_CHUNK", 1000)
    raw = b"".join(b"w " * (i % 9) + b"\n" for i in range(3000))
    path = write_packed(tmp_path / f"s.txt{suffix}", raw)
    pieces = []
    got = lengths_from_text(path, progress=lambda b, n: pieces.append(b))
    assert got.tolist() == reference(raw, "whitespace")
    assert sum(pieces) == len(raw) and len(pieces) > 10 and max(pieces) <= 1000


def test_zst_frames_one_after_another_are_read_to_the_last(tmp_path):
    """Concatenated frames (``cat a.zst b.zst``, pzstd) and skippable frames: the whole text."""
    import struct

    import zstandard

    raw = b"".join(b"w " * (i % 9) + b"\n" for i in range(3000))
    skippable = struct.pack("<II", 0x184D2A50, 3) + b"abc"
    frames = [
        zstandard.ZstdCompressor().compress(raw[i : i + 997]) for i in range(0, len(raw), 997)
    ]
    (tmp_path / "m.txt.zst").write_bytes(skippable + b"".join(frames) + skippable)
    assert lengths_from_text(tmp_path / "m.txt.zst").tolist() == reference(raw, "whitespace")


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
@pytest.mark.parametrize("tokenizer", ["whitespace", "hf"])
def test_compressed_text_cut_short_or_corrupt_is_refused_naming_the_file(
    tmp_path, suffix, tokenizer
):
    """A .zst cut inside a frame was read as a shorter corpus (zstandard's stream reader ends
    quietly), a cut .gz raised EOFError and a plain file named .gz gzip's BadGzipFile."""
    raw = b"".join(b"line %d a b\n" % i for i in range(20_000))
    whole = write_packed(tmp_path / f"w.txt{suffix}", raw).read_bytes()
    if tokenizer == "hf":
        tokenizer = f"hf:{word_tokenizer(tmp_path)}"
    for name, data in {
        "cut": whole[: len(whole) // 2],
        "cut_at_the_end": whole[:-3],
        "plain": raw[:100],
        "flipped": whole[:40] + bytes([whole[40] ^ 0xFF]) + whole[41:],
    }.items():
        path = tmp_path / f"{name}.txt{suffix}"
        path.write_bytes(data)
        with pytest.raises(ValueError, match="is not whole (gzip|zstd) data") as info:
            lengths_from_text(path, tokenizer=tokenizer)
        assert str(path) in str(info.value)


@pytest.mark.parametrize("suffix", [".txt", ".txt.gz", ".txt.zst"])
@pytest.mark.parametrize("tokenizer", ["whitespace", "bytes", "hf"])
def test_binary_file_is_refused_naming_file_and_offset(tmp_path, suffix, tokenizer):
    path = write_packed(tmp_path / f"bin{suffix}", b"ok line\n" * 3 + b"ab\0cd\n")
    if tokenizer == "hf":
        tokenizer = f"hf:{word_tokenizer(tmp_path)}"
    with pytest.raises(ValueError, match="looks binary") as info:
        lengths_from_text(path, tokenizer=tokenizer)
    assert str(path) in str(info.value) and "offset 26" in str(info.value)


def test_folder_passed_as_text_is_refused(tmp_path):
    with pytest.raises(ValueError, match="is a folder, not a text file") as info:
        lengths_from_text(tmp_path)
    assert str(tmp_path) in str(info.value)
    with pytest.raises(TypeError, match="path must be a str or a pathlib.Path"):
        lengths_from_text(3)


def word_tokenizer(tmp_path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "ok": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tok.json"))
    return tmp_path / "tok.json"


# --------------------------------------------------------------------------- bad files


def test_corrupt_files_are_refused_naming_the_file(tmp_path):
    import padless

    for name, raw in [
        ("bad.npy", b"not an array"),
        (
            "trunc.npy",
            b"\x93NUMPY\x01\x00v\x00{'descr': '<i8', 'fortran_order': False, 'shape': (9,), }",
        ),
        ("bad.npz", b"PK\x03\x04 broken zip"),
        ("bad.arrow", b"garbage bytes"),
        ("bad.feather", b""),
        ("bad.parquet", b"PAR1 not really"),
    ]:
        path = tmp_path / name
        path.write_bytes(raw)
        with pytest.raises(ValueError) as info:
            padless.lengths_of(path)
        assert str(path) in str(info.value), name
    np.save(tmp_path / "obj.npy", np.array([1, "x"], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="obj.npy is not a readable .npy"):
        lengths_from_file(tmp_path / "obj.npy")


def test_values_read_from_files_are_range_checked(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    np.save(tmp_path / "big.npy", np.array([1, 2**40]))
    with pytest.raises(ValueError, match=r"big.npy: lengths must be .* at position \[1\]"):
        lengths_from_file(tmp_path / "big.npy")
    pq.write_table(pa.table({"n": pa.array([3, -1], pa.int64())}), tmp_path / "neg.parquet")
    with pytest.raises(ValueError, match=r"neg.parquet: lengths must be .*-1 at position \[1\]"):
        lengths_from_arrow(tmp_path / "neg.parquet", column="n")
    pq.write_table(pa.table({"n": pa.array([2**63], pa.uint64())}), tmp_path / "u.parquet")
    with pytest.raises(ValueError, match="9223372036854775808 at position"):
        lengths_from_arrow(tmp_path / "u.parquet", column="n")


def test_bad_tokenizer_models_are_refused_naming_the_file(tmp_path):
    path = write_text(tmp_path / "a.txt")
    bad = tmp_path / "garbage.model"
    bad.write_bytes(b"\x00garbage")
    for spec in (f"spm:{bad}", f"hf:{bad}"):
        with pytest.raises(ValueError) as info:
            lengths_from_text(path, tokenizer=spec)
        assert str(bad) in str(info.value)


def test_tokenizer_batches_come_back_in_order(tmp_path, monkeypatch):
    import padless.io.readers as R

    monkeypatch.setattr(R, "_TEXT_BATCH", 7)
    monkeypatch.setattr(R, "_CHUNK", 50)
    lines = [" ".join(["ok"] * (i % 11)) + " x" * (i % 3) for i in range(300)]
    path = write_text(tmp_path / "many.txt", lines)
    model = word_tokenizer(tmp_path)
    seen = []
    got = lengths_from_text(
        path, tokenizer=f"hf:{model}", progress=lambda b, n: seen.append((b, n))
    )
    assert got.tolist() == [len(line.split()) for line in lines]
    assert sum(b for b, _ in seen) == path.stat().st_size and sum(n for _, n in seen) == 300


def test_text_from_a_pipe_is_streamed(tmp_path):
    import os
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    raw = b"a b c\n\nd\r\n" * 5000 + b"tail"

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write(raw)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        got = lengths_from_text(fifo)
    finally:
        writer.join(timeout=30)
    assert got.tolist() == reference(raw, "whitespace")


def test_a_saved_plan_is_not_read_as_lengths(tmp_path):
    """Issue 13.9: a plan's offsets must never come back as a token corpus."""
    from pathlib import Path

    import padless

    path = tmp_path / "plan.npz"
    padless.plan_token_budget([3, 4, 5], max_tokens=8).save(path)
    with pytest.raises(ValueError, match="is a padless plan, not lengths"):
        padless.lengths_of(Path(path))


def test_broken_arrays_and_dataset_folders_are_named_by_their_file(tmp_path):
    """Each was a raw exception (BadZipFile, IndexError, KeyError, AttributeError) or numpy's
    message without the file."""
    import io as _io

    from padless.core._output import load_json
    from padless.io.tokens import RawTokens

    np.savez(tmp_path / "zero_d.npz", offsets=np.array([0, 3, 5]), tokens=np.array(5))
    np.savez(tmp_path / "corrupt.npz", offsets=np.arange(0, 4000, 4))
    raw = bytearray((tmp_path / "corrupt.npz").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "corrupt.npz").write_bytes(raw)
    np.savez(tmp_path / "two.npz", en=np.array([3, 4]), es=np.array([5]))
    np.save(tmp_path / "scalar.npy", np.array(7))
    np.save(tmp_path / "offsets.npy", np.array([0, 4, 7]))
    header = _io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<u2", "fortran_order": False, "shape": (-5,)}
    )
    (tmp_path / "negative.npy").write_bytes(header.getvalue() + bytes(8))
    cases = [
        (lambda: lengths_from_file(tmp_path / "zero_d.npz"), r"zero_d.npz \[tokens\]: .*1-D"),
        (lambda: lengths_from_file(tmp_path / "corrupt.npz"), "corrupt.npz: array 'offsets'"),
        (lambda: lengths_from_file(tmp_path / "two.npz", fields=["en", "es"]), "'es': 1"),
        (
            lambda: lengths_from_file(tmp_path / "scalar.npy", offsets=tmp_path / "offsets.npy"),
            r"scalar.npy: tokens must be a 1-D array",
        ),
        (lambda: RawTokens(tmp_path / "negative.npy", eos=0, cache=False), r"shape \(-5,\)"),
        (lambda: load_json(tmp_path / "corrupt.npz", "mesh cost"), "corrupt.npz' holds no JSON"),
    ]
    datasets = pytest.importorskip("datasets")
    good = tmp_path / "good"
    datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4]]}).save_to_disk(str(good))
    state = json.loads((good / "state.json").read_text())
    for name, text, words in (
        ("no_filename", json.dumps({**state, "_data_files": [{}]}), "must name a file"),
        ("elsewhere", json.dumps({**state, "_data_files": [{"filename": "../x"}]}), "a file of"),
        ("a_list", "[]", "must hold a JSON object, got list"),
        ("not_json", "{oops", "state.json' holds no JSON dataset metadata"),
    ):
        folder = tmp_path / name
        folder.mkdir()
        for f in good.iterdir():
            (folder / f.name).write_bytes(f.read_bytes())
        (folder / "state.json").write_text(text)
        cases.append((lambda folder=folder: lengths_from_file(folder, column="input_ids"), words))
    assert lengths_from_file(good, column="input_ids").tolist() == [3, 1]
    for call, words in cases:
        with pytest.raises(ValueError, match=words):
            call()


def test_a_files_format_is_told_by_its_content_whatever_its_name(tmp_path):
    """gzip text without .gz, a .npy named .bin or without a suffix, an .npz without one,
    Parquet named .arrow and Arrow named .parquet: each was read by its name (binary "text",
    "not an Arrow IPC file")."""
    import gzip

    pa = pytest.importorskip("pyarrow")
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    lines = b"a b c\nd e\nf\n"
    want = [3, 2, 1]
    (tmp_path / "gz_text").write_bytes(gzip.compress(lines))
    (tmp_path / "gz_as.txt").write_bytes(gzip.compress(lines))
    for name in ("npy_bare", "npy_as.bin"):
        with open(tmp_path / name, "wb") as fh:
            np.save(fh, np.array(want))
    with open(tmp_path / "npz_bare", "wb") as fh:
        np.savez(fh, lengths=np.array(want))
    table = pa.table({"text": ["a b c", "d e", "f"]})
    pq.write_table(table, tmp_path / "pq_as.arrow")
    feather.write_feather(table, tmp_path / "arrow_as.parquet")
    for name in ("gz_text", "gz_as.txt", "npy_bare", "npy_as.bin", "npz_bare"):
        assert lengths_from_file(tmp_path / name).tolist() == want, name
    for name in ("pq_as.arrow", "arrow_as.parquet"):
        got = lengths_from_file(tmp_path / name, column="text", tokenizer="whitespace")
        assert got.tolist() == want, name
