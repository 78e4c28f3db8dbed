"""padless.ray on a local Ray (2 CPUs): lengths in row order, windowed plans identical to
plan_windows, packed datasets that lose and repeat no token, Ray Train shards feeding
StreamBatchers with exact resume, and a clear error when ray is missing."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
ray = pytest.importorskip("ray")

import padless  # noqa: E402
import padless.ray as pray  # noqa: E402
from padless import Packing, StreamBatcher, TokenBudget, plan_windows  # noqa: E402

DOCS = 240_000  # documents of the Parquet corpus (the benchmark runs 10^6 and more)
FILES = 5
WINDOW = 20_000


@pytest.fixture(scope="module")
def ray_local():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    yield
    ray.shutdown()


class Corpus:
    """Parquet files of short documents; every token id is unique (its position in the corpus)."""

    def __init__(self, folder: Path, lengths: np.ndarray) -> None:
        self.folder = folder
        self.lengths = lengths
        self.offsets = np.zeros(lengths.size + 1, np.int64)
        np.cumsum(lengths, out=self.offsets[1:])
        self.tokens = np.arange(self.offsets[-1], dtype=np.int32)
        self.column = pa.ListArray.from_arrays(
            pa.array(self.offsets.astype(np.int32)), pa.array(self.tokens)
        )
        folder.mkdir()
        cuts = np.linspace(0, lengths.size, FILES + 1).astype(int)
        for f in range(FILES):
            part = self.column[cuts[f] : cuts[f + 1]]
            table = pa.table({"input_ids": part, "doc": np.arange(cuts[f], cuts[f + 1])})
            pq.write_table(table, folder / f"part-{f}.parquet", row_group_size=7_000)

    def read(self, **kw):
        return ray.data.read_parquet(str(self.folder), **kw)

    def doc(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = np.random.default_rng(7)
    lengths = rng.integers(0, 30, DOCS)
    long = rng.random(DOCS) < 0.01
    lengths[long] = rng.integers(65, 200, int(long.sum()))  # longer than the capacity below
    return Corpus(tmp_path_factory.mktemp("ray") / "corpus", lengths)


# --------------------------------------------------------------------------- without ray


def test_import_padless_never_imports_ray_and_padless_ray_says_what_to_install():
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "import padless\n"
        "assert padless.plan_windows and padless.StreamBatcher and padless.TokenBudget\n"
        "assert 'ray' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
        "try:\n"
        "    import padless.ray\n"
        "except ImportError as e:\n"
        "    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "ERR" in out.stdout and "pip install 'padless[ray]'" in out.stdout
    assert not hasattr(padless, "ray") or "ray" not in padless.__all__


# --------------------------------------------------------------------------- lengths


def test_lengths_in_row_order_from_arrow_offsets(ray_local, corpus, tmp_path):
    seen = []
    out = tmp_path / "lengths.npy"

    def first_half_late(batch):  # blocks of the first half finish after those of the second
        time.sleep(0.4 if batch.column("doc")[0].as_py() < DOCS // 2 else 0.0)
        return batch

    # blocks that finish out of order must come back in the files' row order
    ds = corpus.read().repartition(8)
    ds = ds.map_batches(first_half_late, batch_size=None, batch_format="pyarrow")
    got = pray.lengths(ds, column="input_ids", out=out, progress=seen.append)
    assert got.dtype == np.int32 and isinstance(got, np.memmap)
    np.testing.assert_array_equal(got, corpus.lengths)
    mapped = np.load(out, mmap_mode="r")
    np.testing.assert_array_equal(mapped, corpus.lengths)
    assert seen == sorted(seen) and seen[-1] == DOCS and len(seen) == 8
    assert sorted(os.listdir(tmp_path)) == ["lengths.npy"]  # no temporary left beside it


def test_lengths_of_text_by_named_and_callable_tokenizers(ray_local, tmp_path, monkeypatch):
    from tokenizers import Tokenizer, models, pre_tokenizers

    from padless.io.readers import lengths_from_text

    words = ["the", "quick", "fox", "jumps", "over", "lazy", "dog"]
    rng = np.random.default_rng(1)
    texts = [" ".join(rng.choice(words, int(k))) for k in rng.integers(0, 12, 3000)]
    (tmp_path / "t.txt").write_text("\n".join(texts) + "\n")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, "[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tok.json"))
    ds = ray.data.from_items([{"text": t, "n": i} for i, t in enumerate(texts)]).repartition(7)
    monkeypatch.chdir(tmp_path)  # a model path relative to the driver's folder
    named = pray.lengths(ds, column="text", tokenizer="hf:tok.json", out=tmp_path / "a.npy")
    want = lengths_from_text(tmp_path / "t.txt", tokenizer=f"hf:{tmp_path / 'tok.json'}")
    np.testing.assert_array_equal(named, want)

    def split_words(batch):  # a callable on a batch of texts, returning token lists
        return [t.split() for t in batch]

    by_callable = pray.lengths(ds, column="text", tokenizer=split_words, out=tmp_path / "b.npy")
    np.testing.assert_array_equal(by_callable, want)

    def tokenize(batch):  # numpy batches of token arrays: Ray stores them as tensor columns
        return {"ids": [np.arange(len(t.split()), dtype=np.int32) for t in batch["text"]]}

    tensors = ds.map_batches(tokenize)
    np.testing.assert_array_equal(pray.lengths(tensors, column="ids", out=tmp_path / "c.npy"), want)


def test_lengths_errors_are_clear_and_leave_no_file(ray_local, corpus, tmp_path):
    ds = corpus.read()
    out = tmp_path / "l.npy"
    with pytest.raises(TypeError, match="ds must be a ray.data.Dataset"):
        pray.lengths([1, 2], out=out)
    with pytest.raises(ValueError, match=r"has columns \['input_ids', 'doc'\]; choose one"):
        pray.lengths(ds, out=out)
    with pytest.raises(ValueError, match="column must be one of"):
        pray.lengths(ds, column="text", out=out)
    with pytest.raises(ValueError, match="not known before it runs"):  # and nothing ran
        pray.lengths(ds.map_batches(lambda b: b), out=out)
    with pytest.raises(ValueError, match="already tokenized"):
        pray.lengths(ds, column="input_ids", tokenizer="whitespace", out=out)
    with pytest.raises(ValueError, match="tokenizer must be one of"):
        pray.lengths(ds, column="input_ids", tokenizer="gpt", out=out)
    with pytest.raises(FileNotFoundError, match="tokenizer model not found"):
        pray.lengths(ds, column="input_ids", tokenizer="spm:/no/such.model", out=out)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        pray.lengths(ds, column="input_ids", out=tmp_path / "nope" / "l.npy")
    with pytest.raises(IsADirectoryError):
        pray.lengths(ds, column="input_ids", out=tmp_path)
    text = ray.data.from_items([{"text": "a b"}, {"text": None}, {"text": "c"}])
    with pytest.raises(ValueError, match="holds text: pass tokenizer="):
        pray.lengths(text, out=out)
    with pytest.raises(TypeError, match="returned 2 results for a batch of 1"):
        pray.lengths(text, tokenizer=lambda texts: [1, 2], out=out)
    out.write_bytes(b"keep me")
    with pytest.raises(ValueError, match=r"row 1 of the dataset has no value in column 'text'"):
        pray.lengths(text, tokenizer="whitespace", out=out)
    assert out.read_bytes() == b"keep me" and sorted(os.listdir(tmp_path)) == ["l.npy"]
    negative = ray.data.from_items([{"n": 3}, {"n": -2}])
    with pytest.raises(ValueError, match=r"row 1 of the dataset has length -2 in column 'n'"):
        pray.lengths(negative, out=tmp_path / "n.npy")


# --------------------------------------------------------------------------- plans


@pytest.fixture(scope="module")
def lengths_file(corpus, tmp_path_factory):
    path = tmp_path_factory.mktemp("lengths") / "lengths.npy"
    np.save(path, corpus.lengths.astype(np.int32))
    return path


@pytest.mark.parametrize(
    "spec",
    [TokenBudget(max_tokens=256), Packing(capacity=64, rows_per_batch=4, oversize="split")],
    ids=["budget", "packing"],
)
def test_plan_is_plan_windows(ray_local, lengths_file, tmp_path, spec):
    ref = list(plan_windows(np.load(lengths_file), spec, window=WINDOW, seed=3, epoch=1))
    seen = []
    for tasks in (1, 5):
        out = tmp_path / "plan"  # the second run replaces the first's folder
        files = pray.plan(lengths_file, spec, window=WINDOW, seed=3, epoch=1, out=out,
                          tasks=tasks, progress=seen.append)  # fmt: skip
        assert len(list(out.glob("part-*.json"))) == tasks  # parts of 12 and 2 or 3 windows
        assert files.num_windows == len(ref) and files.spec == spec
        for got, want in zip(files, ref, strict=True):
            assert got == want and type(got) is type(want)
            assert got.info == json.loads(json.dumps(want.info))
            assert isinstance(got.indices.base, np.memmap) or isinstance(got.indices, np.memmap)
        flat = np.concatenate([files.batch(i) for i in range(len(files))])
        np.testing.assert_array_equal(flat, np.concatenate([p.indices for p in ref]))
    assert seen[-1] == len(ref)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan"]  # no temporary left


def test_plan_ships_a_small_planner_and_refuses_bad_input(ray_local, lengths_file, tmp_path):
    from padless.planners.windows import WindowedPlanner

    planner = WindowedPlanner(TokenBudget(max_tokens=256), lengths_file, WINDOW)
    assert len(pickle.dumps(planner)) < 20_000  # never the lengths themselves
    spec = TokenBudget(max_tokens=256)
    with pytest.raises(TypeError, match="spec must be a padless planner spec"):
        pray.plan(lengths_file, {"max_tokens": 5}, window=10, out=tmp_path / "p")
    with pytest.raises(ValueError, match="must name a .npy file"):
        pray.plan(tmp_path / "l.txt", spec, window=10, out=tmp_path / "p")
    with pytest.raises(ValueError, match="window must be a positive int"):
        pray.plan(lengths_file, spec, window=0, out=tmp_path / "p")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="holding other files"):
        pray.plan(lengths_file, spec, window=10, out=tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "x"
    floats = tmp_path / "floats.npy"
    np.save(floats, np.array([3.0, 1.0, 2.0]))
    with pytest.raises(TypeError, match=r"lengths_path must hold integer lengths.*float64"):
        pray.plan(floats, spec, window=10, out=tmp_path / "p")
    bad = tmp_path / "bad.npy"
    np.save(bad, np.array([3, -1, 2]))
    with pytest.raises(ValueError, match=r"got -1 at position \[1\]"):
        pray.plan(bad, spec, window=10, out=tmp_path / "p")
    assert not (tmp_path / "p").exists()
    with pytest.raises(ValueError, match="not a padless.ray plan folder"):
        pray.PlanFiles(tmp_path)


# --------------------------------------------------------------------------- packed datasets


def test_pack_loses_and_repeats_no_token_and_matches_pack_table(ray_local, corpus):
    import torch  # noqa: F401  (collate_packed)

    from padless.torch import collate_packed

    spec = Packing(capacity=64, oversize="split")
    # carry=False: every window's rows as pack_table gives them (the carry is tested below)
    rows = pray.pack(corpus.read(), spec, column="input_ids", window=WINDOW, seed=5, carry=False)
    got = pa.concat_tables(rows.iter_batches(batch_size=None, batch_format="pyarrow"))
    ids = got.column("input_ids").combine_chunks()
    np.testing.assert_array_equal(np.sort(ids.values.to_numpy()), corpus.tokens)  # lossless
    assert pa.compute.max(pa.compute.list_value_length(ids)).as_py() <= 64
    # windows of WINDOW consecutive documents across files and blocks: pack_table over them
    want = pa.concat_tables(
        pray.pack_table(
            pa.table({"input_ids": corpus.column[a : a + WINDOW]}), spec, column="input_ids", seed=5
        )  # fmt: skip
        for a in range(0, DOCS, WINDOW)
    )
    assert got.equals(want)
    # the columns are collate_packed's, row by row (segments found by their unique tokens)
    doc_of = np.repeat(np.arange(DOCS), corpus.lengths)
    collate = collate_packed(spec, flatten=True)
    for r in np.random.default_rng(0).choice(got.num_rows, 40, replace=False).tolist():
        row = {k: got.column(k)[r].as_py() for k in got.column_names}
        tokens = np.array(row["input_ids"])
        cuts = row["cu_seqlens"]
        segments = [tokens[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
        for s in segments:  # each segment is one document (or piece of one), in order
            if s.size:
                assert np.unique(doc_of[s]).size == 1 and np.all(np.diff(s) == 1)
        ref = collate([torch.as_tensor(s) for s in segments])
        assert ref["cu_seqlens"].tolist() == cuts
        assert ref["position_ids"].view(-1).tolist() == row["position_ids"]
        assert ref["seq_idx"].view(-1).tolist() == row["seq_idx"]


def docs_table(sizes, first: int = 0) -> pa.Table:
    """Documents of the given lengths whose token ids are unique: first, first + 1, ..."""
    off = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=off[1:])
    ids = pa.array(np.arange(first, first + off[-1], dtype=np.int64))
    return pa.table({"ids": pa.ListArray.from_arrays(pa.array(off.astype(np.int32)), ids)})


def segments(table: pa.Table) -> list[tuple[int, ...]]:
    """Every row's entries (documents or pieces), cut at its cu_seqlens, row after row."""
    out = []
    for ids, cu in zip(table.column("ids").to_pylist(), table.column("cu_seqlens").to_pylist(),
                       strict=True):  # fmt: skip
        out += [tuple(ids[a:b]) for a, b in zip(cu[:-1], cu[1:], strict=True)]
    return out


