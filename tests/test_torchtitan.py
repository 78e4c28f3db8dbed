"""padless.grain.TorchtitanPacking against torchtitan's Grain data path, as read from its source.

torchtitan does not install beside the test extras (``pip install --dry-run torchtitan`` wants
``datasets`` 4.7 where the suite has 5.x), so it is not installed. The interfaces below are
restated from torchtitan's source at commit b5bcd76c66d0acb1a08b176d9639425bc55e0b2a
(2026-08-21, after #4088): ``components/data/types.py`` (DatasetBuildContext,
DatasetIterationPolicy), ``components/data/dataset.py`` (TextSequence, the ``DatasetConfig``
protocol: ``build(*, context, dataset_iteration_policy)``), ``components/data/loader.py``
(GrainDataLoader: ``to_iter_dataset`` for a MapDataset, ``batch(num_rows_per_batch,
drop_remainder=repeat, batch_fn=collator)``, ``ThreadPrefetchIterDataset``, state
``{"version": 1, "dp_world_size": ..., "dp_rank_<r>": iterator.get_state()}``) and
``components/data/collators.py`` (TextCollator). Grain itself is real."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest

grain = pytest.importorskip("grain")
torch = pytest.importorskip("torch")

from padless.grain import IGNORE_INDEX, TorchtitanPacking  # noqa: E402


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TextSequence:  # torchtitan.components.data.TextSequence's fields
    input_ids: np.ndarray
    labels: np.ndarray
    positions: np.ndarray | None = None


def context(tokens):  # DatasetBuildContext's fields
    return SimpleNamespace(
        tokenizer=None,
        max_context_length=tokens,
        num_tokens_per_batch=tokens,
        read_options=grain.ReadOptions(),
    )


def policy(rank, world, repeat, seed=7):  # DatasetIterationPolicy's fields
    return SimpleNamespace(
        seed=seed,
        shuffle=True,
        repeat=repeat,
        dp_rank=rank,
        dp_world_size=world,
        streaming_shuffle_buffer_size=1000,
    )


def text_collator(tokens):
    """TextCollator's rule: concatenate the rows, pad the token batch's tail."""

    def collate(rows):
        ids = torch.cat([torch.as_tensor(r.input_ids) for r in rows])
        labels = torch.cat([torch.as_tensor(r.labels) for r in rows])
        pos = torch.cat([torch.as_tensor(r.positions) for r in rows])
        pad = tokens - ids.numel()
        assert pad >= 0
        if pad:
            ids = torch.nn.functional.pad(ids, (0, pad))
            labels = torch.nn.functional.pad(labels, (0, pad), value=IGNORE_INDEX)
            pos = torch.cat([pos, torch.arange(pad, dtype=pos.dtype)])
        return {"input": ids, "positions": pos}, labels

    return collate


def loader(config, tokens, rank, world, repeat):
    """GrainDataLoader's pipeline over a dataset config."""
    ds = config.build(context=context(tokens), dataset_iteration_policy=policy(rank, world, repeat))
    if isinstance(ds, grain.MapDataset):
        ds = ds.to_iter_dataset(read_options=grain.ReadOptions())
    ds = ds.batch(1, drop_remainder=repeat, batch_fn=text_collator(tokens))
    return iter(grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=2))


@pytest.fixture(scope="module")
def documents():
    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.lognormal(3.5, 0.8, 150).astype(np.int64) + 2, 128)
    docs = []
    for i, n in enumerate(lengths):
        tokens = np.arange(n + 1, dtype=np.int64) + 1000 * i  # shifted pairs, as processors make
        docs.append(TextSequence(input_ids=tokens[:-1], labels=tokens[1:]))
    return lengths, docs


