"""Train a tiny Llama with ``PadlessTrainerMixin`` and record every batch; resume from checkpoints.

Imported by tests/test_hf.py and tests/test_trl.py (one process; two processes, killed and
resumed, are tests/test_integrity.py's).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from transformers.utils import logging as hf_logging

from padless import TokenBudgetSampler
from padless.hf import PaddingFreeCollator, PadlessTrainerMixin

VOCAB = 48


class SaveAt(TrainerCallback):
    """Save checkpoints after exactly these global steps (saving every step is slow)."""

    def __init__(self, steps: Any) -> None:
        self.steps = set(steps)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step in self.steps:
            control.should_save = True
        return control


def corpus(n: int = 96, seed: int = 0) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Long-tailed token lengths (2..40) and HF-style features that carry their index."""
    rs = np.random.default_rng(seed)
    lengths = np.minimum(rs.lognormal(2.2, 0.6, n).astype(np.int64) + 2, 40)
    data = [
        {"input_ids": rs.integers(1, VOCAB, int(k)).tolist(), "index": i}
        for i, k in enumerate(lengths)
    ]
    return lengths, data


def with_index(collator: Any) -> Any:
    """``collator`` that also carries the items' indices along (to record them).

    The result is an instance of a subclass of the collator's class, with the same settings, so
    the trainer judges it as the collator it is (a wrapper of another class would be a collator
    padless does not know).
    """
    base = type(collator)

    def call(self: Any, features: list[Any]) -> dict[str, Any]:
        out = dict(base.__call__(self, features))
        out["index"] = torch.tensor([_unwrapped(f)["index"] for f in features])
        return out

    indexed = type(base.__name__, (base,), {"__call__": call, "__module__": base.__module__})
    out = copy.copy(collator)
    out.__class__ = indexed
    return out


def _unwrapped(feature: Any) -> Any:
    """A feature, out of a capacity warm-up's ScheduledPiece wrapper."""
    return getattr(feature, "item", feature)


class RecordBatches:
    """Mixed in first: records, per micro-batch, the step, the items and the loss."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.record: list[dict[str, Any]] = []

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        index = inputs.pop("index").tolist()
        ids = inputs["input_ids"]
        mask = inputs.get("attention_mask")
        loss = super().training_step(model, inputs, num_items_in_batch)
        self.record.append(
            {
                "step": self.state.global_step,
                "epoch": self.padless_sampler.epoch,
                "index": index,
                "loss": float(loss),
                "shape": tuple(ids.shape),  # what the model received
                "input_ids": ids.tolist(),
                "attention_mask": None if mask is None else mask.tolist(),
            }
        )
        return loss


class RecordingTrainer(RecordBatches, PadlessTrainerMixin, Trainer):
    """A padless Trainer that records its batches."""


def assert_same_weights(theirs: Any, ours: Any, start: Any, atol: float = 1e-5) -> None:
    """``ours`` trained to ``theirs``'s weights (within ``atol``), away from ``start``'s."""
    for a, b in zip(theirs.parameters(), ours.parameters(), strict=True):
        assert torch.allclose(a, b, atol=atol)
    moved = [
        not torch.equal(a, b) for a, b in zip(start.parameters(), ours.parameters(), strict=True)
    ]
    assert any(moved)  # it trained


def tiny_model(seed: int = 0, **config: Any) -> LlamaForCausalLM:
    """A 2-layer Llama of random weights from ``seed`` (no downloads); ``config`` overrides
    the small defaults (``attn_implementation``, sizes, token ids)."""
    torch.manual_seed(seed)
    settings: dict[str, Any] = {
        "vocab_size": VOCAB,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
        "use_cache": False,
    }
    return LlamaForCausalLM(LlamaConfig(**{**settings, **config}))


SETTINGS: dict[str, Any] = {
    "num_train_epochs": 2,
    "gradient_accumulation_steps": 2,
    "learning_rate": 3e-3,
    "optim": "adamw_torch",
    "save_strategy": "no",
    "logging_strategy": "no",
    "report_to": [],
    "use_cpu": True,
    "remove_unused_columns": False,
    "seed": 0,
    "disable_tqdm": True,
}
"""The TrainingArguments of every test run (tests/test_trl.py adds TRL's own)."""


def training_args(out: str, **overrides: Any) -> TrainingArguments:
    return TrainingArguments(out, **{**SETTINGS, **overrides})


def make_sampler(
    lengths: np.ndarray, args: TrainingArguments, cls: Any = TokenBudgetSampler, **kw: Any
) -> Any:
    settings: dict[str, Any] = {"seed": 1}
    if cls is TokenBudgetSampler:
        settings["max_tokens"] = 104  # 14 batches: 7 per process of 2
    settings.update(kw)
    return cls(lengths, rank=args.process_index, world_size=args.world_size, **settings)


def train(
    out: str,
    *,
    resume: str | None = None,
    collator: Any = None,
    sampler_cls: Any = TokenBudgetSampler,
    sampler_kw: dict[str, Any] | None = None,
    save_at: Any = (),
    **overrides: Any,
) -> tuple[RecordingTrainer, list[dict[str, Any]]]:
    """One run (fresh model, fresh sampler); returns the trainer and its record."""
    with quietly():
        return _train(out, resume, collator, sampler_cls, sampler_kw, save_at, overrides)


@contextlib.contextmanager
def quietly() -> Iterator[None]:
    """One torch thread (a tiny model: more threads only contend), no HF logs or bars."""
    threads, verbosity = torch.get_num_threads(), hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _train(
    out: str,
    resume: str | None,
    collator: Any,
    sampler_cls: Any,
    sampler_kw: dict[str, Any] | None,
    save_at: Any,
    overrides: dict[str, Any],
) -> tuple[RecordingTrainer, list[dict[str, Any]]]:
    lengths, data = corpus()
    args = training_args(out, **overrides)
    sampler = make_sampler(lengths, args, sampler_cls, **(sampler_kw or {}))
    trainer = RecordingTrainer(
        model=tiny_model(),
        args=args,
        train_dataset=data,
        data_collator=with_index(collator or PaddingFreeCollator()),
        batch_sampler=sampler,
        callbacks=[SaveAt(save_at)],
    )
    trainer.train(resume_from_checkpoint=resume)
    return trainer, trainer.record


def bare_batches(
    lengths: np.ndarray, args: TrainingArguments, epochs: int, **kw: Any
) -> list[list[list[int]]]:
    """What the bare sampler yields on this rank, epoch by epoch."""
    sampler = make_sampler(lengths, args, **kw)
    out = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        out.append([list(b) for b in sampler])
    return out
