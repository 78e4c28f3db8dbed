"""PadlessTrainerMixin with PackedDPOMixin: TRL's DPOTrainer on a padless plan of preference
rows (a Packing spec over each pair's packed tokens, planned after TRL has tokenized the rows),
a tiny Llama built here, fp32, CPU. The batches the model receives are exactly the plan's, the
loss of each step equals TRL's unpacked DPO loss on the same pairs, and a resume from a
checkpoint continues the plan."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from trl import DPOConfig, DPOTrainer  # noqa: E402
from trl.trainer.dpo_trainer import DataCollatorForPreference  # noqa: E402

from padless import Packing, PlanSampler, TokenBudget  # noqa: E402
from padless.hf import (  # noqa: E402
    STATE_FILE,
    PackedDPOMixin,
    PadlessTrainerMixin,
    PreferenceCollator,
    pair_length,
)

sys.path.insert(0, str(Path(__file__).parent))
import _hf_train as hft  # noqa: E402
from test_trl_dpo import BETA, _model, _text_rows, _tokenizer  # noqa: E402

CAPACITY = 40
SPEC = Packing(capacity=CAPACITY, rows_per_batch=2)


class Recorded(PreferenceCollator):
    """PackedDPOMixin's collator, also handing over the rows it packed (to compare)."""

    def __call__(self, rows):
        out = super().__call__(rows)
        out["rows"] = [
            {k: list(r[k]) for k in ("prompt_ids", "chosen_ids", "rejected_ids")} for r in rows
        ]
        return out


class PlannedDPOTrainer(PadlessTrainerMixin, PackedDPOMixin, DPOTrainer):
    """Records every step's packed batch, its loss and TRL's own loss on the same pairs."""

    def _compute_loss(self, model, inputs, return_outputs):
        rows = inputs.pop("rows")
        loss = super()._compute_loss(model, inputs, return_outputs)
        with torch.no_grad():  # TRL's unpacked loss: each pair padded, prompt twice
            theirs = DPOTrainer._compute_loss(
                self, model, DataCollatorForPreference(pad_token_id=0)(rows), False
            )
        counts = inputs["executed_tokens"], inputs["logical_tokens"]
        self.seen.append((inputs["input_ids"].clone(), rows, loss.item(), theirs.item(), counts))
        return loss


def _trainer(out: Path, rows, **extra) -> PlannedDPOTrainer:
    settings = {**hft.SETTINGS, "num_train_epochs": 1, "gradient_accumulation_steps": 1}
    settings.update(extra.pop("settings", {}))
    config = DPOConfig(str(out), **settings, beta=BETA, bf16=False)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        trainer = PlannedDPOTrainer(
            model=_model(0),
            ref_model=_model(1),
            args=config,
            train_dataset=Dataset.from_list(rows),
            processing_class=_tokenizer(),
            capacity=CAPACITY,
            batch_sampler=SPEC,
            **extra,
        )
    finally:
        hf_logging.set_verbosity(verbosity)
    trainer.data_collator = Recorded(CAPACITY)
    trainer.seen = []
    return trainer


def _planned(trainer):
    """Each planned batch, packed: the plan over the tokenized rows' pair lengths."""
    data = trainer.train_dataset
    lengths = [pair_length(data[i]) for i in range(len(data))]
    sampler = PlanSampler(lengths, SPEC, seed=trainer.args.seed)
    collate = PreferenceCollator(CAPACITY)
    return [collate([data[i] for i in batch])["input_ids"] for batch in sampler]


def test_trains_on_the_plan_with_trls_loss_and_resumes(tmp_path):
    rows = _text_rows(14, seed=2)
    trainer = _trainer(tmp_path / "a", rows, callbacks=[hft.SaveAt([1])])
    planned = _planned(trainer)
    assert 2 <= len(planned) <= 4
    assert int(trainer.padless_sampler.lengths.max()) <= CAPACITY
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        trainer.train()
    finally:
        hf_logging.set_verbosity(verbosity)
    assert trainer.state.global_step == len(planned)
    got = [ids for ids, *_ in trainer.seen]
    assert len(got) == len(planned)
    for a, b in zip(got, planned, strict=True):
        assert torch.equal(a, b)  # the plan's rows, packed: pairs whole, prompts once
    for _, _, ours, theirs, (executed, logical) in trainer.seen:
        assert abs(ours - theirs) < 1e-5  # TRL's padded DPO loss on the same pairs
        assert executed < logical  # each pair's prompt runs once
    served = sorted(json.dumps(r) for _, pairs, *_ in trainer.seen for r in pairs)
    data = trainer.train_dataset
    assert served == sorted(
        json.dumps({k: list(data[i][k]) for k in ("prompt_ids", "chosen_ids", "rejected_ids")})
        for i in range(len(data))
    )  # every pair once
    checkpoint = tmp_path / "a" / "checkpoint-1"
    assert (checkpoint / STATE_FILE).exists()

    again = _trainer(tmp_path / "b", rows)
    hf_logging.set_verbosity_error()
    try:
        again.train(resume_from_checkpoint=str(checkpoint))
    finally:
        hf_logging.set_verbosity(verbosity)
    assert again.state.global_step == len(planned)
    resumed = [ids for ids, *_ in again.seen]
    assert len(resumed) == len(planned) - 1
    for a, b in zip(resumed, planned[1:], strict=True):
        assert torch.equal(a, b)  # the rest of the plan, nothing again


