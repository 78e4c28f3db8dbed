"""padless.hf where two capabilities meet (issue 40), through the real transformers Trainer: the
collator a plan needs, static shapes, Decomposition's pieces, and a resume across a change of
settings. Each test records what the model receives (shapes, tokens, items) and checks it against
the bare sampler. TRL's SFTTrainer and its default collator: tests/test_trl.py."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import torch  # noqa: E402
from transformers import DataCollatorWithPadding  # noqa: E402

from padless import (  # noqa: E402
    Decomposition,
    FixedShapes,
    MixtureSampler,
    PackingSampler,
    PlanSampler,
    TokenBudgetSampler,
)
from padless.hf import STATE_FILE, PaddedCollator, PaddingFreeCollator  # noqa: E402
from padless.planners.packing import PieceDataset  # noqa: E402
from padless.torch import collate_for  # noqa: E402

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import _hf_train as hft  # noqa: E402


def _build(out: Path, sampler: Any, data: Any, collator: Any, **kw: Any) -> Any:
    """A recording padless Trainer (one epoch, no accumulation unless ``kw`` says otherwise)."""
    save_at = kw.pop("save_at", ())
    extra = {k: kw.pop(k) for k in ("trust_collator",) if k in kw}
    args = hft.training_args(
        str(out), **{"gradient_accumulation_steps": 1, "num_train_epochs": 1, **kw}
    )
    with hft.quietly():
        return hft.RecordingTrainer(
            model=hft.tiny_model(),
            args=args,
            train_dataset=data,
            data_collator=collator,
            batch_sampler=sampler,
            callbacks=[hft.SaveAt(save_at)],
            **extra,
        )


def _fit(trainer: Any, resume: Any = None) -> list[dict[str, Any]]:
    with hft.quietly():
        trainer.train(resume_from_checkpoint=resume)
    return trainer.record


def _indices(record: list[dict[str, Any]]) -> list[list[int]]:
    return [r["index"] for r in record]


def _epochs(sampler: Any, epochs: int) -> list[list[int]]:
    out: list[list[int]] = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        out += [list(b) for b in sampler]
    return out


# --------------------------------------------------------------------------- collators


def test_a_collator_padless_cannot_judge_needs_trust_where_the_plan_packs(tmp_path):
    """A function of the user's own: refused under a packing plan (padless cannot tell its
    layout) unless vouched for with trust_collator=True; taken as padding where the plan pads."""
    lengths, data = hft.corpus()
    rows = PaddingFreeCollator(48, rows=2)

    def own(features):
        out = rows(features)
        out["index"] = torch.tensor([f["index"] for f in features])
        return out

    def packing():
        return PackingSampler(lengths, capacity=48, rows_per_batch=2, seed=1)

    with pytest.raises(ValueError) as err:
        _build(tmp_path, packing(), data, own)
    for part in (
        "data_collator test_a_collator_padless_cannot_judge_needs_trust_where_the_plan_packs"
        ".<locals>.own (test_hf_composes)",
        "batch_sampler PackingSampler (packing(capacity=48, rows_per_batch=2))",
        "padless cannot tell whether",
        "padless.hf.PaddingFreeCollator(48, rows=2)",
        "pass trust_collator=True",
    ):
        assert part in str(err.value)
    with pytest.raises(TypeError, match="trust_collator"):
        _build(tmp_path, packing(), data, own, trust_collator=1)
    record = _fit(_build(tmp_path / "own", packing(), data, own, trust_collator=True, max_steps=4))
    assert _indices(record) == [list(b) for b in packing()][:4]
    assert [r["shape"] for r in record] == [(2, 48)] * 4
    # a padded plan budgets padding to the longest: a function is taken as doing that
    _build(tmp_path, TokenBudgetSampler(lengths, max_tokens=112, seed=1), data, own)
    # transformers' padding collator under a packing plan: a row per sequence, refused
    with pytest.raises(ValueError, match=r"DataCollatorWithPadding \(transformers\) does not.*"):
        _build(tmp_path, packing(), data, DataCollatorWithPadding(tokenizer=None))


def test_padless_torch_collates_that_would_misread_the_rows_are_refused_when_built(tmp_path):
    """collate_for(PackingSampler) over rows with labels of their own (an SFT prompt masked)
    made the labels from input_ids, training the prompt; collate_for(TokenBudgetSampler) over
    dict rows failed at the first batch: both refused when the trainer is built, and the packed
    collate refuses such a row in a loop of one's own."""
    lengths, data = hft.corpus(24)
    masked = [{**row, "labels": [-100] * 2 + row["input_ids"][2:]} for row in data]
    packing = PackingSampler(lengths, capacity=48, rows_per_batch=2, seed=1)
    with pytest.raises(ValueError, match="labels of their own .*hf.PaddingFreeCollator"):
        _build(tmp_path, packing, masked, collate_for(packing, pad_id=0))
    with pytest.raises(ValueError, match=r"rows are dicts .*hf.PaddedCollator"):
        budget = TokenBudgetSampler(lengths, max_tokens=112, seed=1)
        _build(tmp_path, budget, data, collate_for(budget, pad_id=0))
    same = [{**row, "labels": list(row["input_ids"])} for row in data]  # labels = ids: kept
    _build(tmp_path, packing, same, collate_for(packing, pad_id=0))
    with pytest.raises(ValueError, match=r"sample \[1\] carries labels of its own"):
        collate_for(packing, pad_id=0)([same[0], masked[1]])


