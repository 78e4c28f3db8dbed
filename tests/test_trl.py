"""padless.hf with TRL's SFTTrainer (the real library, a tiny Llama on CPU): the settings and
preparations that would reorder or drop rows, and a collator (TRL's default included) that would
not deliver the plan's batches, are refused before training; with the collator that does, the
model trains on exactly the plan. Resuming after a SIGKILL is checked by tests/test_integrity.py."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, models  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

from padless import PackingSampler, TokenBudgetSampler  # noqa: E402
from padless.hf import PaddingFreeCollator, PadlessTrainerMixin  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import _hf_train as hft  # noqa: E402


class PadlessSFT(hft.RecordBatches, PadlessTrainerMixin, SFTTrainer):
    """TRL's SFTTrainer with padless batches, recording each micro-batch's items and loss."""


def _tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer built here (nothing downloaded): SFTTrainer wants one."""
    vocab = {f"t{i}": i for i in range(hft.VOCAB)}
    model = models.WordLevel(vocab, unk_token="t0")
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(model), pad_token="t0", eos_token="t1"
    )


def _trainer(out: Path, rows: list | None = None, save_at=(), **config) -> PadlessSFT:
    """An SFTTrainer over the tokenized corpus (or ``rows``), the sampler on the corpus lengths."""
    lengths, data = hft.corpus()
    settings = {**hft.SETTINGS, "max_length": None, **config}
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        return PadlessSFT(
            model=hft.tiny_model(),
            args=SFTConfig(str(out), **settings),
            train_dataset=Dataset.from_list(data if rows is None else rows),
            processing_class=_tokenizer(),
            data_collator=hft.with_index(PaddingFreeCollator()),
            batch_sampler=TokenBudgetSampler(lengths, max_tokens=112, seed=1),
            callbacks=[hft.SaveAt(save_at)],
        )
    finally:
        hf_logging.set_verbosity(verbosity)


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"shuffle_dataset": True}, r"cannot use shuffle_dataset=True.*Pass shuffle_dataset=False"),
        ({"packing": True, "max_length": 64}, r"cannot use TRL's packing=True.*PackingSampler"),
        (
            {"train_sampling_strategy": "group_by_length"},
            "train_sampling_strategy='group_by_length'",
        ),
    ],
)
def test_settings_that_reorder_rows_are_refused(tmp_path: Path, config, match) -> None:
    with pytest.raises(ValueError, match=match):
        _trainer(tmp_path / "x", **config)


def test_a_row_dropped_by_the_preparation_is_refused_before_training(tmp_path: Path) -> None:
    """TRL (max_length set, 1024 by default) drops a tokenized row whose labels are all -100:
    every later index would name the next row (on the old code: an IndexError mid-epoch)."""
    _, data = hft.corpus()
    rows = [dict(r, labels=list(r["input_ids"])) for r in data]
    rows[40]["labels"] = [-100] * len(rows[40]["labels"])
    with pytest.raises(ValueError, match=r"dataset has 95 items but the sampler planned 96") as err:
        _trainer(tmp_path / "x", rows=rows, max_length=1024)
    assert "SFTConfig(max_length=None)" in str(err.value)  # says what to do
    assert "dataset.filter(" in str(err.value)


def test_rows_truncated_by_the_preparation_are_refused_before_training(tmp_path: Path) -> None:
    lengths, _ = hft.corpus()
    first = int(next(i for i, n in enumerate(lengths) if n > 16))
    want = f"dataset item {first} has length 16, but the sampler planned {lengths[first]}"
    with pytest.raises(ValueError, match=want + r".*with max_length=16 it truncates"):
        _trainer(tmp_path / "x", max_length=16)


def test_lengths_in_characters_are_named_not_blamed_on_truncation(tmp_path: Path) -> None:
    """With max_length=None TRL truncates and drops nothing: a mismatch means lengths in other
    units (characters here), which the message says, with where to take token counts."""
    lengths, data = hft.corpus()
    chars = [4 * int(n) for n in lengths]  # about what counting characters gives
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with pytest.raises(ValueError, match=r"not the token counts.*characters") as err:
            PadlessSFT(
                model=hft.tiny_model(),
                args=SFTConfig(str(tmp_path / "x"), **{**hft.SETTINGS, "max_length": None}),
                train_dataset=Dataset.from_list(data),
                processing_class=_tokenizer(),
                data_collator=hft.with_index(PaddingFreeCollator()),
                batch_sampler=TokenBudgetSampler(chars, max_tokens=4 * 112, seed=1),
            )
    finally:
        hf_logging.set_verbosity(verbosity)
    assert "it truncates rows" not in str(err.value)
    assert "lengths_of(dataset, field='input_ids')" in str(err.value)


# --------------------------------------------------------------------------- the collator


def _packing_sft(out: Path, collator, model=None, **config) -> PadlessSFT:
    """An SFTTrainer over the corpus with a PackingSampler (2 rows of 48 tokens a batch)."""
    lengths, data = hft.corpus()
    settings = {**hft.SETTINGS, "max_length": None, "gradient_accumulation_steps": 1, **config}
    kw = {} if collator is None else {"data_collator": collator}
    with hft.quietly():
        return PadlessSFT(
            model=model if model is not None else hft.tiny_model(),
            args=SFTConfig(str(out), **settings),
            train_dataset=Dataset.from_list(data),
            processing_class=_tokenizer(),
            batch_sampler=PackingSampler(lengths, capacity=48, rows_per_batch=2, seed=1),
            **kw,
        )


