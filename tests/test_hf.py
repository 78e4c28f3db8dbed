"""padless.hf: the Trainer mixin with the real transformers/accelerate (tiny Llama, CPU), one and two
processes, and the padding-free collator against transformers' own."""

from __future__ import annotations

import functools
import json
import logging
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import torch  # noqa: E402
from transformers import DataCollatorWithFlattening  # noqa: E402

from padless import PackingSampler, TokenBudgetSampler  # noqa: E402
from padless.hf import (  # noqa: E402
    STATE_FILE,
    PaddingFreeCollator,
    TrainerBatches,
    newest_checkpoint,
)

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import _hf_train as hft  # noqa: E402

# --------------------------------------------------------------------------- collator


def _features(seed, n, labels=False):
    rs = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = rs.integers(1, hft.VOCAB, rs.integers(1, 12)).tolist()
        f = {"input_ids": ids}
        if labels:
            f["labels"] = [t if rs.random() < 0.7 else -100 for t in ids]
        out.append(f)
    return out


@pytest.mark.parametrize("labels", [False, True])
def test_flat_collator_matches_datacollatorwithflattening(labels):
    ours = PaddingFreeCollator(flash_attn_kwargs=True, seq_idx=True)
    theirs = DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_seq_idx=True)
    for seed in range(5):
        feats = _features(seed, 7, labels)
        a, b = ours(feats), theirs(feats)
        assert set(a) == set(b)
        for key in a:
            if isinstance(b[key], torch.Tensor):
                assert a[key].dtype == b[key].dtype, key
                assert a[key].tolist() == b[key].tolist(), key
            else:
                assert a[key] == b[key], key


def test_row_collator_cuts_packing_batches_into_planned_rows():
    lengths = np.random.default_rng(3).integers(1, 30, 200)
    sampler = PackingSampler(lengths, capacity=32, rows_per_batch=4, seed=0)
    feats = [{"input_ids": list(range(1, n + 1))} for n in lengths]
    collate = PaddingFreeCollator(32, rows=4, flash_attn_kwargs=True)
    for batch in sampler:
        out = collate([feats[i] for i in batch])
        ids, pos, lab = out["input_ids"], out["position_ids"], out["labels"]
        assert ids.shape == pos.shape == lab.shape == (4, 32)
        # every real token: position = token - 1 (tokens count up from 1 in every sequence)
        real = ids != 0
        assert torch.equal(pos[real], ids[real] - 1)
        assert int(real.sum()) == int(lengths[batch].sum())
        assert (lab[~real] == -100).all() and (lab[pos == 0] == -100).all()
        cu = out["cu_seq_lens_q"]
        assert cu.dtype == torch.int32 and int(cu[-1]) == 4 * 32


def test_collator_errors():
    with pytest.raises(ValueError, match="pass capacity too"):
        PaddingFreeCollator(rows=2)
    with pytest.raises(TypeError, match="mapping with 'input_ids'"):
        PaddingFreeCollator()([[1, 2]])
    with pytest.raises(ValueError, match="3 input_ids but 2 labels"):
        PaddingFreeCollator()([{"input_ids": [1, 2, 3], "labels": [1, 2]}])
    with pytest.raises(ValueError, match="every feature has 'labels' or none"):
        PaddingFreeCollator()([{"input_ids": [1], "labels": [1]}, {"input_ids": [2]}])
    with pytest.raises(TypeError, match="flash_attn_kwargs must be a bool"):
        PaddingFreeCollator(flash_attn_kwargs=1)


def test_collator_values_must_fit_int64_up_front():
    """position_start=2**63 used to wrap position ids negative; 2**63 ids failed at call time."""
    for name in ("separator_id", "pad_id"):
        for value in (2**63, -(2**63) - 1):
            with pytest.raises(ValueError, match=f"{name} must fit in int64"):
                PaddingFreeCollator(8, **{name: value})
    with pytest.raises(ValueError, match="position_start must be at most 9223372036854775800"):
        PaddingFreeCollator(8, position_start=2**63 - 7)
    with pytest.raises(ValueError, match=r"up to 2\*\*31: position_start must be at most"):
        PaddingFreeCollator(position_start=2**63)
    with pytest.raises(ValueError, match="position_start must be a non-negative int"):
        PaddingFreeCollator(position_start=-1)
    top = PaddingFreeCollator(8, position_start=2**63 - 8)([{"input_ids": [1] * 8}])
    assert (
        int(top["position_ids"].min()) == 2**63 - 8 and int(top["position_ids"].max()) == 2**63 - 1
    )


