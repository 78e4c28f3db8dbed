"""DPO on packed pairs equals TRL's DPO (the real DPOTrainer, a tiny Llama built here, fp32, CPU):
the loss of padless's shared-prefix packed batch (each pair's prompt once, chosen and rejected
after it) and its gradients equal those TRL's own padded batch gives on the same pairs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("trl")
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, models  # noqa: E402
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from trl import DPOConfig, DPOTrainer  # noqa: E402
from trl.trainer.dpo_trainer import DataCollatorForPreference  # noqa: E402

from padless import plan_groups  # noqa: E402
from padless.hf import PackedDPOMixin  # noqa: E402
from padless.torch import (  # noqa: E402
    PreferencePairs,
    collate_groups,
    completion_logprobs,
    dpo_loss,
)

sys.path.insert(0, str(Path(__file__).parent))
import _hf_train as hft  # noqa: E402

BETA = 0.3


def _model(seed: int) -> LlamaForCausalLM:
    return hft.tiny_model(seed, attn_implementation="sdpa")


class PackedDPOTrainer(PackedDPOMixin, DPOTrainer):
    """TRL's DPOTrainer on packed pairs."""


def _tokenizer() -> PreTrainedTokenizerFast:
    vocab = {f"t{i}": i for i in range(hft.VOCAB)}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")),
        pad_token="t0",
        eos_token="t1",
    )


def _trainer(out: Path) -> DPOTrainer:
    tok = _tokenizer()
    rows = [{"prompt": "t3 t4", "chosen": " t5", "rejected": " t6"}] * 2
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        return DPOTrainer(
            model=_model(0),
            ref_model=_model(1),  # another model: the log-ratios are not all 0
            args=DPOConfig(str(out), **{**hft.SETTINGS, "beta": BETA, "bf16": False}),
            train_dataset=Dataset.from_list(rows),
            processing_class=tok,
        )
    finally:
        hf_logging.set_verbosity(verbosity)


def _pairs(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)

    def ids(lo: int, hi: int) -> list[int]:
        return rng.integers(2, hft.VOCAB, int(rng.integers(lo, hi))).tolist()

    return [
        {"prompt_ids": ids(2, 8), "chosen_ids": ids(1, 7), "rejected_ids": ids(1, 7)}
        for _ in range(n)
    ]


def _packed_loss(model, ref, rows, capacity):
    pairs = PreferencePairs(rows)
    plan = plan_groups(
        pairs.lengths, pairs.groups, capacity=capacity, prefix=pairs.prefix, rows_per_batch=8
    )
    assert len(plan) == 1  # one batch holds every pair: the same loss as TRL's batch
    collate = collate_groups(capacity)
    batch = collate([pairs[i] for i in plan[0]])
    assert batch["input_ids"].shape[0] > 1 or batch["group_ids"].numel() > 1
    args = {k: batch[k] for k in ("input_ids", "position_ids", "attention_mask")}
    logps = completion_logprobs(model(**args).logits, batch)
    with torch.no_grad():
        ref_logps = completion_logprobs(ref(**args).logits, batch)
    # the plan may order the pairs differently from the rows: DPO's mean does not care
    return dpo_loss(batch, logps, ref_logps, beta=BETA), batch


def test_packed_dpo_loss_and_gradients_equal_trls(tmp_path):
    trainer = _trainer(tmp_path / "dpo")
    rows = _pairs(6, seed=0)
    model, ref = trainer.model, trainer.ref_model
    model.eval()  # no dropout in either; the same forward
    ref.eval()

    inputs = DataCollatorForPreference(pad_token_id=0)(rows)
    theirs = trainer._compute_loss(model, inputs, False)
    theirs.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    ours, batch = _packed_loss(model, ref, rows, capacity=32)
    ours.backward()
    assert abs(ours.item() - theirs.item()) < 1e-5
    for g, p in zip(grads, model.parameters(), strict=True):
        assert torch.allclose(g, p.grad, atol=1e-5)
    # prompts once: fewer tokens run than TRL's two sequences per pair
    assert batch["executed_tokens"] < batch["logical_tokens"]
    assert batch["loss_tokens"] == sum(len(r["chosen_ids"]) + len(r["rejected_ids"]) for r in rows)


def test_dpo_loss_refuses_groups_that_are_not_pairs():
    batch = collate_groups(16)(
        [{"group": 0, "prompt_ids": [2], "completion_ids": [3]} for _ in range(3)]
    )
    with pytest.raises(ValueError, match="groups of two completions"):
        dpo_loss(batch, torch.zeros(3), torch.zeros(3))


def _text_rows(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)

    def words(lo: int, hi: int) -> str:
        return " ".join(f"t{t}" for t in rng.integers(2, hft.VOCAB, int(rng.integers(lo, hi))))

    return [
        {"prompt": words(2, 8), "chosen": " " + words(1, 6), "rejected": " " + words(1, 6)}
        for _ in range(n)
    ]


def _train(cls, out: Path, rows: list[dict], **extra) -> DPOTrainer:
    settings = {**hft.SETTINGS, "num_train_epochs": 1, "gradient_accumulation_steps": 1}
    config = DPOConfig(str(out), **settings, beta=BETA, bf16=False, per_device_train_batch_size=4)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        trainer = cls(
            model=_model(0),
            ref_model=_model(1),
            args=config,
            train_dataset=Dataset.from_list(rows),
            processing_class=_tokenizer(),
            **extra,
        )
        trainer.train()
        return trainer
    finally:
        hf_logging.set_verbosity(verbosity)


