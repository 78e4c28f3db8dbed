"""padless.hf with TRL's SFTTrainer (the real library, a tiny Llama on CPU): the mixin trains on
exactly the sampler's batches, in its order, and resumes exactly from a mid-epoch checkpoint."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, models  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

from padless import TokenBudgetSampler  # noqa: E402
from padless.hf import STATE_FILE, PaddingFreeCollator, PadlessTrainerMixin  # noqa: E402

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


def _train(out: Path, resume: str | None = None, save_at: tuple[int, ...] = ()) -> PadlessSFT:
    lengths, data = hft.corpus()
    args = SFTConfig(
        str(out),
        num_train_epochs=2,
        gradient_accumulation_steps=2,
        learning_rate=3e-3,
        optim="adamw_torch",
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        remove_unused_columns=False,
        seed=0,
        disable_tqdm=True,
        max_length=None,
    )
    trainer = PadlessSFT(
        model=hft.tiny_model(),
        args=args,
        train_dataset=Dataset.from_list(data),
        processing_class=_tokenizer(),
        data_collator=hft.WithIndex(PaddingFreeCollator()),
        batch_sampler=TokenBudgetSampler(lengths, max_tokens=112, seed=1),
        callbacks=[hft.SaveAt(save_at)],
    )
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        trainer.train(resume_from_checkpoint=resume)
    finally:
        hf_logging.set_verbosity(verbosity)
    return trainer


def test_sft_trainer_trains_on_the_sampler_batches_and_resumes_exactly(tmp_path: Path) -> None:
    lengths, _ = hft.corpus()
    full = _train(tmp_path / "full", save_at=(3,))
    sampler = TokenBudgetSampler(lengths, max_tokens=112, seed=1)
    bare = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        bare += [list(b) for b in sampler]
    assert [r["index"] for r in full.record] == bare
    assert (tmp_path / "full" / "checkpoint-3" / STATE_FILE).exists()
    resumed = _train(tmp_path / "resumed", resume=str(tmp_path / "full" / "checkpoint-3"))
    tail = [r for r in full.record if r["step"] >= 3]
    assert [r["index"] for r in resumed.record] == [r["index"] for r in tail]
    assert [r["loss"] for r in resumed.record] == pytest.approx([r["loss"] for r in tail], abs=1e-6)
