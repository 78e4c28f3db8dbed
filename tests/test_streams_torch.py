"""StreamDataset: DataLoader workers and ranks each batch their share exactly once, exact resume
through torchdata's StatefulDataLoader, the packed collate, and ranks of a 2-process gloo run
that stop at the same step although their shards differ."""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from torch.utils.data import DataLoader  # noqa: E402

from padless import Packing, StreamBatcher, TokenBudget  # noqa: E402
from padless.streams import Piece  # noqa: E402
from padless.torch import StreamDataset, stop_together  # noqa: E402

SIZES = [120, 40, 90, 70]  # rows per Parquet file: unequal shards


@pytest.fixture(scope="module")
def parquet_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("parquet")
    rs = np.random.default_rng(0)
    start = 0
    for k, n in enumerate(SIZES):
        lengths = rs.integers(1, 30, n)
        table = pa.table(
            {
                "id": np.arange(start, start + n),
                "input_ids": [rs.integers(1, 99, int(m)).tolist() for m in lengths],
            }
        )
        pq.write_table(table, folder / f"part{k}.parquet", row_group_size=32)
        start += n
    return folder


def stream(folder):
    files = sorted(str(p) for p in Path(folder).glob("*.parquet"))
    return datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)


def tokens(row):
    return len(row["input_ids"])


def ids(batch):
    return [row["id"] for row in batch]


def as_ids(batch):  # a picklable collate for worker processes
    return [row["id"] for row in batch]


TOTAL = sum(SIZES)


@pytest.mark.parametrize("workers", [0, 2])
def test_workers_split_a_datasets_stream_once(parquet_dir, workers):
    ds = StreamDataset(stream(parquet_dir), TokenBudget(max_tokens=200), buffer=32, length=tokens)
    loader = DataLoader(ds, batch_size=None, num_workers=workers, collate_fn=as_ids)
    seen = [i for batch in loader for i in batch]
    assert sorted(seen) == list(range(TOTAL))


def test_ranks_split_a_datasets_stream_by_its_shards(parquet_dir):
    got = []
    for rank in (0, 1):
        ds = StreamDataset(
            stream(parquet_dir),
            TokenBudget(max_tokens=200),
            buffer=32,
            length=tokens,
            rank=rank,
            world_size=2,
        )
        got.append([i for batch in ds for i in ids(batch)])
    assert sorted(got[0] + got[1]) == list(range(TOTAL))
    assert len(got[0]) != len(got[1])  # whole files per rank: unequal shards


def test_plain_source_split_over_workers_and_ranks():
    lengths = list(range(1, 200))
    seen = []
    for rank in (0, 1):
        ds = StreamDataset(
            lengths, TokenBudget(max_tokens=300), buffer=16, length=int, rank=rank, world_size=2
        )
        loader = DataLoader(ds, batch_size=None, num_workers=2, collate_fn=list)
        seen += [x for batch in loader for x in batch]
    assert sorted(seen) == lengths


def test_max_wait_reaches_the_batchers():
    lengths = np.random.default_rng(0).integers(1, 50, 120).tolist()
    spec = TokenBudget(max_tokens=100)

    def batches(ds):
        return list(DataLoader(ds, batch_size=None, collate_fn=list))

    want = list(StreamBatcher(lengths, spec, buffer=8, length=int, max_wait=1))
    assert want != list(StreamBatcher(lengths, spec, buffer=8, length=int))  # it matters here
    assert batches(StreamDataset(lengths, spec, buffer=8, length=int, max_wait=1)) == want


