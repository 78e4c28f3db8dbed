"""Building a cell's parts as a user would write them (the documented spellings), one rank at a
time: the source (sampler, mixture, stream batcher, LM stream), the dataset it indexes, the
collate, and the consumer that delivers batches ("feeds").

Everything a user calls to set a run up goes through :func:`building`: an exception raised there
is a refusal at construction. What a run does afterwards (iterating) is not wrapped: an error
there is late.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

import padless

from . import corpus as C
from .factors import MIX_SCHEDULE, MIX_WEIGHTS, STREAM_BUFFER, WINDOW, Cell

SEED = 5


class Built(Exception):
    """An exception raised while a run was being set up (wrapped: a refusal at construction)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class Failure(Exception):
    """A check failed: the cell ran without an error and delivered something wrong."""


@contextlib.contextmanager
def building() -> Iterator[None]:
    try:
        yield
    except (Built, Failure):
        raise
    except Exception as err:
        raise Built(err) from err


# ------------------------------------------------------------------------------ environment
class Env:
    """Where a session's token files live (written once)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._files: dict[str, str] | None = None
        self.counter = 0

    @property
    def files(self) -> dict[str, str]:
        if self._files is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._files = C.write_token_files(self.folder)
        return self._files

    def scratch(self, name: str) -> str:
        self.counter += 1
        path = self.folder / f"{name}-{os.getpid()}-{self.counter}"
        path.mkdir(parents=True, exist_ok=True)
        return str(path)


class IndexLength:
    """``length=`` of a stream of item indices (a class: DataLoader workers may pickle it)."""

    def __init__(self, lengths: np.ndarray) -> None:
        self.lengths = lengths

    def __call__(self, index: int) -> int:
        return int(self.lengths[index])


# ------------------------------------------------------------------------------ sources
def spec_of(strategy: str, kw: dict[str, Any]) -> Any:
    return padless.strategies()[strategy](**kw)


def corpus_range(part: str | None) -> range:
    if part == "a":
        return range(0, C.HALF)
    if part == "b":
        return range(C.HALF, C.N)
    return range(C.N)


def source(
    cell: Cell,
    kw: dict[str, Any],
    *,
    rank: int,
    world: int,
    options: dict[str, Any] | None = None,
    part: str | None = None,
    env: Env | None = None,
) -> Any:
    """The batch source of one rank: a PlanSampler of the cell's form, a StreamDataset (the
    stream form), or an LMStream. ``options`` are the layer's keywords (``balance``,
    ``batches_per_step``...); ``part`` a mixture's corpus."""
    options = dict(options or {})
    chosen = corpus_range(part)
    if cell.strategy == "lm":
        spec_kw = {k: v for k, v in kw.items() if k != "context_parallel"}
        if "context_parallel" in kw:
            options["context_parallel"] = kw["context_parallel"]
        tokens: Any
        if cell.consumer == "token_dataset" and part is None and env is not None:
            # the token file the model's data lives in, read by the LM stream itself
            tokens = env.files["bin"]
            options["dtype"] = "uint16"
        else:
            lo = int(sum(C.LENGTHS[: chosen.start]))
            hi = int(sum(C.LENGTHS[: chosen.stop]))
            tokens = C.STREAM_TOKENS[lo:hi]
        return padless.LMStream(
            tokens, **spec_kw, seed=SEED, rank=rank, world_size=world, drop_last=False, **options
        )
    spec = spec_of(cell.strategy, kw)
    if cell.form == "stream":
        if cell.consumer == "token_dataset":
            items: Any = list(chosen)  # indices into the token file
            length: Any = IndexLength(C.LENGTHS)
        else:
            items, length = [C.ITEMS[i] for i in chosen], None
        from padless.torch import StreamDataset

        return StreamDataset(
            items,
            spec,
            buffer=STREAM_BUFFER,
            length=length,
            seed=SEED,
            rank=rank,
            world_size=world,
            **options,
        )
    if cell.form == "window":
        options["window"] = WINDOW
    elif cell.form == "histogram":
        options["window"] = "histogram"
    lengths = C.LENGTHS[chosen.start : chosen.stop]
    return padless.PlanSampler(lengths, spec, seed=SEED, rank=rank, world_size=world, **options)