def full_rows(table: pa.Table, capacity: int) -> np.ndarray:
    """The rows pack keeps in a window: at most capacity // 1024 empty slots."""
    n = pa.compute.list_value_length(table.column("ids")).to_numpy(zero_copy_only=False)
    return np.asarray(capacity - n <= capacity // 1024)


def piece_rows(table: pa.Table) -> list[list[tuple[int, ...]]]:
    """Every row as the list of its entries."""
    ids, cus = table.column("ids").to_pylist(), table.column("cu_seqlens").to_pylist()
    return [[tuple(r[a:b]) for a, b in zip(cu[:-1], cu[1:], strict=True)]
            for r, cu in zip(ids, cus, strict=True)]  # fmt: skip


def check_rows(table: pa.Table, capacity: int) -> None:
    """Each row fits and its cu_seqlens, position_ids and seq_idx are collate_packed's."""
    for ids, cu, pos, seq in zip(*(table.column(k).to_pylist() for k in
                                   ("ids", "cu_seqlens", "position_ids", "seq_idx")),
                                 strict=True):  # fmt: skip
        assert len(ids) <= capacity and cu[0] == 0 and cu[-1] == len(ids)
        assert pos == [t - a for a, b in zip(cu[:-1], cu[1:], strict=True) for t in range(a, b)]
        assert seq == [k for k, (a, b) in enumerate(zip(cu[:-1], cu[1:], strict=True))
                       for _ in range(a, b)]  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 2500), max_size=60),
    st.integers(16, 4000),
    st.integers(0, 3),
    st.data(),
)
def test_windows_keep_their_full_rows_and_a_block_repacks_every_carried_entry_once(
    sizes, capacity, seed, data
):
    """The carry rule as pack's tasks run it (no Ray needed), on a block of two windows: each
    window keeps pack_table's rows with at most capacity // 1024 empty slots, in its order,
    and carries its other rows' entries (documents or pieces), in row order; the block yields
    the kept rows as they were, then rows holding every carried entry exactly once."""
    from padless.ray import _pack

    cut = data.draw(st.integers(0, len(sizes)))
    docs = docs_table(sizes)
    spec = Packing(capacity=capacity, oversize="split")
    kept, carried, items = [], [], []
    for part in (docs.slice(0, cut), docs.slice(cut)):
        whole = pray.pack_table(part, spec, column="ids", seed=seed)
        full = full_rows(whole, capacity)
        kept.append(whole.filter(pa.array(full)))
        carried += [e for row in piece_rows(whole.filter(pa.array(~full))) for e in row]
        mine = _pack._pack_batch(part, spec, "ids", seed, 0, 60, part="items")
        flags = mine.column(_pack.CARRIED).to_numpy(zero_copy_only=False)
        assert not flags[: int((~flags).sum())].any()  # kept rows first, then carried entries
        assert (
            mine.filter(pa.array(~flags))
            .select(["ids", "cu_seqlens"])
            .equals(kept[-1].select(["ids", "cu_seqlens"]))
        )
        assert piece_rows(mine.filter(pa.array(flags))) == [
            [e] for row in piece_rows(whole.filter(pa.array(~full))) for e in row
        ]
        items.append(mine)
    block = _pack._pack_block(pa.concat_tables(items), spec, "ids", seed, 0)
    n_kept = sum(k.num_rows for k in kept)
    assert block.slice(0, n_kept).equals(pa.concat_tables(kept))
    repacked = block.slice(n_kept)
    assert sorted(e for row in piece_rows(repacked) for e in row) == sorted(carried)
    check_rows(repacked, capacity)
    tokens = block.column("ids").to_pylist()
    assert sorted(t for r in tokens for t in r) == list(range(sum(sizes)))  # each once


