"""TokenDataset and the plans it serves (issue 40, "one delivery path").

A capacity warm-up (``Packing(capacity=Schedule)``) is served: every batch of the sampler's
tagged codes is, key for key, the batch ``collate_for(sampler)`` builds from
``sampler.pieces(items)``; every token of the epoch comes once; a step's rows have its capacity.
What it cannot serve is refused when it is built, saying why (it was accepted once and failed at
the first batch with an index out of range: a StreamBatcher with numpy's "inhomogeneous shape",
Decomposition with an index out of range)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

import padless
from padless import Decomposition, Packing, PlanSampler, Schedule, TokenBudget
from padless.io.indexed import write_indexed
from padless.planners.packing import scheduled_stride
from padless.streams import StreamBatcher
from padless.torch import TokenDataset, collate_for

WARMUP = Schedule.piecewise([0, 4, 9], [64, 128, 256])
BASE = 1_000  # token t of document i is i * BASE + t: every token of the corpus is unique
PAD = -1


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(7)
    docs = [rng.integers(1, 500, n) for n in rng.integers(1, 90, 300)]
    prefix = str(tmp_path_factory.mktemp("plans") / "corpus")
    write_indexed(docs, prefix, dtype=np.uint16)
    return prefix, np.array([len(d) for d in docs], dtype=np.int64)


def _unique_corpus(lengths: np.ndarray, root: Path) -> tuple[str, list[np.ndarray]]:
    """A Megatron pair of int32 documents whose every token is unique (and no pad id)."""
    docs = [np.arange(i * BASE, i * BASE + n, dtype=np.int32) for i, n in enumerate(lengths)]
    prefix = str(root / "unique")
    write_indexed(docs, prefix, dtype=np.int32)
    return prefix, [d.astype(np.int64) for d in docs]


def _same(got: dict, want: dict, where: str) -> None:
    assert got.keys() == want.keys(), where
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert got[key].dtype == value.dtype, (where, key)
            assert got[key].shape == value.shape, (where, key)
            assert torch.equal(got[key], value), (where, key)
        else:
            assert got[key] == value, (where, key)


def _served_as_collated(
    sampler: PlanSampler, prefix: str, docs: list[np.ndarray], **options
) -> list[int]:
    """Iterate a whole epoch of ``TokenDataset(...).loader(sampler)``, check every batch against
    ``collate_for(sampler)`` over ``sampler.pieces(docs)`` and the step's capacity; returns the
    real tokens served, in order."""
    dataset = TokenDataset(prefix, plan=sampler, pad_id=PAD, **options)
    collate = collate_for(sampler, pad_id=PAD, **options)
    pieces = sampler.pieces(docs)
    schedule = sampler.spec.capacity_schedule
    rows = options.get("rows") or 0
    served: list[int] = []
    codes = list(sampler)  # the sampler replays the epoch for the loader
    batches = list(dataset.loader(sampler))
    assert len(batches) == len(codes)
    for k, (batch, got) in enumerate(zip(codes, batches, strict=True)):
        _same(got, collate([pieces[c] for c in batch]), f"batch {k}")
        capacity = int(schedule.value(sampler.global_step(k)))
        if not options.get("flatten"):
            assert got["input_ids"].shape[1] == capacity, k
            if rows:
                assert got["input_ids"].shape[0] == rows * (schedule.final // capacity), k
        assert got["max_seqlen"] <= capacity
        ids = got["input_ids"]
        served.extend(ids[ids != PAD].tolist())
    return served


@pytest.mark.parametrize(
    "options",
    [{}, {"flatten": True}, {"rows": 3}, {"attention_mask": "block"}, {"position_start": 2}],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "2-D",
)
@pytest.mark.parametrize("max_per_row", [None, 3])
def test_a_warm_up_is_served_as_the_collate_lays_it_out(tmp_path, options, max_per_row):
    """Documents up to 400 tokens (longer than every phase's capacity, split at 256), three
    phases: every batch equals the collate's, every token comes once."""
    lengths = np.random.default_rng(11).integers(0, 400, 250)
    prefix, docs = _unique_corpus(lengths, tmp_path)
    spec = Packing(capacity=WARMUP, rows_per_batch=3, max_per_row=max_per_row, oversize="split")
    sampler = PlanSampler(lengths, spec, seed=3)
    served = _served_as_collated(sampler, prefix, docs, **options)
    assert sorted(served) == sorted(np.concatenate(docs).tolist())  # every token once


@pytest.mark.parametrize("oversize", ["truncate", "error", "drop"])
def test_a_warm_up_of_whole_or_truncated_documents(tmp_path, oversize):
    lengths = np.random.default_rng(12).integers(1, 256 if oversize == "error" else 300, 200)
    prefix, docs = _unique_corpus(lengths, tmp_path)
    spec = Packing(capacity=WARMUP, rows_per_batch=2, max_per_row=4, oversize=oversize)
    sampler = PlanSampler(lengths, spec, seed=4)
    served = _served_as_collated(sampler, prefix, docs)
    kept = [d[:256] for d in docs if oversize == "truncate" or len(d) <= 256]
    assert sorted(served) == sorted(np.concatenate(kept).tolist())


def test_a_warm_up_through_workers_and_the_packing_sampler(tmp_path):
    """``PackingSampler`` with a schedule, a DataLoader with workers (the dataset pickles),
    int32 tokens: the same batches as served inline."""
    lengths = np.random.default_rng(13).integers(1, 300, 150)
    prefix, docs = _unique_corpus(lengths, tmp_path)
    sampler = padless.PackingSampler(
        lengths, capacity=WARMUP, rows_per_batch=2, oversize="split", seed=5
    )
    dataset = TokenDataset(prefix, plan=sampler, out_dtype="int32", pad_id=PAD)
    inline = [dataset.__getitems__(b) for b in sampler]
    served = list(dataset.loader(sampler, num_workers=2))
    assert len(served) == len(inline)
    for k, (got, want) in enumerate(zip(served, inline, strict=True)):
        _same(got, want, f"batch {k}")
    assert served[0]["input_ids"].shape[1] == 64 and served[-1]["input_ids"].shape[1] == 256


@given(
    raw=st.lists(st.integers(0, 70), min_size=1, max_size=40),
    base=st.integers(1, 12),
    exponents=st.lists(st.integers(0, 3), min_size=1, max_size=3),
    rows_per_batch=st.integers(1, 3),
    max_per_row=st.one_of(st.none(), st.integers(1, 4)),
    oversize=st.sampled_from(["split", "truncate", "drop"]),
    flatten=st.booleans(),
    seed=st.integers(0, 3),
)
# planned rows [3] and [3] (max_per_row=1) at C = 4 are the rows [3], [], [3], []: next fit
# over the pieces would give [3], [3], [], [] (the kernel's own rows are not the layout's)
@example(
    raw=[3, 3], base=4, exponents=[0, 1], rows_per_batch=2, max_per_row=1, oversize="split",
    flatten=False, seed=0,
)  # fmt: skip
def test_any_warm_up_is_served_as_the_collate_lays_it_out(
    raw, base, exponents, rows_per_batch, max_per_row, oversize, flatten, seed
):
    """Small random lengths (zero-length documents too) and schedules of up to three phases,
    capacities ``base · 2**e`` dividing the largest: the same equality, every token once."""
    top = max(exponents)
    values = [base << e for e in exponents]
    if len(set(values)) == 1:
        values.append(base << (top + 1))  # a schedule, not a constant
    schedule = Schedule.piecewise([2 * k for k in range(len(values))], values)
    largest = max(values)
    lengths = np.array(raw, dtype=np.int64)
    spec = Packing(
        capacity=schedule, rows_per_batch=rows_per_batch, max_per_row=max_per_row,
        oversize=oversize,
    )  # fmt: skip
    sampler = PlanSampler(lengths, spec, seed=seed)
    with tempfile.TemporaryDirectory() as root:
        prefix, docs = _unique_corpus(lengths, Path(root))
        served = _served_as_collated(sampler, prefix, docs, flatten=flatten)
    if oversize == "drop":
        docs = [d for d in docs if len(d) <= largest]
    kept = [d[:largest] if oversize == "truncate" else d for d in docs]
    assert sorted(served) == sorted(np.concatenate([np.zeros(0), *kept]).astype(int).tolist())


def test_a_batch_of_two_capacities_is_refused_naming_the_codes(tmp_path):
    lengths = np.random.default_rng(14).integers(1, 200, 60)
    prefix, _ = _unique_corpus(lengths, tmp_path)
    sampler = PlanSampler(lengths, Packing(capacity=WARMUP, rows_per_batch=2), seed=0)
    dataset = TokenDataset(prefix, plan=sampler)
    stride = scheduled_stride(len(lengths), 256)
    with pytest.raises(ValueError, match=r"codes 5 and \d+ of one batch ask for rows of "):
        dataset.__getitems__([5, 6 + stride])
    with pytest.raises(ValueError, match="capacity / 2 and capacity / 4"):
        dataset.__getitems__([5 + stride, 6 + 3 * stride])
    with pytest.raises(ValueError, match="capacity / 3, but 3 does not divide capacity=256"):
        dataset.__getitems__([5 + 2 * stride])
    # a planned code past the items (the plan never splits): today's error, naming the code
    with pytest.raises(ValueError, match=rf"index {60 + stride} \(planned code 60\) is out of"):
        dataset.__getitems__([60 + stride])
    with pytest.raises(ValueError, match="index 60 is out of range"):
        dataset.__getitems__([60])
    with pytest.raises(ValueError, match="non-negative"):
        dataset.__getitems__([-1, 5 + stride])


def test_what_cannot_be_served_is_still_refused_saying_why(tmp_path):
    lengths = np.random.default_rng(15).integers(1, 200, 60)
    prefix, _ = _unique_corpus(lengths, tmp_path)
    cp = padless.PackingSampler(lengths, capacity=256, context_parallel=2)
    with pytest.raises(ValueError, match=r"context parallelism here.*\(context_parallel=2\)"):
        TokenDataset(prefix, plan=cp)
    pairs = PlanSampler(np.stack([lengths, lengths], 1), Packing(capacity=(256, 256)))
    with pytest.raises(ValueError, match=r"\(source, target\) pairs"):
        TokenDataset(prefix, plan=pairs)


def test_decomposition_is_refused_when_built(store):
    prefix, lengths = store
    plan = PlanSampler(lengths, Decomposition(min_length=1, max_length=32, tokens_per_batch=64))
    with pytest.raises(ValueError, match="Decomposition yields the codes .* pieces"):
        TokenDataset(prefix, plan=plan)


def test_a_stream_batcher_is_refused_when_built(store):
    prefix, lengths = store
    batcher = StreamBatcher(lengths.tolist(), TokenBudget(max_tokens=256), length=int)
    with pytest.raises(TypeError, match="sampler of item indices .* got StreamBatcher"):
        TokenDataset(prefix, plan=batcher)


def test_split_pieces_are_still_served(store):
    """The refusal asks what holds whatever the lengths: split pieces, which TokenDataset
    serves itself, are not refused."""
    prefix, lengths = store
    plan = padless.PackingSampler(lengths, capacity=48, oversize="split", seed=1)
    assert Packing(capacity=48, oversize="split").needs_pieces(lengths) is not None
    ds = TokenDataset(prefix, plan=plan)
    served = sum(int((b["input_ids"] != 0).sum()) for b in ds.loader(plan))  # tokens: 1..499
    assert served == int(lengths.sum())  # every token once


def test_the_docs_example_of_a_warm_up_from_a_token_file_runs():
    text = (Path(__file__).parent.parent / "docs" / "schedules.md").read_text()
    code = re.search(r"<!-- example: packing-warmup-tokens -->\n```python\n(.*?)```", text, re.S)
    assert code is not None
    exec(compile(code.group(1), "docs/schedules.md: warm-up from a token file", "exec"), {})
