"""Reading lengths from files: text (plain, gz, zst), tokenizers, npy/npz, Arrow, Parquet, HF folders."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from padless import lengths_of
from padless.readers import (
    lengths_from_arrow,
    lengths_from_file,
    lengths_from_files,
    lengths_from_text,
)

LINES = ["the quick  brown fox", "", "  jumps\tover ", "the lazy dog\r", "héllo wörld ✓", "x"]


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


def test_text_across_chunk_boundaries(tmp_path, monkeypatch):
    import padless.readers as R

    monkeypatch.setattr(R, "_CHUNK", 7)
    rs = np.random.default_rng(0)
    lines = [
        " ".join("w" * int(k) for k in rs.integers(1, 6, rs.integers(0, 8))) for _ in range(200)
    ]
    path = write_text(tmp_path / "b.txt", lines)
    assert lengths_from_text(path).tolist() == expected("whitespace", lines)
    assert lengths_from_text(path, tokenizer="bytes").tolist() == expected("bytes", lines)


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
    import padless.readers as R

    monkeypatch.setattr(R, "_CHUNK", 64)
    lines = [f"line {i} " + "x " * (i % 7) for i in range(100)]
    path = write_text(tmp_path / "p.txt", lines)
    seen = []
    got = lengths_from_text(path, progress=lambda b, n: seen.append((b, n)))
    assert len(seen) > 1
    assert sum(b for b, _ in seen) == path.stat().st_size
    assert sum(n for _, n in seen) == got.size == 100