def long_tailed(n: int, seed: int) -> np.ndarray:
    """Lognormal lengths (median 60) with a heavy tail capped at 4096: 4x the capacity below."""
    rng = np.random.default_rng(seed)
    return np.minimum(rng.lognormal(np.log(60.0), 1.2, n).astype(np.int64) + 1, 4096)


def test_pack_carries_what_windows_fill_poorly_losslessly_whatever_the_blocks(
    ray_local, monkeypatch
):
    from padless.ray import _pack

    sizes = long_tailed(3000, 30)
    docs = docs_table(sizes)
    total, capacity, window = int(sizes.sum()), 1024, 300
    spec = Packing(capacity=capacity, oversize="split")
    layouts = [ray.data.from_arrow([docs.slice(a, 333) for a in range(0, len(sizes), 333)]),
               ray.data.from_arrow(docs)]  # fmt: skip

    def packed(ds):
        out = pray.pack(ds, spec, column="ids", window=window, seed=4)
        return pa.concat_tables(out.iter_batches(batch_size=None, batch_format="pyarrow"))

    got = packed(layouts[0])  # one block of items (at most 2**25 // 1024 = 32,768)
    ids = got.column("ids").combine_chunks()
    np.testing.assert_array_equal(np.sort(ids.values.to_numpy()), np.arange(total))  # lossless
    windows = [pray.pack_table(docs.slice(a, window), spec, column="ids", seed=4)
               for a in range(0, len(sizes), window)]  # fmt: skip
    alone = total / (sum(w.num_rows for w in windows) * capacity)  # each window on its own
    efficiency = total / (got.num_rows * capacity)
    assert efficiency >= 0.999 and efficiency - alone > 0.01, (efficiency, alone)
    kept = pa.concat_tables(w.filter(pa.array(full_rows(w, capacity))) for w in windows)
    assert got.slice(0, kept.num_rows).equals(kept)  # the windows' kept rows, then the repack
    check_rows(got, capacity)

    # blocks of 150 items: the same rows from either layout, block by block as the tasks make
    # them (each block: its kept rows, then its carried entries packed together)
    monkeypatch.setattr(_pack, "BLOCK_TOKENS", 150 * capacity)
    small = packed(layouts[0])
    assert small.equals(packed(layouts[1]))
    items = pa.concat_tables(
        _pack._pack_batch(docs.slice(a, window), spec, "ids", 4, 0, window, part="items")
        for a in range(0, len(sizes), window)
    )
    want = pa.concat_tables(
        _pack._pack_block(items.slice(a, 150), spec, "ids", 4, 0)
        for a in range(0, items.num_rows, 150)
    )
    assert small.equals(want) and not small.equals(got)
    np.testing.assert_array_equal(
        np.sort(small.column("ids").combine_chunks().values.to_numpy()), np.arange(total)
    )


