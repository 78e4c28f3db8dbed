"""Lengths and batches from where the tokens already are: indexed datasets and raw token files
through ``lengths_of`` / ``lengths_from_file`` and the command line, and the README's section
"Data you already have" run as written."""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

import padless
from padless.cli import main
from padless.io import lengths_from_file

README = Path(__file__).parent.parent / "docs" / "data.md"


def _docs(n: int, seed: int, eos: int | None = None) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        doc = rng.integers(2, 60_000, int(rng.integers(1, 400)), dtype=np.int64)
        if eos is not None:
            doc[-1] = eos
        out.append(doc)
    return out


def cli(*args: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([str(a) for a in args])
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, list[np.ndarray]]:
    docs = _docs(300, seed=1)
    sentences = [[d[: len(d) // 2], d[len(d) // 2 :]] for d in docs]  # two sentences each
    prefix = tmp_path / "corpus_text_document"
    padless.write_indexed(sentences, prefix, dtype=np.uint16)
    return prefix, docs


def test_an_indexed_dataset_is_read_by_every_name(pair):
    prefix, docs = pair
    want = [n for d in docs for n in (len(d) // 2, len(d) - len(d) // 2)]
    for name in (prefix.with_suffix(".idx"), prefix.with_suffix(".bin"), prefix):
        lengths = padless.lengths_of(Path(name))
        assert isinstance(lengths, np.memmap) and lengths.dtype == np.int32  # zero-copy
        assert lengths.tolist() == want
    per_doc = lengths_from_file(prefix.with_suffix(".idx"), documents=True)
    assert per_doc.tolist() == [len(d) for d in docs]


def test_a_windowed_sampler_plans_on_the_mapped_index_and_ships_it_as_its_file(pair):
    prefix, docs = pair
    lengths = padless.lengths_of(prefix.with_suffix(".idx"))
    sampler = padless.TokenBudgetSampler(lengths, max_tokens=1024, window=100, seed=3)
    again = pickle.loads(pickle.dumps(sampler))
    assert [list(b) for b in again] == [list(b) for b in sampler]
    seen = sorted(i for b in sampler for i in b)
    assert seen == list(range(2 * len(docs)))


def test_raw_token_files_through_lengths_from_file(tmp_path):
    docs = _docs(200, seed=2, eos=0)
    raw = tmp_path / "part-00000.npy"  # OLMo-style: no header
    np.concatenate(docs).astype(np.uint16).tofile(raw)
    got = lengths_from_file(raw, dtype="uint16", eos=0)
    assert got.tolist() == [len(d) for d in docs]
    with pytest.raises(ValueError, match="no .npy header.*raw token file"):
        padless.lengths_of(raw)


def test_the_reader_options_that_do_not_fit_the_file_are_refused(pair, tmp_path):
    prefix, _ = pair
    with pytest.raises(ValueError, match="dtype is given by the header"):
        lengths_from_file(prefix.with_suffix(".idx"), dtype="uint16")
    text = tmp_path / "t.txt"
    text.write_text("a b\n")
    with pytest.raises(ValueError, match="pass eos= too"):
        lengths_from_file(text, dtype="uint16")
    with pytest.raises(ValueError, match="documents=True is for an indexed dataset"):
        lengths_from_file(text, documents=True)
    with pytest.raises(ValueError, match="drop documents=True"):
        lengths_from_file(text, dtype="uint8", eos=10, documents=True)
    with pytest.raises(TypeError, match="documents must be True or False"):
        lengths_from_file(text, documents="yes")


def test_the_command_line_reads_indexed_and_raw_files(pair, tmp_path):
    prefix, docs = pair
    status, out, _ = cli("report", prefix.with_suffix(".idx"))
    assert status == 0 and f"{2 * len(docs):,} sequences" in out
    status, out, _ = cli("report", prefix.with_suffix(".idx"), "--documents")
    assert status == 0 and f"{len(docs):,} sequences" in out
    raw = tmp_path / "raw.bin"
    np.concatenate(_docs(50, seed=4, eos=1)).astype(np.uint32).tofile(raw)
    status, out, _ = cli("report", raw, "--dtype", "uint32", "--eos", "1")
    assert status == 0 and "50 sequences" in out
    status, _, err = cli("report", tmp_path / "raw.bin", "--dtype", "uint32")
    # --dtype reads only a raw token file, which --eos makes: named as the CLI's options
    assert status == 2 and "--dtype 'uint32' does not apply" in err and "with --eos" in err


def _readme_block() -> str:
    text = README.read_text()
    at = text.index("\n## Data you already have\n")
    return re.search(r"```python\n(.*?)```", text[at:], re.S).group(1)


def test_the_readme_section_runs_as_written(tmp_path, monkeypatch):
    import datasets
    import torch

    monkeypatch.chdir(tmp_path)
    docs = _docs(120, seed=5)
    padless.write_indexed(docs, "corpus_text_document", dtype=np.uint16)
    olmo = _docs(200, seed=6, eos=50279)
    np.concatenate(olmo).astype(np.uint16).tofile("part-00000.npy")
    datasets.Dataset.from_dict({"input_ids": [d.tolist() for d in docs[:50]]}).save_to_disk(
        "tokenized"
    )
    scope: dict = {"__name__": "readme_data_you_have", "train_step": lambda *batch: None}
    torch.set_num_threads(1)
    exec(compile(_readme_block(), "docs/data.md:Data you already have", "exec"), scope)
    # what the recipe built serves the files' data: every OLMo document once, whole
    served = [
        row[: int(n)].tolist()
        for batch in scope["loader"]
        for row, n in zip(batch["input_ids"], batch["lengths"], strict=True)
    ]
    assert sorted(served) == sorted(d.tolist() for d in olmo)
    assert scope["lengths"].tolist() == [len(d) for d in docs[:50]]
    again = padless.IndexedDataset("tokenized_text_document")
    assert [again[i].tolist() for i in range(50)] == [d.tolist() for d in docs[:50]]
    assert os.path.exists("part-00000.npy.uint16.eos50279.offsets.npy")
    store = scope["store"]
    assert store.lengths.tolist() == [len(d) for d in olmo]
