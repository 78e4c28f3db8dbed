"""The integrity runner: every recipe trains a tiny recording model, whole and killed, in fresh processes.

``python tests/_integrity.py OUT [--fuzz] [RECIPE ...]`` imports the libraries once, then forks
one child per run ("leg") of each recipe (two for two ranks, with torchrun's environment) from a
parent that has trained nothing: a fresh process for every leg, without paying the imports
again; two legs run at a time. Legs of a recipe with kill points ``k0 < k1 < ...``
(:func:`kill_points`: mid-epoch 0 and epoch 0's last step; ``--fuzz``: seven):

- ``full``: two epochs, uninterrupted;
- ``run0``: from scratch, a checkpoint after step ``k0``, then ``SIGKILL`` (by itself);
- ``run1``: resumed from that checkpoint, a checkpoint after ``k1``, ``SIGKILL``; and so on;
- the last ``run``: resumed from the last checkpoint, to the end.

So the runs together must be ``full``, and both the plan. The model (a tiny Llama with dropout)
records every training forward (``OUT/<recipe>/<leg>.rank<r>.jsonl``, one line appended and
flushed per step, so a kill loses nothing trained): the dataset indices recovered from the
tokens (item ``i``'s tokens are all ``i + 2``), the shape, the spans it attends within (restarts
of ``position_ids``, else the attention mask), the loss. ``OUT/status.json`` says how each leg
ended; a leg's process group is killed once it ends (its DataLoader workers too).

Recipes with ``extra={"tokens": True}`` train through :class:`padless.torch.TokenDataset`: the
corpus is written once as a Megatron pair (``OUT/corpus.idx`` + ``.bin``, :func:`write_corpus`)
by the parent before any leg forks, and the dataset's ``__getitems__`` builds each planned batch
from it (the DataLoader's collate is the identity).

Refusals (``REFUSALS``): settings that would train on other data must fail before the first
forward, with a ``ValueError``/``TypeError`` (``OUT/refuse/<name>.rank0.error``).

tests/test_integrity.py runs this once per session and checks the records against the bare
samplers (:func:`expected`).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

N = 160  # items; item i's tokens are all i + 2 (0 pads, 1 is the tokenizer's eos)
VOCAB = N + 2
LENGTHS = np.random.default_rng(24).integers(2, 41, N)
MAX_TOKENS = 384
CAPACITY, ROWS = 128, 3
EPOCHS = 2
MARK = "PADLESS_INTEGRITY_RUN"  # in the environment of every process the runner starts


def tokens(i: int) -> list[int]:
    return [i + 2] * int(LENGTHS[i])


@dataclass(frozen=True)
class Recipe:
    """One way to train: the family's runner, the sampler, the collate, the world."""

    family: str  # hf, trl, lightning, loop, stream
    sampler: str = "budget"  # budget, packing (a PlanSampler) or stream (a Packing spec)
    collate: str = "padded"  # padded (a row per item), flat (one row), rows (packed rows)
    world: int = 1
    workers: int = 0
    accumulate: int = 1
    multiple: int = 1  # the plan's pad_to_multiple_of
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def budget(self) -> tuple[str, int, int]:
        """``("tokens", max_tokens, multiple)`` or ``("rows", capacity, rows_per_batch)``."""
        if self.sampler == "budget":
            return ("tokens", MAX_TOKENS, self.multiple)
        return ("rows", CAPACITY, ROWS)


RECIPES: dict[str, Recipe] = {
    "hf-padded": Recipe("hf", accumulate=2),
    "hf-flat": Recipe("hf", collate="flat"),
    "hf-packing": Recipe("hf", sampler="packing", collate="rows"),
    "hf-flat-ddp": Recipe("hf", collate="flat", world=2),
    # killed while checkpoint-k1 is written: resume_from_checkpoint=True takes k0 (item 9)
    "hf-torn-checkpoint": Recipe("hf", collate="flat", extra={"torn": True}),
    "trl": Recipe("trl", collate="flat"),
    "lightning": Recipe("lightning", workers=2),
    # no workers under DDP: a DataLoader worker forked beside gloo's threads can deadlock in
    # CPython's after-fork (tests/_lightning_train.py); "lightning" has 2 workers
    "lightning-ddp": Recipe("lightning", world=2),
    "torchdata": Recipe("loop", workers=2, multiple=8, extra={"balance": True}),
    # TokenDataset over the corpus as a Megatron pair (written once, :func:`write_corpus`):
    # __getitems__ serves each planned batch whole, in 2 workers / padded to the plan's multiple
    "tokens-packing": Recipe(
        "loop", sampler="packing", collate="rows", workers=2, extra={"tokens": True}
    ),
    "tokens-padded": Recipe("loop", multiple=8, extra={"tokens": True}),
    "stream": Recipe("stream", sampler="stream", collate="rows"),
    # a shuffled `datasets` stream (its shuffle buffer is not saved), max_wait=1: item 8
    "stream-shuffled": Recipe("stream", sampler="stream", collate="rows", extra={"shuffle": 64}),
    # the same over 4 shards in 2 DataLoader workers: the plan is each worker's, interleaved
    "stream-workers": Recipe(
        "stream", sampler="stream", collate="rows", workers=2, extra={"shuffle": 64, "shards": 4}
    ),
}