def test_pack_table_fills_rows_to_the_goal_and_is_deterministic():
    rng = np.random.default_rng(11)
    sizes = np.minimum(rng.lognormal(5.5, 1.0, 10_000).astype(np.int64) + 1, 20_000)
    off = np.zeros(sizes.size + 1, np.int64)
    np.cumsum(sizes, out=off[1:])
    docs = pa.table(
        {"ids": pa.LargeListArray.from_arrays(pa.array(off), pa.array(np.arange(off[-1])))}
    )
    spec = Packing(capacity=4096, oversize="split")
    rows = pray.pack_table(docs, spec, column="ids", seed=2)
    assert int(off[-1]) / (rows.num_rows * 4096) >= 0.999  # the goal, window of 10k
    assert rows.equals(pray.pack_table(docs, spec, column="ids", seed=2))
    assert not rows.equals(pray.pack_table(docs, spec, column="ids", seed=3))
    flat = rows.column("ids").combine_chunks().values.to_numpy()
    np.testing.assert_array_equal(np.sort(flat), np.arange(off[-1]))


@given(
    st.lists(st.lists(st.integers(0, 9), max_size=5), max_size=8),
    st.sampled_from([np.int32, np.int64, np.uint16]),
    st.randoms(use_true_random=False),
)
def test_row_columns_kernel_is_its_reference(rows, dtype, rnd):
    """Rows of entries (token counts); entries point anywhere in a values array."""
    seg = np.array([k for row in rows for k in row], np.int64)
    bounds = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(row) for row in rows], out=bounds[1:])
    values = np.arange(100, dtype=dtype)[::-1].copy()
    src = np.array([rnd.randint(0, 100 - k) for k in seg.tolist()], np.int64)
    got = pray.row_columns(values, src, seg, bounds)
    want = pray.row_columns_reference(values, src, seg, bounds)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_pack_errors(ray_local, corpus):
    ds = corpus.read()
    with pytest.raises(TypeError, match=r"spec must be a padless.Packing"):
        pray.pack(ds, TokenBudget(max_tokens=8), column="input_ids")
    with pytest.raises(ValueError, match="window must be a positive int"):
        pray.pack(ds, Packing(capacity=8), column="input_ids", window=0)
    with pytest.raises(TypeError, match="carry must be a bool, got str 'yes'"):
        pray.pack(ds, Packing(capacity=8), column="input_ids", carry="yes")
    with pytest.raises(TypeError, match="must hold lists of token ids"):
        pray.pack(ds, Packing(capacity=8), column="doc")
    docs = pa.table({"ids": [[1, 2, 3], [4, 5, 6, 7, 8]]})
    with pytest.raises(ValueError, match="index 1 has length 5, which exceeds capacity=4"):
        pray.pack_table(docs, Packing(capacity=4), column="ids")
    with pytest.raises(ValueError, match="row 1 is null"):
        pray.pack_table(pa.table({"ids": [[1], None]}), Packing(capacity=4), column="ids")
    # element types the schema shows are refused up front, before anything runs
    for items, kind in (([["a"]], "string"), ([[1.5]], "double"), ([[True]], "bool")):
        strs = ray.data.from_items([{"ids": v} for v in items * 3])
        with pytest.raises(TypeError, match=rf"lists of integer token ids.*lists of {kind}"):
            pray.pack(strs, Packing(capacity=8), column="ids")
    empty = pray.pack(ray.data.from_items([{"ids": []}] * 3), Packing(capacity=8), column="ids")
    assert [r["ids"] for r in empty.take_all()] == [[]]  # lists of nulls: empty documents


