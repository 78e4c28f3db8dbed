"""lengths_of / lengths_from_arrow / list_column on Arrow data in memory: datasets.Dataset (and its
select/shuffle/filter mappings), ds[column], pyarrow Tables, RecordBatches, ChunkedArrays and
Arrays; every answer equal to the Python pass over the same rows, every refusal naming the call."""

import re
import subprocess
import sys

import numpy as np
import pytest

from padless import lengths_of
from padless.io.readers import lengths_from_arrow, list_column, load_npy

pa = pytest.importorskip("pyarrow")
datasets = pytest.importorskip("datasets")


def _rows(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50, int(k)).tolist() for k in rng.integers(0, 12, n)]


def _python_pass(rows):
    return np.array([len(r) for r in rows], dtype=np.int64)


def _dataset(n=300, seed=0):
    rows = _rows(n, seed)
    table = pa.table(
        {
            "input_ids": pa.array(rows, pa.list_(pa.int32())),
            "labels": pa.array([r[:3] for r in rows], pa.large_list(pa.int64())),
            "n": pa.array(np.arange(n) % 7, pa.int64()),
            "text": [" ".join(map(str, r)) for r in rows],
        }
    )
    return datasets.Dataset(table), rows


def _same(got, want):
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_dataset_and_its_mappings_follow_the_rows_the_user_sees():
    ds, _ = _dataset()
    variants = {
        "plain": ds,
        "shuffled": ds.shuffle(seed=3),
        "selected": ds.select([5, 5, 0, 299, 17]),
        "contiguous": ds.select(range(40, 90)),
        "filtered": ds.filter(lambda r: r["n"] != 2),
        "shuffled filtered": ds.shuffle(seed=1).filter(lambda r: len(r["input_ids"]) > 4),
        "empty": ds.filter(lambda r: False),
    }
    for name, view in variants.items():
        want = _python_pass(view["input_ids"][:]) if len(view) else np.zeros(0, np.int64)
        _same(lengths_of(view, column="input_ids"), want)
        _same(lengths_of(view["input_ids"]), want)
        _same(lengths_from_arrow(view, column="input_ids"), want)
        got = list_column(view, "input_ids", "test")
        assert isinstance(got, pa.ChunkedArray), name
        assert got.to_pylist() == view["input_ids"][:], name
        _same(lengths_of(view, column="n"), np.array(view["n"][:], dtype=np.int64))
    shuffled = variants["shuffled"]
    two = lengths_of(shuffled, column=["input_ids", "labels"])
    assert two.shape == (len(ds), 2)
    _same(two[:, 1], _python_pass(shuffled["labels"][:]))


def test_one_column_dataset_needs_no_column_and_several_need_one():
    rows = _rows(20)
    one = datasets.Dataset(pa.table({"ids": rows}))
    _same(lengths_of(one), _python_pass(rows))
    ds, _ = _dataset(10)
    with pytest.raises(ValueError, match=re.escape("lengths_of(ds, column='input_ids')")):
        lengths_of(ds)
    with pytest.raises(ValueError, match=r"no column 'ids'; its columns are \['input_ids'"):
        lengths_of(ds, column="ids")


def test_table_record_batch_and_arrays():
    rows = _rows(50, seed=1)
    table = pa.table({"input_ids": rows, "text": ["a"] * 50})
    want = _python_pass(rows)
    _same(lengths_of(table, column="input_ids"), want)
    _same(lengths_of(table.to_batches()[0], column="input_ids"), want)
    _same(lengths_of(table.column("input_ids")), want)
    _same(lengths_of(pa.array(rows)), want)
    _same(lengths_of(pa.table({"input_ids": rows})), want)
    with pytest.raises(ValueError, match=re.escape("lengths_of(batch, column='input_ids')")):
        lengths_of(table.to_batches()[0])
    # number columns only, no column: (N, F) lengths, as np.asarray(table) always gave
    _same(lengths_of(pa.table({"a": [1, 2], "b": [3.0, 4.0]})), np.array([[1, 3], [2, 4]]))
    _same(lengths_of(pa.array([3, 0, 9], pa.uint16())), np.array([3, 0, 9]))


def test_chunked_sliced_large_and_fixed_size_lists():
    rows = _rows(90, seed=2)
    base = pa.array(rows, pa.list_(pa.int64()))
    # chunks that are slices: their offsets start far from 0
    chunked = pa.chunked_array([base.slice(7, 30), base.slice(40, 1), base.slice(50, 40)])
    want = _python_pass(rows[7:37] + rows[40:41] + rows[50:90])
    assert chunked.chunk(0).offsets[0].as_py() > 0
    _same(lengths_of(chunked), want)
    assert list_column(chunked, None, "test") is chunked
    large = pa.chunked_array(
        [
            pa.array(rows[:40], pa.large_list(pa.int32())),
            pa.array(rows[40:], pa.large_list(pa.int32())).slice(3),
        ]
    )
    _same(lengths_of(large), _python_pass(rows[:40] + rows[43:]))
    fixed = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(24)), 4).slice(1)
    _same(lengths_of(fixed), np.full(5, 4))
    _same(lengths_of(pa.chunked_array([], pa.list_(pa.int32()))), np.zeros(0))
    table = pa.table({"x": chunked})
    view = datasets.Dataset(table).shuffle(seed=0)
    _same(lengths_of(view["x"]), _python_pass(view["x"][:]))