# --------------------------------------------------------------------------- plans


def make_sampler(recipe: Recipe, rank: int = 0, world: int = 1) -> Any:
    """The recipe's padless sampler for this rank (the runner's and the test's)."""
    from padless import PackingSampler, TokenBudgetSampler

    kw: dict[str, Any] = {"seed": 1, "rank": rank, "world_size": world}
    if recipe.sampler == "packing":
        return PackingSampler(LENGTHS, capacity=CAPACITY, rows_per_batch=ROWS, **kw)
    if recipe.extra.get("balance"):
        kw["balance"] = True
    if recipe.multiple != 1:
        kw["pad_to_multiple_of"] = recipe.multiple  # the plan rounds, collate_for(sampler) inherits
    return TokenBudgetSampler(LENGTHS, max_tokens=MAX_TOKENS, **kw)


def stream_source(shuffle: int = 0, shards: int = 1) -> Any:
    """The corpus as a ``datasets`` stream; ``shuffle``: its shuffle buffer (0: in order)."""
    import datasets

    rows = {"input_ids": [tokens(i) for i in range(N)]}
    stream = datasets.Dataset.from_dict(rows).to_iterable_dataset(num_shards=shards)
    return stream.shuffle(seed=5, buffer_size=shuffle) if shuffle else stream


def token_count(row: dict[str, Any]) -> int:
    return len(row["input_ids"])


def make_stream(name: str = "stream", **kw: Any) -> Any:
    from padless import Packing
    from padless.torch import StreamDataset

    extra = RECIPES[name].extra
    shuffle = extra.get("shuffle", 0)
    spec = Packing(capacity=CAPACITY, rows_per_batch=ROWS)
    kw.setdefault("length", token_count)
    kw.setdefault("max_wait", 1 if shuffle else 4)
    source = stream_source(shuffle, extra.get("shards", 1))
    return StreamDataset(source, spec, buffer=48, seed=1, **kw)


def corpus_prefix(out: Path) -> Path:
    """The run's corpus as an indexed pair (``OUT/corpus.idx`` + ``.bin``)."""
    return out / "corpus"


def write_corpus(out: Path) -> None:
    """Write the corpus (item ``i``: :func:`tokens`) once, in the parent before any leg forks."""
    from padless.io.indexed import write_indexed

    write_indexed((tokens(i) for i in range(N)), corpus_prefix(out), dtype=np.uint16)


def token_dataset(recipe: Recipe, sampler: Any, out: Path) -> Any:
    """The recipe's :class:`padless.torch.TokenDataset`: planned batches from the corpus file."""
    from padless.torch import TokenDataset

    rows = {"rows": ROWS} if recipe.collate == "rows" else {}  # packed: the fixed (ROWS, CAPACITY)
    return TokenDataset(str(corpus_prefix(out)), plan=sampler, pad_id=0, **rows)


def _as_batch(batch: Any) -> Any:
    return batch


@functools.cache
def expected_epochs(name: str, rank: int = 0, world: int = 1) -> list[list[list[list[int]]]]:
    """What the bare sampler (or stream) plans on this rank, per epoch: per batch, its rows.

    Padded batches are a row per item, flat ones one row of all; packed batches the planned
    rows (``next_fit_rows``, as the collate cuts them; rows left empty stay empty). A stream in
    workers: the loader's batches (each worker batches its shards, the loader takes turns).
    """
    recipe = RECIPES[name]
    out: list[list[list[list[int]]]] = []
    if recipe.sampler == "stream":
        ds = make_stream(name)
        for epoch in range(EPOCHS):
            ds.set_epoch(epoch)
            batches: Any = ds
            if recipe.workers:
                from torchdata.stateful_dataloader import StatefulDataLoader

                batches = StatefulDataLoader(
                    ds, batch_size=None, num_workers=recipe.workers, collate_fn=_as_batch
                )
            out.append([[[x["input_ids"][0] - 2 for x in row] for row in b] for b in batches])
        return out
    from padless.planners.packing import next_fit_rows

    sampler = make_sampler(recipe, rank, world)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        out.append([])
        for batch in sampler:
            items = [int(i) for i in batch]
            if recipe.collate == "padded":
                out[-1].append([[i] for i in items])
            elif recipe.collate == "flat":
                out[-1].append([items])
            else:
                row_of = next_fit_rows(LENGTHS[items], capacity=CAPACITY).tolist()
                rows = [
                    [i for i, r in zip(items, row_of, strict=True) if r == k] for k in range(ROWS)
                ]
                out[-1].append(rows)
    return out