def test_packed_batch_loss_is_the_loss_of_the_separate_sequences():
    """HF's sdpa path turns restarting position_ids into an exact block-diagonal causal mask."""
    model = hft.tiny_model().eval()
    feats = _features(11, 6)
    with torch.no_grad():
        total = count = 0.0
        for f in feats:
            ids = torch.tensor([f["input_ids"]])
            if ids.shape[1] < 2:
                continue
            n = ids.shape[1] - 1
            total += float(model(input_ids=ids, labels=ids).loss) * n
            count += n
        alone = total / count
        for collate in (PaddingFreeCollator(), PaddingFreeCollator(24)):
            batch = collate(feats)
            packed = float(model(**batch).loss)
            assert packed == pytest.approx(alone, rel=1e-5)


# --------------------------------------------------------------------------- one process


def _indices(record):
    return [r["index"] for r in record]


def test_trainer_uses_exactly_the_sampler_batches_and_resumes_exactly(tmp_path):
    kw = {"sampler_kw": {"max_tokens": 112}}  # 13 batches per epoch: the last step accumulates 1
    lengths = hft.corpus()[0]
    per_epoch = len(TokenBudgetSampler(lengths, max_tokens=112, seed=1))
    assert per_epoch == 13
    steps = 7
    marks = (3, steps, steps + 2)  # mid-epoch 0, end of epoch 0, mid-epoch 1
    trainer, full = hft.train(str(tmp_path / "full"), save_at=marks, **kw)
    bare = hft.bare_batches(lengths, trainer.args, 2, max_tokens=112)
    assert _indices(full) == bare[0] + bare[1]
    for epoch in range(2):  # every item once per epoch
        seen = sorted(i for r in full if r["epoch"] == epoch for i in r["index"])
        assert seen == list(range(len(lengths)))
    state = json.loads((tmp_path / "full" / f"checkpoint-{steps + 2}" / STATE_FILE).read_text())
    assert (state["epoch"], state["position"]) == (1, 4)  # 2 steps x 2 batches into epoch 1
    for mark in marks:
        _, resumed = hft.train(
            str(tmp_path / f"resume{mark}"),
            resume=str(tmp_path / "full" / f"checkpoint-{mark}"),
            **kw,
        )
        tail = [r for r in full if r["step"] >= mark]
        assert _indices(resumed) == _indices(tail), mark
        assert [r["loss"] for r in resumed] == pytest.approx([r["loss"] for r in tail], abs=1e-6)


def test_resume_true_and_ignore_data_skip(tmp_path, caplog):
    out = str(tmp_path / "run")
    _, full = hft.train(out, save_at=(5,), max_steps=5)
    # a run killed while writing checkpoint-7: its folder holds some files, not the last ones
    partial = Path(out) / "checkpoint-7"
    shutil.copytree(Path(out) / "checkpoint-5", partial)
    (partial / "trainer_state.json").unlink()
    (partial / STATE_FILE).unlink()
    assert newest_checkpoint(out) == str(Path(out) / "checkpoint-5")
    # resume_from_checkpoint=True skips it for checkpoint-5; max_steps=9 continues to step 9
    with caplog.at_level(logging.WARNING, logger="padless.hf"):
        _, resumed = hft.train(out, resume=True, max_steps=9)
    assert f"skipping {partial}: it has no {STATE_FILE}" in caplog.text
    _, ref = hft.train(str(tmp_path / "ref"), max_steps=9)
    assert _indices(full + resumed) == _indices(ref)
    # ignore_data_skip: the interrupted epoch restarts from its first batch (HF semantics)
    _, again = hft.train(
        str(tmp_path / "again"),
        resume=str(Path(out) / "checkpoint-5"),
        ignore_data_skip=True,
        max_steps=6,
    )
    per_epoch = len(hft.make_sampler(hft.corpus()[0], hft.training_args(out)))
    epoch = 5 // -(-per_epoch // 2)
    assert (
        again[0]["index"] == hft.bare_batches(hft.corpus()[0], hft.training_args(out), 2)[epoch][0]
    )


def test_packing_sampler_with_row_collator_trains(tmp_path):
    lengths = hft.corpus()[0]
    trainer, record = hft.train(
        str(tmp_path / "pack"),
        collator=PaddingFreeCollator(48, rows=2),
        sampler_cls=PackingSampler,
        sampler_kw={"capacity": 48, "rows_per_batch": 2},
        max_steps=3,
        gradient_accumulation_steps=1,
    )
    sampler = PackingSampler(lengths, capacity=48, rows_per_batch=2, seed=1)
    assert _indices(record) == [list(b) for b in sampler][:3]
    assert all(np.isfinite(r["loss"]) for r in record)


