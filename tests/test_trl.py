"""padless.hf with TRL's SFTTrainer (the real library, a tiny Llama on CPU): the settings and
preparations that would reorder or drop rows are refused before training. Training on exactly the
sampler's batches and resuming them after a SIGKILL are checked by tests/test_integrity.py."""

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
