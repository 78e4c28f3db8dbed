"""padless.io.checked: a dataset bound to its planned lengths refuses another size up front and an
item of another length when it is loaded (per item, or whole from an Arrow dataset's offsets)."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest

from padless import MixtureSampler, Packing, PackingSampler, PieceDataset, TokenBudgetSampler
from padless.io.checked import CheckedDataset, sampler_lengths

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("datasets")

from torch.utils.data import ConcatDataset, DataLoader  # noqa: E402


def _corpus(n=500, seed=0):
    rs = np.random.default_rng(seed)
    lengths = rs.integers(1, 60, n)
    return lengths, [rs.integers(1, 100, int(k)).tolist() for k in lengths]


def _load_all(sampler, dataset, **kw):
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=list, **kw)
    return [batch for batch in loader]


def test_matching_dataset_is_served_unchanged_through_a_dataloader():
    lengths, data = _corpus()
    sampler = TokenBudgetSampler(lengths, max_tokens=256, seed=0)
    checked = sampler.checked(data)
    assert isinstance(checked, CheckedDataset) and len(checked) == 500
    got = _load_all(sampler, checked)
    assert got == [[data[i] for i in b] for b in sampler]


def test_shorter_lengths_are_refused_up_front():
    lengths, data = _corpus()
    sampler = TokenBudgetSampler(lengths[:300], max_tokens=256)  # would train on 300 of 500
    with pytest.raises(ValueError, match="dataset has 500 items but the sampler planned 300"):
        sampler.checked(data)


def test_longer_lengths_are_refused_up_front():
    lengths, data = _corpus()
    sampler = TokenBudgetSampler(np.concatenate([lengths, lengths[:20]]), max_tokens=256)
    with pytest.raises(ValueError, match="dataset has 500 items but the sampler planned 520"):
        sampler.checked(data)


def test_lengths_in_another_order_are_refused_at_the_first_mismatching_item():
    lengths, data = _corpus()
    shuffled = np.random.default_rng(1).permutation(lengths)  # same multiset, other order
    sampler = TokenBudgetSampler(shuffled, max_tokens=512, seed=0)
    checked = sampler.checked(data)  # same size: accepted up front
    order = [i for b in sampler for i in b]
    first = next(i for i in order if len(data[i]) != shuffled[i])
    message = f"dataset item {first} has length {len(data[first])}, but the sampler planned "
    message += f"{shuffled[first]}"
    with pytest.raises(ValueError, match=re.escape(message)):
        _load_all(sampler, checked)
    with pytest.raises(ValueError, match=re.escape(message)):
        checked[first]  # __getitem__ checks as __getitems__ does


def test_dict_rows_with_a_key_and_a_function():
    lengths, data = _corpus(60)
    rows = [{"input_ids": x, "labels": x[:1]} for x in data]
    sampler = TokenBudgetSampler(lengths, max_tokens=128)
    assert _load_all(sampler, sampler.checked(rows, field="input_ids"))[0][0] in rows
    by_fn = sampler.checked(rows, field=lambda r: len(r["input_ids"]))
    assert by_fn.__getitems__([3, 4]) == rows[3:5]
    with pytest.raises(ValueError, match="dataset item 0 has length 1, but the sampler planned"):
        sampler.checked(rows, field="labels")[0]


def test_dict_rows_without_field_are_a_type_error_that_shows_the_fix():
    lengths, data = _corpus(10)
    rows = [{"input_ids": x} for x in data]
    with pytest.raises(TypeError, match=r"field='input_ids', or field=lambda row: len\(row"):
        TokenBudgetSampler(lengths, max_tokens=128).checked(rows)


def test_two_column_lengths_with_a_tuple_of_fields():
    rs = np.random.default_rng(2)
    lengths = rs.integers(1, 30, (80, 2))
    rows = [{"source": [1] * int(a), "target": [2] * int(b)} for a, b in lengths]
    pairs = [(r["source"], r["target"]) for r in rows]
    sampler = TokenBudgetSampler(lengths, max_tokens=128, seed=3)
    assert _load_all(sampler, sampler.checked(rows, field=("source", "target")))
    assert _load_all(sampler, sampler.checked(pairs))  # tuples (source, target), field=None
    fn = sampler.checked(rows, field=lambda r: (len(r["source"]), len(r["target"])))
    assert fn[5] is rows[5]
    swapped = sampler.checked(rows, field=("target", "source"))
    i = int(np.flatnonzero(lengths[:, 0] != lengths[:, 1])[0])
    want = f"dataset item {i} has length ({lengths[i, 1]}, {lengths[i, 0]}), but the sampler "
    with pytest.raises(ValueError, match=re.escape(want + f"planned ({lengths[i, 0]}, ")):
        swapped[i]


def _arrow(lengths):
    return datasets.Dataset.from_dict(
        {"input_ids": [[7] * int(k) for k in lengths], "labels": [[1] * 2 for _ in lengths]}
    )


def _verdict(dataset, lengths, field):
    """None if every item fits, else the first mismatching index (Arrow or per-item path)."""
    try:
        checked = CheckedDataset(dataset, lengths, field=field)
        for i in range(len(checked)):
            checked[i]
    except ValueError as err:
        return int(re.search(r"item (\d+)", str(err)).group(1))
    return None


def test_arrow_fast_path_agrees_with_the_per_item_path():
    lengths, _ = _corpus(200)
    base = _arrow(lengths)
    per_item = lambda r: len(r["input_ids"])  # noqa: E731 - a function takes the per-item path
    shuffled = base.shuffle(seed=4)
    variants = {
        "plain": (base, lengths),
        "shuffled": (shuffled, lengths[np.asarray(shuffled._indices.column(0))]),
        "selected": (base.select(range(50, 150)), lengths[50:150]),
        "filtered": (base.filter(lambda r: len(r["input_ids"]) > 10), lengths[lengths > 10]),
    }
    for name, (ds, good) in variants.items():
        assert CheckedDataset(ds, good, field="input_ids").verified, name
        assert _verdict(ds, good, "input_ids") is None, name
        assert _verdict(ds, good, per_item) is None, name
        bad = good.copy()
        bad[len(bad) // 2] += 1
        bad[-1] += 3
        assert _verdict(ds, bad, "input_ids") == _verdict(ds, bad, per_item) == len(bad) // 2
        assert _verdict(ds, good[::-1].copy(), "input_ids") == _verdict(
            ds, good[::-1].copy(), per_item
        )
    two = np.stack([lengths, np.full(200, 2)], axis=1)
    assert CheckedDataset(base, two, field=("input_ids", "labels")).verified
    two[7, 1] = 3
    assert _verdict(base, two, ("input_ids", "labels")) == 7
    with pytest.raises(ValueError, match="7 has length"):
        CheckedDataset(base, two, field=("input_ids", "labels"))


def test_arrow_dataset_in_a_dataloader_and_a_transform_falls_back_to_per_item():
    lengths, _ = _corpus(100)
    ds = _arrow(lengths)
    sampler = TokenBudgetSampler(lengths, max_tokens=200, seed=0)
    got = _load_all(sampler, sampler.checked(ds, field="input_ids"))
    assert [[len(r["input_ids"]) for r in b] for b in got] == [lengths[b].tolist() for b in sampler]
    doubled = ds.with_transform(lambda b: {"input_ids": [x + x for x in b["input_ids"]]})
    checked = sampler.checked(doubled, field="input_ids")
    assert not checked.verified  # a transform: its items are not the table's rows
    with pytest.raises(ValueError, match="dataset item 0 has length"):
        checked[0]


def test_arrow_null_rows_and_missing_columns():
    ds = datasets.Dataset.from_dict({"input_ids": [[1, 2], None, [3]]})
    with pytest.raises(ValueError, match="item 1 has length None, but the sampler planned 0"):
        CheckedDataset(ds, [2, 0, 1], field="input_ids")
    with pytest.raises(ValueError, match=r"no column 'ids'; its columns are \['input_ids'\]"):
        CheckedDataset(ds, [2, 0, 1], field="ids")
    text = datasets.Dataset.from_dict({"text": ["ab", "c"]})
    with pytest.raises(TypeError, match="must name a column of token lists"):
        CheckedDataset(text, [2, 1], field="text")


@pytest.mark.parametrize(
    ("field", "error", "match"),
    [
        (3, TypeError, "field must be None, a key name, a tuple of key names or a function"),
        (b"input_ids", TypeError, "field must be None, a key name"),
        ("", ValueError, "non-empty key name"),
        (("input_ids", 1), TypeError, "tuple of non-empty key names"),
        (
            ("input_ids", "labels"),
            ValueError,
            r"names 2 columns, but the lengths have shape \(N,\)",
        ),
        ((), ValueError, "at least one column"),
    ],
)
def test_hostile_fields_are_refused_up_front(field, error, match):
    with pytest.raises(error, match=match):
        CheckedDataset([{"input_ids": [1]}], [1], field=field)


def test_hostile_items_and_indices():
    ok = CheckedDataset([[1, 2], [3]], [2, 1])
    with pytest.raises(TypeError, match="tuple of 2 key names for \\(N, 2\\) lengths"):
        CheckedDataset([[1]], np.array([[1, 1]]), field="input_ids")
    with pytest.raises(TypeError, match="must be a sequence of tokens, got str"):
        CheckedDataset(["ab", "c"], [2, 1])[0]  # text is not tokens, even of the right length
    with pytest.raises(TypeError, match="must be a sized sequence of tokens, got int"):
        CheckedDataset([5], [1])[0]
    with pytest.raises(TypeError, match=r"must be a sequence of tokens, got NoneType"):
        CheckedDataset([None], [0])[0]
    with pytest.raises(ValueError, match=r"item 0 has no key 'input_ids'.*\['ids'\]"):
        CheckedDataset([{"ids": [1]}], [1], field="input_ids")[0]
    for bad in ("7", 2.5, True, None):
        with pytest.raises(TypeError, match="field function must return an int length"):
            CheckedDataset([[1]], [1], field=lambda r, b=bad: b)[0]
    with pytest.raises(TypeError, match="must return a tuple of 2 ints"):
        CheckedDataset([[1]], np.array([[1, 1]]), field=lambda r: (1, "1"))[0]
    with pytest.raises(IndexError, match=r"index must be in \[0, 2\), got -1"):
        ok[-1]
    with pytest.raises(IndexError, match=r"got 5; a PackingSampler with oversize='split'"):
        ok.__getitems__([0, 5])
    with pytest.raises(IndexError, match=r"got -2"):
        ok.__getitems__([0, -2])
    with pytest.raises(TypeError, match="index must be an int"):
        ok[1.0]
    with pytest.raises(TypeError, match="map-style dataset with len"):
        CheckedDataset(iter([[1]]), [1])
    with pytest.raises(ValueError, match="lengths must be whole numbers"):
        CheckedDataset([[1]], [-1])


def test_pickles_for_workers_and_checks_inside_them():
    lengths, data = _corpus(64)
    sampler = TokenBudgetSampler(lengths, max_tokens=256, seed=0)
    checked = pickle.loads(pickle.dumps(sampler.checked(data)))
    assert checked.__getitems__([1, 2]) == data[1:3]
    assert _load_all(sampler, checked, num_workers=1) == [[data[i] for i in b] for b in sampler]
    wrong = sampler.checked(data[::-1])
    with pytest.raises(ValueError, match="has length"):
        _load_all(sampler, wrong, num_workers=1)


def test_packing_pieces_and_mixtures():
    lengths, data = _corpus(80)
    split = PackingSampler(lengths, capacity=16, rows_per_batch=4, oversize="split", seed=0)
    pieces = PieceDataset(split.checked(data), capacity=16)
    got = [t for b in _load_all(split, pieces) for item in b for t in item]
    assert sorted(got) == sorted(t for x in data for t in x)  # every token once
    mix = MixtureSampler(
        {
            "a": TokenBudgetSampler(lengths[:50], max_tokens=128),
            "b": TokenBudgetSampler(lengths[50:], max_tokens=128),
        },
        num_batches=12,
        seed=1,
    )
    assert np.array_equal(sampler_lengths(mix), lengths)
    concat = ConcatDataset([data[:50], data[50:]])
    checked = CheckedDataset(concat, sampler_lengths(mix))
    assert len(_load_all(mix, checked)) == 12
    assert sampler_lengths(object()) is None
    assert Packing(capacity=16).name == "packing"


def test_memory_mapped_lengths_are_neither_copied_nor_pickled(tmp_path):
    """A windowed sampler over a billion int32 lengths on disk: the check reads the same map
    (no int64 copy of N lengths) and a DataLoader worker maps the file again."""
    import pickle

    lengths = np.random.default_rng(0).integers(1, 50, 200_000).astype(np.int32)
    np.save(tmp_path / "lengths.npy", lengths)
    mapped = np.load(tmp_path / "lengths.npy", mmap_mode="r")
    sampler = TokenBudgetSampler(mapped, max_tokens=4096, window=50_000)
    rows = [[1] * int(n) for n in lengths]
    checked = sampler.checked(rows)
    assert np.shares_memory(np.asarray(checked.lengths), mapped)
    blob = pickle.dumps(checked)
    assert len(blob) < lengths.nbytes // 2 + len(pickle.dumps(rows))  # the lengths by file
    again = pickle.loads(blob)
    assert again.__getitems__([0, 7]) == [rows[0], rows[7]]
    again.dataset[9].append(1)
    with pytest.raises(ValueError, match="item 9 has length"):
        again[9]