class WrongOrder(PackedDPOMixin, PadlessTrainerMixin, DPOTrainer):
    """The mixins the other way round."""


@pytest.mark.parametrize(
    ("cls", "spec", "capacity", "match"),
    [
        (WrongOrder, SPEC, CAPACITY, "PadlessTrainerMixin, PackedDPOMixin, DPOTrainer"),
        (PlannedDPOTrainer, SPEC, 64, "cuts other rows than planned: capacity=64"),
        (PlannedDPOTrainer, TokenBudget(max_tokens=64), CAPACITY, "only a packing plan"),
        (
            PlannedDPOTrainer,
            Packing(capacity=5),
            5,
            "cannot plan the dataset the trainer prepared.*exceeds capacity=5",
        ),
    ],
)
def test_combinations_that_cannot_deliver_the_plan_are_refused(
    tmp_path, cls, spec, capacity, match
):
    with pytest.raises((TypeError, ValueError), match=match):
        cls(
            model=_model(0),
            ref_model=_model(1),
            args=DPOConfig(str(tmp_path), **hft.SETTINGS, beta=BETA, bf16=False),
            train_dataset=Dataset.from_list(_text_rows(4, seed=0)),
            processing_class=_tokenizer(),
            capacity=capacity,
            batch_sampler=spec,
        )


def test_a_spec_under_any_trainer_is_planned_over_its_dataset(tmp_path):
    """Not DPO only: a plain Trainer with batch_sampler=a spec plans it over train_dataset's
    lengths by length_field, with the trainer's seed; the DataLoader yields that plan."""
    from transformers import Trainer

    lengths, data = hft.corpus(40, seed=4)
    spec = TokenBudget(max_tokens=96)

    class SpecTrainer(PadlessTrainerMixin, Trainer):
        pass

    args = hft.training_args(str(tmp_path), seed=5)
    trainer = SpecTrainer(
        model=hft.tiny_model(), args=args, train_dataset=data, batch_sampler=spec,
        data_collator=lambda rows: [r["index"] for r in rows],
    )  # fmt: skip
    assert trainer.padless_sampler.lengths.tolist() == lengths.tolist()
    expected = [list(b) for b in PlanSampler(lengths, spec, seed=5)]
    assert list(trainer.get_train_dataloader()) == expected
    with pytest.raises(ValueError, match="cuts sequences into pieces"):
        SpecTrainer(
            model=hft.tiny_model(), args=args, train_dataset=data,
            batch_sampler=Packing(capacity=16, oversize="split"),
            data_collator=lambda rows: rows, trust_collator=True,
        )  # fmt: skip


def test_packed_dpo_under_flex_attention_equals_trls_loss(tmp_path):
    """PackedDPOMixin(attention_mask="flex"): the pairs' shared-prefix mask as a BlockMask, fed
    to flex-attention models (traced with torch.compile(backend="eager"), flex attention's
    unfused path, as in tests/test_flex_mask.py); the loss equals TRL's padded DPO loss."""
    from test_trl_dpo import _pairs, _trainer
    from torch.nn.attention.flex_attention import BlockMask

    class FlexDPOTrainer(PackedDPOMixin, DPOTrainer):
        pass

    def flex(seed):
        model = _model(seed)
        model.set_attn_implementation("flex_attention")
        return model

    def build(policy, ref):
        return FlexDPOTrainer(
            model=policy, ref_model=ref, processing_class=_tokenizer(),
            args=DPOConfig(str(tmp_path), **hft.SETTINGS, beta=BETA, bf16=False),
            train_dataset=Dataset.from_list(_text_rows(2, seed=0)),
            capacity=CAPACITY, attention_mask="flex",
        )  # fmt: skip

    with pytest.raises(ValueError, match="attn_implementation='flex_attention'"):
        build(_model(0), _model(1))
    ours = build(flex(0), flex(1))
    rows = _pairs(5, seed=4)
    batch = ours.data_collator(rows)
    assert isinstance(batch["attention_mask"], BlockMask)
    assert batch["input_ids"].shape[0] >= 2
    ours.ref_model = torch.compile(ours.ref_model, backend="eager")
    policy = torch.compile(ours.model, backend="eager")
    with torch.no_grad():  # torch 2.13 has no flex-attention backward on CPU
        loss = ours._compute_loss(policy, batch, False)
    theirs = _trainer(tmp_path / "trl")  # TRL's DPOTrainer, the same weights in sdpa
    expected = theirs._compute_loss(
        theirs.model, DataCollatorForPreference(pad_token_id=0)(rows), False
    )
    assert abs(loss.item() - expected.item()) < 1e-5


