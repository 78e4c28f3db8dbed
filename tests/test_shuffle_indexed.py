"""``shuffle_indexed`` and ``padless shuffle`` of an indexed dataset's documents."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from padless.io.indexed import IndexedDataset, write_indexed
from padless.shuffle._indexed import shuffle_indexed

PADLESS = shutil.which("padless", path=os.path.dirname(sys.executable)) or "padless"


def corpus(where: Path, fmt: str = "megatron", n: int = 300) -> list[list[int]]:
    """Documents whose tokens name them (document d holds d*100 + k), some split in sentences."""
    rng = np.random.default_rng(1)
    docs, out = [], []
    for d in range(n):
        k = int(rng.integers(0, 7))
        tokens = [d * 100 + j for j in range(k)]
        docs.append(tokens)
        out.append([np.array(tokens[:2]), np.array(tokens[2:])] if d % 4 == 0 else tokens)
    write_indexed(out, where, dtype="int32", format=fmt)
    return docs


def read_docs(prefix: Path) -> list[list[int]]:
    ds = IndexedDataset(prefix, documents=True)
    return [ds[i].tolist() for i in range(len(ds))]


def test_every_document_once_with_its_sentences(tmp_path: Path) -> None:
    docs = corpus(tmp_path / "a")
    before = [(tmp_path / f"a.{s}").read_bytes() for s in ("idx", "bin")]
    r = shuffle_indexed(tmp_path / "a.idx", tmp_path / "b", seed=3)
    got = read_docs(tmp_path / "b")
    assert sorted(got) == sorted(docs) and got != docs
    assert (r.items, r.documents, r.format, r.seed) == (300, True, "megatron", 3)
    assert r.bytes == (tmp_path / "a.bin").stat().st_size
    # each document keeps its split: the sequences follow it
    a, b = IndexedDataset(tmp_path / "a"), IndexedDataset(tmp_path / "b")
    assert sorted(np.diff(a.document_index).tolist()) == sorted(np.diff(b.document_index).tolist())
    assert len(b) == len(a)
    assert [(tmp_path / f"a.{s}").read_bytes() for s in ("idx", "bin")] == before
    again = shuffle_indexed(tmp_path / "a", tmp_path / "c", seed=3)
    assert read_docs(tmp_path / "c") == got and again.seed == 3
    other = shuffle_indexed(tmp_path / "a", tmp_path / "d", seed=4)
    assert read_docs(tmp_path / "d") != got and other.seed == 4
    fresh = shuffle_indexed(tmp_path / "a", tmp_path / "e")
    assert isinstance(fresh.seed, int) and sorted(read_docs(tmp_path / "e")) == sorted(docs)


def test_sequences_and_fairseq(tmp_path: Path) -> None:
    corpus(tmp_path / "a")
    a = IndexedDataset(tmp_path / "a")
    r = shuffle_indexed(tmp_path / "a", tmp_path / "s", seed=0, documents=False)
    s = IndexedDataset(tmp_path / "s")
    assert not r.documents and s.num_documents == len(s) == len(a)
    key = sorted(tuple(x[i].tolist()) for x in (a,) for i in range(len(x)))
    assert sorted(tuple(s[i].tolist()) for i in range(len(s))) == key
    docs = corpus(tmp_path / "f", "fairseq")
    r = shuffle_indexed(tmp_path / "f", tmp_path / "g", seed=0)
    g = IndexedDataset(tmp_path / "g")
    assert r.format == g.format == "fairseq" and not r.documents
    assert sorted(sum((g[i].tolist() for i in range(len(g))), [])) == sorted(sum(docs, []))


def test_long_document_and_refusals(tmp_path: Path) -> None:
    big = np.arange(3 << 20, dtype=np.int64) % 50_000  # more than one gather step
    write_indexed([big, [1, 2], []], tmp_path / "a", dtype="uint16")
    shuffle_indexed(tmp_path / "a", tmp_path / "b", seed=1)
    got = read_docs(tmp_path / "b")
    assert sorted(map(len, got)) == [0, 2, len(big)]
    assert np.array_equal(next(d for d in got if len(d) > 2), big)
    for dst in ("a", "a.idx", "a.bin"):
        with pytest.raises(ValueError, match="names the source"):
            shuffle_indexed(tmp_path / "a", tmp_path / dst, seed=1)
    with pytest.raises(FileNotFoundError, match="no such file"):
        shuffle_indexed(tmp_path / "nothing", tmp_path / "c")
    assert sorted(os.listdir(tmp_path)) == ["a.bin", "a.idx", "b.bin", "b.idx"]


def padless(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([PADLESS, "shuffle", *args], capture_output=True, cwd=cwd, timeout=120)


def test_cli_end_to_end(tmp_path: Path) -> None:
    docs = corpus(tmp_path / "corpus_text_document")
    proc = padless("corpus_text_document.idx", "out", "--seed", "7", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert b"300 documents" in proc.stderr and b"seed 7" in proc.stderr
    via_api = shuffle_indexed(tmp_path / "corpus_text_document", tmp_path / "api", seed=7)
    assert read_docs(tmp_path / "out") == read_docs(tmp_path / "api") and via_api.items == 300
    assert sorted(read_docs(tmp_path / "out")) == sorted(docs)
    seqs = padless("corpus_text_document", "seqs", "--indexed", "--sequences", "-q", cwd=tmp_path)
    assert seqs.returncode == 0 and seqs.stderr == b""
    assert IndexedDataset(tmp_path / "seqs").num_documents == len(IndexedDataset(tmp_path / "api"))
    same = padless("corpus_text_document.idx", "corpus_text_document", cwd=tmp_path)
    assert same.returncode == 2 and b"names the source" in same.stderr
    bad = padless("corpus_text_document.idx", "x", "--shards", "2", cwd=tmp_path)
    assert bad.returncode == 2 and b"not --indexed" in bad.stderr
    stray = padless("corpus_text_document.bin", "x", "--lines", "--sequences", cwd=tmp_path)
    assert stray.returncode == 2 and b"--sequences is for an indexed" in stray.stderr
    neither = padless("corpus_text_document.bin", "x", cwd=tmp_path)
    assert neither.returncode == 2 and b"--record-size --lines is required" in neither.stderr
