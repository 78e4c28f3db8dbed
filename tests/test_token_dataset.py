"""``padless.torch.TokenDataset``: planned batches gathered from a token file equal the batches
the plan's collate builds from the same items, for every strategy's form."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch

import padless
from padless.io.indexed import IndexedDataset, write_indexed
from padless.io.tokens import RawTokens
from padless.torch import TokenDataset, collate_packed, collate_padded

EOS = 7


def _documents(n: int, seed: int, longest: int = 300) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n):
        doc = rng.integers(8, 60_000, int(rng.integers(0, longest)) + 1, dtype=np.int64)
        doc[-1] = EOS  # each document ends with its eos, as raw token files hold them
        docs.append(doc)
    return docs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[np.ndarray], str, str]:
    """The same documents as a Megatron pair and as a raw uint16 file with eos."""
    root = tmp_path_factory.mktemp("tokens")
    docs = _documents(400, seed=3)
    prefix = str(root / "corpus_text_document")
    write_indexed(docs, prefix, dtype=np.uint16)
    raw = root / "corpus.npy"  # an OLMo-style raw file: no .npy header
    np.concatenate(docs).astype(np.uint16).tofile(raw)
    return docs, prefix, str(raw)


def _same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert got[key].dtype == value.dtype, key
            assert got[key].shape == value.shape, key
            assert torch.equal(got[key], value), key
        else:
            assert got[key] == value, key


def _items(docs: list[np.ndarray]) -> list[np.ndarray]:
    return [d.astype(np.int64) for d in docs]


@pytest.mark.parametrize(
    "options",
    [{}, {"flatten": True}, {"rows": 48}, {"attention_mask": "block"}, {"position_start": 2}],
)
@pytest.mark.parametrize("oversize", ["error", "split"])
def test_packed_batches_equal_the_packed_collate(corpus, options, oversize):
    docs, prefix, _ = corpus
    store = IndexedDataset(prefix)
    capacity = 512 if oversize == "error" else 128
    sampler = padless.PackingSampler(
        store.lengths, capacity=capacity, max_per_row=6, oversize=oversize, seed=1
    )
    dataset = TokenDataset(store, plan=sampler, **options)
    collate = collate_packed(sampler, **options)
    items = sampler.pieces(_items(docs)) if oversize == "split" else _items(docs)
    served = []
    for batch in sampler:
        got = dataset.__getitems__(batch)
        _same(got, collate([items[c] for c in batch]))
        served.append(got["input_ids"].numel())
    assert sum(served) >= int(store.lengths.sum())


@pytest.mark.parametrize(
    "spec",
    [
        padless.TokenBudget(max_tokens=2048, pad_to_multiple_of=8),
        padless.ExactLength(max_tokens=2048),
        padless.Buckets(num_buckets=4, max_tokens=2048),
        padless.FixedShapes(shapes=[(16, 64), (8, 128), (4, 304)]),
        padless.FixedShapes(shapes=[(16, 64), (8, 128), (4, 304)], pad_batches=False),
    ],
    ids=lambda s: type(s).__name__,
)
def test_padded_batches_equal_the_padded_collate(corpus, spec):
    docs, _, raw = corpus
    store = RawTokens(raw, dtype=np.uint16, eos=EOS)
    sampler = padless.PlanSampler(store.lengths, spec, seed=2)
    dataset = TokenDataset(store, plan=sampler, pad_id=5)
    collate = collate_padded(5, plan=sampler)
    items = _items(docs)
    seen = []
    for batch in sampler:
        _same(dataset.__getitems__(batch), collate([items[i] for i in batch]))
        seen.extend(batch)
    assert sorted(seen) == list(range(len(docs)))


def test_a_path_opens_the_store_and_items_are_the_documents(corpus):
    docs, prefix, raw = corpus
    for source, kw in ((prefix + ".idx", {}), (raw, {"dtype": "uint16", "eos": EOS})):
        dataset = TokenDataset(source, **kw)
        assert len(dataset) == len(docs)
        for i in (0, 17, len(docs) - 1):
            assert torch.equal(dataset[i], torch.from_numpy(docs[i]))


def test_int32_tokens_and_the_batch_in_a_dataloader_with_workers(corpus):
    docs, prefix, _ = corpus
    store = IndexedDataset(prefix)
    sampler = padless.PackingSampler(store.lengths, capacity=512, seed=4)
    dataset = TokenDataset(prefix, plan=sampler, out_dtype="int32", flatten=True)
    inline = [dataset.__getitems__(b) for b in sampler]
    assert all(b["input_ids"].dtype == torch.int32 for b in inline)
    loader = dataset.loader(sampler, num_workers=2)
    served = list(loader)
    assert len(served) == len(inline)
    for got, want in zip(served, inline, strict=True):
        _same(got, want)
    tokens = torch.cat([b["input_ids"].view(-1) for b in served]).sort().values
    assert torch.equal(tokens, torch.from_numpy(np.concatenate(docs)).to(torch.int32).sort().values)


def test_the_dataset_pickles_as_its_paths(corpus):
    _, prefix, _ = corpus
    dataset = TokenDataset(prefix)
    blob = pickle.dumps(dataset)
    assert len(blob) < 4096  # the tokens do not travel
    again = pickle.loads(blob)
    assert torch.equal(again[3], dataset[3])


def test_plan_lengths_must_be_the_files(corpus):
    docs, prefix, _ = corpus
    store = IndexedDataset(prefix)
    lengths = np.asarray(store.lengths, dtype=np.int64).copy()
    lengths[123] += 1
    with pytest.raises(ValueError, match="item 123: planned"):
        TokenDataset(store, plan=padless.PackingSampler(lengths, capacity=512))
    with pytest.raises(ValueError, match="holds 400 items"):
        TokenDataset(store, plan=padless.PackingSampler(lengths[:-1], capacity=512))


def test_bad_arguments_are_named(corpus):
    _, prefix, _ = corpus
    store = IndexedDataset(prefix)
    with pytest.raises(TypeError, match="source must be"):
        TokenDataset(3.5)
    with pytest.raises(ValueError, match="plan is not a packing plan"):
        TokenDataset(store, flatten=True)
    with pytest.raises(ValueError, match="out_dtype"):
        TokenDataset(store, out_dtype="float32")
    with pytest.raises(ValueError, match="pad_id must fit out_dtype=int32"):
        TokenDataset(store, out_dtype="int32", pad_id=1 << 40)
    with pytest.raises(ValueError, match="describe a file"):
        TokenDataset(store, dtype="uint16")
    dataset = TokenDataset(store)
    with pytest.raises(ValueError, match="index 400 is out of range"):
        dataset.__getitems__([0, 400])
    with pytest.raises(ValueError, match="non-negative"):
        dataset.__getitems__([-1])


def test_tokens_that_do_not_fit_int32_are_refused(tmp_path):
    path = tmp_path / "wide.bin"
    np.array([1, 2, 3, 2**31 + 5, 9, 0], dtype=np.uint32).tofile(path)
    dataset = TokenDataset(path, dtype="uint32", eos=0, out_dtype="int32")
    with pytest.raises(ValueError):
        dataset.__getitems__([0])
    assert (
        TokenDataset(path, dtype="uint32", eos=0).__getitems__([0])["input_ids"].max() == 2**31 + 5
    )


@pytest.mark.parametrize("kind", ["indexed", "raw"])
def test_a_token_file_that_shrinks_under_the_dataset_is_refused_per_batch(tmp_path, kind):
    """Issue 39.4: the file's size is checked when a batch is served; a cut inside the last page
    would otherwise be read as zeros (and a deeper one kill the process with SIGBUS)."""
    import mmap

    page = mmap.PAGESIZE
    docs = [np.full(page // 4, 9, np.uint16) for _ in range(7)]  # 3.5 pages of tokens
    for d in docs:
        d[-1] = EOS
    if kind == "indexed":
        write_indexed(docs, tmp_path / "c", dtype="uint16")
        path, dataset = tmp_path / "c.bin", TokenDataset(str(tmp_path / "c"))
    else:
        path = tmp_path / "c.bin"
        np.concatenate(docs).tofile(path)
        dataset = TokenDataset(path, dtype="uint16", eos=EOS)
    sampler = padless.PackingSampler(dataset.store.lengths, capacity=page, seed=0)
    packed = TokenDataset(dataset.store, plan=sampler)
    assert dataset.__getitems__([6])["input_ids"][0, -1] == EOS
    size = path.stat().st_size
    os.truncate(path, size - 2)
    for serve in (
        lambda: dataset.__getitems__([6]),
        lambda: packed.__getitems__([6, 0]),
        lambda: dataset[6],
    ):
        with pytest.raises(ValueError, match=rf"c\.bin.*shrank.*{size}.*{size - 2}"):
            serve()
