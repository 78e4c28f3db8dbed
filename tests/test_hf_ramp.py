"""A batch-size ramp through transformers.Trainer: each optimizer step trains exactly the
sampler's micro-batches of that step, weighted to the step's mean loss, and resumes exactly
(issue 28)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import padless
from padless import PlanSampler, Schedule, TokenBudget
from padless.hf import STATE_FILE, PadlessTrainerMixin
from tests import _hf_train as hft


class RecordMicro:
    """Mixed in first: records every micro-batch compute_loss sees, with its weight."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.record = []

    def compute_loss(self, model, inputs, *args, **kwargs):
        index = inputs.pop("index").tolist()
        loss = super().compute_loss(model, inputs, *args, **kwargs)
        weight = self._padless_weight
        self.record.append({"step": self.state.global_step, "index": index, "weight": weight})
        return loss


class RampTrainer(RecordMicro, PadlessTrainerMixin, hft.Trainer):
    pass


RAMP = Schedule.linear(2, 6, steps=3, multiple_of=2)  # 2, 2(3.3→2), 4, 6… micro-batches a step


def _sampler(lengths):
    return PlanSampler(lengths, TokenBudget(max_tokens=104), seed=1, batches_per_step=RAMP)


def _run(out, resume=None, save_at=(), **overrides):
    lengths, data = hft.corpus()
    args = hft.training_args(out, gradient_accumulation_steps=1, num_train_epochs=1, **overrides)
    trainer = RampTrainer(
        model=hft.tiny_model(),
        args=args,
        train_dataset=data,
        data_collator=hft.with_index(padless.hf.PaddingFreeCollator()),
        batch_sampler=_sampler(lengths),
        callbacks=[hft.SaveAt(save_at)],
    )
    torch.set_num_threads(1)
    trainer.train(resume_from_checkpoint=resume)
    return trainer, trainer.record


def test_each_optimizer_step_trains_the_steps_micro_batches_weighted_to_its_mean(tmp_path):
    lengths = hft.corpus()[0]
    reference = _sampler(lengths)
    groups = [[list(b) for b in g] for g in reference.steps(reference)]
    assert [len(g) for g in groups][:3] == [2, 2, 4]
    trainer, record = _run(str(tmp_path / "full"), save_at=(2,))
    assert trainer.state.global_step == len(groups)
    got = [[r["index"] for r in record if r["step"] == k] for k in range(len(groups))]
    assert got == groups
    for k, group in enumerate(groups):  # weights: each micro-batch's share of the targets
        targets = [sum(int(lengths[i]) - 1 for i in b) for b in group]
        weights = [r["weight"] for r in record if r["step"] == k]
        assert weights == pytest.approx([t / sum(targets) for t in targets])
    state = json.loads((tmp_path / "full" / "checkpoint-2" / STATE_FILE).read_text())
    assert state["position"] == 4  # two steps of 2 micro-batches
    _, resumed = _run(str(tmp_path / "resumed"), resume=str(tmp_path / "full" / "checkpoint-2"))
    assert [r["index"] for r in resumed] == [r["index"] for r in record if r["step"] >= 2]


def test_rows_with_their_own_labels_weigh_by_their_real_targets(tmp_path):
    """SFT rows whose prompt is masked (-100): a step's gradient is that of the mean loss over
    its real targets (weighted by the plan's lengths it was 87% off in the issue's probe)."""
    lengths, data = hft.corpus(24)
    for i, row in enumerate(data):  # even rows: only the last 2 tokens are targets
        ids = row["input_ids"]
        row["labels"] = [-100] * (len(ids) - 2) + ids[-2:] if i % 2 == 0 else list(ids)
    sampler = PlanSampler(lengths, TokenBudget(max_tokens=104), seed=1, batches_per_step=2)
    model = hft.tiny_model()
    args = hft.training_args(str(tmp_path), gradient_accumulation_steps=1, learning_rate=0.0)
    trainer = RampTrainer(
        model=model,
        args=args,
        train_dataset=data,
        data_collator=hft.with_index(padless.hf.PaddingFreeCollator()),
        batch_sampler=sampler,
    )
    inputs = next(iter(trainer.get_train_dataloader()))
    micro = inputs["padless_micro_batches"]  # RecordMicro pops their "index" in training_step
    targets = [int(b["labels"][:, 1:].ne(-100).sum()) for b in micro]
    assert targets != [sum(int(lengths[i]) - 1 for i in b) for b in list(sampler)[:2]]
    trainer.current_gradient_accumulation_steps = 1
    model.train()
    trainer.training_step(model, inputs)
    ours = torch.cat([p.grad.flatten() for p in model.parameters()]).clone()
    model.zero_grad()
    summed = 0.0
    for b in micro:
        out = model(input_ids=b["input_ids"], position_ids=b["position_ids"])
        logits = out.logits[:, :-1].reshape(-1, out.logits.shape[-1])
        summed = summed + torch.nn.functional.cross_entropy(
            logits, b["labels"][:, 1:].reshape(-1), ignore_index=-100, reduction="sum"
        )
    (summed / sum(targets)).backward()
    want = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert float((ours - want).norm() / want.norm()) < 1e-5


def test_a_ramp_needs_accumulation_one_and_epochs_of_equal_steps(tmp_path):
    lengths, data = hft.corpus()
    args = hft.training_args(str(tmp_path), gradient_accumulation_steps=2)
    with pytest.raises(ValueError, match="gradient_accumulation_steps must be 1"):
        RampTrainer(model=hft.tiny_model(), args=args, train_dataset=data,
                    batch_sampler=_sampler(lengths))  # fmt: skip
    batches = padless.hf.TrainerBatches(_sampler(lengths))
    with pytest.raises(ValueError, match="optimizer steps"):
        batches.set_epoch(1)  # the ramp is over by epoch 1: fewer, larger steps
    assert np.sum(batches.padless_sampler.step_sizes()) == len(batches.padless_sampler)