# --------------------------------------------------------------------------- static shapes

SHAPES = [(8, 16), (4, 32), (2, 48)]


def _shaped() -> PlanSampler:
    return PlanSampler(hft.corpus()[0], FixedShapes(shapes=SHAPES), seed=1)


@pytest.mark.parametrize(
    "collator",
    [
        PaddingFreeCollator(),  # (1, 1970)-like flat rows: the case
        PaddingFreeCollator(48, rows=2),
        DataCollatorWithPadding(tokenizer=None),
        PaddedCollator(FixedShapes(shapes=[(8, 48)])),  # another shape set
    ],
    ids=["flat", "rows", "hf-padding", "other-shapes"],
)
def test_fixed_shapes_refuse_a_collator_that_leaves_the_shape_set(tmp_path, collator):
    with pytest.raises(ValueError) as err:
        _build(tmp_path, _shaped(), hft.corpus()[1], collator)
    message = str(err.value)
    assert f"data_collator {type(collator).__name__}" in message
    assert "batch_sampler PlanSampler (fixed_shapes(shapes=[[8, 16], [4, 32], [2, 48]]))" in message
    assert "compile-once-per-shape no longer holds" in message
    assert "Pass data_collator=padless.hf.PaddedCollator(sampler)" in message


def test_fixed_shapes_train_on_shapes_of_the_set_only(tmp_path):
    lengths, data = hft.corpus()
    collate = hft.with_index(PaddedCollator(_shaped()))
    record = _fit(_build(tmp_path / "run", _shaped(), data, collate, num_train_epochs=2))
    assert _indices(record) == _epochs(_shaped(), 2)
    for epoch in range(2):  # every item once per epoch
        seen = sorted(i for r in record if r["epoch"] == epoch for i in r["index"])
        assert seen == list(range(len(lengths)))
    for r in record:
        assert r["shape"] in SHAPES, r["shape"]
        rows, width = r["shape"]
        for row in range(rows):  # each item in a row of its own, padding after; dummy rows
            tokens = data[r["index"][row]]["input_ids"] if row < len(r["index"]) else []
            assert r["input_ids"][row] == tokens + [0] * (width - len(tokens))
            assert r["attention_mask"][row] == [1] * len(tokens) + [0] * (width - len(tokens))
        assert np.isfinite(r["loss"])


# --------------------------------------------------------------------------- Decomposition