def test_struct_field_column():
    rows = _rows(30, seed=4)
    ds = datasets.Dataset(pa.table({"s": pa.array([{"a": r, "b": 1} for r in rows])}))
    view = ds.shuffle(seed=2)
    _same(lengths_of(view["s"]["a"]), _python_pass(view["s"]["a"][:]))


def test_null_rows_are_named_unless_the_mapping_leaves_them_out():
    rows = [[1, 2], None, [3], [], None]
    ds = datasets.Dataset(pa.table({"input_ids": pa.array(rows, pa.list_(pa.int64()))}))
    with pytest.raises(ValueError, match="column 'input_ids': row 1 is null"):
        lengths_of(ds, column="input_ids")
    with pytest.raises(ValueError, match="row 2 is null"):
        lengths_of(ds.select([0, 3, 4]))
    with pytest.raises(ValueError, match="row 1 is null; every row needs a list"):
        list_column(ds.select([3, 1]), "input_ids", "write_indexed")
    kept = ds.select([3, 0, 2])
    _same(lengths_of(kept), np.array([0, 2, 1]))
    assert list_column(kept, "input_ids", "test").to_pylist() == [[], [1, 2], [3]]
    with pytest.raises(ValueError, match="row 1 is null"):
        lengths_of(pa.chunked_array([pa.array([[1]]), pa.array([None], pa.list_(pa.int64()))]))
    with pytest.raises(ValueError, match="row 0 is null"):
        lengths_of(pa.array([None, 3], pa.int64()))


def test_text_and_integer_columns():
    ds, rows = _dataset(40)
    with pytest.raises(
        TypeError, match=re.escape("lengths_from_arrow(ds, column='text', tokenizer=")
    ):
        lengths_of(ds, column="text")
    with pytest.raises(TypeError, match=re.escape("lengths_from_arrow(ds['text'], tokenizer=")):
        lengths_of(ds["text"])
    view = ds.shuffle(seed=5)
    words = [len(t.split()) for t in view["text"][:]]
    _same(lengths_from_arrow(view, column="text"), np.array(words))
    _same(
        lengths_from_arrow(view["text"], tokenizer="chars"),
        np.array([len(t) for t in view["text"][:]]),
    )
    _same(lengths_from_arrow(view, column="n"), np.array(view["n"][:]))
    with pytest.raises(ValueError, match=r"column 'n': lengths must be .* -1 at position \[1\]"):
        lengths_of(pa.table({"n": [3, -1]}), column="n")
    with pytest.raises(TypeError, match="must name a column of token lists"):
        list_column(ds, "text", "write_indexed")
    with pytest.raises(ValueError, match="holds no lengths"):
        lengths_of(pa.array([True]))


def test_objects_without_lengths_name_the_right_call():
    ds, _ = _dataset(10)
    dd = datasets.DatasetDict(train=ds, test=ds)
    with pytest.raises(TypeError, match=re.escape("splits ['train', 'test']")) as info:
        lengths_of(dd)
    assert "lengths_of(dd['train'], column='input_ids')" in str(info.value)
    _same(lengths_from_arrow(dd, column="input_ids", split="test"), lengths_of(ds["input_ids"]))
    stream = ds.to_iterable_dataset()
    for x in (stream, stream["input_ids"], datasets.IterableDatasetDict(train=stream)):
        with pytest.raises(TypeError) as info:
            lengths_of(x)
        assert "lengths_of(" in str(info.value)
    with pytest.raises(TypeError, match="padless.StreamBatcher.*padless.torch.StreamDataset"):
        lengths_of(stream, column="input_ids")
    with pytest.raises(
        TypeError, match=re.escape("lengths_of(ds['input_ids']) or lengths_of(ds, column='labels')")
    ):
        lengths_of(ds["input_ids"], column="labels")
    with pytest.raises(TypeError, match=re.escape("lengths_of(x) without column=")):
        lengths_of(np.arange(3), column="input_ids")
    with pytest.raises(TypeError, match="without column="):
        lengths_of(pa.array([[1]]), column="input_ids")
    with pytest.raises(TypeError, match="column must be a name or a list of names"):
        lengths_of(ds, column=[1])
    with pytest.raises(TypeError, match="split picks a split of a datasets.DatasetDict"):
        lengths_from_arrow(ds, split="train")


def test_raw_npy_without_header_names_the_raw_token_readers(tmp_path):
    raw = tmp_path / "part-0.npy"
    np.arange(100, dtype=np.uint16).tofile(raw)  # OLMo-style: tokens back to back, no header
    for call in (lambda: lengths_of(raw), lambda: load_npy(raw, mmap_mode="r")):
        with pytest.raises(ValueError, match="no .npy header") as info:
            call()
        msg = str(info.value)
        assert "allow_pickle" not in msg and "pickled" not in msg
        assert "padless.io.tokens.RawTokens(path, dtype=..., eos=...)" in msg
        assert "lengths_from_file(path, dtype=..., eos=...)" in msg


def test_lengths_module_stays_light():
    code = "import sys, padless.core.lengths; print(sorted(m for m in ('pyarrow', 'datasets') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