def test_stateful_dataloader_resumes_exactly(parquet_dir):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")

    def make():
        ds = StreamDataset(
            stream(parquet_dir), TokenBudget(max_tokens=150), buffer=24, length=tokens, seed=3
        )
        ds.set_epoch(1)
        return sdl.StatefulDataLoader(ds, batch_size=None, num_workers=2, collate_fn=as_ids)

    full = list(make())
    assert sorted(i for b in full for i in b) == list(range(TOTAL))
    for cut in (len(full) // 2,):  # past the first round (docs_resume: a shuffled stream)
        loader = make()
        it = iter(loader)
        got = [next(it) for _ in range(cut)]
        state = loader.state_dict()  # workers have prefetched further
        del it
        resumed = make()
        resumed.load_state_dict(state)
        assert got + list(resumed) == full, cut


def test_resume_in_process_through_the_dataset(parquet_dir):
    def make():
        return StreamDataset(
            stream(parquet_dir), Packing(capacity=64, rows_per_batch=2), buffer=24, length=tokens
        )

    full = [json.dumps(b, default=str) for b in make()]
    ds = make()
    it = iter(ds)
    got = [json.dumps(next(it), default=str) for _ in range(7)]
    state = json.loads(json.dumps(ds.state_dict()))
    again = make()
    again.load_state_dict(state)
    assert got + [json.dumps(b, default=str) for b in again] == full


def test_packed_collate_rows_and_pieces():
    from padless.torch import collate_for

    rs = np.random.default_rng(1)
    items = [{"input_ids": rs.integers(1, 50, int(n)).tolist()} for n in rs.integers(1, 60, 80)]
    spec = Packing(capacity=32, rows_per_batch=2, oversize="split")
    ds = StreamDataset(items, spec, buffer=16, length=tokens)
    collate, flat = collate_for(ds), collate_for(ds, flatten=True)
    pieces = 0
    for batch in ds:
        out = collate(batch)
        assert out["input_ids"].shape == (len(batch), 32)
        got = out["input_ids"].view(-1).tolist()
        bounds = [0]
        k = real = 0
        for row in batch:  # each row's sequences back to back, then padding
            used = 0
            for x in row:
                t = list(x.tokens("input_ids") if isinstance(x, Piece) else x["input_ids"])
                pieces += isinstance(x, Piece)
                assert got[k : k + len(t)] == t
                k, used, real = k + len(t), used + len(t), real + len(t)
                bounds.append(k)
            if used < 32:
                assert got[k : k + 32 - used] == [0] * (32 - used)
                k += 32 - used
                bounds.append(k)
        assert out["cu_seqlens"].tolist() == bounds
        assert flat(batch)["input_ids"].shape == (1, real)  # no padding at all
    assert pieces > 0


def test_padded_collate_for_budget_batches():
    from padless.torch import collate_for

    items = [{"input_ids": list(range(n))} for n in range(1, 40)]
    ds = StreamDataset(items, TokenBudget(max_tokens=64), buffer=8, length=tokens)
    collate = collate_for(ds, pad_id=0, fields=["input_ids"])
    for batch in ds:
        out = collate(batch)
        assert out["input_ids"].shape[0] == len(batch)
        assert out["input_ids"].numel() <= 64
    # a width multiple rounds past the budget (384 tokens under 100 was accepted): refused,
    # as collate_for(sampler) refuses one that is not the plan's
    for source in (ds, StreamBatcher(items, TokenBudget(max_tokens=64), buffer=8, length=tokens)):
        with pytest.raises(ValueError, match="multiple_of=16 is refused for a stream's batches"):
            collate_for(source, pad_id=0, multiple_of=16)
        assert collate_for(source, pad_id=0, multiple_of=1)([[1, 2], [3]])["input_ids"].shape == (
            2,
            2,
        )


def test_stop_together_is_the_loader_without_a_process_group():
    wrapped = stop_together([[1], [2], [3]], every=2)
    assert list(wrapped) == [[1], [2], [3]]
    assert wrapped.steps == 3 and len(wrapped) == 3
    with pytest.raises(ValueError, match="every must be a positive int"):
        stop_together([], every=0)


def test_ddp_two_processes_stop_at_the_same_step(parquet_dir, tmp_path):
    script = Path(__file__).with_name("_stream_ddp.py")
    prefix = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(script), str(parquet_dir), "3", str(prefix)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    rows = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("run.rank*.json"))]
    assert sorted(r["rank"] for r in rows) == [0, 1]
    for r in rows:
        assert r["raw"] > 0
    raw = [r["raw"] for r in rows]
    assert raw[0] != raw[1]  # unequal shards: without stop_together one rank would hang
    for every in ("1", "3"):
        steps = {r["steps"][every] for r in rows}
        assert steps == {min(raw)}
        assert {r["sum"][every] for r in rows} == {2 * min(raw)}
    assert sum(r["left_over"]["1"] for r in rows) == 1  # one batch pulled, not delivered
    ids_seen = [i for r in rows for i in r["ids"]]
    assert len(ids_seen) == len(set(ids_seen))


# --------------------------------------------------------------------------- issue 24