def mixture(
    cell: Cell, kw: dict[str, Any], *, rank: int, world: int, env: Env | None = None
) -> Any:
    """A MixtureSampler over two corpora of the cell's strategy and form (the corpus's items
    [0, HALF) and [HALF, N)), its weights by the layer."""
    subs = {p: source(cell, kw, rank=0, world=1, part=p, env=env) for p in ("a", "b")}
    weights = MIX_SCHEDULE if cell.layer == "mixture_schedule" else MIX_WEIGHTS
    return padless.MixtureSampler(subs, weights=weights, seed=SEED, rank=rank, world_size=world)


def is_mixture(obj: Any) -> bool:
    return isinstance(obj, padless.MixtureSampler)


def is_stream(obj: Any) -> bool:
    from padless.torch import StreamDataset

    return isinstance(obj, (StreamDataset, padless.StreamBatcher))


def is_lm(obj: Any) -> bool:
    """An LM stream, or a mixture of them: (x, y) batches, no dataset to index."""
    return isinstance(obj, padless.LMStream) or getattr(obj, "yields", None) == "tokens"


def has_pieces(sampler: Any) -> bool:
    """Whether the sampler's spec yields codes of pieces to serve (``sampler.pieces``)."""
    return isinstance(getattr(sampler, "spec", None), (padless.Packing, padless.Decomposition))


# ------------------------------------------------------------------------------ datasets
def dataset_for(src: Any, consumer: str, rows: list[Any]) -> Any:
    """The dataset a sampler's batches index, as the docs spell it: the items, checked
    (``sampler.checked``) for the checked consumer, wrapped by ``sampler.pieces`` where the
    spec yields codes of pieces; a mixture's: ``mixture_dataset`` of its corpora's."""
    from padless.torch import mixture_dataset

    if is_mixture(src):
        parts = {}
        for name, sub in src.samplers.items():
            lo = 0 if name == "a" else C.HALF
            parts[name] = dataset_for(sub, consumer, rows[lo : lo + sub.sizes.shape[0]])
        return mixture_dataset(parts, src)
    data = src.checked(rows) if consumer == "checked" else rows
    return src.pieces(data) if has_pieces(src) else data


def collate_of(src: Any, **options: Any) -> Any:
    """``padless.torch.collate_for(source)`` (a mixture's: its corpora's one collate)."""
    from padless.torch import collate_for

    return collate_for(src, pad_id=0, **options)


class JoinShares:
    """Collate every context-parallel rank's share of a batch and join them (what the CP ranks
    of one data-parallel rank receive, together)."""

    def __init__(self, collates: list[Any]) -> None:
        self.collates = collates

    def __call__(self, batch: Any) -> Any:
        from padless.torch import join_cp_shares

        shares = [c(batch) for c in self.collates]
        joined = join_cp_shares(shares)
        joined["cp_shares"] = len(shares)
        return joined