@pytest.mark.parametrize(
    ("collator", "named", "why"),
    [
        (None, "DataCollatorForLanguageModeling (trl), the trainer's default", "a row of its own"),
        ("padding", "DataCollatorWithPadding (transformers)", "a row of its own"),
        (PaddingFreeCollator(48, rows=3), "PaddingFreeCollator", r"rows=3 \(the plan's: 2\)"),
        (PaddingFreeCollator(32, rows=2), "PaddingFreeCollator", r"capacity=32 \(the plan's: 48\)"),
        (  # it flattens the batch and pads it: 96 tokens to 100 (was accepted)
            "padding_free_multiple",
            "DataCollatorForLanguageModeling (trl)",
            r"pad_to_multiple_of=5: a batch of the plan's 96 tokens becomes 100",
        ),
    ],
    ids=["sft-default", "padding", "rows", "capacity", "padding-free-multiple"],
)
def test_a_collator_that_would_not_deliver_the_packing_plan_is_refused_when_built(
    tmp_path: Path, collator, named, why
) -> None:
    """On the old code TRL's default collator trained on padded batches (a row per sequence,
    padded to the longest) where the plan packed 2 rows of 48 tokens, and check_packed never
    ran (the collator does not pack)."""
    if collator == "padding":
        from transformers import DataCollatorWithPadding

        collator = DataCollatorWithPadding(_tokenizer())
    elif collator == "padding_free_multiple":
        from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

        collator = DataCollatorForLanguageModeling(
            pad_token_id=0, padding_free=True, pad_to_multiple_of=5
        )
    with pytest.raises(ValueError) as err:
        _packing_sft(tmp_path / "x", collator)
    message = str(err.value)
    assert re.search(f"data_collator {re.escape(named)}.* does not deliver the batches of batch_sampler "
                     r"PackingSampler \(packing\(capacity=48, rows_per_batch=2\)\)", message)  # fmt: skip
    assert re.search(why, message), message
    assert "Pass data_collator=padless.hf.PaddingFreeCollator(48, rows=2)" in message


@pytest.mark.parametrize(("multiple", "refused"), [(8, True), (4, False)])
def test_a_padding_free_multiple_is_judged_against_a_padded_plans_budget(multiple, refused):
    """TRL's padding-free collator flattens a padded plan's batch (at most max_tokens=100 real
    tokens) and pads it to its multiple: 104 under 8 (was accepted), 100 under 4."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from padless.hf import _check_collator

    sampler = TokenBudgetSampler([30, 20, 45, 12] * 10, max_tokens=100, seed=0)
    collator = DataCollatorForLanguageModeling(
        pad_token_id=0, padding_free=True, pad_to_multiple_of=multiple
    )
    if not refused:
        _check_collator(collator, sampler, trust=False, default=False)
        return
    with pytest.raises(ValueError, match="a batch of the plan's 100 tokens becomes 104"):
        _check_collator(collator, sampler, trust=False, default=False)


def test_sft_trains_exactly_the_packing_plan(tmp_path: Path) -> None:
    """With the collator that lays out the plan: every batch is the planned (2, 48) rows of the
    sampler's items, each item once, and check_packed runs (an OPT is refused before step 1)."""
    lengths, data = hft.corpus()
    trainer = _packing_sft(tmp_path / "run", hft.with_index(PaddingFreeCollator(48, rows=2)))
    with hft.quietly():
        trainer.train()
    record = trainer.record
    bare = PackingSampler(lengths, capacity=48, rows_per_batch=2, seed=1)
    expected = hft.bare_batches(lengths, trainer.args, 2, cls=PackingSampler, capacity=48,
                                rows_per_batch=2)  # fmt: skip
    assert [r["index"] for r in record] == expected[0] + expected[1]
    for epoch in range(2):
        seen = sorted(i for r in record if r["epoch"] == epoch for i in r["index"])
        assert seen == list(range(len(lengths)))
    for r in record:
        assert r["shape"] == (2, 48)
        real = [t for row in r["input_ids"] for t in row if t != 0]  # tokens are 1..VOCAB-1
        assert real == [t for i in r["index"] for t in data[i]["input_ids"]]
    assert len(bare) == len(expected[0])
    from transformers import OPTConfig, OPTForCausalLM

    config = OPTConfig(
        vocab_size=hft.VOCAB, hidden_size=16, ffn_dim=32, num_hidden_layers=1,
        num_attention_heads=2, max_position_embeddings=64, word_embed_proj_dim=16,
    )  # fmt: skip
    opt = _packing_sft(tmp_path / "opt", PaddingFreeCollator(48, rows=2), OPTForCausalLM(config))
    with pytest.raises(ValueError, match="packed documents attend to each other"):
        with hft.quietly():
            opt.train()
    assert opt.state.global_step == 0