def test_a_step_of_unequal_micro_batches_is_the_mean_over_its_pairs(tmp_path):
    """Gradient accumulation over planned batches of different pair counts: the step's gradient
    is that of TRL's DPO loss over all of the step's pairs at once (not a mean of the
    micro-batches' means, which counts a pair of the smaller batch more)."""
    rows = _text_rows(14, seed=2)
    trainer = _trainer(tmp_path, rows, settings={"gradient_accumulation_steps": 2})
    batches = list(trainer.get_train_dataloader())[:2]
    counts = [len(b["rows"]) for b in batches]
    assert counts[0] != counts[1], counts  # the plan packs as many pairs as fit
    model = trainer.model
    model.train()
    samples, _ = trainer.get_batch_samples(iter(batches), 2, torch.device("cpu"))
    trainer.current_gradient_accumulation_steps = len(samples)  # as the training loop sets it
    model.zero_grad()
    for batch in samples:
        trainer.training_step(model, dict(batch), None)
    ours = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    every = [r for b in batches for r in b["rows"]]
    loss = DPOTrainer._compute_loss(trainer, model, DataCollatorForPreference(0)(every), False)
    loss.backward()
    for got, want in zip(ours, (p.grad for p in model.parameters()), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_a_ramps_step_is_the_mean_over_its_pairs(tmp_path):
    """A sampler with batches_per_step under PackedDPOMixin: the micro-batches of a step are
    weighted by their pairs (loss_targets defaults to one per row), not by their tokens."""
    from padless import Schedule
    from padless.hf import MICRO_BATCHES

    rows = _text_rows(14, seed=2)
    data = _trainer(tmp_path / "tokenized", rows).train_dataset  # TRL's tokenized rows
    lengths = [pair_length(data[i]) for i in range(len(data))]
    sampler = PlanSampler(lengths, SPEC, seed=0, batches_per_step=Schedule.constant(2))
    settings = {**hft.SETTINGS, "gradient_accumulation_steps": 1}
    config = DPOConfig(str(tmp_path / "ramp"), **settings, beta=BETA, bf16=False)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        trainer = PlannedDPOTrainer(
            model=_model(0), ref_model=_model(1), args=config, train_dataset=Dataset.from_list(rows),
            processing_class=_tokenizer(), capacity=CAPACITY, batch_sampler=sampler,
        )  # fmt: skip
    finally:
        hf_logging.set_verbosity(verbosity)
    trainer.data_collator = Recorded(CAPACITY)
    trainer.seen = []
    step = next(iter(trainer.get_train_dataloader()))
    micro = step[MICRO_BATCHES]
    counts = [len(b["rows"]) for b in micro]
    assert len(counts) == 2 and counts[0] != counts[1], counts
    every = [r for b in micro for r in b["rows"]]
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 1
    model.zero_grad()
    trainer.training_step(model, step, None)
    ours = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    loss = DPOTrainer._compute_loss(trainer, model, DataCollatorForPreference(0)(every), False)
    loss.backward()
    for got, want in zip(ours, (p.grad for p in model.parameters()), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def _mask_ignored(module, query, key, value, attention_mask, **kwargs):
    """An attention that ignores the 4-D mask it is given (causal over the whole row)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, None, **{**kwargs, "is_causal": True})


def test_a_model_that_lets_packed_pairs_see_each_other_is_refused_before_training(tmp_path):
    """PackedDPOMixin, alone or under PadlessTrainerMixin, checks before the first step that the
    model applies the pairs' shared-prefix mask; check_packed=False skips the check."""
    from test_trl_dpo import PackedDPOTrainer
    from transformers import AttentionInterface

    AttentionInterface.register("padless_test_mask_ignored", _mask_ignored)

    def leaky(seed):
        model = _model(seed)
        model.set_attn_implementation("padless_test_mask_ignored")
        return model

    rows = _text_rows(4, seed=0)
    settings = {**hft.SETTINGS, "gradient_accumulation_steps": 1, "max_steps": 1}
    config = DPOConfig(str(tmp_path), **settings, beta=BETA, bf16=False)
    common = {"args": config, "train_dataset": Dataset.from_list(rows), "capacity": CAPACITY}
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        for cls, extra, who in (
            (PackedDPOTrainer, {}, "PackedDPOMixin"),
            (PlannedDPOTrainer, {"batch_sampler": SPEC}, "PadlessTrainerMixin"),
        ):
            trainer = cls(model=leaky(0), ref_model=_model(1), processing_class=_tokenizer(),
                          **common, **extra)  # fmt: skip
            with pytest.raises(ValueError, match=f"shared-prefix mask.*{who} checks this"):
                trainer.train()
            assert trainer.state.global_step == 0
        trainer = PackedDPOTrainer(
            model=leaky(0), ref_model=_model(1), processing_class=_tokenizer(), **common,
            check_packed=False,
        )  # fmt: skip
        trainer.train()
        assert trainer.state.global_step == 1
    finally:
        hf_logging.set_verbosity(verbosity)
    # the same model under sdpa keeps pairs apart: the check returns its (zero) difference
    assert PreferenceCollator(CAPACITY).check_model(_model(0)) < 1e-5
    with pytest.raises(TypeError, match="model must be a torch causal LM"):
        PreferenceCollator(CAPACITY).check_model("gpt2")


def test_two_processes_step_on_the_mean_over_all_their_pairs(tmp_path):
    """DDP over two processes (torchrun, gloo), accumulation 2, planned batches of different
    pair counts: the first optimizer step's gradient, on both processes, is that of TRL's DPO
    loss over the four micro-batches' pairs at once; the logged rewards and log-probs are TRL's
    means over both processes' pairs (gathering the values of unequal counts broke the run)."""
    from _procs import torchrun

    torchrun("_dpo_ddp.py", tmp_path, timeout=240)
    runs = [torch.load(tmp_path / f"dpo{r}.pt") for r in (0, 1)]
    counts = [len(rows) for run in runs for rows in run["micro_batches"]]
    assert len(counts) == 4 and len(set(counts)) > 1, counts  # unequal: the weighting mattered
    for a, b in zip(runs[0]["grads"], runs[1]["grads"], strict=True):
        torch.testing.assert_close(a, b)  # DDP reduced one gradient
    trainer = _trainer(tmp_path / "reference", _text_rows(14, seed=2))
    every = [r for run in runs for rows in run["micro_batches"] for r in rows]
    model = trainer.model
    model.train()
    model.zero_grad()
    DPOTrainer._compute_loss(trainer, model, DataCollatorForPreference(0)(every), False).backward()
    for got, p in zip(runs[0]["grads"], model.parameters(), strict=True):
        torch.testing.assert_close(got, p.grad, rtol=1e-4, atol=1e-6)
    # the metrics of each micro-batch: TRL's, over both processes' pairs of that micro-batch
    for j in range(2):
        trainer._metrics["train"].clear()
        rows = runs[0]["micro_batches"][j] + runs[1]["micro_batches"][j]
        with torch.no_grad():
            DPOTrainer._compute_loss(trainer, model, DataCollatorForPreference(0)(rows), False)
        theirs = trainer._metrics["train"]
        shared = list(runs[0]["metrics"][j])
        assert len(shared) == 6 and all(k in theirs for k in shared), (shared, list(theirs))
        for name in shared:
            for run in runs:
                assert run["metrics"][j][name] == pytest.approx(theirs[name][0], abs=1e-5), name


def test_the_packed_check_before_training_is_one_rule_for_both_mixins(caplog):
    """A collator's own check (pairs) or check_packed: a leak refuses training naming the
    mixin that checked; a model the check cannot call is a warning, under either mixin."""
    import logging

    from padless.hf import _packed_preflight

    class Checked(PreferenceCollator):
        def __init__(self, error):
            super().__init__(CAPACITY)
            self.error = error

        def check_model(self, model):
            raise self.error

    with pytest.raises(ValueError, match=r"moved \(PackedDPOMixin checks this before training"):
        _packed_preflight(_model(0), Checked(ValueError("moved")), "PackedDPOMixin")
    with caplog.at_level(logging.WARNING, logger="padless.hf"):
        _packed_preflight(_model(0), Checked(RuntimeError("no logits")), "PackedDPOMixin")
    assert "could not check" in caplog.text and "no logits" in caplog.text
    _packed_preflight(_model(0), None, "PadlessTrainerMixin")  # nothing packs: nothing to check
