"""Hugging Face glue: padless samplers inside ``transformers.Trainer`` (and TRL's trainers), and
padding-free batches in the format HF models accept.

The only padless module that imports ``transformers`` and ``accelerate``.

- :class:`PadlessTrainerMixin`: mix into any ``Trainer`` subclass
  (``class MyTrainer(PadlessTrainerMixin, Trainer)``, or TRL's ``SFTTrainer``) and pass
  ``batch_sampler=`` a padless sampler. The Trainer then trains on exactly that sampler's batches, in
  its order, with your ``data_collator``; accelerate does not deal them out again; every process
  runs the same number of steps; the sampler's state goes into every checkpoint and
  ``trainer.train(resume_from_checkpoint=...)`` continues with exactly the batches the
  uninterrupted run would have used.
- :class:`PaddingFreeCollator`: ``input_ids``, ``labels`` and ``position_ids`` restarting at every
  sequence, as ``transformers.DataCollatorWithFlattening`` emits them, flat ``(1, total)`` or in the
  ``(rows, capacity)`` layout of a :class:`padless.PackingSampler` batch.
- :class:`PaddedCollator`: padded batches as the plan budgets them (its width multiple, or the
  batch's shape of a :class:`padless.FixedShapes` plan).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import itertools
import json
import logging
import math
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import Any, cast

import numpy as np

from .core._check import (
    INT64_MAX,
    check_bool,
    check_choice,
    check_int,
    check_int64,
    positive_or_none,
)
from .io import lengths_of
from .io.checked import CheckedDataset, Field, _check_field, _measure, sampler_lengths
from .planners.exact import ExactLength
from .planners.packing import PieceDataset, ScheduledPiece
from .planners.spec import Spec, check_collate_multiple
from .planners.step import plan_step
from .sampling.placed import refuse_placements
from .sampling.sampler import PlanSampler
from .torch import MixtureDataset, PackedCollate, PaddedCollate, collate_padded
from .torch._collate import _as_ids as as_ids
from .torch._collate import _refuse_own_labels as refuse_own_labels
from .torch._flex import flex_block_mask
from .torch._groups import (
    GroupCollate,
    PreferencePairs,
    check_prefix_packed,
    completion_logprobs,
    dpo_loss,
)
from .torch._packed_check import block_causal_mask, packs
from .torch._packed_check import check_packed as _check_packed
from .torch._pairs import PackedPairsCollate
from .torch._rollout import split_rollout

logger = logging.getLogger(__name__)

STATE_FILE = "padless_sampler.json"
"""Name of the file each checkpoint folder gets: the sampler state to continue from (JSON)."""

_SAMPLER_API = ("__iter__", "__len__", "set_epoch", "state_dict", "load_state_dict")


def _packed_preflight(model: Any, collator: Any, who: str) -> None:
    """Before training: refuse a model that lets the sequences ``collator`` packs together see
    each other (a collator's own ``check_model``, e.g. pairs, else :func:`check_packed`); a
    model the check cannot call is a warning."""
    own = getattr(collator, "check_model", None)  # a collator that packs other rows
    if collator is None or (not callable(own) and not packs(collator)):
        return
    try:
        if callable(own):
            own(model)
        else:
            _check_packed(model, collate=collator)
    except ValueError as err:
        raise ValueError(
            f"{err} ({who} checks this before training; check_packed=False skips it)"
        ) from None
    except Exception as err:  # noqa: BLE001 - a model this check cannot call
        logger.warning(
            "could not check that %s keeps packed sequences apart (%s: %s); pass "
            "check_packed=False to skip this check",
            type(model).__name__,
            type(err).__name__,
            err,
        )


def _check_sampler(sampler: Any) -> Any:
    refuse_placements(sampler, "a Trainer's batch_sampler")
    missing = [name for name in _SAMPLER_API if not hasattr(sampler, name)]
    missing += [name for name in ("rank", "world_size", "epoch") if not hasattr(sampler, name)]
    if missing:
        raise TypeError(
            "batch_sampler must be a padless sampler (TokenBudgetSampler, PackingSampler, "
            f"MixtureSampler...); {type(sampler).__name__} lacks {missing}"
        )
    if getattr(sampler, "yields", "indices") != "indices":
        raise TypeError(
            f"batch_sampler must yield indices of train_dataset, and a {type(sampler).__name__} "
            "yields the token batches themselves (x, y read from its corpus), which a Trainer "
            "cannot take as a batch_sampler: for pre-training under the Trainer, plan the "
            "documents with a PackingSampler (rows of whole documents, PaddingFreeCollator); "
            "or train on the stream in your own loop (padless.torch.lm_tensors)"
        )
    return sampler


# --------------------------------------------------------------------------- batches for the Trainer


STEP = "padless_step"
"""Key of a whole optimizer step's input (the step's index in the iteration) when the sampler
has ``batches_per_step``; its micro-batches, collated each, are under :data:`MICRO_BATCHES`."""
MICRO_BATCHES = "padless_micro_batches"


def _steps_of(sampler: Any) -> bool:
    """Whether ``sampler`` cuts its batches into optimizer steps (``batches_per_step``)."""
    return getattr(sampler, "batches_per_step", None) is not None


class TrainerBatches:
    """The batch sampler a :class:`PadlessTrainerMixin` hands the DataLoader.

    It yields the padless sampler's batches unchanged and holds the number of batches per epoch
    fixed: the Trainer sizes every epoch from the first one (``len(dataloader)``), so an epoch of
    another length would be cut short or leave an optimizer step half accumulated. ``set_epoch``
    therefore refuses an epoch whose length differs, before any batch of it is used. (Samplers over
    one length per item plan the same number of batches every epoch.)

    A sampler with ``batches_per_step`` (a batch-size ramp) is yielded one optimizer step at a
    time instead: the keys of the step's micro-batches, each ``(step, micro-batch, key)``, which
    the mixin's dataset and collate turn into one input per step (its micro-batches collated
    each); the length is then the epoch's optimizer steps, which every epoch must share.

    Args:
        sampler: the padless sampler.

    >>> from padless import TokenBudgetSampler
    >>> batches = TrainerBatches(TokenBudgetSampler([3, 1, 2, 5, 4, 4], max_tokens=6, seed=0))
    >>> batches.set_epoch(1)
    >>> len(batches), sorted(i for b in batches for i in b)
    (5, [0, 1, 2, 3, 4, 5])
    """

    def __init__(self, sampler: Any) -> None:
        self.padless_sampler = _check_sampler(sampler)
        self.by_step = _steps_of(sampler)
        self.length = self._count()
        self._lead: tuple[int, int] | None = None  # (epoch, placeholders): see skipped_by_trainer

    def skipped_by_trainer(self, epoch: int, count: int) -> None:
        """The sampler was put where a checkpoint left it, inside ``epoch``, and the Trainer
        will skip the epoch's first ``count`` batches (optimizer steps with ``batches_per_step``)
        by index: the next iteration of that epoch yields ``count`` empty placeholders first,
        which the Trainer skips unloaded, then the sampler's batches from where it stands."""
        self._lead = (epoch, count) if count else None

    def _count(self) -> int:
        sampler = self.padless_sampler
        return int(sampler.step_sizes().size) if self.by_step else len(sampler)

    def __iter__(self) -> Iterator[list[Any]]:
        sampler = self.padless_sampler
        lead = self._lead[1] if self._lead and self._lead[0] == sampler.epoch else 0
        self._lead = None  # once: a later iteration of the epoch starts it afresh
        if not self.by_step:
            batches: Iterator[list[Any]] = iter(sampler)
        else:
            batches = (
                [(k, j, key) for j, batch in enumerate(group) for key in batch]
                for k, group in enumerate(sampler.steps(sampler))
            )
        return itertools.chain(([] for _ in range(lead)), batches) if lead else batches

    def __len__(self) -> int:
        return self.length

    def batches_before(self, steps: int) -> int:
        """This process's batches in the epoch's first ``steps`` optimizer steps (one step is
        one batch without ``batches_per_step``)."""
        if not self.by_step:
            return steps
        return int(self.padless_sampler.step_sizes()[:steps].sum())

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch; a ``ValueError`` if it has another number of batches than the first."""
        sampler = self.padless_sampler
        sampler.set_epoch(epoch)
        if self._lead is not None and self._lead[0] != epoch:
            self._lead = None
        got = self._count()
        if self._lead is not None and not self.by_step:  # len() counts from where it stands
            got += self._lead[1]
        if got != self.length:
            what = "optimizer steps" if self.by_step else "batches per process"
            raise ValueError(
                f"epoch {epoch} of the batch_sampler has {got} {what}, the first epoch "
                f"had {self.length}; transformers.Trainer needs the same number every epoch (it "
                "sizes epochs and accumulation steps from the first). Plan with one length per "
                "item (with a batch-size ramp: train one epoch, or ramp within max_steps of it), "
                "or drive the sampler from your own loop"
            )


class _StepRows:
    """The dataset a step's keys index: ``(step, micro-batch, key)`` -> ``(step, micro-batch,
    dataset[key])``."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int, Any]) -> tuple[int, int, Any]:
        step, micro, inner = key
        return step, micro, self.dataset[inner]


class _StepCollate:
    """One optimizer step's rows -> ``{STEP: step, MICRO_BATCHES: [collate(micro-batch)...]}``."""

    def __init__(self, collate: Any) -> None:
        self.collate = collate

    def __call__(self, rows: Sequence[tuple[int, int, Any]]) -> dict[str, Any]:
        groups: list[list[Any]] = []
        for _, micro, row in rows:
            while micro >= len(groups):
                groups.append([])
            groups[micro].append(row)
        return {STEP: int(rows[0][0]), MICRO_BATCHES: [self.collate(g) for g in groups]}


# --------------------------------------------------------------------------- the Trainer mixin


def _refuse_rollout_trainers(cls: type) -> None:
    """Refuse PadlessTrainerMixin over an online RL trainer (TRL's GRPO or RLOO, or
    PackedGRPOMixin): such a trainer samples each prompt ``num_generations`` times with its own
    sampler and scores each group's rollouts together; a plan of the dataset's rows in its place
    puts unrelated prompts in one group (advantages across them), and PackedGRPOMixin already
    plans each step's rollouts."""
    names = [c.__name__ for c in cls.__mro__]
    online = [n for n in ("PackedGRPOMixin", "GRPOTrainer", "RLOOTrainer") if n in names]
    if online:
        raise TypeError(
            f"{cls.__name__} puts PadlessTrainerMixin over {online[0]}: an online RL trainer "
            "samples each prompt num_generations times and scores a group's rollouts together, "
            "and a plan of the dataset's rows in place of its sampler would group unrelated "
            "prompts. Use PackedGRPOMixin without PadlessTrainerMixin (it plans each step's "
            f"rollouts with padless.plan_step): class {cls.__name__}(PackedGRPOMixin, "
            f"{online[-1] if online[-1] != 'PackedGRPOMixin' else 'GRPOTrainer'})"
        )