# ------------------------------------------------------------------------------ feeds
class Feed:
    """One rank's consumer over its source: delivers :class:`corpus.Got` batches, saves and
    loads its state. Built inside :func:`building`."""

    def __init__(self, cell: Cell, env: Env, src: Any, *, cp: int = 1) -> None:
        self.cell, self.env, self.src = cell, env, src
        self.loaded = False
        self.groups: list[int] = []  # micro-batches per optimizer step (a ramp)
        consumer = cell.consumer
        self.iterable: Any
        if is_lm(src):
            self._lm(consumer)
            return
        collate: Any = None
        if consumer != "token_dataset":
            if cp > 1:
                collate = JoinShares([collate_of(src, cp_rank=r) for r in range(cp)])
            else:
                collate = collate_of(src)
        if is_stream(src):
            self._stream(consumer, collate)
            return
        if consumer == "token_dataset" and is_mixture(src):
            # a TokenDataset per corpus (its own token file), served as the mixture's dataset
            from padless.torch import TokenDataset, mixture_dataset

            parts = {n: TokenDataset(env.files[n], plan=sub) for n, sub in src.samplers.items()}
            self.loader: Any = DataLoader(
                mixture_dataset(parts, src), batch_sampler=src, collate_fn=TokenDataset.collate
            )
        elif consumer == "token_dataset":
            from padless.torch import TokenDataset

            tokens = TokenDataset(env.files["prefix"], plan=src)
            self.loader = tokens.loader(src)
        else:
            data = dataset_for(src, consumer, C.ITEMS)
            if consumer == "torchdata":
                from torchdata.stateful_dataloader import StatefulDataLoader

                self.loader = StatefulDataLoader(
                    data, batch_sampler=src, num_workers=2, collate_fn=collate
                )
            else:
                self.loader = DataLoader(data, batch_sampler=src, collate_fn=collate)
        self.iterable = self.loader

    def _lm(self, consumer: str) -> None:
        from padless.torch import lm_tensors

        if consumer == "checked":
            self.iterable = self.src.checked(C.ITEMS)
        elif consumer == "torchdata":
            from torchdata.stateful_dataloader import StatefulDataLoader

            from padless.torch import LMDataset

            # the documented path: the stream itself is no map-style dataset
            self.loader = StatefulDataLoader(LMDataset(self.src), batch_size=None, num_workers=2)
            self.iterable = self.loader
        elif consumer == "token_dataset":
            self.iterable = self.src  # the stream reads the token file itself
        else:
            self.iterable = _Repeatable(lambda: lm_tensors(self.src))

    def _stream(self, consumer: str, collate: Any) -> None:
        if consumer == "checked":
            self.iterable = self.src.checked(C.ITEMS)
            return
        if consumer == "token_dataset":
            from padless.torch import TokenDataset

            tokens = TokenDataset(self.env.files["prefix"], plan=self.src)
            self.loader = tokens.loader(self.src)
        elif consumer == "torchdata":
            from torchdata.stateful_dataloader import StatefulDataLoader

            self.loader = StatefulDataLoader(
                self.src, batch_size=None, num_workers=2, collate_fn=collate
            )
        else:
            self.loader = DataLoader(self.src, batch_size=None, collate_fn=collate)
        self.iterable = self.loader

    # -------------------------------------------------------------- running
    def set_epoch(self, epoch: int) -> None:
        self.src.set_epoch(epoch)

    def iterate(self, ramp: bool = False) -> Iterator[C.Got]:
        """The epoch's batches as delivered, read back (``opt``: the optimizer step, with a
        ramp grouped by ``sampler.steps(loader)``)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                if self.loaded and self.cell.consumer == "torchdata":
                    with building():  # torchdata loads the sampler's state when iterated
                        it = iter(self.iterable)
                else:
                    it = iter(self.iterable)
                yield from self._read(it, ramp)
            except Exception as err:  # not GeneratorExit: a run stopped early ends normally
                stop_workers(err)
                raise

    def _read(self, it: Any, ramp: bool) -> Iterator[C.Got]:
        step = 0
        if ramp:
            for opt, group in enumerate(self.src.steps(it)):
                self.groups.append(len(group))
                for batch in group:
                    got = C.read(batch)
                    got.step, got.opt = step, opt
                    step += 1
                    yield got
            return
        for batch in it:
            got = C.read(batch)
            got.step = got.opt = step
            step += 1
            yield got

    def state(self) -> Any:
        target = self.loader if self.cell.consumer == "torchdata" else self.src
        return json.loads(json.dumps(target.state_dict()))  # what a checkpoint keeps

    def stop(self) -> None:
        """End the loader iterator a stopped iteration left running (its state taken): its
        workers now, not when the loader is collected (a shutdown then waits seconds on
        workers forked beside a later loader's)."""
        running = getattr(getattr(self, "loader", None), "_iterator", None)
        if isinstance(getattr(running, "_workers", None), list):
            _end(running)

    def load(self, state: Any) -> None:
        with building():
            target = self.loader if self.cell.consumer == "torchdata" else self.src
            target.load_state_dict(state)
        self.loaded = True

    @property
    def repeated(self) -> int:
        return int(getattr(self.src, "repeated", 0))


def stop_workers(err: BaseException) -> None:
    """End the workers of a loader iterator that failed (found in the error's traceback, which
    holds it): collected later it would wait seconds for them, or be collected in a later
    loader's forked worker."""
    seen: set[int] = set()
    error: BaseException | None = err
    while error is not None and id(error) not in seen:  # the error and what caused it
        seen.add(id(error))
        tb = error.__traceback__
        while tb is not None:
            for value in list(tb.tb_frame.f_locals.values()):
                if isinstance(getattr(value, "_workers", None), list):
                    _end(value)
            tb = tb.tb_next
        error = error.__cause__ or error.__context__


def _end(iterator: Any) -> None:
    """Shut a loader iterator down at once: its workers unregistered from torch's SIGCHLD
    watch (so their end is no error), ended, then the iterator's own shutdown (now quick)."""
    from torch.utils.data._utils import signal_handling

    if getattr(iterator, "_shutdown", True):
        return
    if getattr(iterator, "_worker_pids_set", False):
        signal_handling._remove_worker_pids(id(iterator))
        iterator._worker_pids_set = False
    for worker in iterator._workers:
        if worker.is_alive():
            worker.terminate()
    for worker in iterator._workers:
        worker.join(timeout=5)
    iterator._shutdown_workers()


class _Repeatable:
    def __init__(self, make: Callable[[], Iterator[Any]]) -> None:
        self.make = make

    def __iter__(self) -> Iterator[Any]:
        return self.make()


# ------------------------------------------------------------------------------ the HF Trainer
class Recorder(torch.nn.Module):
    """A model that records what it receives (one forward per micro-batch) and returns a loss."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[C.Got] = []
        self.trainer: Any = None

    def forward(self, input_ids: Any = None, **inputs: Any) -> dict[str, Any]:
        batch = {"input_ids": input_ids, **inputs}
        got = C.read(batch)
        if self.flat and got.kind == "packed":
            got.kind = "flat"  # one (1, total) row of sequences back to back
        step = self.trainer.state.global_step if self.trainer is not None else 0
        got.opt = step
        got.step = len(self.seen)
        self.seen.append(got)
        return {"loss": self.w.sum() * 0.0 + self.w.sum()}

    flat = True  # the collator lays the batch out as one flat row (no capacity given)


def hf_collator(src: Any) -> Any:
    """The documented HF collator of the source: ``PaddingFreeCollator(capacity, rows=...)`` for
    packing (rows of the planned capacity), ``PaddingFreeCollator()`` otherwise."""
    from padless.hf import PaddingFreeCollator

    target = src.samplers["a"] if is_mixture(src) else src
    spec = getattr(target, "spec", None)
    if isinstance(spec, padless.Packing):
        # the planned capacity (a warm-up's largest): the collator lays out each step's rows
        return PaddingFreeCollator(int(spec.row_capacity), rows=spec.rows_per_batch)
    return PaddingFreeCollator()


def hf_dataset(src: Any) -> Any:
    """The HF features the Trainer trains on (``{"input_ids": ...}``), pieces where the spec
    yields codes, a mixture's concatenated."""
    if not is_lm(src) and (is_mixture(src) or not is_stream(src)):
        return dataset_for(src, "collate", C.FEATURES)
    return C.FEATURES


class SaveAt:
    """Save checkpoints after exactly these global steps."""

    def __new__(cls, steps: Any) -> Any:
        from transformers import TrainerCallback

        class _SaveAt(TrainerCallback):
            def __init__(self, steps: Any) -> None:
                self.steps = set(steps)

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
                if state.global_step in self.steps:
                    control.should_save = True
                return control

        return _SaveAt(steps)


def hf_train(
    env: Env,
    src: Any,
    *,
    save_at: tuple[int, ...] = (),
    resume: str | None = None,
) -> tuple[list[C.Got], str]:
    """Train a recording model with ``PadlessTrainerMixin`` on ``src``'s batches for one epoch.

    Construction is the Trainer's ``__init__`` and ``train()`` up to the first forward (the
    Trainer builds its DataLoader and loads a checkpoint's state there, before step 1): an
    error there is a refusal at construction. Returns the recorded batches and the output
    folder.
    """
    from transformers import Trainer, TrainingArguments
    from transformers.utils import logging as hf_logging

    from padless.hf import PadlessTrainerMixin

    class PadlessTrainer(PadlessTrainerMixin, Trainer):
        pass

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    out = env.scratch("hf")
    model = Recorder()
    with building():
        collator = hf_collator(src)
        model.flat = getattr(collator, "capacity", None) is None
        args = TrainingArguments(
            out,
            num_train_epochs=1,
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            remove_unused_columns=False,
            disable_tqdm=True,
            learning_rate=1e-3,
            seed=0,
            gradient_accumulation_steps=1,
        )
        trainer = PadlessTrainer(
            model=model,
            args=args,
            train_dataset=hf_dataset(src),
            data_collator=collator,
            batch_sampler=src,
            check_packed=False,
            callbacks=[SaveAt(save_at)] if save_at else None,
        )
        model.trainer = trainer
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            trainer.train(resume_from_checkpoint=resume)
    except Exception as err:
        if not model.seen:
            raise Built(err) from err
        raise
    return model.seen, out


def hf_state(out: str, step: int) -> Any:
    from padless.hf import STATE_FILE

    return json.loads((Path(out) / f"checkpoint-{step}" / STATE_FILE).read_text())


def bare_gots(src: Any, collate: Any, dataset: Any) -> list[C.Got]:
    """What the bare sampler's batches are through ``collate`` over ``dataset`` (no loader)."""
    out = []
    for step, batch in enumerate(src):
        got = C.read(collate([dataset[i] for i in batch]))
        got.step = got.opt = step
        out.append(got)
    return out