def test_dpotrainer_on_packed_pairs_trains_to_trls_weights(tmp_path):
    """The same pairs, seed and steps: TRL's padded DPOTrainer and the packed one end with the
    same weights (each step's loss and gradient equal)."""
    rows = _text_rows(12, seed=1)
    theirs = _train(DPOTrainer, tmp_path / "padded", rows)
    ours = _train(PackedDPOTrainer, tmp_path / "packed", rows, capacity=48)
    assert ours.state.global_step == theirs.state.global_step == 3
    hft.assert_same_weights(theirs.model, ours.model, _model(0))


def _built(cls, out: Path, rows: list[dict], *, tok=None, config=None, **extra) -> DPOTrainer:
    """A DPO trainer of ``cls`` over ``rows`` (models 0 and 1), as TRL builds it."""
    return cls(
        model=_model(0),
        ref_model=_model(1),
        args=DPOConfig(str(out), **{**hft.SETTINGS, **(config or {})}, bf16=False),
        train_dataset=Dataset.from_list(rows),
        processing_class=_tokenizer() if tok is None else tok,
        **extra,
    )


@pytest.mark.parametrize(
    ("extra", "config", "match"),
    [
        ({}, {"loss_type": ["hinge"]}, "loss_type=\\['hinge'\\] is not supported"),
        ({}, {"ld_alpha": 0.5}, "ld_alpha=0.5"),
        (
            {"data_collator": DataCollatorForPreference(pad_token_id=0)},
            {},
            "data_collator must be None",
        ),
    ],
)
def test_settings_the_packed_loss_does_not_implement_are_refused(tmp_path, extra, config, match):
    with pytest.raises(ValueError, match=match):
        _built(
            PackedDPOTrainer, tmp_path, _text_rows(2, seed=0), config=config, capacity=48, **extra
        )


def test_a_pair_trl_would_truncate_is_refused_when_built(tmp_path):
    """TRL truncates prompt + completion to DPOConfig.max_length; the packed rows hold whole
    pairs (they trained other tokens than TRL's: the loss differed, nothing was refused)."""
    from tokenizers import pre_tokenizers

    tok = _tokenizer()
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    rows = [
        {"prompt": "t2 t3", "chosen": " t4", "rejected": " t5"},
        {"prompt": "t2 t3", "chosen": " t4 t5 t6 t7 t8", "rejected": " t9"},
    ]

    def build(max_length):
        config = {"max_length": max_length}
        return _built(PackedDPOTrainer, tmp_path, rows, tok=tok, config=config, capacity=48)

    with pytest.raises(ValueError, match=r"pair 1: .*chosen completion hold 8 tokens, more than "):
        build(6)
    build(None)  # whole pairs, bounded by the capacity
    build(8)


def test_loss_weights_weigh_the_packed_loss_as_trls(tmp_path):
    """DPOConfig(loss_weights=[2.0]): TRL doubles the sigmoid loss; the packed loss ignored it
    (the logged loss halved, and so the gradient under SGD)."""
    rows = _text_rows(4, seed=3)
    losses = []
    for cls, extra in ((DPOTrainer, {}), (PackedDPOTrainer, {"capacity": 48})):
        config = {"per_device_train_batch_size": 4, "loss_weights": [2.0], "beta": BETA}
        trainer = _built(cls, tmp_path / cls.__name__, rows, config=config, **extra)
        trainer.model.eval()
        batch = next(iter(trainer.get_train_dataloader()))
        losses.append(trainer._compute_loss(trainer.model, batch, False).item())
    assert abs(losses[0] - losses[1]) < 1e-5


def test_a_packing_plan_of_another_capacity_names_packed_dpo_capacity(tmp_path):
    """The refusal said to pass a PaddingFreeCollator, which PackedDPOMixin refuses."""
    from padless import Packing
    from padless.hf import PadlessTrainerMixin

    class Planned(PadlessTrainerMixin, PackedDPOMixin, DPOTrainer):
        pass

    with pytest.raises(ValueError, match="Pass capacity=48 to PackedDPOMixin"):
        _built(
            Planned,
            tmp_path,
            _text_rows(8, seed=0),
            config={"remove_unused_columns": False},
            batch_sampler=Packing(capacity=48, rows_per_batch=2),
            capacity=32,
        )


def test_a_packing_sampler_over_pair_rows_gives_the_collator_its_planned_rows():
    """A TRL preference row is one group: PackingSampler over rows of P + C + R tokens plans
    the pairs (resumable, per rank, per epoch), and PreferenceCollator packs each batch into
    exactly the planned rows."""
    from padless import PackingSampler, plan_packing
    from padless.hf import PreferenceCollator

    rows = _pairs(40, seed=3)
    lengths = [len(r["prompt_ids"]) + len(r["chosen_ids"]) + len(r["rejected_ids"]) for r in rows]
    sampler = PackingSampler(lengths, capacity=40, rows_per_batch=3, seed=1)
    collate = PreferenceCollator(40)
    plan = plan_packing(lengths, capacity=40, rows_per_batch=3, seed=1)
    row_of = {int(i): r for r, items in enumerate(plan.rows) for i in items}
    seen = []
    for batch_idx in sampler:
        batch = collate([rows[i] for i in batch_idx])
        # the collate's rows: each pair's row from where its chosen completion's targets lie
        got = (batch["target_index"][batch["completion_loss_tokens"].cumsum(0) - 1] // 40)[0::2]
        planned = [row_of[i] for i in batch_idx]
        assert batch["input_ids"].shape == (len(set(planned)), 40)
        assert len(set(zip(got.tolist(), planned, strict=True))) == len(set(planned))
        assert batch["executed_tokens"] == sum(lengths[i] for i in batch_idx)
        assert batch["loss_tokens"] == sum(
            lengths[i] - len(rows[i]["prompt_ids"]) for i in batch_idx
        )
        seen.extend(batch_idx)
    assert sorted(seen) == list(range(len(rows)))