def test_pack_names_the_dataset_row_of_a_bad_document(ray_local):
    """A task packs one window: its messages count rows from the dataset's start, not its own."""
    docs = [{"ids": [1, 2]} for _ in range(10)]
    docs[7] = {"ids": None}
    docs[8] = {"ids": list(range(20))}  # longer than the capacity
    ds = ray.data.from_items(docs)
    spec = Packing(capacity=8)
    with pytest.raises(Exception, match=r"row 7 is null.*in the dataset's order"):
        pray.pack(ds, spec, column="ids", window=3).take_all()  # window 2, its row 1
    docs[7] = {"ids": [3]}
    ds = ray.data.from_items(docs)
    with pytest.raises(Exception, match=r"index 8 has length 20, which exceeds capacity=8"):
        pray.pack(ds, spec, column="ids", window=3).take_all()


# --------------------------------------------------------------------------- Ray Train


def test_train_shards_feed_stream_batchers_with_exact_resume(ray_local, corpus):
    """Stands in for Ray Train: the shards its DataConfig hands two workers (the same
    ``configure`` call the trainer makes), read by two threads instead of two worker
    processes, each feeding a StreamBatcher as the docs/ray.md recipe does."""
    from ray.data import ExecutionOptions
    from ray.train import DataConfig

    first = 6000
    ds = ray.data.from_arrow(
        [pa.table({"input_ids": corpus.column[a : a + 2000], "doc": np.arange(a, a + 2000)})
         for a in range(0, first, 2000)]
    )  # fmt: skip
    config = DataConfig(execution_options=ExecutionOptions(preserve_order=True))
    spec = TokenBudget(max_tokens=256)

    def batcher(shard, rank=0, world=1):
        return StreamBatcher(lambda: shard.iter_rows(), spec, buffer=2000,
                             length=lambda row: len(row["input_ids"]),
                             shard=(rank, world))  # fmt: skip

    shards = config.configure({"train": ds}, world_size=2, worker_handles=None,
                              worker_node_ids=None)  # fmt: skip
    got: dict[int, list] = {}
    saved: dict[int, dict] = {}

    def work(rank):
        b = batcher(shards[rank]["train"], rank, 2)
        got[rank] = []
        for batch in b:
            got[rank].append([int(r["doc"]) for r in batch])
            if len(got[rank]) == 5:
                saved[rank] = json.loads(json.dumps(b.state_dict()))

    threads = [threading.Thread(target=work, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    docs = [d for r in range(2) for b in got[r] for d in b]
    assert sorted(docs) == list(range(first))  # every document once, over both workers
    assert all(len(b) * max(corpus.lengths[b]) <= 256 for r in range(2) for b in got[r])

    # exact resume on one worker: the same batches after a restore as without it
    (shard,) = (s["train"] for s in config.configure({"train": ds}, world_size=1,
                                                     worker_handles=None, worker_node_ids=None))  # fmt: skip
    full, state = [], None
    b = batcher(shard)
    for k, batch in enumerate(b):
        full.append([int(r["doc"]) for r in batch])
        if k == 17:
            state = json.loads(json.dumps(b.state_dict()))
    resumed = batcher(shard)
    resumed.load_state_dict(state)
    assert [[int(r["doc"]) for r in batch] for batch in resumed] == full[18:]
    # a 2-worker checkpoint resumed by 1 worker: its position in worker 0's shard read in the
    # whole data repeated 83 documents with no error; shard= refuses it
    with pytest.raises(ValueError, match="shard 0 of 2.*this one reads shard 0 of 1"):
        batcher(shard).load_state_dict(saved[0])


# --------------------------------------------------------------------------- docs/ray.md


def doc_example(name: str) -> str:
    import re

    text = (Path(__file__).parent.parent / "docs" / "ray.md").read_text()
    found = re.search(rf"<!-- example: {name} -->\n```python\n(.*?)```", text, re.S)
    assert found is not None, name
    return found.group(1)


def test_docs_pipeline_example_runs_as_written(ray_local, tmp_path, monkeypatch):
    """docs/ray.md (the README section): Parquet -> lengths -> windowed plan / packed dataset.
    Its Ray Train recipe is compiled here; its data path is the test above."""
    rng = np.random.default_rng(5)
    (tmp_path / "corpus").mkdir()
    for f in range(3):
        docs = [rng.integers(1, 1000, int(k)).tolist() for k in rng.integers(1, 300, 4000)]
        pq.write_table(pa.table({"input_ids": docs}), tmp_path / "corpus" / f"{f}.parquet")
    monkeypatch.chdir(tmp_path)
    scope: dict = {"__name__": "docs_ray"}
    exec(compile(doc_example("ray-pipeline"), "docs/ray.md:ray-pipeline", "exec"), scope)
    assert scope["lengths"].shape == (12_000,) and len(scope["plan"]) > 0
    assert list((tmp_path / "packed").glob("*.parquet"))
    compile(doc_example("ray-train"), "docs/ray.md:ray-train", "exec")


# --------------------------------------------------------------------------- hostile values


def test_hostile_values_into_the_ray_entries(ray_local, tmp_path, monkeypatch):
    """tests/test_hostile.py's matrix for the entries that need a running Ray (RAY_ENTRIES)."""
    import test_hostile as th

    monkeypatch.chdir(tmp_path)  # a relative path value ("4096") lands in an empty folder
    lengths_path = tmp_path / "l.npy"
    np.save(lengths_path, np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3], np.int32))
    f = {"lengths": lengths_path, "plan": tmp_path / "plan"}
    ds = ray.data.from_items([{"ids": [1, 2, 3]}, {"ids": [4]}, {"ids": [5, 6]}])
    failures = []
    for entry, label, base, params in th.RAY_ENTRIES:
        for param in params:
            failures += th.attack(entry, label, base(ds, f), param, None)
    assert not failures, "\n".join(failures)