DECOMPOSITION = Decomposition(min_length=2, max_length=16, tokens_per_batch=64)


def _decomposed() -> PlanSampler:
    return PlanSampler(hft.corpus()[0], DECOMPOSITION, seed=1)


def test_decomposition_trains_on_exactly_the_planned_pieces(tmp_path):
    """On the old code the mixin served the pieces as plain PieceDataset ones (cut at every 16
    tokens instead of the binary decomposition), then failed with an IndexError."""
    lengths, data = hft.corpus()
    pieces = _decomposed().pieces(data)
    record = _fit(
        _build(tmp_path / "run", _decomposed(), pieces, hft.with_index(PaddingFreeCollator()))
    )
    bare = [list(b) for b in _decomposed()]
    assert len(record) == len(bare)
    by_doc: dict[int, list[tuple[int, list[int]]]] = {}
    for r, codes in zip(record, bare, strict=True):
        planned = [pieces[c]["input_ids"] for c in codes]
        assert r["shape"] == (1, sum(map(len, planned))) and r["shape"][1] <= 64
        assert r["input_ids"][0] == [t for p in planned for t in p]  # the pieces, in order
        assert len({len(p) for p in planned}) == 1  # a dense block: one piece length
        for c, p in zip(codes, planned, strict=True):
            by_doc.setdefault(c % len(data), []).append((c // len(data), p))
    assert Counter(c for b in bare for c in b).most_common(1)[0][1] == 1  # each piece once
    for doc, parts in by_doc.items():  # the pieces cut each document in order, powers of two
        joined = [t for _, p in sorted(parts) for t in p]
        assert joined == data[doc]["input_ids"][: len(joined)]
        assert all(len(p) & (len(p) - 1) == 0 for _, p in parts)
    trained = sum(r["shape"][1] for r in record)
    dropped = _decomposed().epoch_plan(0)[0].info["dropped_tokens"]
    assert trained == int(lengths.sum()) - dropped  # every token once, bar the dropped ones


def test_decomposition_refuses_a_dataset_that_does_not_serve_its_pieces(tmp_path):
    lengths, data = hft.corpus()
    flat = PaddingFreeCollator()
    with pytest.raises(ValueError, match=r"must serve the pieces batch_sampler PlanSampler \(deco"):
        _build(tmp_path, _decomposed(), data, flat)
    with pytest.raises(ValueError, match=r"sampler.pieces\(dataset, keys=\('input_ids',\)\)"):
        _build(tmp_path, _decomposed(), data, flat)
    with pytest.raises(ValueError, match=r"serves PieceDataset\(capacity=16, scheduled=False\), "):
        _build(tmp_path, _decomposed(), PieceDataset(data, capacity=16), flat)
    labelled = [dict(r, labels=list(r["input_ids"])) for r in data]
    with pytest.raises(ValueError, match=r"also hold \['labels'\].*'input_ids', 'labels'"):
        _build(tmp_path, _decomposed(), _decomposed().pieces(labelled), flat)
    _build(
        tmp_path, _decomposed(), _decomposed().pieces(labelled, keys=("input_ids", "labels")), flat
    )
    with pytest.raises(ValueError, match=r"lays out packed rows of capacity=16, which only a pack"):
        _build(tmp_path, _decomposed(), _decomposed().pieces(data), PaddingFreeCollator(16))
    with pytest.raises(
        ValueError, match=r"is a DecomposedDataset \(pieces of sequences\), but batch"
    ):
        _build(
            tmp_path,
            hft.make_sampler(lengths, hft.training_args(str(tmp_path))),
            _decomposed().pieces(data),
            flat,
        )


# --------------------------------------------------------------------------- resume across a change


def test_a_resume_across_a_change_of_max_tokens_is_refused_before_any_step(tmp_path):
    """On the old code it resumed with no error: the new plan's first batches were skipped by
    count, so items went untrained and others trained twice."""
    lengths = hft.corpus()[0]
    hft.train(str(tmp_path / "a"), save_at=(3, 7), max_steps=7)  # max_tokens=104: 14 batches
    for mark, where in (
        (3, "before the saved position"),
        (7, "global step 7 means epoch 1 after 4 batches"),
    ):
        args = hft.training_args(str(tmp_path / f"b{mark}"))
        sampler = hft.make_sampler(lengths, args, max_tokens=160)
        trainer = _build(tmp_path / f"b{mark}", sampler, hft.corpus()[1],
                         hft.with_index(PaddingFreeCollator()), gradient_accumulation_steps=2,
                         num_train_epochs=2)  # fmt: skip
        with pytest.raises(ValueError) as err:
            _fit(trainer, resume=str(tmp_path / "a" / f"checkpoint-{mark}"))
        message = str(err.value)
        assert "max_tokens=104 in the checkpoint, 160 now" in message
        assert where in message and "drive the sampler from your own loop" in message
        assert trainer.record == []  # nothing trained
    # the documented way for such a change: the bare sampler resumes the same state exactly
    state = json.loads((tmp_path / "a" / "checkpoint-3" / STATE_FILE).read_text())
    first = [i for b in TokenBudgetSampler(lengths, max_tokens=104, seed=1) for i in b]
    bare = TokenBudgetSampler(lengths, max_tokens=160, seed=1)
    bare.load_state_dict(state)
    rest = [i for b in bare for i in b]
    done = state["position"]
    taken = [i for b in list(TokenBudgetSampler(lengths, max_tokens=104, seed=1))[:done] for i in b]
    assert sorted(taken + rest) == list(range(len(lengths))) and first[: len(taken)] == taken


def _mixture(weight: float) -> MixtureSampler:
    la, lb = hft.corpus(48, seed=0)[0], hft.corpus(48, seed=1)[0]
    corpora = {
        "a": TokenBudgetSampler(la, max_tokens=104, seed=1),
        "b": TokenBudgetSampler(lb, max_tokens=104, seed=2),
    }
    return MixtureSampler(corpora, weights={"a": weight, "b": 1 - weight}, num_batches=12, seed=3)


def test_a_resume_across_a_change_of_mixture_weights_continues_exactly(tmp_path):
    """A change that keeps the epoch's batches per process resumes through the Trainer as the
    bare sampler does: the saved batches, then the rest drawn under the new weights. On the old
    code the Trainer skipped the new weights' first batches by count instead."""
    rows = hft.corpus(48, seed=0)[1] + hft.corpus(48, seed=1)[1]
    data = [dict(r, index=i) for i, r in enumerate(rows)]  # the corpora's ConcatDataset

    def run(name, weight, resume=None, **kw):
        trainer = _build(tmp_path / name, _mixture(weight), data,
                         hft.with_index(PaddingFreeCollator()), gradient_accumulation_steps=2,
                         num_train_epochs=2, **kw)  # fmt: skip
        return _fit(trainer, resume)

    before = run("a", 0.5, save_at=(3,), max_steps=3)
    assert _indices(before) == [list(b) for b in _mixture(0.5)][:6]
    after = run("b", 0.8, resume=str(tmp_path / "a" / "checkpoint-3"), save_at=(5,))
    state = json.loads((tmp_path / "a" / "checkpoint-3" / STATE_FILE).read_text())
    bare = _mixture(0.8)
    bare.load_state_dict(state)  # the bare sampler's resume across the change
    expected = [list(b) for b in bare]
    bare.set_epoch(1)
    expected += [list(b) for b in bare]
    assert _indices(after) == expected
    for r in before + after:  # the model received exactly those items' tokens
        assert r["input_ids"] == [[t for i in r["index"] for t in data[i]["input_ids"]]]
    # a checkpoint of the resumed run, inside the changed epoch, resumes exactly too
    again = run("c", 0.8, resume=str(tmp_path / "b" / "checkpoint-5"))
    assert _indices(again) == [r["index"] for r in after if r["step"] >= 5]