def test_refuses_checkpoint_of_other_settings_and_wrong_shards(tmp_path):
    out = str(tmp_path / "a")
    hft.train(out, save_at=(2,), max_steps=2)
    with pytest.raises(ValueError, match="settings differ"):
        hft.train(
            str(tmp_path / "b"),
            resume=str(Path(out) / "checkpoint-2"),
            sampler_kw={"shuffle": False},  # what a run cannot change
            max_steps=3,
        )
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        hft.train(
            str(tmp_path / "c"),
            resume=str(Path(out) / "checkpoint-2"),
            gradient_accumulation_steps=1,
            max_steps=3,
        )
    lengths, data = hft.corpus()
    args = hft.training_args(str(tmp_path / "d"))
    with pytest.raises(ValueError, match="rank=args.process_index, world_size=args.world_size"):
        hft.RecordingTrainer(
            model=hft.tiny_model(),
            args=args,
            train_dataset=data,
            data_collator=PaddingFreeCollator(),
            batch_sampler=TokenBudgetSampler(lengths, max_tokens=64, world_size=2),
        )
    with pytest.raises(TypeError, match="must be a padless sampler"):
        hft.RecordingTrainer(model=hft.tiny_model(), args=args, batch_sampler=[[0, 1]])


def test_newest_checkpoint(tmp_path):
    assert newest_checkpoint(tmp_path / "missing") is None  # a first run: train from scratch
    assert newest_checkpoint(tmp_path) is None
    for name in ("checkpoint-2", "checkpoint-10", "checkpoint-x", "checkpoint-30"):
        (tmp_path / name).mkdir()
    (tmp_path / "checkpoint-99").write_text("a file, not a checkpoint")
    assert newest_checkpoint(tmp_path) is None  # only unfinished ones: train from the start
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("{}")
    # written without padless (no checkpoint has the state file): the newest the Trainer finished
    assert newest_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")
    (tmp_path / "checkpoint-2" / STATE_FILE).write_text("{}")
    (tmp_path / "checkpoint-10" / STATE_FILE).write_text("{}")
    assert newest_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")  # by number, not name


def _construct(tmp_path, data, lengths, **kw):
    args = hft.training_args(str(tmp_path / "c"), **kw.pop("args", {}))
    return hft.RecordingTrainer(
        model=hft.tiny_model(),
        args=args,
        train_dataset=data,
        data_collator=hft.with_index(PaddingFreeCollator()),
        batch_sampler=TokenBudgetSampler(lengths, max_tokens=112, seed=1),
        **kw,
    )


def test_a_dataset_that_is_not_the_lengths_is_refused_before_training(tmp_path):
    """On the old code: a subset trained silently, or batches over budget, or an IndexError."""
    lengths, data = hft.corpus()
    with pytest.raises(ValueError, match="dataset has 90 items but the sampler planned 96"):
        _construct(tmp_path, data[:90], lengths)
    with pytest.raises(ValueError, match="dataset has 96 items but the sampler planned 100"):
        _construct(tmp_path, data, np.concatenate([lengths, lengths[:4]]))
    shuffled = [data[i] for i in np.random.default_rng(0).permutation(len(data))]
    first = next(i for i, r in enumerate(shuffled) if len(r["input_ids"]) != lengths[i])
    want = f"item {first} has length {len(shuffled[first]['input_ids'])}, but the sampler planned"
    with pytest.raises(ValueError, match=want):
        _construct(tmp_path, shuffled, lengths)
    # measured on another field, or by a function; a bad field is refused up front
    rows = [dict(r, labels=r["input_ids"][:1]) for r in data]
    _construct(tmp_path, rows, np.ones(len(rows), np.int64), length_field="labels")
    _construct(tmp_path, rows, lengths, length_field=lambda r: len(r["input_ids"]))
    with pytest.raises(TypeError, match="length_field=3 is refused: field must be None, a key"):
        _construct(tmp_path, rows, lengths, length_field=3)
    with pytest.raises(ValueError, match="train_sampling_strategy='group_by_length'"):
        _construct(tmp_path, data, lengths, args={"train_sampling_strategy": "group_by_length"})
    # accepted before and never used: on an out-of-memory error the Trainer's retry trained
    # the epoch's first batches again at the same size; the data seed shuffled nothing
    for given, words in (
        ({"auto_find_batch_size": True}, "auto_find_batch_size=True: after an out-of-memory"),
        ({"data_seed": 7}, "data_seed=7: the Trainer's sampler does not run"),
    ):
        with pytest.raises(ValueError, match=words):
            _construct(tmp_path, data, lengths, args=given)


def test_dispatch_batches_is_refused(tmp_path):
    with pytest.raises(ValueError, match="dispatch_batches=False"):
        hft.train(str(tmp_path / "x"), max_steps=1, accelerator_config={"dispatch_batches": True})