def test_every_document_once_per_epoch_in_equal_rows_per_rank(documents):
    lengths, docs = documents
    config = TorchtitanPacking(docs, lengths, sequence_type=TextSequence)
    per_rank = []
    for r in range(3):
        it = loader(config, 128, r, 3, repeat=False)
        try:
            per_rank.append(list(it))
        finally:
            it.close()
    assert len({len(x) for x in per_rank}) == 1  # equal steps: no rank hangs a collective
    seen: dict[int, int] = {}
    for inputs, labels in (b for rank in per_rank for b in rank):
        ids, pos = inputs["input"].numpy(), inputs["positions"].numpy()
        labels = labels.numpy()
        assert ids.shape == (128,)
        starts = np.flatnonzero(pos == 0)
        for a, b in zip(starts, [*starts[1:], 128], strict=True):
            if labels[a] == IGNORE_INDEX:  # padding: positions 0, labels ignored
                assert ids[a] == 0
                continue
            doc = int(ids[a]) // 1000
            np.testing.assert_array_equal(ids[a:b], docs[doc].input_ids)
            np.testing.assert_array_equal(labels[a:b], docs[doc].labels)
            np.testing.assert_array_equal(pos[a:b], np.arange(b - a))
            seen[doc] = seen.get(doc, 0) + 1
    assert sorted(seen) == list(range(len(docs)))  # every document; repeats are whole rows
    assert max(seen.values()) <= 2


def test_the_loader_state_resumes_exactly_across_epochs(documents):
    lengths, docs = documents
    config = TorchtitanPacking(docs, lengths, sequence_type=TextSequence)

    def run(it, count):
        out = []
        for _ in range(count):
            inputs, labels = next(it)
            out.append(np.concatenate([inputs["input"].numpy(), labels.numpy()]))
        return out

    it = loader(config, 128, 1, 2, repeat=True)
    try:
        rows = len(
            list(config.build(context=context(128), dataset_iteration_policy=policy(1, 2, False)))
        )
        full = run(it, rows + 10)  # past the end of the first epoch
    finally:
        it.close()
    it = loader(config, 128, 1, 2, repeat=True)
    try:
        head = run(it, rows - 3)
        state = {"version": 1, "dp_world_size": 2, "dp_rank_1": it.get_state()}
    finally:
        it.close()
    state = json.loads(json.dumps(state))
    fresh = loader(config, 128, 1, 2, repeat=True)
    try:
        fresh.set_state(state["dp_rank_1"])
        rest = run(fresh, 13)
    finally:
        fresh.close()
    for a, b in zip(head + rest, full, strict=True):
        np.testing.assert_array_equal(a, b)


def test_refusals_and_the_default_row_type(documents):
    lengths, docs = documents
    with pytest.raises(ValueError, match="oversize='split' cuts documents"):
        TorchtitanPacking(docs, lengths, oversize="split")
    with pytest.raises(ValueError, match="records holds 3 documents, lengths 150"):
        TorchtitanPacking(docs[:3], lengths)
    try:
        import torchtitan  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError):
            TorchtitanPacking(docs, lengths).build(
                context=context(128), dataset_iteration_policy=policy(0, 1, False)
            )


def test_a_document_past_the_models_context_is_refused_or_left_out():
    """torchtitan's max_context_length (2048 by default) bounds a document, beside the row's
    num_tokens_per_batch (16384): a 3000-token document was packed whole, with positions up to
    2999 past the model's table. Refused with oversize='error', left out with 'drop' (as
    torchtitan's own packers do)."""
    lengths = [3000, 100, 200, 2048]
    docs = [{"input_ids": np.arange(n) + 1, "labels": np.arange(n) + 2} for n in lengths]
    ctx = SimpleNamespace(
        tokenizer=None,
        max_context_length=2048,
        num_tokens_per_batch=16384,
        read_options=grain.ReadOptions(),
    )
    with pytest.raises(ValueError, match=r"document 0 has 3000 tokens.*max_context_length=2048"):
        TorchtitanPacking(docs, lengths, sequence_type=TextSequence).build(
            context=ctx, dataset_iteration_policy=policy(0, 1, False)
        )
    rows = list(
        TorchtitanPacking(docs, lengths, oversize="drop", sequence_type=TextSequence).build(
            context=ctx, dataset_iteration_policy=policy(0, 1, False)
        )
    )
    assert max(int(r.positions.max()) for r in rows) == 2047
    assert sum(int((r.labels != IGNORE_INDEX).sum()) for r in rows) == 100 + 200 + 2048