@pytest.fixture(scope="module")
def token_dir(tmp_path_factory):
    """400 rows in 4 Parquet files; row i's tokens are all i + 1 (ids recoverable from tokens)."""
    folder = tmp_path_factory.mktemp("tokens")
    lengths = np.random.default_rng(1).integers(1, 30, 400)
    for k in range(4):
        rows = range(100 * k, 100 * (k + 1))
        table = pa.table({"input_ids": [[i + 1] * int(lengths[i]) for i in rows]})
        pq.write_table(table, folder / f"part{k}.parquet", row_group_size=25)
    return folder


def streaming_doc_example() -> str:
    """docs/streaming.md's StreamDataset loop, at test sizes, over a shuffled stream."""
    doc = (Path(__file__).parent.parent / "docs" / "streaming.md").read_text()
    blocks = [b.split("```", 1)[0] for b in doc.split("```python\n")[1:]]
    code = next(b for b in blocks if "StreamDataset(" in b)  # the loop, after the page's setup
    for old, new in [
        ("Packing(capacity=4096, rows_per_batch=8)", "Packing(capacity=64, rows_per_batch=2)"),
        ("buffer=10_000", "buffer=24"),
        ("num_workers=4", "num_workers=2"),
        ("streaming=True)", "streaming=True).shuffle(seed=0, buffer_size=64)"),
    ]:
        assert old in code, old
        code = code.replace(old, new)
    assert "for epoch in range(start, epochs)" in code
    return code


def tiny_llama():
    """The model the example checks once: packed documents kept apart (no cache)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=512, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, use_cache=False,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config)


def run_doc_loop(code, files, checkpoint, keep_at=-1):
    """Run the example; return the documents of each step trained and the checkpoint the loop
    held when step ``keep_at`` began (where a process killed then would resume from)."""
    steps, kept = [], []

    def train_step(batch):
        if len(steps) == keep_at:
            kept.append(json.loads(json.dumps(scope["checkpoint"])))  # as a file holds it
        first = batch["input_ids"][0, batch["cu_seqlens"][:-1]] - 1
        steps.append(tuple(first.tolist()))

    scope = {"files": files, "epochs": 2, "checkpoint": checkpoint, "train_step": train_step,
             "time_to_save": True, "__name__": "streaming_doc", "model": tiny_llama()}  # fmt: skip
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: more threads on a busy machine only wait
    try:
        exec(compile(code, "docs/streaming.md", "exec"), scope)
    finally:
        torch.set_num_threads(threads)
        scope.clear()  # the loader: its workers stop now, not while the next run starts
        gc.collect()
    return steps, kept[0] if kept else None


def test_docs_resume_loop_visits_each_item_once_per_epoch(token_dir, monkeypatch):
    """The documented loop, over a shuffled datasets stream with 2 workers, resumed from the
    checkpoint of a step in epoch 1 past max_wait × buffer: every row trained exactly twice, in
    the uninterrupted order (a shuffled stream resumes by re-reading; items 3 and 8 of issue
    24). Written with range(epochs), the resumed loop is refused, not trained 1.5 times."""
    pytest.importorskip("torchdata.stateful_dataloader")
    # datasets sleeps 5 s when a shuffled Parquet stream's shard threads shut down (an Arrow
    # workaround), at every epoch's end: not what this test measures
    monkeypatch.setattr(datasets.config, "SLEEP_TIME_ON_THREADS_SHUTDOWN", 0)
    files = sorted(str(p) for p in token_dir.glob("*.parquet"))
    code = streaming_doc_example()
    stop = 85  # of 104 steps: in epoch 1, past max_wait × buffer of each worker
    full, checkpoint = run_doc_loop(code, files, None, keep_at=stop)
    assert sorted(i for step in full for i in step) == sorted(list(range(400)) * 2)
    assert checkpoint["epoch"] == 1 and len(full) // 2 < stop < len(full)
    positions = re.findall(r'"position": (\d+)', json.dumps(checkpoint))  # each worker's
    assert positions and min(map(int, positions)) > 0  # a seek would not find the same items
    rest, _ = run_doc_loop(code, files, checkpoint)
    assert full[:stop] + rest == full
    wrong = code.replace("range(start, epochs)", "range(epochs)")
    with pytest.raises(ValueError, match=r"state is of epoch 1, but set_epoch\(0\) was called"):
        run_doc_loop(wrong, files, checkpoint)