class GrowingBudget:
    """A user's own sampler (padless protocol) whose budget grows with the epoch: fewer batches."""

    rank, world_size = 0, 1

    def __init__(self, lengths):
        self.lengths, self.epoch = lengths, 0

    def _sampler(self):
        return TokenBudgetSampler(self.lengths, max_tokens=16 * (1 + self.epoch), shuffle=False)

    def __iter__(self):
        return iter(self._sampler())

    def __len__(self):
        return len(self._sampler())

    def set_epoch(self, epoch):
        self.epoch = epoch

    def state_dict(self, consumed=None):
        return {"epoch": self.epoch}

    def load_state_dict(self, state):
        self.epoch = state["epoch"]


def test_epoch_of_another_length_is_refused_before_use():
    batches = TrainerBatches(GrowingBudget(np.full(40, 4)))
    assert len(batches) == 10
    batches.set_epoch(0)
    with pytest.raises(ValueError, match="epoch 1 of the batch_sampler has 5 batches"):
        batches.set_epoch(1)


# --------------------------------------------------------------------------- two processes


def test_docs_example(tmp_path):
    from _docs import run_example

    scope = run_example("hf", tmp_path)
    trainer = scope["trainer"]
    assert (tmp_path / "out" / "checkpoint-10" / STATE_FILE).exists()
    assert trainer.state.global_step == trainer.state.max_steps > 10


def test_a_model_that_lets_packed_documents_attend_across_is_refused_before_training(tmp_path):
    """OPT builds its causal mask without position_ids: packed documents see each other."""
    from transformers import OPTConfig, OPTForCausalLM

    lengths, data = hft.corpus()
    torch.manual_seed(0)
    config = OPTConfig(
        vocab_size=hft.VOCAB, hidden_size=16, ffn_dim=32, num_hidden_layers=1,
        num_attention_heads=2, max_position_embeddings=64, word_embed_proj_dim=16,
    )  # fmt: skip
    args = hft.training_args(str(tmp_path / "opt"), max_steps=1)
    made = {
        "args": args,
        "train_dataset": data,
        "data_collator": PaddingFreeCollator(),
        "batch_sampler": TokenBudgetSampler(lengths, max_tokens=112, seed=1),
    }
    from transformers import Trainer

    from padless.hf import PadlessTrainerMixin

    class PadlessTrainer(PadlessTrainerMixin, Trainer):
        pass

    trainer = PadlessTrainer(model=OPTForCausalLM(config), **made)
    with pytest.raises(ValueError, match="packed documents attend to each other.*block"):
        trainer.train()
    assert trainer.state.global_step == 0
    # evaluate() and predict() too: no metrics of leaked attention
    for run in ("evaluate", "predict"):
        fresh = PadlessTrainer(model=OPTForCausalLM(config), eval_dataset=data[:8], **made)
        with pytest.raises(ValueError, match="packed documents attend to each other"):
            getattr(fresh, run)(*([data[:8]] if run == "predict" else []))
    # the Llama of the other tests (the Trainer sets use_cache=False) passes; so does a skip
    PadlessTrainer(model=hft.tiny_model(), **made).train()
    trainer = PadlessTrainer(model=OPTForCausalLM(config), check_packed=False, **made)
    trainer.train()
    assert trainer.state.global_step == 1


def test_a_collator_that_pads_past_the_plan_is_refused(tmp_path):
    """DataCollatorWithPadding(pad_to_multiple_of=8) under a plan that does not round widens
    batches past max_tokens; with the multiple in the plan it is the planned batch."""
    from transformers import DataCollatorWithPadding

    from padless.torch import collate_padded

    lengths, data = hft.corpus()
    args = hft.training_args(str(tmp_path / "w"))

    def build(collator, **plan):
        sampler = TokenBudgetSampler(lengths, max_tokens=112, seed=1, **plan)
        return hft.RecordingTrainer(
            model=hft.tiny_model(), args=args, train_dataset=data, data_collator=collator,
            batch_sampler=sampler,
        )  # fmt: skip

    hf8 = DataCollatorWithPadding(tokenizer=None, pad_to_multiple_of=8)
    with pytest.raises(ValueError, match="pad_to_multiple_of=8 is not the plan's pad_to_multi"):
        build(hf8)
    for called in (hf8.__call__, functools.partial(hf8.__call__)):  # judged as hf8 itself
        with pytest.raises(ValueError, match="pad_to_multiple_of=8 is not the plan's"):
            build(called)
    build(hf8, pad_to_multiple_of=8)
    with pytest.raises(ValueError, match=r"multiple_of=4 is not the plan's pad_to_multiple_of=8"):
        build(collate_padded(0, multiple_of=4), pad_to_multiple_of=8)
    with pytest.raises(ValueError, match="pads every batch to max_length"):
        build(DataCollatorWithPadding(tokenizer=None, padding="max_length", max_length=64))