class PadlessTrainerMixin:
    """Train a ``transformers.Trainer`` (or TRL trainer) on a padless sampler's batches.

    Mix it in *before* the Trainer class and pass the sampler as ``batch_sampler=``::

        from transformers import Trainer, TrainingArguments
        from padless import TokenBudgetSampler
        from padless.hf import PadlessTrainerMixin

        class PadlessTrainer(PadlessTrainerMixin, Trainer):
            pass

        args = TrainingArguments("out", num_train_epochs=3, save_steps=500)
        sampler = TokenBudgetSampler(lengths, max_tokens=16384, seed=args.seed,
                                     rank=args.process_index, world_size=args.world_size)
        trainer = PadlessTrainer(model=model, args=args, train_dataset=dataset,
                                 data_collator=collator, batch_sampler=sampler)
        trainer.train()                                   # or resume_from_checkpoint=True

    What it does:

    - **No second sharding.** The sampler already gives each process its own batches, so the
      ``BatchSamplerShard`` that ``accelerator.prepare`` wraps around a batch sampler is made a
      pass-through (what transformers does for its own rank-aware ``BatchRebalanceSampler``);
      ``dispatch_batches=True`` or ``split_batches=True`` are refused with a ``ValueError``.
      ``per_device_train_batch_size`` and ``dataloader_drop_last`` do not apply: the sampler
      decides.
    - **The dataset is the lengths' dataset.** The dataset the DataLoader indexes (after the
      Trainer's or TRL's preparation) is bound to the sampler's lengths with
      :class:`padless.io.checked.CheckedDataset`, measured on ``length_field`` (``"input_ids"``;
      a tuple of keys for (N, F) lengths, a function ``row -> length``, or None for rows that
      are token sequences): another number of rows is a ``ValueError`` when the trainer is
      built, and so is a row of another length for a ``datasets.Dataset`` or a list (checked
      whole); other datasets are checked row by row as they are loaded.
    - **No reordering.** Settings that reorder or drop rows are refused with a ``ValueError``
      that says what to do instead: TRL's ``shuffle_dataset=True`` and ``packing=True``, and
      ``train_sampling_strategy`` other than ``"random"`` (``group_by_length``). A TRL
      preparation that dropped or truncated rows fails the dataset check, naming the cause.
    - **The collator delivers the plan.** The ``data_collator`` (yours, or the trainer's
      default: TRL's pads every sequence to a row of its own) is checked against the plan when
      the trainer is built: one that would give the model other batches than planned (a padding
      collator under a packing plan, anything but :class:`PaddedCollator` under static shapes,
      rows of another capacity, another width multiple...) is a ``ValueError`` naming the
      collator, the sampler's strategy and the collator to pass. A collator padless does not
      know is taken as padding to the longest under a padded plan and refused under a packing
      or static-shape plan unless ``trust_collator=True`` (you vouch that it lays out every
      batch as planned). docs/trainers.md has the table.
    - **Pieces.** A sampler that cuts sequences (Decomposition, a packing that splits, truncates
      or warms up its capacity) needs ``train_dataset=sampler.pieces(dataset, keys=...)``; a
      plain dataset, another kind of pieces or a sequence field left out of ``keys`` is a
      ``ValueError`` when the trainer is built. The rows under the pieces are checked against
      the lengths, and the pieces served are exactly those the plan names.
    - **Epochs.** The Trainer's epoch reaches the sampler's ``set_epoch``; every epoch must have
      the same number of batches (see :class:`TrainerBatches`).
    - **Checkpoints.** Each checkpoint folder gets ``padless_sampler.json``, the sampler state at
      the batches trained so far (written by the process that writes the checkpoint).
    - **Resume.** ``train(resume_from_checkpoint=...)`` loads that state into the sampler
      (refusing, with a ``ValueError``, one saved for other data or seed) and checks it against
      the Trainer's own count (global step, accumulation), which must agree; the Trainer then
      skips the epoch's first batches by *index* (accelerate's ``SkipBatchSampler``), and is
      handed empty placeholders for them, so nothing skipped is planned again or loaded. The
      run continues with exactly the uninterrupted run's batches. A state saved under other
      sampler settings continues as the bare sampler's resume across a change does (the rest
      of the epoch planned under the new settings) when every epoch keeps its batches per
      process (a mixture's weights); a change that alters them (``max_tokens``) is a
      ``ValueError`` naming it, before any step: the Trainer counts epochs by a fixed number
      of batches. ``ignore_data_skip=True`` keeps its meaning: the interrupted epoch restarts
      from its first batch. ``resume_from_checkpoint=True`` takes the newest
      *complete* checkpoint (:func:`newest_checkpoint`: a partial one, from a run killed while
      writing it, is skipped with a warning) and, with none, trains from the start.

    - **Batch-size ramps.** A sampler with ``batches_per_step`` (a :class:`padless.Schedule`
      of micro-batches per optimizer step, or ``tokens_per_step``) sets the accumulation itself:
      the DataLoader yields one input per optimizer step, holding the step's micro-batches
      (collated each), and ``training_step`` runs forward and backward on each in turn (the
      gradient reduced once, after the last), its loss weighted by the micro-batch's share of
      the step's targets (a model's loss is taken to be the mean over its batch's targets), so
      the step's gradient is that of the mean loss over all of the step's targets on every
      rank, whatever its size. The targets are counted in the micro-batches' ``labels`` where
      they have them (not -100, after the shift for ``loss_targets="shifted"``; summed over
      the ranks by one all-reduce), so an SFT row's masked prompt counts no target; otherwise
      in the plan (``sampler.loss_tokens``, counting ``loss_targets``, no communication).
      ``gradient_accumulation_steps`` must then be 1, and every epoch must have the same number
      of optimizer steps (the Trainer sizes epochs from the first): a ramp fits a run of one
      epoch, or ``max_steps`` within the first. Checkpoints and resume work as above, counted
      in optimizer steps.
    - **Documents kept apart.** When the ``data_collator`` packs several sequences into a row
      (``PaddingFreeCollator``, ``DataCollatorWithFlattening``, ``collate_packed``), ``train()``
      first runs :func:`check_packed` on the model: one whose attention lets a packed document
      see the ones before it is refused with a ``ValueError`` naming the fix (see
      docs/packed_attention.md); ``check_packed=False`` skips it.

    - **Lengths known only after the trainer's preparation.** ``batch_sampler`` may be a
      planner spec (``padless.Packing(capacity=..., rows_per_batch=...)`` and the others): the
      mixin then plans it, once the trainer has prepared its dataset (TRL tokenizes text
      columns in its ``__init__``), as ``PlanSampler(lengths, spec, seed=args.seed,
      rank=args.process_index, world_size=args.world_size)`` over the prepared rows' lengths by
      ``length_field`` (from the Arrow offsets for a ``datasets.Dataset`` column); a row the
      spec cannot take is a ``ValueError`` when the trainer is built. With
      :class:`PackedDPOMixin` (``class T(PadlessTrainerMixin, PackedDPOMixin, DPOTrainer)``,
      in this order) ``length_field`` defaults to :func:`pair_length` (a pair's prompt once,
      its chosen and rejected completions), so a ``Packing`` spec plans whole pairs into the
      rows :class:`PreferenceCollator` packs; tests/test_trl_dpo_sampler.py trains it.

    The sampler's ``rank`` and ``world_size`` must be this process's (``args.process_index``,
    ``args.world_size``); a mismatch is a ``ValueError``. Cost: one plan computation per epoch
    (a resume inside an epoch: the plan of each part of it, no replay).

    >>> import torch
    >>> from transformers import Trainer, TrainingArguments
    >>> from padless import TokenBudgetSampler
    >>> class PadlessTrainer(PadlessTrainerMixin, Trainer):
    ...     pass
    >>> lengths = [3, 1, 2, 5, 4, 4]
    >>> rows = [{"input_ids": [7] * n, "row": i} for i, n in enumerate(lengths)]
    >>> sampler = TokenBudgetSampler(lengths, max_tokens=6, seed=0)
    >>> args = TrainingArguments("out", use_cpu=True, report_to=[], remove_unused_columns=False)
    >>> trainer = PadlessTrainer(model=torch.nn.Linear(1, 1), args=args, train_dataset=rows,
    ...                          data_collator=lambda b: [r["row"] for r in b],
    ...                          batch_sampler=sampler)
    >>> list(trainer.get_train_dataloader()) == [list(b) for b in sampler]
    True
    >>> PadlessTrainer(model=torch.nn.Linear(1, 1), args=args, train_dataset=rows[::-1],
    ...                data_collator=lambda b: b, batch_sampler=sampler)
    Traceback (most recent call last):
    ...
    ValueError: train_dataset does not fit the batch_sampler: dataset item 0 has length 4, but the sampler planned 3: ...
    """

    def __init__(
        self,
        *args: Any,
        batch_sampler: Any,
        length_field: Field = "input_ids",
        check_packed: bool = True,
        loss_targets: Any = "shifted",
        trust_collator: bool = False,
        **kwargs: Any,
    ) -> None:
        _refuse_rollout_trainers(type(self))
        # a spec: planned once the trainer has prepared (tokenized) its dataset, see below
        spec = batch_sampler if isinstance(batch_sampler, Spec) else None
        if spec is None:
            _check_sampler(batch_sampler)
        if isinstance(self, PackedDPOMixin):
            if length_field == "input_ids":
                length_field = pair_length  # the default: a preference row's tokens, packed
            if isinstance(loss_targets, str) and loss_targets == "shifted":
                loss_targets = _one_per_row  # the DPO loss is a mean over pairs, not tokens
        trust_collator = check_bool("trust_collator", trust_collator)
        default_collator = kwargs.get("data_collator", args[2] if len(args) > 2 else None) is None
        if spec is None:
            self._padless_loss_targets_checked(batch_sampler, loss_targets, length_field)
        else:  # before the trainer's preparation: the lengths' shape is the field's
            columns = len(length_field) if isinstance(length_field, (tuple, list)) else 0
            try:
                _check_field(length_field, columns)
            except (TypeError, ValueError) as err:
                raise type(err)(f"length_field={length_field!r} is refused: {err}") from None
        given = kwargs.get("args", args[1] if len(args) > 1 else None)
        if given is not None:
            _refuse_reordering(given)  # before TRL prepares (and shuffles or packs) the data
        super().__init__(*args, **kwargs)
        trainer: Any = self
        _refuse_reordering(trainer.args)
        if spec is None:
            sampler = batch_sampler
        else:
            sampler = self._padless_plan(spec, trainer.train_dataset, length_field)
            self._padless_loss_targets_checked(sampler, loss_targets, length_field)
        lengths = sampler_lengths(sampler)
        procs, index = trainer.accelerator.num_processes, trainer.accelerator.process_index
        if (sampler.world_size, sampler.rank) != (procs, index):
            raise ValueError(
                f"batch_sampler must shard for this process: it has rank={sampler.rank}, "
                f"world_size={sampler.world_size}, but this is process {index} of {procs}; build it "
                "with rank=args.process_index, world_size=args.world_size"
            )
        if _steps_of(sampler) and trainer.args.gradient_accumulation_steps != 1:
            raise ValueError(
                "gradient_accumulation_steps must be 1 when the batch_sampler has "
                "batches_per_step or tokens_per_step (its schedule sets the micro-batches of "
                "each optimizer step), "
                f"got {trainer.args.gradient_accumulation_steps}"
            )
        if trainer.data_collator is not None:
            _check_collator(
                trainer.data_collator, sampler, trust=trust_collator, default=default_collator
            )
            _check_bare_collate(trainer.data_collator, trainer.train_dataset)
        self.padless_sampler = sampler
        self.padless_loss_targets = loss_targets
        self._padless_weight: float | None = None
        self.padless_length_field = length_field
        self._padless_lengths = lengths
        self._padless_batches = TrainerBatches(sampler)
        self._padless_resume: str | None = None
        self._padless_offset: tuple[int, int] | None = None  # (epoch, batches) see _padless_restore
        self._padless_check_packed = check_bool("check_packed", check_packed)
        if trainer.train_dataset is not None:
            self._padless_checked(trainer.train_dataset)  # a prepared dataset that differs: now

    @staticmethod
    def _padless_loss_targets_checked(sampler: Any, loss_targets: Any, length_field: Any) -> None:
        """Refuse ``loss_targets`` and ``length_field`` that cannot serve ``sampler``."""
        if (
            _steps_of(sampler)
            and loss_targets not in ("shifted", "all")
            and not callable(loss_targets)
        ):
            raise ValueError(
                f"loss_targets must be 'shifted', 'all' or a function (see "
                f"PlanSampler.loss_tokens), got {loss_targets!r}"
            )
        lengths = sampler_lengths(sampler)
        if lengths is not None:
            try:
                _check_field(length_field, int(lengths.shape[1]) if lengths.ndim == 2 else 0)
            except (TypeError, ValueError) as err:
                raise type(err)(f"length_field={length_field!r} is refused: {err}") from None

    def _padless_plan(self, spec: Any, dataset: Any, length_field: Any) -> Any:
        """The sampler of ``batch_sampler=spec``: a :class:`padless.PlanSampler` over the lengths
        of the dataset the trainer prepared, with the trainer's seed, rank and world size."""
        trainer: Any = self
        if dataset is None:
            raise ValueError(
                "batch_sampler is a spec, planned over train_dataset's lengths: pass a "
                "train_dataset (or a sampler built on lengths of your own)"
            )
        try:
            lengths = _dataset_lengths(dataset, length_field)
        except (TypeError, ValueError) as err:
            raise type(err)(
                f"batch_sampler={spec.describe()} is planned over the lengths of the dataset the "
                f"trainer prepared, measured by length_field={_field_name(length_field)}: {err}"
            ) from None
        if _serves_pieces(spec, np.asarray(lengths)):
            raise ValueError(
                f"batch_sampler={spec.describe()} cuts sequences into pieces, which only its "
                "sampler's pieces(dataset) serves, and a spec the trainer plans has no dataset "
                "of pieces: build the sampler on the prepared dataset's lengths yourself and "
                "pass train_dataset=sampler.pieces(dataset), or a spec that keeps sequences "
                "whole (oversize='error' or 'drop', no capacity_schedule)"
            )
        try:
            sampler = PlanSampler(
                lengths,
                spec,
                seed=trainer.args.seed,
                rank=trainer.accelerator.process_index,
                world_size=trainer.accelerator.num_processes,
            )
            len(sampler)  # plans the first epoch: a row the spec cannot take fails now
        except ValueError as err:
            raise ValueError(
                f"batch_sampler={spec.describe()} cannot plan the dataset the trainer prepared "
                f"(lengths by length_field={_field_name(length_field)}): {err}"
            ) from None
        return sampler

    def _padless_checked(self, dataset: Any) -> Any:
        """``dataset`` bound to the sampler's lengths (:class:`padless.io.checked.CheckedDataset`)."""
        lengths = self._padless_lengths
        if lengths is None:  # a sampler of the user's own without lengths: nothing to check
            return dataset
        bound = self.__dict__.get("_padless_bound")
        if bound is not None and bound[0] is dataset:
            return bound[1]  # checked when the trainer was built: not twice
        out = self._padless_bind(dataset, lengths)
        self.__dict__["_padless_bound"] = (dataset, out)
        return out

    def _padless_bind(self, dataset: Any, lengths: Any) -> Any:
        sampler = self.padless_sampler
        _check_pieces(dataset, sampler, lengths)
        if isinstance(dataset, MixtureDataset):  # each corpus's part, bound to its sampler
            subs = list(sampler.samplers.values())
            return dataset.with_served(
                [
                    part
                    if getattr(part, "serves_codes", False)  # a TokenDataset: checked when built
                    else self._padless_bind_one(part, sub, sampler_lengths(sub))
                    for part, sub in zip(dataset.served, subs, strict=True)
                ]
            )
        return self._padless_bind_one(dataset, sampler, lengths)

    def _padless_bind_one(self, dataset: Any, sampler: Any, lengths: Any) -> Any:
        """``dataset`` (one corpus's) bound to ``sampler``'s ``lengths``: checked rows, inside
        the same kind of pieces where it serves pieces."""
        if sampler is not self.padless_sampler:
            _check_pieces(dataset, sampler, lengths)
        inner = dataset.dataset if isinstance(dataset, PieceDataset) else dataset
        try:
            checked = CheckedDataset(inner, lengths, field=self.padless_length_field)
        except ValueError as err:
            raise ValueError(
                f"train_dataset does not fit the batch_sampler: {err}{_prepared_hint(self)}"
            ) from None
        if isinstance(inner, (list, tuple)):
            try:
                checked.verify()  # in memory: one quick pass, so a wrong row fails before step 1
            except ValueError as err:
                raise ValueError(f"train_dataset does not fit the batch_sampler: {err}") from None
        if isinstance(dataset, PieceDataset):
            # the same kind of pieces over the checked rows: a Decomposition's cut by its rule
            out = copy.copy(dataset)
            out.dataset = checked
            return out
        return checked

    # ------------------------------------------------------------------ data
    def get_train_dataloader(self) -> Any:
        """The DataLoader over the padless batches, prepared by accelerate without re-sharding."""
        from accelerate.data_loader import BatchSamplerShard, DataLoaderDispatcher
        from torch.utils.data import DataLoader

        trainer: Any = self
        if trainer.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        args = trainer.args
        dataset, collator = trainer.train_dataset, trainer.data_collator
        try:
            import datasets

            is_arrow = isinstance(dataset, datasets.Dataset)
        except ImportError:  # pragma: no cover - datasets comes with transformers' Trainer
            is_arrow = False
        checked = self._padless_checked(dataset)  # the rows the DataLoader will index
        if is_arrow:
            # removing columns keeps the rows: an Arrow dataset checked whole needs no wrapper
            dataset = trainer._remove_unused_columns(dataset, description="training")
            if not getattr(checked, "verified", True):
                dataset = self._padless_checked(dataset)
        else:
            dataset = checked
            collator = trainer._get_collator_with_removed_columns(collator, description="training")
        batches = self._padless_batches
        if batches.by_step:  # one input per optimizer step: its micro-batches, collated each
            dataset, collator = _StepRows(dataset), _StepCollate(collator)
        if self._padless_resume is not None:
            self._padless_restore(self._padless_resume)
        workers = args.dataloader_num_workers
        params: dict[str, Any] = {
            "collate_fn": collator,
            "num_workers": workers,
            "pin_memory": args.dataloader_pin_memory,
            "persistent_workers": bool(args.dataloader_persistent_workers and workers),
            "worker_init_fn": _worker_init(workers, args.process_index),
        }
        if workers:
            params["prefetch_factor"] = args.dataloader_prefetch_factor
        prepared = trainer.accelerator.prepare(DataLoader(dataset, batch_sampler=batches, **params))
        if isinstance(prepared, DataLoaderDispatcher):
            raise ValueError(
                "PadlessTrainerMixin needs accelerator_config dispatch_batches=False: with "
                "dispatch_batches=True process 0 would read its own shard and split it among all"
            )
        inner = getattr(prepared, "batch_sampler", None)
        if isinstance(inner, BatchSamplerShard) and inner.batch_sampler is batches:
            if inner.split_batches:  # pragma: no cover - prepare refuses it first (no batch_size)
                raise ValueError("PadlessTrainerMixin needs accelerator_config split_batches=False")
            inner.num_processes, inner.process_index = 1, 0  # pass-through: already sharded
        elif inner is not batches:
            raise ValueError(
                "accelerate replaced the padless batch sampler by "
                f"{type(inner).__name__}; PadlessTrainerMixin needs the default accelerator_config"
            )
        return prepared

    # ------------------------------------------------------------------ state
    def _padless_steps(self) -> tuple[int, int]:
        """(batches per epoch, optimizer steps per epoch) as the Trainer counts them."""
        trainer: Any = self
        batches = self._padless_batches
        if batches.by_step:  # the whole epoch's micro-batches, wherever the sampler stands
            return int(self.padless_sampler.step_sizes().sum()), max(batches.length, 1)
        per_epoch = batches.length
        accumulate = trainer.args.gradient_accumulation_steps
        return per_epoch, max(math.ceil(per_epoch / accumulate), 1)

    def _padless_batches_before(self, steps: int) -> int:
        """This process's batches in the epoch's first ``steps`` optimizer steps."""
        trainer: Any = self
        if self._padless_batches.by_step:
            return self._padless_batches.batches_before(steps)
        return steps * trainer.args.gradient_accumulation_steps

    def padless_state(self) -> dict[str, Any]:
        """The sampler state after the batches of ``self.state.global_step`` optimizer steps.

        This is what checkpoints hold. At an epoch's end it is the finished epoch (position past
        its last batch); loading it continues with the next epoch.
        """
        trainer: Any = self
        sampler = self.padless_sampler
        per_epoch, steps = self._padless_steps()
        step = trainer.state.global_step
        epoch, done = divmod(step, steps)
        # batches of the sampler's epoch before its iteration began (a resume's position)
        offset = self._padless_offset
        before = offset[1] if offset is not None and offset[0] == sampler.epoch else 0
        if done == 0 and step > 0 and sampler.epoch == epoch - 1:
            return dict(sampler.state_dict(consumed=per_epoch - before))
        if sampler.epoch != epoch:
            raise RuntimeError(
                f"the batch_sampler is at epoch {sampler.epoch} but the Trainer at epoch {epoch} "
                f"(global step {step}); was set_epoch called from outside the Trainer?"
            )
        consumed = min(self._padless_batches_before(done), per_epoch) - before
        return dict(sampler.state_dict(consumed=consumed))

    # ------------------------------------------------------------------ optimizer steps
    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        """``Trainer.training_step``; a whole optimizer step's input (a sampler with
        ``batches_per_step``) runs each of its micro-batches in turn, weighted (see the class)."""
        micro = inputs.get(MICRO_BATCHES) if isinstance(inputs, Mapping) else None
        if micro is None:
            return super().training_step(model, inputs, num_items_in_batch)  # type: ignore[misc]
        trainer: Any = self
        sampler = self.padless_sampler
        labelled = self._padless_label_targets(micro)
        if labelled is None:
            total, counts = sampler.loss_tokens(
                int(inputs[STEP]), targets=self.padless_loss_targets
            )
        else:  # the rows' own labels (an SFT prompt's -100s): counted, summed over the ranks
            import torch

            counts = labelled
            mine = torch.tensor(float(sum(counts)), device=trainer.accelerator.device)
            total = float(trainer.accelerator.reduce(mine, reduction="sum").item())
        out = None
        try:
            for j, batch in enumerate(micro):
                self._padless_weight = counts[j] * sampler.world_size / total if total else 0.0
                last = j == len(micro) - 1
                reduce = contextlib.nullcontext() if last else trainer.accelerator.no_sync(model)
                with reduce:
                    loss = super().training_step(model, batch, None)  # type: ignore[misc]
                out = loss if out is None else out + loss
        finally:
            self._padless_weight = None
        return out

    def _padless_label_targets(self, micro: Sequence[Any]) -> list[int] | None:
        """Each micro-batch's targets counted in its ``labels`` (not -100; shifted by one for
        ``loss_targets="shifted"``), or None where the plan's count stands: a ``loss_targets``
        function, or micro-batches without ``labels``. The same on every rank: one collator."""
        mode = self.padless_loss_targets
        if not (isinstance(mode, str) and mode in ("shifted", "all")):
            return None
        counts = []
        for batch in micro:
            labels = batch.get("labels") if isinstance(batch, Mapping) else None
            if labels is None or not hasattr(labels, "ne"):
                return None
            kept = labels[..., 1:] if mode == "shifted" else labels
            counts.append(int(kept.ne(-100).sum()))
        return counts

    def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.compute_loss``, times the micro-batch's weight inside an optimizer step."""
        out = super().compute_loss(model, inputs, *args, **kwargs)  # type: ignore[misc]
        weight = self._padless_weight
        if weight is None:
            return out
        if isinstance(out, tuple):
            return (out[0] * weight, *out[1:])
        return out * weight

    def floating_point_ops(self, inputs: Any) -> int:
        """``Trainer.floating_point_ops``, summed over an optimizer step's micro-batches."""
        micro = inputs.get(MICRO_BATCHES) if isinstance(inputs, Mapping) else None
        parent: Any = super()
        if micro is None:
            return int(parent.floating_point_ops(inputs))
        return sum(int(parent.floating_point_ops(b)) for b in micro)

    def _track_num_input_tokens(self, inputs: Any) -> None:
        micro = inputs.get(MICRO_BATCHES) if isinstance(inputs, Mapping) else None
        parent: Any = super()
        for batch in [inputs] if micro is None else micro:
            parent._track_num_input_tokens(batch)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)  # type: ignore[misc]
        trainer: Any = self
        if not trainer.args.should_save:
            return
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        folder = os.path.join(
            trainer._get_output_dir(trial=trial),
            f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}",
        )
        _write_json(os.path.join(folder, STATE_FILE), self.padless_state())

    def train(
        self,
        resume_from_checkpoint: str | bool | None = None,
        trial: Any = None,
        ignore_keys_for_eval: list[str] | None = None,
        **kwargs: Any,
    ) -> Any:
        """``Trainer.train``; a checkpoint to resume from also restores the sampler (see the class)."""
        path: Any = resume_from_checkpoint
        if path is True:
            path = newest_checkpoint(self.args.output_dir)  # type: ignore[attr-defined]
            if path is None:
                logger.info(
                    "resume_from_checkpoint=True: no checkpoint in %s, training from the start",
                    self.args.output_dir,  # type: ignore[attr-defined]
                )
        self._padless_resume = None if path is None or path is False else os.fspath(path)
        self._padless_offset = None
        self._padless_packed_check()
        try:
            return super().train(  # type: ignore[misc]
                resume_from_checkpoint=self._padless_resume,
                trial=trial,
                ignore_keys_for_eval=ignore_keys_for_eval,
                **kwargs,
            )
        finally:
            self._padless_resume = None

    def _padless_packed_check(self) -> None:
        """Refuse a model that lets packed documents see each other (see :func:`check_packed`),
        once: before the first of ``train``, ``evaluate`` and ``predict`` (the model and the
        collator stay the same)."""
        if not self._padless_check_packed:
            return
        trainer: Any = self
        _packed_preflight(trainer.model, trainer.data_collator, "PadlessTrainerMixin")
        self._padless_check_packed = False

    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.evaluate``; the packed check of :meth:`train` first (once), so a model
        whose packed documents see each other gives no metrics of leaked attention."""
        self._padless_packed_check()
        return super().evaluate(*args, **kwargs)  # type: ignore[misc]

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.predict``; the packed check of :meth:`train` first (once), as
        :meth:`evaluate`."""
        self._padless_packed_check()
        return super().predict(*args, **kwargs)  # type: ignore[misc]

    def _padless_restore(self, checkpoint: str) -> None:
        """Put the sampler where ``checkpoint`` left it: a state saved under other settings
        continues with them (resume across a change), as long as the Trainer's count of the
        epoch's batches still holds; the Trainer then skips the epoch's first batches."""
        trainer: Any = self
        sampler = self.padless_sampler
        batches = self._padless_batches
        self._padless_offset = None
        try:
            with open(os.path.join(checkpoint, "trainer_state.json")) as fh:
                step = int(json.load(fh)["global_step"])
        except FileNotFoundError:
            return  # not a Trainer checkpoint: the Trainer starts from scratch, so do we
        per_epoch, steps = self._padless_steps()
        epoch, done = divmod(step, steps)
        skip = self._padless_batches_before(done)
        try:
            with open(os.path.join(checkpoint, STATE_FILE)) as fh:
                saved = json.load(fh)
        except FileNotFoundError:
            logger.warning(
                "%s has no %s (written without padless?): resuming the sampler at epoch %d from "
                "the Trainer's step count alone",
                checkpoint,
                STATE_FILE,
                epoch,
            )
            sampler.set_epoch(epoch)
            return
        fresh = sampler.state_dict()  # this sampler's settings: to name a change
        try:
            sampler.load_state_dict(saved)  # checks data, settings and seed
        except (TypeError, ValueError) as err:
            raise ValueError(f"cannot resume the batch_sampler from {checkpoint}: {err}") from None
        if saved["world_size"] != sampler.world_size:
            raise ValueError(
                f"cannot resume from {checkpoint} exactly: it was written by "
                f"{saved['world_size']} processes, this run has {sampler.world_size}; the Trainer "
                "counts batches per process"
            )
        changed = _changed_settings(saved, fresh)
        left = len(sampler)  # this process's batches after the saved position
        saved_epoch, saved_done = saved["epoch"], saved["position"] // saved["world_size"]
        wrong = ""
        if left == 0:  # saved at the epoch's end: the next one starts from its first batch
            saved_epoch, saved_done = saved_epoch + 1, 0
        elif saved_done + left != per_epoch:
            wrong = (
                f"epoch {saved_epoch} has {saved_done} batches per process before the saved "
                f"position and {left} after it, {saved_done + left} in all, where the Trainer "
                f"counts {per_epoch} an epoch"
            )
        if not wrong and (saved_epoch, saved_done) != (epoch, skip):
            wrong = (
                f"its sampler state is epoch {saved_epoch} after {saved_done} batches, the "
                f"Trainer's global step {step} means epoch {epoch} after {skip} batches"
            )
        if wrong and changed:
            raise ValueError(
                f"cannot resume from {checkpoint} through the Trainer: its sampler state was "
                f"saved under other settings ({changed}); with the change, {wrong}. "
                "transformers.Trainer sizes every epoch from the first and maps its global "
                "step to an epoch and a batch by that count, so it cannot continue this run "
                "exactly. Resume with the settings the checkpoint was saved under (a change "
                "that keeps every epoch's batches per process, such as a MixtureSampler's "
                "weights, resumes exactly), or drive the sampler from your own loop, where "
                "load_state_dict resumes across a change of settings"
            )
        if wrong:
            raise ValueError(
                f"cannot resume from {checkpoint} exactly: {wrong}; were "
                "gradient_accumulation_steps or the sampler's batches per epoch changed?"
            )
        if trainer.args.ignore_data_skip:  # the interrupted epoch restarts from its first batch
            sampler.load_state_dict({**saved, "epoch": epoch, "position": 0})
            if changed and len(sampler) != per_epoch:
                raise ValueError(
                    f"cannot restart epoch {epoch} from {checkpoint} (ignore_data_skip=True) "
                    f"under the changed settings ({changed}): they plan it as {len(sampler)} "
                    f"batches per process where the Trainer counts {per_epoch}. Resume with the "
                    "settings the checkpoint was saved under"
                )
        elif left and skip:
            # the sampler stands where the checkpoint left it (after any change of settings
            # within the epoch); the Trainer skips the epoch's first batches by index: let it
            # skip as many placeholders, unloaded
            batches.skipped_by_trainer(epoch, done if batches.by_step else skip)
            self._padless_offset = (epoch, skip)