def expected(name: str, rank: int = 0, world: int = 1) -> list[list[list[int]]]:
    """:func:`expected_epochs`, the epochs one after the other."""
    return [batch for epoch in expected_epochs(name, rank, world) for batch in epoch]


def steps_per_epoch(name: str) -> list[int]:
    """Optimizer steps of each epoch (the same on every rank; the kill points count these)."""
    recipe = RECIPES[name]
    epochs = expected_epochs(name, 0, recipe.world)
    return [-(-len(batches) // recipe.accumulate) for batches in epochs]


def kill_points(name: str, fuzz: bool = False) -> list[int]:
    """Steps after which a run is killed: mid-epoch 0 and epoch 0's last (fuzz: seven).

    Lightning also at epoch 1's first step: there the fit loop and the loader each keep an
    epoch, and a checkpoint just past the boundary is a case of its own.
    """
    first, second = steps_per_epoch(name)
    if not fuzz:
        after = [first + 1] if RECIPES[name].family == "lightning" else []
        return [first // 2, first, *after]
    points = {1, first // 2, first - 1, first, first + 1, first + second // 2, first + second - 1}
    return sorted(points - {0})


def batches_through(name: str, step: int, rank: int = 0) -> int:
    """Micro-batches this rank has trained by the end of optimizer step ``step``."""
    recipe = RECIPES[name]
    done = 0
    for batches in expected_epochs(name, rank, recipe.world):
        steps = -(-len(batches) // recipe.accumulate)
        if step < steps:
            return done + step * recipe.accumulate
        done, step = done + len(batches), step - steps
    return done


def leg_plans(
    name: str, fuzz: bool = False
) -> dict[str, tuple[int | None, int | None, tuple[int, ...]]]:
    """Each killed-and-resumed leg, in order: (the step it resumes after, the step it dies at,
    the steps it checkpoints at). A torn recipe's first leg checkpoints at both kill points and
    dies *while* writing the second; the next resumes from the newest complete one."""
    kills = kill_points(name, fuzz)
    if RECIPES[name].extra.get("torn"):
        return {"run0": (None, kills[-1], tuple(kills)), "run1": (kills[-2], None, ())}
    plans: dict[str, tuple[int | None, int | None, tuple[int, ...]]] = {}
    for j in range(len(kills) + 1):
        since, kill = (kills[j - 1] if j else None), (kills[j] if j < len(kills) else None)
        plans[f"run{j}"] = (since, kill, () if kill is None else (kill,))
    return plans


def legs(name: str, fuzz: bool = False) -> list[str]:
    """The killed-and-resumed runs of a recipe, in order."""
    return list(leg_plans(name, fuzz))


def plan_leg(name: str, leg: str, fuzz: bool) -> tuple[int | None, int | None, tuple[int, ...]]:
    """(the step this leg resumes after, the step it dies at, the steps it checkpoints at)."""
    return (None, None, ()) if leg == "full" else leg_plans(name, fuzz)[leg]


# --------------------------------------------------------------------------- recording


def segments(batch: dict[str, Any]) -> list[list[tuple[int | None, int, int]]]:
    """Per row, the spans the model attends within: ``(index, start, length)``.

    Spans: restarts of ``position_ids`` where given, else the attention mask (a prefix of ones),
    else the whole row. ``index`` is the item whose tokens fill the span, ``None`` for padding,
    -1 for a span with tokens of several items, -2 for a mask that is not a prefix of ones.
    """
    ids = batch["input_ids"]
    rows, width = ids.shape
    pos, mask = batch.get("position_ids"), batch.get("attention_mask")
    out = []
    for r in range(rows):
        row = ids[r].tolist()
        if pos is not None:
            p = pos.reshape(rows, width)[r].tolist()
            ends = [j for j in range(1, width) if p[j] != p[j - 1] + 1] + [width]
        elif mask is not None:
            m = mask.reshape(rows, width)[r]
            n = int(m.sum())
            if not bool((m[:n] == 1).all()):
                out.append([(-2, 0, width)])
                continue
            ends = [n, width] if n < width else [width]
        else:
            ends = [width]
        spans, start = [], 0
        for end in ends:
            part = set(row[start:end])
            if part == {0}:
                index: int | None = None
            elif len(part) == 1 and min(part) >= 2:
                index = min(part) - 2
            else:
                index = -1
            spans.append((index, start, end - start))
            start = end
        out.append(spans)
    return out


def decode(batch: dict[str, Any]) -> dict[str, Any]:
    """What a record holds of a batch: its shape, per row its items' ``[index, length]`` spans
    (padding left out), and its padding tokens."""
    rows = segments(batch)
    items = [[[i, n] for i, _, n in row if i is not None] for row in rows]
    pad = sum(n for row in rows for i, _, n in row if i is None)
    return {"shape": list(batch["input_ids"].shape), "rows": items, "pad": pad}


class Recorder:
    """Appends one JSON line per training forward to ``path`` (flushed: a kill loses nothing)."""

    def __init__(self, path: str) -> None:
        self.fh = open(path, "a")  # noqa: SIM115 (closed by the process's end)
        self.meta: dict[str, Any] = {}

    def write(self, batch: dict[str, Any], loss: Any) -> None:
        line = {**self.meta, **decode(batch), "loss": float(loss)}
        self.fh.write(json.dumps(line) + "\n")
        self.fh.flush()


def tiny_llama(**overrides: Any) -> Any:
    """A one-layer Llama with attention dropout, ~10k parameters, the same weights every time."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    settings: dict[str, Any] = {
        "vocab_size": VOCAB,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": CAPACITY,
        "attention_dropout": 0.1,
        "use_cache": False,  # what docs/trainers.md asks for packed batches
        "tie_word_embeddings": True,
    }
    settings.update(overrides)
    return LlamaForCausalLM(LlamaConfig(**settings))


MODEL_KEYS = ("input_ids", "attention_mask", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k")


def leak(model: Any, batch: dict[str, Any]) -> float:
    """Largest |logit| difference between the batch as given and each item alone (eval mode)."""
    import torch

    ids = batch["input_ids"]
    kwargs = {k: v for k, v in batch.items() if k in MODEL_KEYS or k.startswith("max_length_")}
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            together = model(**kwargs).logits
            worst = 0.0
            for r, spans in enumerate(segments(batch)):
                for index, start, n in spans:
                    if index is None:
                        continue
                    if index < 0:
                        return float("inf")
                    alone = model(input_ids=ids[r : r + 1, start : start + n]).logits
                    diff = (together[r : r + 1, start : start + n] - alone).abs().max()
                    worst = max(worst, float(diff))
    finally:
        model.train(was)
    return worst


def watch(model: Any, rec: Recorder, meta: Callable[[], dict[str, Any]], check: bool) -> None:
    """Record every training forward of ``model``; the first one also measures the leak."""
    state = {"checked": not check}

    def before(module: Any, _args: Any, kwargs: dict[str, Any]) -> None:
        if module.training:
            rec.meta = meta()
            if not state["checked"]:
                state["checked"] = True
                rec.meta["leak"] = leak(module, kwargs)

    def after(module: Any, _args: Any, kwargs: dict[str, Any], output: Any) -> None:
        if module.training:
            rec.write(kwargs, output.loss)

    model.register_forward_pre_hook(before, with_kwargs=True)
    model.register_forward_hook(after, with_kwargs=True)


def check_packed(model: Any, collate: Any) -> None:
    """The documented call before training on packed batches (issue 24), where it exists."""
    import padless.torch

    check = getattr(padless.torch, "check_packed", None)
    if check is not None:
        check(model, collate=collate)


def model_inputs(batch: dict[str, Any]) -> dict[str, Any]:
    """A padless collate's output as the Llama takes it (labels -100 on padding)."""
    out = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids") if k in batch}
    labels = batch.get("labels")
    if labels is None:
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    out["labels"] = labels
    return out


def die() -> None:
    """The crash: SIGKILL, right after a checkpoint (nothing of the process runs after it)."""
    Path(os.environ["INTEGRITY_LEG"] + ".killed").touch()
    os.kill(os.getpid(), signal.SIGKILL)


def bind(sampler: Any, dataset: Any, field_name: str | None) -> Any:
    """The dataset as the recipe passes it: ``sampler.checked(...)`` where padless has it."""
    checked = getattr(sampler, "checked", None)
    if checked is None:
        return dataset  # PlanSampler.checked does not exist yet (issue 24)
    return checked(dataset, field=field_name)


def item_dataset() -> list[Any]:
    import torch

    return [torch.tensor(tokens(i)) for i in range(N)]


# --------------------------------------------------------------------------- HF and TRL


def hf_padded(features: list[dict[str, Any]]) -> dict[str, Any]:
    """A padded HF collate on padless's: ids, attention mask, labels -100 on padding."""
    from padless.torch import collate_padded

    out = collate_padded(0)([f["input_ids"] for f in features])
    return model_inputs(out)


def word_tokenizer() -> Any:
    """A word-level tokenizer built here (nothing downloaded): SFTTrainer wants one."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(VOCAB)}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")),
        pad_token="t0",
        eos_token="t1",
    )


def hf_trainer(name: str, out: Path, data: Any = None, **overrides: Any) -> Any:
    """The recipe's Trainer (or SFTTrainer), model and sampler: ``(trainer, sampler, callbacks)``."""
    from transformers import Trainer, TrainingArguments

    from padless.hf import PaddingFreeCollator, PadlessTrainerMixin

    recipe = RECIPES[name]
    trl = recipe.family == "trl"
    if trl:
        from trl import SFTConfig, SFTTrainer

        class Base(PadlessTrainerMixin, SFTTrainer):  # type: ignore[misc]
            pass

        args_cls: Any = SFTConfig
        overrides.setdefault("max_length", None)
    else:

        class Base(PadlessTrainerMixin, Trainer):  # type: ignore[no-redef]
            pass

        args_cls = TrainingArguments
    args = args_cls(
        str(out),
        num_train_epochs=EPOCHS,
        gradient_accumulation_steps=recipe.accumulate,
        learning_rate=3e-3,
        optim="adamw_torch",
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        remove_unused_columns=False,
        seed=0,
        disable_tqdm=True,
        **overrides,
    )
    sampler = make_sampler(recipe, args.process_index, args.world_size)
    if data is None:
        data = [{"input_ids": tokens(i)} for i in range(N)]
    collator: Any = {
        "padded": hf_padded,
        "flat": PaddingFreeCollator(),
        "rows": PaddingFreeCollator(CAPACITY, rows=ROWS),
    }[recipe.collate]
    model = tiny_llama()
    kw: dict[str, Any] = {}
    if trl:
        from datasets import Dataset

        dataset: Any = Dataset.from_list(data)
        kw["processing_class"] = word_tokenizer()
    else:
        dataset = bind(sampler, data, "input_ids")
    if recipe.collate != "padded":
        check_packed(model, collator)
    trainer = Base(
        model=model,
        args=args,
        train_dataset=dataset,
        data_collator=collator,
        batch_sampler=sampler,
        **kw,
    )
    return trainer, sampler


def run_hf(name: str, leg: str, out: Path, rec: Recorder, fuzz: bool) -> None:
    from transformers import TrainerCallback

    since, kill_at, saves = plan_leg(name, leg, fuzz)
    torn = bool(RECIPES[name].extra.get("torn"))

    class SaveKill(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            if state.global_step in saves:
                control.should_save = True
            return control

        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            if state.global_step == kill_at:
                die()  # the checkpoint, padless_sampler.json included, is written
            return control

    def tear(trainer: Any) -> None:
        """Die in the middle of writing checkpoint-``kill_at`` (model and optimizer written)."""
        save_rng_state = trainer._save_rng_state

        def dying(output_dir: str) -> None:
            if trainer.state.global_step == kill_at:
                die()
            save_rng_state(output_dir)

        trainer._save_rng_state = dying

    trainer, sampler = hf_trainer(name, out / ("full" if leg == "full" else "ckpt"))
    trainer.add_callback(SaveKill())
    if torn:
        tear(trainer)

    def meta() -> dict[str, Any]:
        return {"step": trainer.state.global_step, "epoch": sampler.epoch}

    watch(trainer.model, rec, meta, leg == "full" and RECIPES[name].collate != "padded")
    resume: Any = None if since is None else str(out / f"ckpt/checkpoint-{since}")
    if torn and since is not None:
        resume = True  # the newest complete checkpoint of args.output_dir
    trainer.train(resume_from_checkpoint=resume)


# --------------------------------------------------------------------------- Lightning


RNG_CALLBACKS = ("ExactResume",)  # padless.lightning's callback for bitwise dropout (item 10)


def lightning_rng_callback() -> Any:
    """padless's Lightning callback that makes dropout resume bitwise, if padless has it."""
    import padless.lightning as pll

    names = [n for n in RNG_CALLBACKS if n in getattr(pll, "__all__", ())]
    return getattr(pll, names[0]) if names else None  # (made on first use: imports Lightning)


def has_lightning_rng_callback() -> bool:
    """Whether :func:`lightning_rng_callback` finds one, without importing Lightning."""
    import padless.lightning as pll

    return any(n in getattr(pll, "__all__", ()) for n in RNG_CALLBACKS)


def lightning_fit(
    recipe: Recipe,
    out: Path,
    rec: Recorder,
    *,
    resume: str | None,
    kill_at: int | None,
    max_steps: int = -1,
    shuffle: bool = True,
) -> None:
    """The documented Lightning recipe: ``LightningBatches`` in a ``StatefulDataLoader``,
    ``ModelCheckpoint(every_n_train_steps=...)``, padless's RNG callback where it exists."""
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torchdata.stateful_dataloader import StatefulDataLoader

    from padless.lightning import LightningBatches

    class Lit(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = tiny_llama()

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return self.net(**model_inputs(batch)).loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=3e-3)

    class Data(pl.LightningDataModule):
        def train_dataloader(self) -> Any:
            from padless.torch import collate_for

            trainer = self.trainer
            sampler = make_sampler(recipe, trainer.global_rank, trainer.world_size)
            if not shuffle:  # another shuffle than the checkpoint's
                shard = {"rank": sampler.rank, "world_size": sampler.world_size}
                sampler = type(sampler)(
                    LENGTHS, max_tokens=MAX_TOKENS, seed=1, shuffle=False, **shard
                )
            return StatefulDataLoader(
                bind(sampler, item_dataset(), None),
                batch_sampler=LightningBatches(sampler),
                num_workers=recipe.workers,
                collate_fn=collate_for(sampler, pad_id=0),
            )

    class SaveKill(ModelCheckpoint):
        """The documented checkpoint callback (Lightning runs it after the others), then the kill."""

        def _save_checkpoint(self, trainer: Any, filepath: str) -> None:
            super()._save_checkpoint(trainer, filepath)
            if trainer.global_step == kill_at and max_steps < 0:
                die()

    callbacks: list[Any] = []
    if kill_at is not None:
        every = {"every_n_train_steps": kill_at, "save_top_k": -1}
        callbacks.append(SaveKill(dirpath=out / "ckpt", filename="{step}", **every))
    rng = lightning_rng_callback()
    if rng is not None:
        callbacks.append(rng())
    trainer = pl.Trainer(
        default_root_dir=str(out),
        max_epochs=EPOCHS,
        max_steps=max_steps,
        accelerator="cpu",
        devices=recipe.world,
        strategy="ddp" if recipe.world > 1 else "auto",
        use_distributed_sampler=False,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=kill_at is not None,
        callbacks=callbacks,
    )
    model = Lit()

    def meta() -> dict[str, Any]:
        return {"step": trainer.global_step, "epoch": trainer.current_epoch}

    watch(model.net, rec, meta, False)
    trainer.fit(model, datamodule=Data(), ckpt_path=resume)


def run_lightning(name: str, leg: str, out: Path, rec: Recorder, fuzz: bool) -> None:
    since, kill_at, _ = plan_leg(name, leg, fuzz)
    resume = None if since is None else str(out / f"ckpt/step={since}.ckpt")
    lightning_fit(RECIPES[name], out, rec, resume=resume, kill_at=kill_at)


# --------------------------------------------------------------------------- plain loops


def run_loop(name: str, leg: str, out: Path, rec: Recorder, fuzz: bool) -> None:
    """torchdata's StatefulDataLoader in a plain loop: the resume pattern of the docs.

    The checkpoint holds the epoch, the step, the loader's state and the random state:
    ``padless.torch.StepRng`` around each step where padless has it, else torch's RNG state put
    back after ``iter(loader)`` (which draws its workers' seed from it). Token recipes: the
    dataset is a ``TokenDataset`` over the corpus file, which serves whole batches.
    """
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    import padless.torch as pt
    from padless.torch import collate_for

    recipe = RECIPES[name]
    since, kill_at, _ = plan_leg(name, leg, fuzz)
    torch.manual_seed(0)
    if recipe.family == "stream":
        dataset: Any = make_stream(name)
        sampler: Any = dataset
        collate = collate_for(dataset)
        loader = StatefulDataLoader(
            dataset, batch_size=None, num_workers=recipe.workers, collate_fn=collate
        )
    elif recipe.extra.get("tokens"):  # each batch built whole by the dataset's __getitems__
        sampler = make_sampler(recipe)
        loader = StatefulDataLoader(
            token_dataset(recipe, sampler, out.parent),
            batch_sampler=sampler,
            num_workers=recipe.workers,
            collate_fn=pt.TokenDataset.collate,  # the identity: a per-item fetch would fail
        )
    else:
        sampler = make_sampler(recipe)
        loader = StatefulDataLoader(
            bind(sampler, item_dataset(), None),
            batch_sampler=sampler,
            num_workers=recipe.workers,
            collate_fn=collate_for(sampler, pad_id=0),
        )
    model = tiny_llama()
    if recipe.collate != "padded":
        check_packed(model, pt.collate_packed(CAPACITY))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    step_rng = pt.StepRng() if hasattr(pt, "StepRng") else None
    first, step, rng = 0, 0, None
    if since is not None:
        ckpt = torch.load(out / f"ckpt/step={since}.pt", weights_only=False)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        loader.load_state_dict(ckpt["loader"])
        first, step, rng = ckpt["epoch"], ckpt["step"], ckpt["rng"]
        if step_rng is not None:
            step_rng.load_state_dict(rng)
            rng = None
    measure = leg == "full" and recipe.collate != "padded"
    watch(model, rec, lambda: {"step": step, "epoch": epoch}, measure)
    model.train()
    for epoch in range(first, EPOCHS):
        sampler.set_epoch(epoch)
        batches = iter(loader)
        if rng is not None:
            torch.set_rng_state(rng)
            rng = None
        for batch in batches:
            if step_rng is not None:
                step_rng.begin()
            loss = model(**model_inputs(batch)).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step_rng is not None:
                step_rng.end()
            step += 1
            if step == kill_at:
                state = {
                    "model": model.state_dict(),
                    "optimizer": opt.state_dict(),
                    "loader": loader.state_dict(),
                    "epoch": epoch,
                    "step": step,
                    "rng": torch.get_rng_state() if step_rng is None else step_rng.state_dict(),
                }
                torch.save(state, out / f"ckpt/step={step}.pt")
                die()


RUNNERS: dict[str, Callable[[str, str, Path, Recorder, bool], None]] = {
    "hf": run_hf,
    "trl": run_hf,
    "lightning": run_lightning,
    "loop": run_loop,
    "stream": run_loop,
}


# --------------------------------------------------------------------------- refusals


def _trl_with(out: Path, data: list[dict[str, Any]], **overrides: Any) -> None:
    trainer, _ = hf_trainer("trl", out, data=data, **overrides)
    watch(trainer.model, Recorder(str(out / "forwards.jsonl")), dict, False)
    trainer.train()


def refuse_trl_shuffle(out: Path) -> None:
    """TRL's ``shuffle_dataset=True`` reorders the rows the lengths describe (item 2)."""
    _trl_with(out, [{"input_ids": tokens(i)} for i in range(N)], shuffle_dataset=True)


def refuse_trl_dropped_row(out: Path) -> None:
    """A row whose labels are all -100 is dropped by TRL: every later index shifts (item 2)."""
    data = [{"input_ids": tokens(i), "labels": tokens(i)} for i in range(N)]
    data[7]["labels"] = [-100] * len(data[7]["labels"])
    _trl_with(out, data, max_length=1024)  # TRL's default: it then drops fully masked rows


def refuse_hf_lengths_of_other_order(out: Path) -> None:
    """The lengths the sampler plans on, in another order than the dataset (item 6)."""
    trainer, sampler = hf_trainer("hf-flat", out, data=[{"input_ids": tokens(i)} for i in range(N)])
    watch(trainer.model, Recorder(str(out / "forwards.jsonl")), dict, False)
    data = [{"input_ids": tokens(i)} for i in reversed(range(N))]
    trainer.train_dataset = bind(sampler, data, "input_ids")
    trainer.train()


def refuse_stream_dict_rows_without_length(out: Path) -> None:
    """``length=`` left out on dict rows: the default measured the keys (item 7)."""
    from padless import Packing
    from padless.torch import StreamDataset

    ds = StreamDataset(stream_source(), Packing(capacity=CAPACITY, rows_per_batch=ROWS), buffer=48)
    next(iter(ds))


def refuse_stream_state_of_another_epoch(out: Path) -> None:
    """The old docs loop: a state saved in epoch 1, then ``for epoch in range(2)`` (item 3)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader_of(ds: Any) -> Any:
        from padless.torch import collate_for

        return StatefulDataLoader(ds, batch_size=None, num_workers=0, collate_fn=collate_for(ds))

    ds = make_stream()
    loader = loader_of(ds)
    ds.set_epoch(1)
    batches = iter(loader)
    next(batches), next(batches)
    state = loader.state_dict()
    ds = make_stream()  # a new process
    loader = loader_of(ds)
    loader.load_state_dict(state)
    rec = Recorder(str(out / "forwards.jsonl"))
    for epoch in range(EPOCHS):
        ds.set_epoch(epoch)
        for batch in loader:
            rec.write(batch, 0.0)


def refuse_lightning_state_of_other_settings(out: Path) -> None:
    """A Lightning checkpoint resumed with ``shuffle=False`` (a budget may change during a run,
    not the shuffle): padless's error, not
    Lightning's teardown ``RuntimeError`` (item 11)."""
    recipe = RECIPES["lightning"]
    first = Recorder(str(out / "first.jsonl"))
    lightning_fit(recipe, out, first, resume=None, kill_at=2, max_steps=2)
    again = Recorder(str(out / "forwards.jsonl"))
    ckpt = str(out / "ckpt/step=2.ckpt")
    lightning_fit(recipe, out, again, resume=ckpt, kill_at=None, shuffle=False)


REFUSALS: dict[str, tuple[Callable[[Path], None], str]] = {
    # name: (the scenario, a regex the error message must match)
    "trl-shuffle": (refuse_trl_shuffle, "shuffle_dataset"),
    "trl-dropped-row": (refuse_trl_dropped_row, r"(?i)rows?\b|index|dropped"),
    "hf-lengths-other-order": (refuse_hf_lengths_of_other_order, r"(?i)index|length"),
    "stream-no-length": (refuse_stream_dict_rows_without_length, "length"),
    "stream-state-of-another-epoch": (refuse_stream_state_of_another_epoch, "epoch"),
    "lightning-state-of-other-settings": (
        refuse_lightning_state_of_other_settings,
        "state does not fit|settings differ",
    ),
}


# --------------------------------------------------------------------------- the parent


def preload() -> None:
    """Import what the legs need once, in the parent, before any fork."""
    import datasets
    import lightning.pytorch  # noqa: F401
    import torch
    import torchdata.stateful_dataloader  # noqa: F401
    from transformers.utils import logging as hf_logging

    import padless.hf  # noqa: F401
    import padless.lightning  # noqa: F401
    import padless.torch  # noqa: F401

    torch.set_num_threads(1)  # tiny models: more threads only contend
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    try:
        import trl  # noqa: F401
    except ImportError:
        pass


def child(job: tuple[str, str], out: Path, rank: int, env: dict[str, str], fuzz: bool) -> None:
    """A forked leg: its own process group, its log, its record; exits, dies or fails."""
    os.setpgid(0, 0)
    name, leg = job
    base = out / name / f"{leg}.rank{rank}"
    log = os.open(f"{base}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ.update(env, INTEGRITY_LEG=str(base))
    code = 1
    try:
        import logging
        import warnings

        warnings.filterwarnings("ignore")
        logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
        if name == "refuse":
            scenario = out / name / leg
            scenario.mkdir()
            try:
                REFUSALS[leg][0](scenario)
            except Exception as exc:
                traceback.print_exc()
                error = {"type": type(exc).__name__, "message": str(exc)}
                Path(f"{base}.error").write_text(json.dumps(error))
        else:
            rec = Recorder(f"{base}.jsonl")
            RUNNERS[RECIPES[name].family](name, leg, out / name, rec, fuzz)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def world(name: str) -> int:
    return 1 if name == "refuse" else RECIPES[name].world


def start(job: tuple[str, str], out: Path, fuzz: bool) -> list[int]:
    size = world(job[0])
    envs: list[dict[str, str]] = [{}]
    if size > 1:  # what torchrun sets: Lightning takes it as a torchelastic launch
        port = str(free_port())
        envs = [
            {
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "WORLD_SIZE": str(size),
                "RANK": str(r),
                "LOCAL_RANK": str(r),
                "LOCAL_WORLD_SIZE": str(size),
                "GROUP_RANK": "0",
                "NODE_RANK": "0",
                "TORCHELASTIC_RUN_ID": f"integrity-{job[0]}-{job[1]}",
            }
            for r in range(size)
        ]
    pids = []
    for rank, env in enumerate(envs):
        pid = os.fork()
        if pid == 0:
            child(job, out, rank, env, fuzz)
        pids.append(pid)
    return pids


def expect(name: str, leg: str, fuzz: bool) -> str:
    """How a leg must end: ``killed`` after its checkpoint, or ``ok``."""
    return "ok" if name == "refuse" or plan_leg(name, leg, fuzz)[1] is None else "killed"


def finish(pids: list[int], ended: list[tuple[int, int]], late: bool, base: Path) -> dict[str, Any]:
    for p in pids:  # each leg's process group: the DataLoader workers of a killed leg too
        try:
            os.killpg(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    codes = []
    for p, (done, status) in zip(pids, ended, strict=True):
        codes.append(os.waitstatus_to_exitcode(status if done else os.waitpid(p, 0)[1]))
    marks = [Path(f"{base}.rank{r}.killed").exists() for r in range(len(pids))]
    if late:
        how = "timeout"
    elif all(marks) and all(c == -signal.SIGKILL for c in codes):
        how = "killed"
    elif all(c == 0 for c in codes):
        how = "ok"
    else:
        how = "error"
    return {"how": how, "codes": codes}


def main(out: Path, names: list[str], fuzz: bool, timeout: float = 150.0, slots: int = 2) -> None:
    os.environ[MARK] = str(os.getpid())
    began = time.monotonic()
    preload()
    for name in [*names, "refuse"]:
        (out / name / "ckpt").mkdir(parents=True, exist_ok=True)
    if any(RECIPES[name].extra.get("tokens") for name in names):
        write_corpus(out)  # before the first fork: every leg reads the finished pair
    status: dict[str, dict[str, Any]] = {name: {} for name in [*names, "refuse"]}
    queue = [(name, leg) for name in names for leg in ("run0", "full")]
    queue += [("refuse", leg) for leg in REFUSALS]
    running: dict[tuple[str, str], tuple[list[int], float]] = {}
    reaped: dict[int, int] = {}  # pid: wait status, of the legs still running
    while queue or running:
        while queue and sum(world(n) for n, _ in running) + world(queue[0][0]) <= slots:
            job = queue.pop(0)
            running[job] = (start(job, out, fuzz), time.monotonic())
        time.sleep(0.02)
        for (name, leg), (pids, t0) in list(running.items()):
            for p in pids:
                if p not in reaped:
                    done, code = os.waitpid(p, os.WNOHANG)
                    if done:
                        reaped[p] = code
            late = time.monotonic() - t0 > timeout
            if not late and any(p not in reaped for p in pids):
                continue
            ended = [(p, reaped.pop(p)) if p in reaped else (0, 0) for p in pids]
            del running[(name, leg)]
            got = finish(pids, ended, late, out / name / leg)
            status[name][leg] = {**got, "seconds": round(time.monotonic() - t0, 2)}
            if name != "refuse" and leg != "full" and got["how"] == expect(name, leg, fuzz):
                following = f"run{int(leg[3:]) + 1}"
                if following in legs(name, fuzz):
                    queue.insert(0, (name, following))
    status["runner"] = {"pid": os.getpid(), "seconds": round(time.monotonic() - began, 2)}
    (out / "status.json").write_text(json.dumps(status, indent=1))


if __name__ == "__main__":
    argv = sys.argv[2:]
    fuzz = "--fuzz" in argv
    chosen = [a for a in argv if a != "--fuzz"] or list(RECIPES)
    main(Path(sys.argv[1]), chosen, fuzz)