def _changed_settings(saved: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """The settings a state was saved under that differ from a sampler's (its fresh state):
    ``"max_tokens=104 in the checkpoint, 160 now"``; empty when they are the same."""

    def flat(state: Mapping[str, Any]) -> dict[str, Any]:
        record = state.get("settings")
        if not isinstance(record, Mapping):
            return {}
        config = record.get("config")
        out = dict(config) if isinstance(config, Mapping) else {}
        out.update({k: v for k, v in record.items() if k not in ("config", "spec")})
        return out

    old, new = flat(saved), flat(now)
    return "; ".join(
        f"{k}={old.get(k)!r:.60} in the checkpoint, {new.get(k)!r:.60} now"
        for k in sorted(set(old) | set(new), key=str)
        if old.get(k) != new.get(k)
    )


_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def newest_checkpoint(output_dir: str | os.PathLike[str]) -> str | None:
    """The newest *complete* ``checkpoint-N`` folder of ``output_dir``, or None if it has none.

    A checkpoint is complete when it holds ``padless_sampler.json``, the file
    :class:`PadlessTrainerMixin` writes last (atomically) into every checkpoint; a newer folder
    without it (a run killed while writing it) is skipped with a warning.
    ``train(resume_from_checkpoint=True)`` resumes from this one, and with no checkpoint at all
    starts from scratch (so the same script serves the first run and every restart).
    Checkpoints written without padless (none has the file) fall back to the newest that holds
    the Trainer's own ``trainer_state.json``.

    Cost: one directory listing and one ``stat`` per checkpoint.
    """
    if not isinstance(output_dir, (str, os.PathLike)):
        raise TypeError(
            "output_dir must be a str or a pathlib.Path (the Trainer's output folder), got "
            f"{type(output_dir).__name__} {output_dir!r:.60}"
        )
    try:
        names = os.listdir(output_dir)
    except FileNotFoundError:
        return None
    found = []
    for name in names:
        match = _CHECKPOINT.match(name)
        path = os.path.join(output_dir, name)
        if match and os.path.isdir(path):
            found.append((int(match.group(1)), path))
    found.sort(reverse=True)
    # padless writes STATE_FILE last; without padless, the Trainer's trainer_state.json is last
    for last in (STATE_FILE, "trainer_state.json"):
        for k, (_, path) in enumerate(found):
            if os.path.isfile(os.path.join(path, last)):
                for _, partial in found[:k]:
                    logger.warning(
                        "skipping %s: it has no %s, so it was not finished (the run stopped "
                        "while writing it); resuming from %s",
                        partial,
                        last,
                        path,
                    )
                return path
    if found:
        logger.warning(
            "no complete checkpoint in %s (%s unfinished): training from the start",
            output_dir,
            ", ".join(p for _, p in found),
        )
    return None


def _refuse_reordering(args: Any) -> None:
    """Refuse Trainer/TRL settings under which the rows are no longer the ones the lengths plan."""
    if getattr(args, "shuffle_dataset", False):
        raise ValueError(
            "PadlessTrainerMixin cannot use shuffle_dataset=True: TRL shuffles the prepared "
            "dataset, so the sampler's indices would name other rows than the lengths it "
            "planned on. Pass shuffle_dataset=False; the batch_sampler shuffles (shuffle=True, "
            "seed=...), exactly and resumably"
        )
    if getattr(args, "packing", False):
        raise ValueError(
            "PadlessTrainerMixin cannot use TRL's packing=True: it concatenates rows into new "
            "ones, so the sampler's indices and lengths no longer name rows. Pass packing=False "
            "and let padless pack: PackingSampler(lengths, capacity=...) with "
            "PaddingFreeCollator(capacity, rows=rows_per_batch)"
        )
    strategy = getattr(args, "train_sampling_strategy", "random")
    if getattr(args, "group_by_length", False) or strategy not in ("random", None):
        what = (
            "group_by_length=True"
            if getattr(args, "group_by_length", False)
            else (f"train_sampling_strategy={strategy!r}")
        )
        raise ValueError(
            f"PadlessTrainerMixin cannot use {what}: the batch_sampler decides which items go "
            "together and in which order (padless samplers already group by length). Remove it; "
            "for a fixed order build the sampler with shuffle=False"
        )
    if getattr(args, "auto_find_batch_size", False):
        raise ValueError(
            "PadlessTrainerMixin cannot use auto_find_batch_size=True: after an out-of-memory "
            "error the Trainer halves per_device_train_batch_size and starts again, but the "
            "batch_sampler's plan makes the batches, so the same batches would be trained again "
            "at the same size. Remove it and give the plan a smaller budget (max_tokens, "
            "capacity); padless.torch.probe_memory finds one that fits before training"
        )
    if getattr(args, "data_seed", None) is not None:
        raise ValueError(
            f"PadlessTrainerMixin cannot use data_seed={args.data_seed!r}: the Trainer's "
            "sampler does not run, the batch_sampler shuffles with its own seed. Remove it and "
            "build the sampler with seed=..."
        )


# --------------------------------------------------------------------------- collator and plan


@dataclasses.dataclass(frozen=True)
class _Layout:
    """How a collator lays out a batch, as far as the plan is concerned.

    ``kind``: ``"flat"`` (one ``(1, total)`` row of packed sequences), ``"rows"`` (packed rows of
    ``capacity``), ``"pairs"`` (packed rows per field), ``"padded"`` (a row per sequence, padded
    to the longest times ``multiple``), ``"shapes"`` (padded to static ``shapes``),
    ``"stacked"`` (no padding: equal lengths only) or ``"unknown"``. ``padless``: one of
    padless's own, which lay out a capacity warm-up's pieces (:class:`ScheduledPiece`).
    """

    kind: str
    name: str
    capacity: Any = None
    rows: int | None = None
    max_per_row: int | None = None
    context_parallel: int = 1
    multiple: int = 1
    padding: Any = None
    shapes: Any = None
    pad_batches: bool = True
    padless: bool = False


# transformers' and TRL's collators by (package, class name), subclasses included
_HF_KINDS = {
    ("transformers", "DataCollatorWithFlattening"): "flat",
    ("transformers", "DataCollatorWithPadding"): "padded",
    ("transformers", "DataCollatorForSeq2Seq"): "padded",
    ("transformers", "DataCollatorForLanguageModeling"): "padded",
    ("transformers", "DataCollatorForTokenClassification"): "padded",
    ("transformers", "DefaultDataCollator"): "stacked",
    ("trl", "DataCollatorForLanguageModeling"): "padded",  # "flat" with padding_free=True
}


def _origin(obj: Any) -> tuple[str, str]:
    """(top-level package, name) of a function, or of an object's class."""
    named = obj if inspect.isroutine(obj) or inspect.isclass(obj) else type(obj)
    module = str(getattr(named, "__module__", "") or "").partition(".")[0]
    return module, str(getattr(named, "__qualname__", type(obj).__name__))


def _collator_name(collator: Any, default: bool) -> str:
    """The collator as the messages name it: its class (or function), where it comes from."""
    package, name = _origin(collator)
    out = name if package in ("padless", "") else f"{name} ({package})"
    return out + (", the trainer's default data_collator" if default else "")


def _called(collator: Any) -> Any:
    """The collator a bound ``__call__`` or an argument-free ``functools.partial`` of one
    calls (judged as itself: passing ``collator.__call__`` must not slip past the checks)."""
    while True:
        if isinstance(collator, partial) and not collator.args and not collator.keywords:
            collator = collator.func
        elif getattr(collator, "__name__", None) == "__call__" and hasattr(collator, "__self__"):
            collator = collator.__self__
        else:
            return collator


def _layout(collator: Any, default: bool) -> _Layout:
    """The layout of ``collator`` (``default``: the trainer chose it, the user passed none)."""
    collator = _called(collator)
    name = _collator_name(collator, default)
    inner = collator
    if isinstance(collator, PaddingFreeCollator):
        if collator.capacity is None:
            return _Layout("flat", name, padless=True)
        inner = collator._ids
    elif isinstance(collator, PaddedCollator):
        inner = collator._ids
    if isinstance(inner, PackedCollate):
        return _Layout(
            "flat" if inner.flatten else "rows",
            name,
            capacity=inner.capacity,
            rows=inner.rows,
            max_per_row=inner.max_per_row,
            context_parallel=inner.context_parallel,
            padless=True,
        )
    if isinstance(inner, PackedPairsCollate):
        return _Layout(
            "pairs", name, capacity=inner.capacity, max_per_row=inner.max_per_row, padless=True
        )
    if isinstance(inner, PaddedCollate):
        if inner.shapes is not None:
            return _Layout(
                "shapes", name, shapes=inner.shapes, pad_batches=inner.pad_batches, padless=True
            )
        return _Layout("padded", name, multiple=inner.multiple_of, padless=True)
    if isinstance(collator, PreferenceCollator):  # packed rows of whole pairs, next fit
        inner = collator.collate
        return _Layout("rows", name, capacity=inner.capacity, rows=inner.rows)
    kind = next(
        (
            _HF_KINDS[key]
            for key in (
                (k.__module__.partition(".")[0], k.__name__) for k in type(collator).__mro__
            )
            if key in _HF_KINDS
        ),
        None,
    )
    if kind is None:
        if _origin(collator) == ("transformers", "default_data_collator"):
            return _Layout("stacked", name)
        return _Layout("unknown", name)
    if kind == "padded" and getattr(collator, "padding_free", False) is True:
        kind = "flat"
    multiple = getattr(collator, "pad_to_multiple_of", None)
    return _Layout(
        kind,
        name,
        multiple=multiple if isinstance(multiple, int) and not isinstance(multiple, bool) else 1,
        padding=getattr(collator, "padding", None),
    )


def _plan_specs(sampler: Any) -> list[tuple[str, Any]]:
    """``(what, spec)`` for each plan whose batches the collator gets: the sampler's, or each
    corpus's of a mixture; none for a sampler of the user's own without a spec."""
    spec = getattr(sampler, "spec", None)
    if isinstance(spec, Spec):
        return [(f"{type(sampler).__name__} ({spec.describe()})", spec)]
    subs = getattr(sampler, "samplers", None)
    if not isinstance(subs, Mapping):
        return []
    return [
        (f"{type(sampler).__name__} corpus {name!r} ({sub.spec.describe()})", sub.spec)
        for name, sub in subs.items()
        if isinstance(getattr(sub, "spec", None), Spec)
    ]


def _fix(spec: Any) -> str:
    """The collator that delivers ``spec``'s batches, as the messages suggest it."""
    form = spec.collate_form()
    if form.packed and (form.capacities is not None or form.context_parallel > 1):
        what = "rows per field" if form.capacities is not None else "context-parallel rows"
        return (
            f"data_collator=collate_for(sampler) (padless.torch.collate_for: the plan's {what}; "
            "with context parallelism, collate_for(sampler, cp_rank=...))"
        )
    if form.packed:
        rows = int(getattr(spec, "rows_per_batch", 1))
        extra = f", max_per_row={form.max_per_row}" if form.max_per_row is not None else ""
        return (
            f"data_collator=padless.hf.PaddingFreeCollator({form.capacity}, rows={rows}{extra}) "
            "(the planned (rows, capacity) tensors) or padless.hf.PaddingFreeCollator() (one "
            "flat row)"
        )
    if form.shapes is not None:
        return "data_collator=padless.hf.PaddedCollator(sampler) (each batch padded to its shape)"
    multiple = f", pad_to_multiple_of={form.multiple_of}" if form.multiple_of != 1 else ""
    return (
        "data_collator=padless.hf.PaddedCollator(sampler), padless.hf.PaddingFreeCollator() or "
        f"transformers.DataCollatorWithPadding(tokenizer{multiple})"
    )


_SHAPES_OF = {
    "flat": "one flat (1, total) row",
    "rows": "(rows, capacity) packed rows",
    "pairs": "packed rows per field",
    "padded": "(sequences, longest) padded tensors",
    "stacked": "(sequences, length) stacked tensors",
    "shapes": "tensors of other shapes",
}


def _flat_multiple(lay: _Layout, bound: int | None) -> str | None:
    """Why a collator that flattens a batch into one row and pads it to ``lay.multiple``
    passes the plan's ``bound`` tokens a batch (None: it does not, or no bound)."""
    if lay.multiple <= 1 or bound is None or bound % lay.multiple == 0:
        return None
    over = -(-bound // lay.multiple) * lay.multiple
    return (
        f"it pads the flat row to a multiple of pad_to_multiple_of={lay.multiple}: a batch "
        f"of the plan's {bound} tokens becomes {over}; plan batches of a multiple of "
        f"{lay.multiple} tokens, or leave pad_to_multiple_of unset"
    )


def _refusal(lay: _Layout, spec: Any, longest: int) -> str | None:
    """Why a collator of layout ``lay`` does not deliver ``spec``'s batches (sequences up to
    ``longest`` tokens), or None when it does (an unknown layout: None, decided elsewhere)."""
    form, kind = spec.collate_form(), lay.kind
    if kind == "unknown":
        return None
    if form.packed:
        if form.capacities is not None or kind == "pairs":
            same = (lay.capacity, lay.max_per_row) == (form.capacities, form.max_per_row)
            if kind == "pairs" and same:
                return None
            return (
                f"it lays out {_SHAPES_OF[kind]}, not the plan's rows per field "
                f"(capacity={form.capacities if form.capacities is not None else form.capacity})"
            )
        if kind in ("padded", "stacked", "shapes"):
            rows = int(getattr(spec, "rows_per_batch", 1))
            return (
                f"it gives every sequence a row of its own ({_SHAPES_OF[kind]}), not the "
                f"plan's rows of packed sequences ({rows} x {form.capacity} tokens a batch): "
                "the model would train on padded batches far past the planned tokens"
            )
        if form.context_parallel > 1 and lay.context_parallel != form.context_parallel:
            return (
                f"it lays out rows for context_parallel={lay.context_parallel}, but the "
                f"plan's rows are shared by {form.context_parallel} context-parallel ranks "
                "(documents padded to a multiple of 2 x context_parallel, each rank its share)"
            )
        if getattr(spec, "capacity_schedule", None) is not None and not lay.padless:
            return (
                "it cannot lay out a capacity warm-up's pieces (padless.planners.packing."
                "ScheduledPiece items, each a planned row's share at its step's capacity)"
            )
        if kind == "flat":
            if lay.capacity is not None and lay.capacity < form.capacity:
                return (
                    f"it holds sequences of up to capacity={lay.capacity} tokens, the "
                    f"plan's rows up to {form.capacity}"
                )
            return _flat_multiple(lay, form.capacity * int(getattr(spec, "rows_per_batch", 1)))
        rows = int(getattr(spec, "rows_per_batch", 1))
        wrong = [
            f"{name}={given} (the plan's: {planned})"
            for name, given, planned in (
                ("capacity", lay.capacity, form.capacity),
                ("max_per_row", lay.max_per_row, form.max_per_row),
                ("rows", lay.rows, lay.rows if lay.rows is None else rows),  # None: as needed
            )
            if given != planned
        ]
        if wrong:
            return f"it cuts other rows than planned: {', '.join(wrong)}"
        return None
    if form.shapes is not None:
        if kind == "shapes" and (lay.shapes, lay.pad_batches) == (form.shapes, form.pad_batches):
            return None
        shapes = [list(s) for s in form.shapes]
        return (
            f"it delivers {_SHAPES_OF[kind]}, not one of the plan's shapes {shapes}: the "
            "model would see shapes outside the set (compile-once-per-shape no longer holds)"
        )
    if kind in ("rows", "pairs"):
        return (
            f"it lays out packed rows of capacity={lay.capacity}, which only a packing plan "
            "has (a longer sequence fails, and rows of padding pass the plan's budget)"
        )
    if kind == "shapes":
        return "it pads to static shapes the plan did not budget (it plans padded widths)"
    if kind == "stacked":  # equal lengths: a Decomposition's blocks, unrounded exact lengths
        if form.equal_lengths or (isinstance(spec, ExactLength) and form.multiple_of == 1):
            return None
        return (
            "it stacks the features without padding, but the plan's batches hold "
            "sequences of different lengths"
        )
    if kind == "flat":
        if lay.capacity is not None and lay.capacity < longest:
            return f"it holds sequences of up to {lay.capacity} tokens, the data up to {longest}"
        bound = getattr(spec, "max_tokens", None)
        return _flat_multiple(lay, bound if isinstance(bound, int) else None)
    if str(getattr(lay.padding, "value", lay.padding)) == "max_length":
        return (
            "it pads every batch to max_length, past the widths the plan budgeted; pad "
            "to the longest (padding=True) and put any width multiple in the plan (e.g. "
            "TokenBudget(..., pad_to_multiple_of=8))"
        )
    try:
        what = "multiple_of" if lay.padless else "pad_to_multiple_of"
        check_collate_multiple(form.multiple_of, lay.multiple, f"data_collator.{what}")
    except ValueError as err:
        return str(err)
    return None


def _check_collator(collator: Any, sampler: Any, *, trust: bool, default: bool) -> None:
    """Refuse, when the trainer is built, a collator that would not deliver the plan's batches.

    Each batch the model receives must be the one the plan made: packed rows for a packing
    plan, one of the shapes of a static-shape plan, the planned padded widths otherwise. A
    collator padless knows (its own, transformers' and TRL's) is checked against the plan; one
    it does not know is taken as padding to the longest where the plan pads (what it budgets),
    and refused where the plan packs or has static shapes unless ``trust`` (the user vouches).
    """
    lengths = sampler_lengths(sampler)
    longest = int(lengths.max()) if lengths is not None and lengths.size else 0
    lay = _layout(collator, default)
    for where, spec in _plan_specs(sampler):
        why = _refusal(lay, spec, longest)
        form = spec.collate_form()
        if why is None and lay.kind == "unknown" and not trust and (form.packed or form.shapes):
            what = "packed rows" if form.packed else "static shapes"
            why = (
                f"padless cannot tell whether {lay.name} lays out the plan's {what} (it knows "
                "its own collators, transformers' and TRL's)"
            )
            fix = (
                f"Pass {_fix(spec)}; or, if {lay.name} does lay out every batch as planned, "
                "pass trust_collator=True to the trainer"
            )
        elif isinstance(collator, PreferenceCollator) and form.packed:
            # PackedDPOMixin sets this collator itself and takes no other: its capacity= moves
            fix = (
                f"Pass capacity={form.capacity} to PackedDPOMixin (the plan's rows), or plan "
                f"rows of capacity={lay.capacity}"
            )
        else:
            fix = f"Pass {_fix(spec)}"
        if why is not None:
            raise ValueError(
                f"data_collator {lay.name} does not deliver the batches of batch_sampler "
                f"{where}: {why}. {fix}"
            )


def _check_bare_collate(collator: Any, dataset: Any) -> None:
    """Refuse, when the trainer is built, a ``padless.torch`` collate over rows it would
    misread: a padded one does not read a row's fields unless told (``fields=``) and makes no
    ``labels``; a packed one makes a row's labels from its ``input_ids``, so rows with labels of
    their own (a masked prompt) would train on every token. The first row is looked at; the
    packed collate checks every row it collates."""
    if not isinstance(collator, (PackedCollate, PaddedCollate)) or dataset is None:
        return
    try:
        row = dataset[0] if len(dataset) else None
    except (TypeError, KeyError, IndexError):  # an iterable dataset: the collate checks
        return
    if not isinstance(row, Mapping):
        return
    if isinstance(collator, PaddedCollate):
        if collator.fields is None:
            raise ValueError(
                "data_collator is padless.torch's padded collate (collate_for / collate_padded), "
                f"which reads rows of token ids, but train_dataset's rows are dicts (keys "
                f"{sorted(map(str, row))!r:.80}) and it makes no labels: pass "
                "data_collator=padless.hf.PaddedCollator(...) (the plan's widths, with labels)"
            )
        return
    if collator.key in row:
        try:  # the collate's own check of every row it collates, on row 0
            refuse_own_labels(row, as_ids(row[collator.key], "row 0"), 0)
        except ValueError as err:
            raise ValueError(
                "data_collator is padless.torch's packed collate, but train_dataset's rows carry "
                f"labels of their own (the collate says of row 0: {err})"
            ) from None


def _serves_pieces(spec: Any, lengths: Any) -> bool:
    """Whether a sampler of ``spec`` over ``lengths`` yields pieces of sequences (codes
    ``index + piece · N``, or a capacity warm-up's tagged codes) that only its ``pieces()``
    dataset serves: a Decomposition always, a packing with a capacity schedule, or one that
    splits or truncates a sequence longer than its capacity."""
    if not callable(getattr(spec, "pieces", None)):
        return False
    if spec.collate_form().equal_lengths or getattr(spec, "capacity_schedule", None) is not None:
        return True
    cut = getattr(spec, "oversize", None) in ("split", "truncate")
    capacity = getattr(spec, "row_capacity", None)
    return bool(cut and capacity is not None and lengths.size and int(lengths.max()) > capacity)


def _check_pieces(dataset: Any, sampler: Any, lengths: Any) -> None:
    """Refuse a train_dataset that does not serve the items ``sampler`` yields: the pieces of a
    sampler that cuts sequences need its own ``sampler.pieces(dataset)`` (the same kind of
    pieces, capacity and tags, every sequence field sliced), and whole items need no pieces."""
    spec = getattr(sampler, "spec", None)
    coded = getattr(sampler, "needs_pieces", None)
    why = coded() if spec is None and callable(coded) else None
    if why is not None and not isinstance(dataset, MixtureDataset):
        # a mixture whose corpora warm up, split or decompose sequences
        raise ValueError(
            f"train_dataset must serve the codes batch_sampler {type(sampler).__name__} yields "
            f"({why}), but it is a plain {type(dataset).__name__}: pass "
            "train_dataset=padless.torch.mixture_dataset(datasets, sampler)"
        )
    if isinstance(dataset, MixtureDataset):
        return  # each corpus's part is checked against its own sampler when bound
    make = getattr(spec, "pieces", None)
    what = f"batch_sampler {type(sampler).__name__} ({spec.describe()})" if spec else ""
    if not isinstance(dataset, PieceDataset):
        if spec is not None and _serves_pieces(spec, lengths):
            keys = _sequence_keys(dataset)
            raise ValueError(
                f"train_dataset must serve the pieces {what} yields (codes index + piece x N "
                "naming pieces of the sequences), but it is a plain "
                f"{type(dataset).__name__}: pass train_dataset=sampler.pieces(dataset, "
                f"keys={keys!r})"
            )
        return
    if not callable(make):
        raise ValueError(
            f"train_dataset is a {type(dataset).__name__} (pieces of sequences), but "
            f"{what or 'the batch_sampler'} yields whole items: pass the dataset itself"
        )
    want = make(dataset.dataset, num_sequences=dataset.num_sequences, keys=dataset.keys)

    def form(x: PieceDataset) -> str:
        return f"{type(x).__name__}(capacity={x.capacity}, scheduled={x.scheduled})"

    if (type(dataset), dataset.capacity, dataset.scheduled) != (
        type(want),
        want.capacity,
        want.scheduled,
    ):
        raise ValueError(
            f"train_dataset serves {form(dataset)}, but {what} yields codes of "
            f"{form(want)}: pass train_dataset=sampler.pieces(dataset, keys=...)"
        )
    missing = [k for k in _sequence_keys(dataset.dataset) if k not in dataset.keys]
    if missing:
        raise ValueError(
            f"train_dataset's pieces slice keys={dataset.keys!r}, but its rows also hold "
            f"{missing} as long as their input_ids, which would stay whole beside the cut "
            f"input_ids: pass sampler.pieces(dataset, keys={(*dataset.keys, *missing)!r})"
        )


_PAIR_KEYS = ("prompt_ids", "chosen_ids", "rejected_ids")


def pair_length(row: Mapping[str, Any]) -> int:
    """The tokens a tokenized preference row takes packed (:class:`PreferenceCollator`: its
    prompt once, then its chosen and rejected completions): the ``length_field`` that
    :class:`PadlessTrainerMixin` measures TRL's tokenized DPO rows with under
    :class:`PackedDPOMixin`.

    >>> pair_length({"prompt_ids": [1, 2], "chosen_ids": [3], "rejected_ids": [4, 5, 6]})
    6
    """
    if not isinstance(row, Mapping):
        raise TypeError(
            f"row must be a mapping with keys {list(_PAIR_KEYS)}, got {type(row).__name__}"
        )
    missing = [k for k in _PAIR_KEYS if k not in row]
    if missing:
        raise ValueError(
            f"row has no field {missing[0]!r} (a tokenized preference row has {list(_PAIR_KEYS)}); "
            f"it has {sorted(map(str, row))!r:.80}"
        )
    total = 0
    for k in _PAIR_KEYS:
        value = row[k]
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
            raise TypeError(
                f"row[{k!r}] must be a sequence of token ids, got {type(value).__name__}"
            )
        total += len(value)
    return total


def _field_name(field: Any) -> str:
    return getattr(field, "__name__", None) or repr(field)


def _dataset_lengths(dataset: Any, field: Any) -> Any:
    """The lengths of ``dataset``'s rows measured by ``field`` (as :class:`CheckedDataset`
    measures them): from the Arrow offsets where the rows are a ``datasets.Dataset``'s columns,
    else one pass over the rows."""
    hf = sys.modules.get("datasets")
    arrow = (
        hf is not None
        and isinstance(dataset, hf.Dataset)
        and dataset.format.get("type") != "custom"
    )
    if arrow and field is pair_length:
        return lengths_of(dataset, column=list(_PAIR_KEYS)).sum(axis=1)
    if arrow and isinstance(field, (str, tuple)):
        return lengths_of(dataset, column=field if isinstance(field, str) else list(field))
    if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
        raise TypeError(
            f"the dataset must have a length and rows by index, got {type(dataset).__name__}"
        )
    columns = len(field) if isinstance(field, tuple) else 0
    sizes = [_measure(dataset[i], field, columns, i) for i in range(len(dataset))]
    return np.array(sizes, dtype=np.int64)


def _sequence_keys(dataset: Any) -> tuple[str, ...]:
    """The keys of ``dataset``'s first row that hold a sequence as long as its ``input_ids``
    (those a piece must slice together); ``("input_ids",)`` when that cannot be told."""
    try:
        row = dataset[0]
        size = len(row["input_ids"])
    except Exception:  # noqa: BLE001 - rows of another form: slice the default key
        return ("input_ids",)
    keys = [
        k
        for k, v in row.items()
        if not isinstance(v, (str, bytes)) and hasattr(v, "__len__") and len(v) == size
    ]
    return tuple(sorted(keys, key=lambda k: k != "input_ids"))


def _prepared_hint(trainer: Any) -> str:
    """What to do when a trainer's own preparation changed the dataset (TRL's SFTTrainer)."""
    args = trainer.args
    if not hasattr(args, "dataset_text_field"):  # not TRL's SFTConfig
        return (
            ". Build the sampler on the lengths of the dataset the Trainer trains on, in its "
            "order (after any map/filter/select)"
        )
    limit = getattr(args, "max_length", None)
    if limit is None:  # no truncation, no row dropped: the planned lengths are not its tokens
        return (
            ". TRL's SFTTrainer neither truncates nor drops rows with max_length=None, so the "
            "lengths the sampler planned are not the token counts of the rows it trains on: "
            "lengths counted in characters or words, or with another tokenizer or chat "
            "template, differ. Tokenize the dataset first (TRL leaves input_ids that are "
            "there as they are) and take the lengths from it: [len(r['input_ids']) for r in "
            "dataset], or padless.lengths_of(dataset, field='input_ids')"
        )
    return (
        ". TRL's SFTTrainer prepared the dataset after the lengths were taken: with "
        f"max_length={limit!r} it truncates rows to max_length and drops the rows whose labels "
        "are then all -100. Take the lengths from a dataset that needs no such step: truncate "
        "and drop those rows yourself first (e.g. dataset.filter(lambda r: any(t != -100 for t "
        "in r['labels']))), or pass SFTConfig(max_length=None), with which TRL neither "
        "truncates nor drops rows"
    )


def _worker_init(workers: int, rank: int) -> Any:
    from transformers.trainer_utils import seed_worker

    if not workers:
        return None
    if len(inspect.signature(seed_worker).parameters) >= 3:
        return partial(seed_worker, num_workers=workers, rank=rank)
    return seed_worker  # pragma: no cover - transformers 4.x


def _write_json(path: str, data: Mapping[str, Any]) -> None:
    """Write JSON under a temporary name, then rename: never a partial file under ``path``."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as fh:
            json.dump(dict(data), fh)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


# --------------------------------------------------------------------------- padding-free batches


_FLAT_ROW = 1 << 62
_MAX_SEQUENCE = 1 << 31  # padless lengths are below 2**31


def _rewrapped(values: list[Any], wraps: list[ScheduledPiece | None]) -> list[Any]:
    """One field of a batch's features, wrapped again where the features came wrapped."""
    return [v if w is None else w.with_item(v) for v, w in zip(values, wraps, strict=True)]


class PaddingFreeCollator:
    """Collate HF features into a padding-free batch: sequences back to back, positions restarting.

    The output is what ``transformers.DataCollatorWithFlattening`` emits and HF models accept for
    padding-free training: ``input_ids`` and ``labels`` (the token ids, or each feature's own
    ``labels``, with ``separator_id`` at every sequence's first position) and ``position_ids``
    restarting at ``position_start`` for every sequence. Optionally ``cu_seq_lens_q`` /
    ``cu_seq_lens_k`` (int32) and ``max_length_q`` / ``max_length_k`` (flash-attention varlen
    kwargs) and ``seq_idx`` (int32). Models using transformers' mask functions (Llama, Qwen,
    Mistral...) derive an exact block-diagonal causal mask from ``position_ids`` with eager and
    sdpa attention (train with ``use_cache=False``); flash attention uses the kwargs.

    Args:
        capacity: None for one flat ``(1, total)`` row (any padless sampler). With a
            :class:`padless.PackingSampler`, its ``capacity`` gives ``(rows, capacity)`` tensors
            cut into its planned rows, each row's padding tail a sequence of its own with labels
            ``separator_id``. A capacity schedule's pieces (:class:`ScheduledPiece`) are laid
            out in rows of their step's capacity (the flat layout, or ``capacity`` the planned
            one).
        max_per_row, rows: as for :func:`padless.torch.collate_packed` (2-D layout only).
        flash_attn_kwargs: add ``cu_seq_lens_q/k`` and ``max_length_q/k``.
        seq_idx: add ``seq_idx``.
        position_start: first position id of every sequence (2 for RoBERTa-like models).
        separator_id: label at each sequence's first position and on padding.
        pad_id: token id of padding (2-D layout only).

    Features are mappings with ``input_ids`` (and optionally ``labels`` of the same length);
    other keys are ignored. Cost: one concatenation of the batch's tokens (two with labels).

    >>> collate = PaddingFreeCollator()
    >>> out = collate([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}])
    >>> out["input_ids"].tolist(), out["position_ids"].tolist()
    ([[5, 6, 7, 8, 9]], [[0, 1, 2, 0, 1]])
    >>> out["labels"].tolist()
    [[-100, 6, 7, -100, 9]]
    """

    def __init__(
        self,
        capacity: int | None = None,
        *,
        max_per_row: int | None = None,
        rows: int | None = None,
        flash_attn_kwargs: bool = False,
        seq_idx: bool = False,
        position_start: int = 0,
        separator_id: int = -100,
        pad_id: int = 0,
    ) -> None:
        self.capacity = positive_or_none("capacity", capacity)
        self.flash_attn_kwargs = check_bool("flash_attn_kwargs", flash_attn_kwargs)
        self.seq_idx = check_bool("seq_idx", seq_idx)
        self.separator_id = check_int64("separator_id", separator_id)
        pad_id = check_int64("pad_id", pad_id)
        position_start = cast(int, check_int("position_start", position_start, minimum=0))
        span = self.capacity if self.capacity is not None else _MAX_SEQUENCE
        if position_start + span - 1 > INT64_MAX:
            what = f"capacity={self.capacity}" if self.capacity else "a sequence of up to 2**31"
            raise ValueError(
                "position_start + capacity - 1 (the last position id) must fit in int64, the "
                f"position_ids' dtype, with {what}: position_start must be at most "
                f"{INT64_MAX - span + 1}, got {position_start}"
            )
        flat = self.capacity is None
        row = self.capacity or _FLAT_ROW  # one flat row: no sequence is too long for it
        sep = cast(int, self.separator_id)
        if flat and (max_per_row is not None or rows is not None):
            raise ValueError(
                "max_per_row and rows describe the (rows, capacity) layout; pass capacity too, "
                f"got capacity=None with max_per_row={max_per_row!r}, rows={rows!r}"
            )
        self._ids = PackedCollate(
            row,
            max_per_row=max_per_row,
            rows=rows,
            flatten=flat,
            position_start=position_start,
            pad_id=pad_id,
            ignore_index=sep,
        )
        self._labels = PackedCollate(
            row,
            max_per_row=max_per_row,
            rows=rows,
            flatten=flat,
            pad_id=sep,
            ignore_index=sep,
        )

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        ids: list[Any] = []
        labels: list[Any] = []
        wraps: list[ScheduledPiece | None] = []  # a capacity warm-up's pieces keep their rows
        for i, feature in enumerate(features):
            wrap = feature if isinstance(feature, ScheduledPiece) else None
            if wrap is not None:
                feature = wrap.item
            if not isinstance(feature, Mapping) or "input_ids" not in feature:
                raise TypeError(
                    f"features [{i}] must be a mapping with 'input_ids', got {type(feature).__name__}"
                )
            wraps.append(wrap)
            ids.append(feature["input_ids"])
            if "labels" in feature:
                labels.append(feature["labels"])
        if labels and len(labels) != len(ids):
            raise ValueError("either every feature has 'labels' or none does")
        packed = self._ids(_rewrapped(ids, wraps))
        out: dict[str, Any] = {
            "input_ids": packed["input_ids"],
            "labels": packed["labels"],
            "position_ids": packed["position_ids"],
        }
        if labels:
            for i, (a, b) in enumerate(zip(ids, labels, strict=True)):
                if len(a) != len(b):
                    raise ValueError(
                        f"features [{i}] has {len(a)} input_ids but {len(b)} labels; they must match"
                    )
            out["labels"] = self._labels(_rewrapped(labels, wraps))["labels"]
        if self.flash_attn_kwargs:
            out["cu_seq_lens_q"] = out["cu_seq_lens_k"] = packed["cu_seqlens"]
            out["max_length_q"] = out["max_length_k"] = packed["max_seqlen"]
        if self.seq_idx:
            out["seq_idx"] = packed["seq_idx"]
        return out

    def __repr__(self) -> str:
        return (
            f"PaddingFreeCollator(capacity={self.capacity}, flash_attn_kwargs="
            f"{self.flash_attn_kwargs}, seq_idx={self.seq_idx}, separator_id={self.separator_id})"
        )


class PaddedCollator:
    """Collate HF features padded as a padless plan budgets them: to the plan's width multiple,
    or to the batch's shape of a :class:`padless.FixedShapes` plan.

    The output is what a padded HF model takes: ``input_ids`` (right-padded with ``pad_id``),
    ``attention_mask`` (1 on tokens) and ``labels`` (each feature's ``labels``, or its
    ``input_ids``; ``separator_id`` on padding). With static shapes every batch is one of the
    plan's shapes: padded to the shape's length and, with ``pad_batches`` (the default),
    filled to its batch size with dummy rows (padding only, ``attention_mask`` 0, labels
    ``separator_id``), so a compiled model sees only the shapes of the set.

    Args:
        plan: the padless sampler or spec whose batches this collates (not a packing plan:
            :class:`PaddingFreeCollator` lays those out).
        pad_id: token id of padding.
        separator_id: label on padding (ignored by the loss).

    Features are mappings with ``input_ids`` (and optionally ``labels`` of the same length);
    other keys are ignored.

    >>> from padless import FixedShapes
    >>> collate = PaddedCollator(FixedShapes(shapes=[(3, 4), (1, 8)]))
    >>> out = collate([{"input_ids": [5, 6, 7]}, {"input_ids": [8]}])
    >>> out["input_ids"].tolist(), out["attention_mask"].tolist()
    ([[5, 6, 7, 0], [8, 0, 0, 0], [0, 0, 0, 0]], [[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    >>> out["labels"].tolist()
    [[5, 6, 7, -100], [8, -100, -100, -100], [-100, -100, -100, -100]]
    """

    def __init__(self, plan: Any, *, pad_id: int = 0, separator_id: int = -100) -> None:
        self.pad_id = check_int64("pad_id", pad_id)
        self.separator_id = check_int64("separator_id", separator_id)
        self._ids = collate_padded(cast(int, self.pad_id), fields=["input_ids"], plan=plan)
        self._labels = collate_padded(cast(int, self.separator_id), fields=["labels"], plan=plan)

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        labels: list[Any] = []
        for i, feature in enumerate(features):
            if not isinstance(feature, Mapping) or "input_ids" not in feature:
                raise TypeError(
                    f"features [{i}] must be a mapping with 'input_ids', got {type(feature).__name__}"
                )
            if "labels" in feature:
                if len(feature["labels"]) != len(feature["input_ids"]):
                    raise ValueError(
                        f"features [{i}] has {len(feature['input_ids'])} input_ids but "
                        f"{len(feature['labels'])} labels; they must match"
                    )
                labels.append(feature["labels"])
        if labels and len(labels) != len(features):
            raise ValueError("either every feature has 'labels' or none does")
        padded = self._ids(list(features))
        out = {"input_ids": padded["input_ids"], "attention_mask": padded["input_ids_mask"]}
        if labels:
            out["labels"] = self._labels([{"labels": x} for x in labels])["labels"]
        else:
            out["labels"] = padded["input_ids"].masked_fill(
                padded["input_ids_mask"] == 0, cast(int, self.separator_id)
            )
        return out

    def __repr__(self) -> str:
        ids = self._ids
        how = (
            f"shapes={[list(x) for x in ids.shapes]}"
            if ids.shapes
            else f"multiple_of={ids.multiple_of}"
        )
        return f"PaddedCollator({how}, pad_id={self.pad_id}, separator_id={self.separator_id})"


class PreferenceCollator:
    """TRL's tokenized preference rows (``prompt_ids``, ``chosen_ids``, ``rejected_ids``) as a
    packed :func:`padless.torch.collate_groups` batch: each row one group, its prompt once, then
    its chosen and its rejected completion (the collate of :class:`PackedDPOMixin`).
    ``attention_mask``: ``"block"``, the 4-D float mask (eager and sdpa), or ``"flex"``, the
    same mask as a flex-attention ``BlockMask`` (:func:`padless.torch.flex_block_mask`)."""

    def __init__(self, capacity: int, *, pad_id: int = 0, attention_mask: str = "block") -> None:
        check_choice("attention_mask", attention_mask, ("block", "flex"))
        self.collate = GroupCollate(capacity, pad_id=pad_id, attention_mask=attention_mask)

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        pairs = PreferencePairs(rows)
        return self.collate([pairs[k] for k in range(len(pairs))])

    def check_model(self, model: Any) -> float:
        """Check that ``model`` keeps this collator's packed pairs apart: two short pairs packed
        into one row, each completion's log-probability against it after its prompt alone
        (:func:`padless.torch.check_prefix_packed`); the largest difference, or a
        ``ValueError``. Tolerance 1e-4 (float32/64 weights) or 5e-2 (16-bit). A flex-attention
        collator is checked when the trainer is built instead (the model's implementation)."""
        import torch

        if not callable(model) or not callable(getattr(model, "parameters", None)):
            raise TypeError(
                f"model must be a torch causal LM (called as model(**batch)), got "
                f"{type(model).__name__}"
            )
        if self.collate.attention_mask != "block" or self.collate.capacity < 7:
            return 0.0
        vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 64)
        ids = [1 + i % max(vocab - 1, 1) for i in range(3, 3 + 14)]
        rows = [
            {"prompt_ids": ids[k : k + 3], "chosen_ids": ids[k + 3 : k + 5],
             "rejected_ids": ids[k + 5 : k + 7]}
            for k in (0, 7)[: self.collate.capacity // 7]
        ]  # fmt: skip
        pairs = PreferencePairs(rows)
        dtype = next(iter(model.parameters())).dtype
        exact = dtype in (torch.float32, torch.float64)
        items = [pairs[k] for k in range(len(pairs))]
        return check_prefix_packed(model, items, self.collate, atol=1e-4 if exact else 5e-2)

    def __repr__(self) -> str:
        return (
            f"PreferenceCollator(capacity={self.collate.capacity}, "
            f"attention_mask={self.collate.attention_mask!r})"
        )


def _one_per_row(lengths: np.ndarray) -> np.ndarray:
    """``loss_targets`` of a loss that is a mean over rows (DPO's pairs): one target each."""
    return np.ones(len(lengths), dtype=np.int64)


class PackedDPOMixin:
    """Mix into TRL's ``DPOTrainer`` (``class PackedDPOTrainer(PackedDPOMixin, DPOTrainer)``) to
    train DPO on padding-free packed pairs: each batch's pairs packed into rows of ``capacity``
    tokens, a pair's prompt once, its chosen and rejected completions after it under the
    shared-prefix mask (:func:`padless.torch.collate_groups`), the loss TRL's sigmoid DPO loss
    on the completions' log-probs (:func:`padless.torch.dpo_loss`). tests/test_trl_dpo.py trains
    it beside TRL's own padded DPOTrainer and finds the same weights.

    TRL's own ``padding_free`` is disabled for DPO (TRL 1.x); this mixin replaces the collator and
    the loss only. The settings it does not implement are refused when built, naming them:
    ``loss_type`` other than ``"sigmoid"``, ``f_divergence_type``, ``ld_alpha``,
    ``use_weighting``, ``precompute_ref_logps``, a router aux loss, a PEFT model without a
    ``ref_model``, and a ``data_collator`` of your own (pass ``capacity``). A pair longer than
    ``capacity`` is a ``ValueError`` at its batch. TRL truncates a pair at
    ``DPOConfig.max_length`` (1024 by default) and the packed rows hold whole pairs, so a pair
    over it is refused when the trainer is built (``max_length=None`` trains whole pairs, the
    capacity bounding them). ``loss_weights`` weighs the loss as TRL does. Logged metrics: the
    rewards, margins, accuracies and log-probs TRL logs.

    An optimizer step's loss is the mean over all of its pairs, on every process and in every
    micro-batch of the accumulation, whatever each micro-batch holds: each micro-batch's mean
    is weighted by its share of the step's pairs (counted when the Trainer gathers the step's
    batches; one all-gather of an int across processes). With micro-batches of equal size this
    is TRL's loss; with a padless plan, whose batches hold as many pairs as fit, an unweighted
    mean of means would count a pair of a small batch more than one of a large batch.

    ``attention_mask="flex"`` packs the pairs under the same mask as a flex-attention
    ``BlockMask`` (O(capacity) per row instead of the 4-D mask's ``capacity² · 4`` bytes, 1 GiB
    at 16,384), for a model and ref_model loaded with ``attn_implementation="flex_attention"``
    (another is refused when built); the loss rebuilds the mask on the model's device.

    With :class:`PadlessTrainerMixin` first (``class T(PadlessTrainerMixin, PackedDPOMixin,
    DPOTrainer)``; the other order is a ``TypeError``) and ``batch_sampler=padless.Packing(
    capacity=C, rows_per_batch=R)`` beside ``capacity=C``, the pairs are planned whole after
    TRL has tokenized them (lengths by :func:`pair_length`): every batch the model gets is the
    plan's, deterministic, per rank, and resumed exactly from a checkpoint.
    """

    def __init__(
        self,
        *args: Any,
        capacity: int,
        attention_mask: str = "block",
        check_packed: bool = True,
        **kwargs: Any,
    ) -> None:
        self._padless_check_pairs = check_bool("check_packed", check_packed)
        mro = type(self).__mro__
        if PadlessTrainerMixin in mro and mro.index(PadlessTrainerMixin) > mro.index(
            PackedDPOMixin
        ):
            raise TypeError(
                f"{type(self).__name__} lists PackedDPOMixin before PadlessTrainerMixin: "
                "PadlessTrainerMixin checks the collator PackedDPOMixin sets, so it must come "
                f"first: class {type(self).__name__}(PadlessTrainerMixin, PackedDPOMixin, "
                "DPOTrainer)"
            )
        if kwargs.get("data_collator", args[3] if len(args) > 3 else None) is not None:
            raise ValueError(
                "data_collator must be None with PackedDPOMixin: it packs the pairs itself "
                "(PreferenceCollator(capacity)); pass capacity= instead"
            )
        collator = PreferenceCollator(capacity, attention_mask=attention_mask)
        super().__init__(*args, **kwargs)
        me = cast(Any, self)
        refused = {
            "loss_type": (list(me.loss_types) != ["sigmoid"], list(me.loss_types)),
            "f_divergence_type": (me.f_divergence_type != "reverse_kl", me.f_divergence_type),
            "ld_alpha": (me.ld_alpha is not None, me.ld_alpha),
            "use_weighting": (bool(me.use_weighting), me.use_weighting),
            "precompute_ref_logps": (bool(me.precompute_ref_logps), me.precompute_ref_logps),
            "router aux loss": (bool(me.aux_loss_enabled), me.aux_loss_enabled),
            "ref_model": (me.ref_model is None, None),
        }
        for name, (bad, value) in refused.items():
            if bad:
                raise ValueError(
                    f"PackedDPOMixin supports TRL's sigmoid DPO loss with a reference model only: "
                    f"{name}={value!r} is not supported; use TRL's DPOTrainer for it"
                )
        _refuse_truncated_pairs(me.train_dataset, getattr(me.args, "max_length", None))
        if attention_mask == "flex":
            for which, net in (("model", me.model), ("ref_model", me.ref_model)):
                impl = getattr(getattr(net, "config", None), "_attn_implementation", None)
                if impl != "flex_attention":
                    raise ValueError(
                        f"attention_mask='flex' gives the {which} a flex-attention BlockMask, "
                        f"which only attn_implementation='flex_attention' takes; the {which} "
                        f"has {impl!r}: load it with attn_implementation='flex_attention', or "
                        "keep attention_mask='block' (the 4-D mask, eager and sdpa)"
                    )
        me.data_collator = collator
        self._padless_step_pairs: tuple[int, int] | None = None

    def train(self, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.train``, after checking once that the model keeps packed pairs apart
        (:meth:`PreferenceCollator.check_model`; ``check_packed=False`` skips it). Under
        :class:`PadlessTrainerMixin`, its own check runs it instead."""
        me = cast(Any, self)
        if self._padless_check_pairs and not isinstance(self, PadlessTrainerMixin):
            _packed_preflight(me.model, me.data_collator, "PackedDPOMixin")
            self._padless_check_pairs = False  # once: the model and collator stay the same
        return super().train(*args, **kwargs)  # type: ignore[misc]

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> Any:
        """``Trainer.get_batch_samples``; also counts the step's pairs on every process (see
        the class), which weighs each micro-batch's loss."""
        import torch

        samples, items = super().get_batch_samples(  # type: ignore[misc]
            epoch_iterator, num_batches, device
        )
        me = cast(Any, self)
        counted = [b for b in samples if isinstance(b, Mapping) and "completion_group" in b]
        if not samples or len(counted) != len(samples):
            self._padless_step_pairs = None  # a whole step's input: PadlessTrainerMixin weighs
            return samples, items
        pairs = sum(int(b["completion_group"].numel()) // 2 for b in counted)
        if me.accelerator.num_processes > 1:
            total = torch.tensor([pairs], device=device, dtype=torch.int64)
            pairs = int(me.accelerator.gather(total).sum())
        self._padless_step_pairs = (pairs, len(samples))
        return samples, items

    def _compute_loss(self, model: Any, inputs: Any, return_outputs: bool) -> Any:
        import torch

        me = cast(Any, self)
        if "target_index" not in inputs:
            raise ValueError(
                "PackedDPOMixin got a batch without 'target_index': its data_collator must be "
                f"PreferenceCollator, got keys {sorted(inputs)!r:.80}"
            )
        args = {k: inputs[k] for k in ("input_ids", "position_ids", "attention_mask")}
        mask, device = args["attention_mask"], args["input_ids"].device
        if not isinstance(mask, torch.Tensor) and mask.kv_num_blocks.device != device:
            # a BlockMask from the collate (CPU): its mask_mod's tensors go with it only if
            # built there (BlockMask.to leaves them behind)
            args["attention_mask"] = flex_block_mask(inputs, device=device)
        logps = completion_logprobs(model(**args, use_cache=False).logits, inputs)
        with torch.no_grad():
            ref = completion_logprobs(me.ref_model(**args, use_cache=False).logits, inputs)
        # TRL weighs each loss type by its loss_weights (one type here: sigmoid)
        loss = dpo_loss(inputs, logps, ref, beta=me.beta) * float(me.loss_weights[0])
        step = self._padless_step_pairs
        if step is not None and step[0] > 0 and model.training:
            # the Trainer divides by the step's micro-batches and DDP averages over processes
            pairs, micro = step
            loss = loss * (logps.shape[0] // 2 * micro * me.accelerator.num_processes / pairs)
        mode = "train" if me.model.training else "eval"
        ratio = (logps - ref).detach()
        chosen, rejected = me.beta * ratio[0::2], me.beta * ratio[1::2]
        values = {
            "rewards/chosen": chosen,
            "rewards/rejected": rejected,
            "rewards/accuracies": (chosen > rejected).float(),
            "rewards/margins": chosen - rejected,
            "logps/chosen": logps.detach()[0::2],
            "logps/rejected": logps.detach()[1::2],
        }
        # TRL's means over every process's pairs, as sums and a count: a plan's batches hold
        # different pair counts on different processes, which gathering the values cannot take
        sums = torch.stack([v.float().sum() for v in values.values()] + [chosen.new_tensor(
            float(chosen.numel()))])  # fmt: skip
        sums = me.accelerator.gather(sums[None]).sum(0)
        for k, name in enumerate(values):
            me._metrics[mode][name].append((sums[k] / sums[-1].clamp(min=1)).item())
        return (loss, None) if return_outputs else loss


def _refuse_truncated_pairs(dataset: Any, max_length: Any) -> None:
    """Refuse a tokenized preference dataset with a pair TRL would truncate: TRL's collate cuts
    prompt + chosen and prompt + rejected at ``DPOConfig.max_length``, and PackedDPOMixin packs
    whole pairs (a pair over it trained other tokens than TRL's DPO)."""
    names = getattr(dataset, "column_names", None)
    if max_length is None or not isinstance(names, list) or not hasattr(dataset, "__len__"):
        return  # no limit, or a stream (an IterableDataset: its rows are not all at hand)
    if not set(_PAIR_KEYS) <= set(names):
        return
    prompt = lengths_of(dataset, column="prompt_ids")
    for side in ("chosen", "rejected"):
        total = prompt + lengths_of(dataset, column=f"{side}_ids")
        over = np.flatnonzero(total > int(max_length))
        if over.size:
            i = int(over[0])
            raise ValueError(
                f"pair {i}: its prompt and {side} completion hold {int(total[i])} tokens, more "
                f"than DPOConfig.max_length={int(max_length)} ({over.size} pairs are over it), "
                "which TRL's collate truncates them to, and PackedDPOMixin packs whole pairs: "
                "set max_length=None (the packing capacity bounds the pairs), or leave the "
                "longer pairs out of the dataset"
            )


_GRPO_LOSS_TYPES = ("dapo", "grpo", "bnpo", "dr_grpo")  # the ones PackedGRPOMixin computes


def _over_cap(i: int, tokens: int, cap: int) -> ValueError:
    """PackedGRPOMixin's refusal of rollout ``i`` of ``tokens`` tokens over its cap."""
    return ValueError(
        f"rollout {i} holds {tokens} tokens (prompt + completion), over "
        f"padless_max_tokens={cap}: raise padless_max_tokens to at least the longest prompt's "
        "tokens + max_completion_length (TRL does not truncate prompts: or leave out of the "
        "dataset the prompts longer than padless_max_tokens - max_completion_length)"
    )


class PackedGRPOMixin:
    """Mix into TRL's ``GRPOTrainer`` or ``RLOOTrainer`` (``class T(PackedGRPOMixin,
    GRPOTrainer)``) to run each rollout batch's loss on padding-free packed micro-batches
    planned by :func:`padless.plan_step`, each under ``padless_max_tokens`` tokens.

    At every loss step the process's batch (prompt + completion of each rollout, the tokens
    TRL's attention mask keeps) is planned with ``plan_step(lengths, world_size=1,
    max_tokens=padless_max_tokens, loss_tokens=...)`` and cut by
    :func:`padless.torch.split_rollout` into packed rows: one ``(1, T)`` row per micro-batch,
    position ids restarting at every sequence (transformers' padding-free attention), no
    padding. Every completion is scored through TRL's fused LM head, and the loss is TRL's:
    GRPO's clipped surrogate (``loss_type`` ``"dapo"``, the default, ``"grpo"``, ``"bnpo"``,
    ``"dr_grpo"``; importance sampling per token or per sequence; the KL term with ``beta``;
    ``delta``; ``use_bias_correction_kl``) or RLOO's per-sequence one, with the same
    normalisation (``bnpo`` divides by the plan's ``total_loss_tokens``). TRL's scoring without
    a gradient (the old policy's and the reference model's log-probs of a generation batch)
    runs packed too.

    ``padless_share_prompts=True`` runs each prompt once for the rollouts of it that share a
    micro-batch (a GRPO group: rollouts with equal prompt tokens are one group of the plan,
    kept whole, cut into pieces that fit where a group is over the cap): the prompt but its
    last token, then per rollout that last token and the completion, under a 4-D shared-prefix
    mask (the one :func:`padless.torch.collate_groups` emits; a float ``T × T`` mask per
    micro-batch, so keep the cap moderate) with positions continuing the prompt's. It pays
    where a process's batch holds several rollouts of a prompt (``steps_per_generation=1``:
    the whole generation batch); the model must honour a 4-D mask (eager or sdpa attention).

    Memory: while the gradient is on, every micro-batch but the last is back-propagated as
    soon as its loss is known (as the Trainer would back-propagate it, under ``no_sync``
    with several processes), so one micro-batch's activations are held at a time; the loss
    returned is the whole batch's. With several processes, the processes agree on the number
    of micro-batches (an all-reduce of one int) so that every one runs the same number.

    Refused when built, naming the setting: ``loss_type`` ``"cispo"``, ``"sapo"``,
    ``"luspo"``, ``"vespo"``; ``top_entropy_quantile < 1``; ``off_policy_mask_threshold``;
    an entropy bonus; a router aux loss; vLLM's importance-sampling correction; DeepSpeed;
    ``nn.DataParallel``. A batch with images, or a sequence over the cap, is a ``ValueError``
    at its step. Logged: the entropy, the KL term and the clip ratios' means as TRL logs them
    (not the per-sequence ``clip_ratio/low_min`` and ``high_max``). tests/test_trl_grpo.py
    checks the loss and gradients against TRL's own and trains beside the plain trainers (one
    process and two) to the same weights.
    """

    def __init__(
        self,
        *args: Any,
        padless_max_tokens: int,
        padless_share_prompts: bool = False,
        **kwargs: Any,
    ) -> None:
        names = [c.__name__ for c in type(self).__mro__]
        if "GRPOTrainer" not in names and "RLOOTrainer" not in names:
            raise TypeError(
                "PackedGRPOMixin mixes into TRL's GRPOTrainer or RLOOTrainer "
                f"(class T(PackedGRPOMixin, GRPOTrainer)), got {type(self).__name__} over "
                f"{', '.join(names[1:4])}"
            )
        cap = cast(int, check_int("padless_max_tokens", padless_max_tokens, minimum=2))
        share = check_bool("padless_share_prompts", padless_share_prompts)
        super().__init__(*args, **kwargs)
        me = cast(Any, self)
        me._padless_max_tokens = cap
        me._padless_share = share
        me._padless_rloo = "RLOOTrainer" in names
        args_ = me.args
        refused: dict[str, tuple[bool, Any]] = {
            "router aux loss": (bool(me.aux_loss_enabled), me.aux_loss_enabled),
            "DeepSpeed": (me.is_deepspeed_enabled, True),
            "n_gpu (nn.DataParallel)": (args_.n_gpu > 1, args_.n_gpu),
        }
        if not me._padless_rloo:
            refused.update(
                {
                    "loss_type": (me.loss_type not in _GRPO_LOSS_TYPES, me.loss_type),
                    "top_entropy_quantile": (
                        me.top_entropy_quantile < 1.0,
                        me.top_entropy_quantile,
                    ),
                    "off_policy_mask_threshold": (
                        me.off_policy_mask_threshold is not None,
                        me.off_policy_mask_threshold,
                    ),
                    "entropy bonus": (bool(me._entropy_bonus_enabled), args_.entropy_coef),
                    "vllm_importance_sampling_correction": (
                        bool(me.use_vllm and me.vllm_importance_sampling_correction),
                        True,
                    ),
                }
            )
        for name, (bad, value) in refused.items():
            if bad:
                raise ValueError(
                    f"PackedGRPOMixin computes TRL's clipped GRPO loss (loss_type one of "
                    f"{', '.join(_GRPO_LOSS_TYPES)}) and RLOO's: {name}={value!r} is not "
                    "supported; use TRL's trainer without the mixin for it"
                )
        longest = getattr(me, "max_completion_length", None)
        if isinstance(longest, int) and cap <= longest:
            raise ValueError(
                f"padless_max_tokens must hold a prompt and a whole completion, more than "
                f"max_completion_length={longest} tokens, got {cap}: a completion that runs to "
                "max_completion_length would be refused in training; raise padless_max_tokens "
                "to the longest prompt's tokens + max_completion_length"
            )

    def _padless_plan(self, lengths: Any, loss_tokens: Any, groups: Any = None) -> Any:
        import torch

        me = cast(Any, self)
        cap = me._padless_max_tokens
        too_long = [i for i, n in enumerate(lengths.tolist()) if n > cap]
        if too_long:
            raise _over_cap(too_long[0], int(lengths[too_long[0]]), cap)
        plan = plan_step(
            lengths, world_size=1, max_tokens=cap, loss_tokens=loss_tokens, groups=groups
        )
        if me.accelerator.num_processes > 1:  # the same number of micro-batches everywhere
            m = torch.tensor(plan.num_micro_batches, device=me.accelerator.device)
            most = int(me.accelerator.reduce(m, reduction="max").item())
            if most > plan.num_micro_batches:
                plan = plan_step(
                    lengths,
                    world_size=1,
                    max_tokens=cap,
                    loss_tokens=loss_tokens,
                    groups=groups,
                    min_micro_batches=most,
                )
        return plan

    def _padless_micro_batches(
        self, input_ids: Any, mask: Any, completions: int, loss_mask: Any
    ) -> list[dict[str, Any]]:
        """The packed micro-batches of a batch of ``prompt | completion`` rows (the completion
        its last ``completions`` columns; ``mask`` the tokens kept)."""
        import torch

        me = cast(Any, self)
        mask = mask.bool()
        _check_one_run(mask, mask[:, : mask.shape[1] - completions])
        if me._padless_share:
            return me._padless_shared(input_ids, mask, completions, loss_mask)
        lengths = mask.sum(dim=1).cpu().numpy()
        plan = me._padless_plan(lengths, loss_mask.sum(dim=1).cpu().numpy())
        is_completion = torch.zeros_like(mask)
        is_completion[:, mask.shape[1] - completions :] = True
        batch = {"input_ids": input_ids, "attention_mask": mask, "is_completion": is_completion}
        return split_rollout(batch, plan, 0)

    def _padless_shared(
        self, input_ids: Any, mask: Any, completions: int, loss_mask: Any
    ) -> list[dict[str, Any]]:
        """Micro-batches with each prompt once: the rollouts of one prompt (equal prompt
        tokens) are one group of the plan, laid out as the prompt but its last token, then for
        each rollout its prompt's last token and its completion, under a 4-D mask by which each
        of those blocks sees the prompt and itself only. (The last prompt token is repeated so
        that TRL's fused head, which scores token j from position j - 1, scores every
        completion's first token.) A group over the cap is cut into groups that fit (those of one
        prompt that land in one micro-batch still run it once)."""
        import numpy as np
        import torch

        me = cast(Any, self)
        cap = me._padless_max_tokens
        cut = mask.shape[1] - completions
        prompts = [input_ids[i, :cut][mask[i, :cut]] for i in range(mask.shape[0])]
        answers = [input_ids[i, cut:][mask[i, cut:]] for i in range(mask.shape[0])]
        found: dict[tuple[int, ...], list[int]] = {}
        for i, prompt in enumerate(prompts):
            found.setdefault(tuple(prompt.tolist()), []).append(i)
        n = len(prompts)
        lengths = np.zeros(n, dtype=np.int64)
        groups = np.zeros(n, dtype=np.int64)
        same = np.zeros(n, dtype=np.int64)  # which prompt: a micro-batch runs each once
        gid = -1
        for k, members in enumerate(found.values()):
            same[members] = k
            room = 0
            for i in members:
                block = 1 + answers[i].numel()
                trunk = prompts[i].numel() - 1
                if trunk + block > cap:
                    raise _over_cap(i, trunk + block, cap)
                if block > room:  # a new group: the prompt once more
                    gid, room = gid + 1, cap - trunk
                    lengths[i] = trunk
                groups[i] = gid
                lengths[i] += block
                room -= block
        plan = me._padless_plan(lengths, loss_mask.sum(dim=1).cpu().numpy(), groups)
        dtype = next(me.model.parameters()).dtype
        device = input_ids.device
        out = []
        for idx in plan.micro_batches(0):
            order = sorted(idx.tolist(), key=lambda i: (same[i], i))
            mb: dict[str, Any] = {
                "indices": torch.tensor(order, dtype=torch.long),
                "step_loss_tokens": plan.total_loss_tokens,
            }
            out.append(mb)
            if not order:
                mb["input_ids"] = input_ids.new_zeros((1, 0))
                mb["position_ids"] = torch.zeros((1, 0), dtype=torch.long)
                mb["is_completion"] = torch.zeros((1, 0), dtype=torch.bool)
                continue
            pieces: list[Any] = []
            positions: list[Any] = []
            scored: list[Any] = []
            sizes: list[int] = []
            prompt_of: list[int] = []
            last, trunk_seg = -1, -1
            for i in order:
                prompt, answer = prompts[i], answers[i]
                p = prompt.numel()
                if same[i] != last:  # the prompt but its last token, once
                    last, trunk_seg = int(same[i]), -1
                    if p > 1:
                        trunk_seg = len(sizes)
                        pieces.append(prompt[:-1])
                        positions.append(torch.arange(p - 1))
                        sizes.append(p - 1)
                        prompt_of.append(-1)
                        scored.append(torch.zeros(p - 1, dtype=torch.bool))
                pieces.append(torch.cat([prompt[-1:], answer]))
                positions.append(torch.arange(p - 1, p + answer.numel()))
                sizes.append(answer.numel() + 1)
                prompt_of.append(trunk_seg)
                flags = torch.ones(answer.numel() + 1, dtype=torch.bool)
                flags[0] = False
                scored.append(flags)
            counts = torch.tensor(sizes)
            seg = torch.repeat_interleave(torch.arange(len(sizes)), counts)[None]
            owner = torch.repeat_interleave(torch.tensor(prompt_of), counts)[None]
            mb["input_ids"] = torch.cat(pieces)[None]
            mb["position_ids"] = torch.cat(positions)[None].to(device)
            mb["attention_mask"] = block_causal_mask(seg, dtype, prompt_of=owner).to(device)
            mb["is_completion"] = torch.cat(scored)[None].to(device)
        return out

    def _padless_forward(self, model: Any, mb: dict[str, Any], fallback: Any) -> tuple[Any, Any]:
        """Log-probs (and entropies, where the model's fused head gives them) of a packed
        micro-batch's completion tokens, in order: TRL's fused LM head on one packed row."""
        import torch

        me = cast(Any, self)
        ids = mb["input_ids"]
        pos = mb["position_ids"].to(ids.device)
        if ids.shape[1] == 0:  # an empty micro-batch (processes agreed on more): a zero forward
            ids = fallback[:1, :1]
            pos = torch.zeros_like(ids)
            completion = torch.zeros_like(ids, dtype=torch.bool)
        else:
            completion = mb["is_completion"].bool()
        labels = ids.masked_fill(~completion, -100)
        labels[:, 0] = -100
        extra = {}
        if "attention_mask" in mb and mb["input_ids"].shape[1]:  # shared prompts: a 4-D mask
            extra["attention_mask"] = mb["attention_mask"]
        with me.accelerator.autocast():
            out = model(input_ids=ids, position_ids=pos, labels=labels, fused_lm_head=True, **extra)
        # out.log_probs[0, j - 1] scores token j: shift back onto the tokens
        keep = completion[0, 1:]
        entropy = out.entropy[0][keep] if out.entropy is not None else None
        return out.log_probs[0][keep], entropy

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: Any,
        attention_mask: Any,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **extra: Any,
    ) -> tuple[Any, Any, Any]:
        """TRL's no-gradient scoring (the old policy's and the reference model's log-probs of a
        generation batch) on packed micro-batches too; anything else is TRL's own."""
        import torch

        me = cast(Any, self)
        if (
            torch.is_grad_enabled()
            or compute_aux_loss
            or any(v is not None for v in extra.values())
        ):
            return cast(Any, super())._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **extra,
            )
        mask = attention_mask.bool()
        rows = mask[:, mask.shape[1] - logits_to_keep :]
        logps = torch.zeros(rows.shape, dtype=torch.float32, device=input_ids.device)
        entropies = torch.zeros_like(logps) if compute_entropy else None
        for mb in me._padless_micro_batches(input_ids, mask, logits_to_keep, rows):
            idx = mb["indices"].to(input_ids.device)
            got, entropy = me._padless_forward(model, mb, input_ids)
            at = rows[idx]
            block = logps[idx]
            block[at] = got.to(logps.dtype)
            logps[idx] = block
            if entropies is not None and entropy is not None:
                block = entropies[idx]
                block[at] = entropy.to(entropies.dtype)
                entropies[idx] = block
        return logps, entropies, None

    def _compute_loss(self, model: Any, inputs: Any) -> Any:
        import torch

        me = cast(Any, self)
        images = [k for k in _GRPO_IMAGE_KEYS if inputs.get(k) is not None]
        if images:
            raise ValueError(
                f"PackedGRPOMixin packs text rollouts only; this batch carries {images}: use "
                "TRL's trainer without the mixin for images"
            )
        completion_mask = inputs["completion_mask"]
        loss_mask = completion_mask
        if "tool_mask" in inputs:
            loss_mask = completion_mask * inputs["tool_mask"]
        micro = me._padless_micro_batches(
            torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1),
            torch.cat([inputs["prompt_mask"], completion_mask], dim=1),
            completion_mask.shape[1],
            loss_mask,
        )
        training = bool(me.model.training)
        scale = 1.0
        if training and not me.loss_is_scaled_for_ga:
            scale = 1.0 / me.current_gradient_accumulation_steps
        early = torch.is_grad_enabled() and len(micro) > 1
        total = None
        stats: dict[str, Any] = {}
        for k, mb in enumerate(micro):
            last = k == len(micro) - 1
            context = (
                me.accelerator.no_sync(model) if early and not last else contextlib.nullcontext()
            )
            with context:
                part = me._padless_part(model, inputs, mb, completion_mask, loss_mask, stats)
                if early and not last:
                    me.accelerator.backward(part * scale)
                    part = part.detach()
            total = part if total is None else total + part
        me._padless_log(stats, training)
        return total

    def _padless_part(
        self,
        model: Any,
        inputs: Any,
        mb: dict[str, Any],
        completion_mask: Any,
        loss_mask: Any,
        stats: dict[str, Any],
    ) -> Any:
        """One micro-batch's share of the batch's loss (and its metrics into ``stats``)."""
        import torch

        me = cast(Any, self)
        idx = mb["indices"].to(completion_mask.device)
        logps, entropy = me._padless_forward(model, mb, inputs["completion_ids"])
        rows = completion_mask[idx].bool()  # the completion tokens of these rollouts, in order
        counts = rows.sum(dim=1)
        seq = torch.repeat_interleave(torch.arange(idx.numel(), device=counts.device), counts)
        weight = loss_mask[idx][rows].to(logps.dtype)
        n = completion_mask.shape[0]
        advantages = inputs["advantages"][idx]

        def per_seq(x: Any) -> Any:
            return torch.zeros(idx.numel(), dtype=x.dtype, device=x.device).index_add_(0, seq, x)

        if entropy is not None:
            _add(stats, "entropy", (entropy.detach() * weight).sum(), weight.sum())
        if me._padless_rloo:
            log_ratio = per_seq(logps) - inputs["old_logps"][idx]
            coef_1 = torch.exp(log_ratio)
            coef_2 = torch.clamp(coef_1, 1 - me.epsilon_low, 1 + me.epsilon_high)
            loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
            _clip_stats(stats, coef_1.detach(), advantages, torch.ones_like(coef_1), me)
            return loss.sum() / n

        if advantages.dim() == 2:
            advantages = advantages[rows]
        else:
            advantages = advantages[seq]
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old[idx][rows]
        log_ratio = logps - old
        by_seq = me.importance_sampling_level == "sequence"
        if by_seq:  # one ratio per sequence: its tokens' mean log-ratio
            level = per_seq(log_ratio * weight) / per_seq(weight).clamp(min=1.0)
            log_ratio = level[seq]
        coef_1 = torch.exp(log_ratio)
        coef_2 = torch.clamp(coef_1, 1 - me.epsilon_low, 1 + me.epsilon_high)
        if me.beta != 0.0:
            ref = inputs["ref_per_token_logps"][idx][rows]
            kl = torch.exp(ref - logps) - (ref - logps) - 1
            if me.args.use_bias_correction_kl:
                kl = kl * coef_1
            _add(stats, "kl", (kl.detach() * weight).sum(), weight.sum())
        if me.args.delta is not None:
            coef_1 = torch.clamp(coef_1, max=me.args.delta)
        if by_seq and inputs["advantages"].dim() == 1:  # TRL counts these per sequence
            ratio = torch.exp(level.detach())
            if me.args.delta is not None:
                ratio = torch.clamp(ratio, max=me.args.delta)
            adv = inputs["advantages"][idx]
            _clip_stats(stats, ratio, adv, torch.ones_like(ratio), me)
        else:
            _clip_stats(stats, coef_1.detach(), advantages, weight, me)
        per_token = -torch.min(coef_1 * advantages, coef_2 * advantages)
        if me.beta != 0.0:
            per_token = per_token + me.beta * kl
        summed = per_token * weight
        training = bool(me.model.training)
        accumulation = me.current_gradient_accumulation_steps if training else 1.0
        if me.loss_type == "grpo":
            counts = per_seq(weight).clamp(min=1.0)
            return (per_seq(summed) / counts).sum() / n / accumulation
        if me.loss_type == "bnpo":
            return summed.sum() / max(mb["step_loss_tokens"], 1) / accumulation
        if me.loss_type == "dr_grpo":
            return summed.sum() / (n * me.max_completion_length) / accumulation
        # dapo: TRL's normaliser, the generation batch's loss tokens over every process
        normaliser = inputs["num_items_in_batch"].clamp(min=1.0) / me.accelerator.num_processes
        if training:
            normaliser = (
                normaliser * me.current_gradient_accumulation_steps / me.args.steps_per_generation
            )
        return summed.sum() / normaliser

    def _padless_log(self, stats: dict[str, Any], training: bool) -> None:
        import torch

        me = cast(Any, self)
        metrics = me._metrics["train" if training else "eval"]
        for name, (total, count) in stats.items():
            both = me.accelerator.reduce(torch.stack([total, count]).float(), reduction="sum")
            metrics[name].append((both[0] / both[1].clamp(min=1.0)).item())


_GRPO_IMAGE_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "pixel_attention_mask",
    "spatial_shapes",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


def _add(stats: dict[str, Any], name: str, total: Any, count: Any) -> None:
    if name in stats:
        a, b = stats[name]
        stats[name] = (a + total, b + count)
    else:
        stats[name] = (total, count)


def _clip_stats(stats: dict[str, Any], coef: Any, advantages: Any, weight: Any, me: Any) -> None:
    low = ((coef < 1 - me.epsilon_low) & (advantages < 0)).to(weight.dtype)
    high = ((coef > 1 + me.epsilon_high) & (advantages > 0)).to(weight.dtype)
    _add(stats, "clip_ratio/low_mean", (low * weight).sum(), weight.sum())
    _add(stats, "clip_ratio/high_mean", (high * weight).sum(), weight.sum())
    _add(stats, "clip_ratio/region_mean", ((low + high) * weight).sum(), weight.sum())


def _check_one_run(mask: Any, prompt_mask: Any) -> None:
    """Each rollout's kept tokens must be one run (left-padded prompt, right-padded completion):
    then packing them keeps TRL's relative positions, and the first token is a prompt's."""
    starts = (mask[:, 1:] & ~mask[:, :-1]).sum(dim=1) + mask[:, 0].long()
    bad = (starts != 1).nonzero()
    if bad.numel():
        i = int(bad[0, 0])
        raise ValueError(
            f"rollout {i}: its prompt_mask and completion_mask must keep one run of tokens "
            "(left-padded prompt, right-padded completion), got "
            f"{int(starts[i])} runs"
        )
    empty = (prompt_mask.sum(dim=1) == 0).nonzero()
    if empty.numel():
        raise ValueError(
            f"rollout {int(empty[0, 0])} has an empty prompt: PackedGRPOMixin needs at least "
            "one prompt token per rollout"
        )


__all__ = [
    "STATE_FILE",
    "PackedDPOMixin",
    "PackedGRPOMixin",
    "PreferenceCollator",
    "PaddedCollator",
    "PaddingFreeCollator",
    "PadlessTrainerMixin",
    "TrainerBatches",
    "newest_checkpoint",
    "pair_length",
]
