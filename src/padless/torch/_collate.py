"""Collate functions: padded (to a width multiple or static shapes) and packed (varlen rows).

A strategy's batches are collated by the form its spec gives (:meth:`padless.Spec.collate_form`);
:func:`padless.torch.collate_for` picks the function from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..core._check import (
    INT64_MAX,
    check_bool,
    check_choice,
    check_int,
    check_int64,
    positive,
    positive_or_none,
)
from ..core._keywords import checks_keywords
from ..core.plan import BatchPlan, check_shapes
from ..planners.packing import layout_rows, next_fit_rows, unwrap_scheduled
from ..planners.shapes import shape_for
from ..planners.spec import CollateForm, Spec, check_collate_multiple
from ..sampling.placed import refuse_placements
from ._flex import flex_block_mask
from ._packed_check import block_causal_mask

__all__ = [
    "PackedCollate",
    "PaddedCollate",
    "collate_packed",
    "collate_padded",
    "form_of",
    "join_cp_shares",
    "zigzag_indices",
]

_MAX_SEQUENCE = 1 << 31  # padless lengths are below 2**31


def form_of(source: Any) -> CollateForm | None:
    """The collate form of a spec, or of the spec of a sampler or batcher; None for anything else.

    >>> from padless import Packing
    >>> form_of(Packing(capacity=8)).packed, form_of(8)
    (True, None)
    """
    spec = getattr(source, "spec", source)
    return spec.collate_form() if isinstance(spec, Spec) else None


# --------------------------------------------------------------------------- padded collate


def _as_ids(sample: Any, where: str) -> torch.Tensor:
    if isinstance(sample, torch.Tensor):
        out = sample
    else:
        arr = None if isinstance(sample, Mapping) else np.asarray(sample)
        if arr is None or (arr.dtype.kind not in "iubf" and arr.size):
            raise TypeError(
                f"{where} must be a 1-D sequence of integer token ids, got "
                f"{type(sample).__name__} {sample!r:.60}"
                + (" (a dict: name its ids with fields= or key=)" if arr is None else "")
            )
        if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
            raise ValueError(
                f"{where} holds token id {int(arr.max())}, past int64 (the ids' tensor dtype)"
            )
        if not arr.flags.writeable and arr.dtype.kind in "iu":  # a token store's memory map:
            arr = arr.astype(np.int64)  # the copy .to(torch.long) makes, made before torch sees it
        out = torch.as_tensor(arr)
    if out.ndim != 1:
        raise ValueError(f"{where} must be a 1-D token sequence, got shape {tuple(out.shape)}")
    if out.numel() and (out.dtype.is_floating_point or out.dtype == torch.bool):
        raise TypeError(f"{where} must hold integer token ids, got {out.dtype}")
    return out.to(torch.long)


def _refuse_own_labels(sample: Mapping[str, Any], ids: torch.Tensor, i: int) -> None:
    """Refuse a sample whose own ``labels`` are not its ids: a packed collate's labels are the
    ids (``ignore_index`` at each document's start), so a masked prompt would be trained on."""
    own = sample.get("labels")
    if own is None:
        return
    same = np.array_equal(np.asarray(own.tolist() if isinstance(own, torch.Tensor) else own), ids)
    if not same:
        raise ValueError(
            f"sample [{i}] carries labels of its own (not its input_ids: e.g. a masked prompt), "
            "and collate_packed / collate_for make a packed row's labels from its input_ids: "
            "the masked tokens would be trained on; with transformers use "
            "padless.hf.PaddingFreeCollator (it keeps each row's labels), or drop the labels "
            "field"
        )


def _pad(
    seqs: list[torch.Tensor],
    pad_id: int,
    multiple_of: int,
    shape: tuple[int, int] | None = None,
) -> tuple[torch.Tensor, ...]:
    # shape: (rows, width) to pad to; rows past the samples are dummy rows (length 0, mask 0)
    lengths = torch.zeros(len(seqs) if shape is None else shape[0], dtype=torch.long)
    lengths[: len(seqs)] = torch.tensor([s.numel() for s in seqs], dtype=torch.long)
    if shape is None:
        width = int(lengths.max()) if seqs else 0
        width = -(-width // multiple_of) * multiple_of
    else:
        width = shape[1]
    ids = torch.full((lengths.numel(), width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : s.numel()] = s
    mask = (torch.arange(width)[None, :] < lengths[:, None]).to(torch.long)
    return ids, mask, lengths


def _check_fields(fields: Any) -> list[str] | None:
    """None, or the non-empty list of field names a padded collate reads from each sample."""
    if fields is None:
        return None
    if isinstance(fields, (str, bytes)) or not isinstance(fields, (Sequence, np.ndarray)):
        raise TypeError(
            "fields must be None or a sequence of field names (e.g. ['source', 'target']), got "
            f"{type(fields).__name__} {fields!r:.60}"
        )
    names = list(fields)
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise TypeError(
                f"fields[{i}] must be a field name (str), got {type(name).__name__} {name!r:.60}"
            )
    if not names:
        raise ValueError("fields must name at least one field, got an empty sequence")
    return names


class PaddedCollate:
    """Collate function built by :func:`collate_padded` (a picklable callable, for any worker)."""

    def __init__(
        self,
        pad_id: int,
        multiple_of: int,
        fields: list[str] | None,
        shapes: tuple[tuple[int, int], ...] | None = None,
        pad_batches: bool = True,
        equal_lengths: bool = False,
    ) -> None:
        self.pad_id = check_int64("pad_id", pad_id)
        self.equal_lengths = check_bool("equal_lengths", equal_lengths)
        self.multiple_of = positive("multiple_of", multiple_of)
        self.fields = _check_fields(fields)
        self.pad_batches = check_bool("pad_batches", pad_batches)
        self.shapes = None
        if shapes is not None:
            if self.multiple_of != 1:
                raise ValueError(
                    "multiple_of must be 1 with shapes (each shape's length is the width), got "
                    f"{self.multiple_of}"
                )
            self.shapes = check_shapes(shapes)

    def _shape(self, columns: list[list[torch.Tensor]], count: int) -> tuple[int, int] | None:
        """The (rows, width) of this batch: its shape, found from the samples alone."""
        if self.shapes is None:
            return None
        longest = max((t.numel() for col in columns for t in col), default=0)
        at = shape_for(self.shapes, count, longest, self.pad_batches)
        if at < 0:
            raise ValueError(
                f"the batch of {count} samples (longest {longest} tokens) fits none of the shapes "
                f"{[list(s) for s in self.shapes]}; were the shapes and lengths the sampler's?"
            )
        rows, width = self.shapes[at]
        return (rows if self.pad_batches else count), width

    def _check_equal(self, seqs: list[torch.Tensor]) -> None:
        """Refuse a batch of unequal lengths where the plan made dense blocks."""
        sizes = {t.numel() for t in seqs}
        if self.equal_lengths and len(sizes) > 1:
            raise ValueError(
                f"the batch's samples have lengths {sorted(sizes)}, but the plan's batches hold "
                "pieces of one length: serve the planned pieces (e.g. sampler.pieces(dataset))"
            )

    def __call__(self, samples: list[Any]) -> dict[str, torch.Tensor]:
        if self.fields is None:
            seqs = [_as_ids(s, f"sample [{i}]") for i, s in enumerate(samples)]
            self._check_equal(seqs)
            shape = self._shape([seqs], len(samples))
            ids, mask, lengths = _pad(seqs, self.pad_id, self.multiple_of, shape)
            return {"input_ids": ids, "attention_mask": mask, "lengths": lengths}
        columns = []
        for f, name in enumerate(self.fields):
            seqs = []
            for i, s in enumerate(samples):
                part = s[name] if isinstance(s, Mapping) else s[f]
                seqs.append(_as_ids(part, f"field {name!r} of sample [{i}]"))
            self._check_equal(seqs)
            columns.append(seqs)
        shape = self._shape(columns, len(samples))
        out: dict[str, torch.Tensor] = {}
        for name, seqs in zip(self.fields, columns, strict=True):
            ids, mask, lengths = _pad(seqs, self.pad_id, self.multiple_of, shape)
            out[name], out[f"{name}_mask"], out[f"{name}_lengths"] = ids, mask, lengths
        return out


def _plan_multiple(plan: Any) -> tuple[int, Any]:
    """The width multiple a sampler, spec or BatchPlan plans with, and its spec (or None)."""
    if isinstance(plan, BatchPlan):
        return int(plan.info.get("pad_to_multiple_of", 1)), None
    refuse_placements(plan, "collate_padded(plan=)")
    spec = getattr(plan, "spec", plan)
    if not isinstance(spec, Spec):
        raise TypeError(
            "plan must be a padless sampler, spec (e.g. padless.TokenBudget(...)) or BatchPlan, "
            f"got {type(plan).__name__}"
        )
    form = spec.collate_form()
    if form.packed:
        raise ValueError(
            "plan is a packing plan, whose batches are rows of packed sequences: collate them "
            "with padless.torch.collate_packed(sampler) or collate_for(sampler), not collate_padded"
        )
    return form.multiple_of, spec


@checks_keywords()
def collate_padded(
    pad_id: int,
    *,
    multiple_of: int | None = None,
    fields: Sequence[str] | None = None,
    shapes: Any = None,
    plan: Any = None,
) -> PaddedCollate:
    """Make a collate function that right-pads token sequences to the batch's longest.

    A token budget is a promise about the batch the model receives: pad to a multiple in the
    plan (``TokenBudget(max_tokens=4096, pad_to_multiple_of=8)``, which plans the rounded
    widths) and take the collate from it (``collate_for(sampler, pad_id=0)`` or
    ``collate_padded(0, plan=sampler)``). ``multiple_of`` alone rounds after planning, so
    batches may pass the budget.

    Args:
        pad_id: token id used for padding.
        multiple_of: round the padded width up to a multiple (e.g. 8 for tensor cores). With
            ``plan``: the plan's ``pad_to_multiple_of`` by default, and a ValueError if given
            otherwise. Without: 1 by default.
        plan: the padless sampler, spec or :class:`padless.BatchPlan` whose batches this
            collate pads: the width multiple comes from it, so the padded batch is the one the
            plan budgeted (a :class:`padless.FixedShapes` spec or sampler acts as ``shapes``).
        fields: None when each sample is one token sequence; else the field names (e.g.
            ``("source", "target")``) when each sample is a mapping with those keys or a tuple in
            that order.
        shapes: pad every batch to a static shape instead: a list of ``(batch_size, length)``
            pairs, or a :class:`padless.FixedShapes` spec (or its sampler). A batch of ``c``
            samples, the longest ``m`` tokens (over all fields), takes the shape the planner
            tagged it with (:func:`padless.planners.shapes.shape_for`: the fewest slots among
            the shapes with ``length >= m`` and ``batch_size >= c``); every field is padded to
            that length, and rows are added up to that batch size (dummy rows: ``pad_id``
            tokens, an all-zero mask, length 0) unless the spec has ``pad_batches=False``; a
            plain list always adds them. A batch no shape holds raises ValueError. Not with
            ``multiple_of`` (the shape fixes the width).

    Returns:
        A picklable function mapping a list of samples to ``{"input_ids", "attention_mask",
        "lengths"}``, or with fields to ``{name: ids, name + "_mask": mask, name + "_lengths":
        lengths}`` for each field.

    >>> out = collate_padded(0, multiple_of=4)([[5, 6, 7], [8]])
    >>> out["input_ids"].tolist(), out["attention_mask"].tolist()
    ([[5, 6, 7, 0], [8, 0, 0, 0]], [[1, 1, 1, 0], [1, 0, 0, 0]])
    >>> out = collate_padded(0, shapes=[(3, 4), (1, 8)])([[5, 6, 7], [8]])
    >>> out["input_ids"].tolist(), out["lengths"].tolist()
    ([[5, 6, 7, 0], [8, 0, 0, 0], [0, 0, 0, 0]], [3, 1, 0])
    >>> from padless import TokenBudget
    >>> collate_padded(0, plan=TokenBudget(max_tokens=64, pad_to_multiple_of=8)).multiple_of
    8
    """
    pad_id = check_int64("pad_id", pad_id)
    names = _check_fields(fields)
    if plan is not None:
        planned, spec = _plan_multiple(plan)
        if spec is not None and spec.collate_form().shapes is not None:
            if shapes is not None:
                raise ValueError("pass shapes or a FixedShapes plan, not both")
            shapes = spec
        if multiple_of is None:
            multiple_of = planned
        else:
            multiple_of = positive("multiple_of", multiple_of)
            check_collate_multiple(planned, multiple_of)
    multiple_of = 1 if multiple_of is None else positive("multiple_of", multiple_of)
    if shapes is None:
        equal = form_of(plan) if plan is not None and not isinstance(plan, BatchPlan) else None
        return PaddedCollate(
            pad_id, multiple_of, names, equal_lengths=bool(equal and equal.equal_lengths)
        )
    form = form_of(shapes)
    if form is not None and form.shapes is not None:
        return PaddedCollate(pad_id, multiple_of, names, form.shapes, form.pad_batches)
    return PaddedCollate(pad_id, multiple_of, names, shapes, True)


# --------------------------------------------------------------------------- packed collate


class PackedCollate:
    """Collate function built by :func:`collate_packed` (a picklable callable, for any worker)."""

    def __init__(
        self,
        capacity: int,
        *,
        max_per_row: int | None = None,
        rows: int | None = None,
        flatten: bool = False,
        position_start: int = 0,
        pad_id: int = 0,
        ignore_index: int = -100,
        key: str = "input_ids",
        truncate: bool = False,
        attention_mask: str | None = None,
        context_parallel: int = 1,
        cp_rank: int | None = None,
    ) -> None:
        self.capacity = positive("capacity", capacity)
        self.context_parallel, self.cp_rank = _check_cp(self.capacity, context_parallel, cp_rank)
        self.max_per_row = positive_or_none("max_per_row", max_per_row)
        self.rows = positive_or_none("rows", rows)
        self.flatten = check_bool("flatten", flatten)
        self.position_start = check_int("position_start", position_start, minimum=0) or 0
        span = min(self.capacity, _MAX_SEQUENCE)  # the longest sequence a row can hold
        if self.position_start > INT64_MAX - span + 1:
            what = f"capacity={self.capacity}" if span == self.capacity else "sequences < 2**31"
            raise ValueError(
                "position_start + capacity - 1 (the last position id) must fit in int64, the "
                f"position_ids' dtype: with {what}, position_start must be at most "
                f"{INT64_MAX - span + 1}, got {self.position_start}"
            )
        self.pad_id = check_int64("pad_id", pad_id)
        self.ignore_index = check_int64("ignore_index", ignore_index)
        if not isinstance(key, str):
            raise TypeError(f"key must be a str, got {type(key).__name__} {key!r}")
        self.key = key
        self.truncate = check_bool("truncate", truncate)
        if attention_mask is not None:
            check_choice("attention_mask", attention_mask, ("block", "flex"))
            if self.context_parallel > 1:
                raise ValueError(
                    "attention_mask must be None with context_parallel > 1 (a rank's share is "
                    "no row; its attention is the context-parallel kernel's), got "
                    f"attention_mask={attention_mask!r} with context_parallel="
                    f"{self.context_parallel}"
                )
        self.attention_mask = attention_mask

    def _samples(self, samples: Sequence[Any], cap: int | None = None) -> list[torch.Tensor]:
        """The samples' token ids (longer ones than ``cap``, the capacity by default, cut to it
        where ``truncate``)."""
        cap = self.capacity if cap is None else cap
        seqs: list[torch.Tensor] = []
        for i, s in enumerate(samples):
            part = s[self.key] if isinstance(s, Mapping) else s
            ids = _as_ids(part, f"sample [{i}]")
            if isinstance(s, Mapping) and self.key != "labels":
                _refuse_own_labels(s, ids, i)
            if ids.numel() > cap:
                if not self.truncate:
                    raise ValueError(
                        f"sample [{i}] has {ids.numel()} tokens, more than capacity={cap}; serve "
                        "pieces with PackingSampler.pieces(dataset) (oversize='split' or "
                        "'truncate'), or pass truncate=True to keep the first capacity tokens"
                    )
                ids = ids[:cap]
            seqs.append(ids)
        return seqs

    def _rows(self, sizes: list[int], cap: int | None = None) -> tuple[list[int], int]:
        """Every sample's row (next fit over the planned ``sizes`` in rows of ``cap``, the
        capacity by default) and the rows needed."""
        cap = self.capacity if cap is None else cap
        row_of = next_fit_rows(sizes, capacity=cap, max_per_row=self.max_per_row).tolist()
        needed = row_of[-1] + 1 if row_of else 0
        if self.rows is not None and needed > self.rows:
            raise ValueError(
                f"the batch needs {needed} rows of capacity={cap}, more than rows={self.rows}; "
                "were capacity, max_per_row and context_parallel the sampler's, and its lengths "
                "the dataset's?"
            )
        return row_of, needed

    def __call__(self, samples: Sequence[Any]) -> dict[str, Any]:
        samples, scheduled = unwrap_scheduled(samples)
        cap = self.capacity
        if scheduled is not None:
            return self._scheduled(samples, *scheduled)
        seqs = self._samples(samples)
        if self.context_parallel > 1:
            return self._context_parallel(seqs)
        lengths = [int(t.numel()) for t in seqs]
        row_of, needed = self._rows(lengths)
        # segments cover the whole output: the sequences, plus each row's padding tail (2-D only)
        parts: list[torch.Tensor] = []
        seg_lens: list[int] = []
        seg_real: list[bool] = []
        if self.flatten:
            parts, seg_lens, seg_real = seqs, lengths, [True] * len(seqs)
            shape = (1, sum(lengths))
        else:
            num_rows = self.rows if self.rows is not None else needed
            used = [0] * num_rows
            for n, r in zip(lengths, row_of, strict=True):
                used[r] += n
            i = 0
            for r in range(num_rows):
                while i < len(seqs) and row_of[i] == r:
                    parts.append(seqs[i])
                    seg_lens.append(lengths[i])
                    seg_real.append(True)
                    i += 1
                if used[r] < cap:
                    parts.append(torch.full((cap - used[r],), self.pad_id, dtype=torch.long))
                    seg_lens.append(cap - used[r])
                    seg_real.append(False)
            shape = (num_rows, cap)
        return self._assemble(parts, seg_lens, seg_real, shape)

    def _scheduled(self, samples: list[Any], capacity: int, planned: int) -> dict[str, Any]:
        """A batch of a capacity schedule's step at ``capacity``: every planned row (next fit
        at the ``planned`` capacity) laid out as ``f = planned / capacity`` rows of ``capacity``
        (:func:`padless.planners.packing.layout_rows`), each piece a sequence of its own; with
        ``rows``, ``rows · f`` rows. The 2-D layout needs this collate's capacity to be the
        planned one; the flat layout takes any."""
        if self.context_parallel > 1 or (not self.flatten and self.capacity != planned):
            raise ValueError(
                f"the samples were planned in rows of {planned} tokens (served at {capacity}): "
                f"the collate's capacity must be {planned} with context_parallel=1, got "
                f"capacity={self.capacity}, context_parallel={self.context_parallel}; use "
                "collate_for(sampler)"
            )
        f = planned // capacity
        seqs = self._samples(samples, planned)
        lengths = [int(t.numel()) for t in seqs]
        row_of, needed = self._rows(lengths, planned)
        planned_rows = self.rows if self.rows is not None and not self.flatten else needed
        parts: list[torch.Tensor] = []
        seg_lens: list[int] = []
        seg_real: list[bool] = []
        for sub in layout_rows(lengths, row_of, capacity, f, planned_rows):
            used = 0
            for i, a, b in sub:
                parts.append(seqs[i][a:b])
                seg_lens.append(b - a)
                seg_real.append(True)
                used += b - a
            if used < capacity and not self.flatten:
                parts.append(torch.full((capacity - used,), self.pad_id, dtype=torch.long))
                seg_lens.append(capacity - used)
                seg_real.append(False)
        shape = (1, sum(seg_lens)) if self.flatten else (planned_rows * f, capacity)
        return self._assemble(parts, seg_lens, seg_real, shape)

    def _assemble(
        self,
        parts: list[torch.Tensor],
        seg_lens: list[int],
        seg_real: list[bool],
        shape: tuple[int, int],
    ) -> dict[str, Any]:
        """The batch's tensors from its segments (sequences and padding tails, in order)."""
        flat = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
        lens_t = torch.tensor(seg_lens, dtype=torch.long)
        cu = torch.zeros(len(seg_lens) + 1, dtype=torch.long)
        torch.cumsum(lens_t, 0, out=cu[1:])
        total = int(cu[-1])
        seq_idx = torch.repeat_interleave(torch.arange(len(seg_lens)), lens_t)
        position_ids = (
            torch.arange(total) - torch.repeat_interleave(cu[:-1], lens_t) + self.position_start
        )
        real = torch.tensor(seg_real, dtype=torch.bool)
        labels = flat.clone()
        labels[~torch.repeat_interleave(real, lens_t)] = self.ignore_index
        labels[cu[:-1][real & (lens_t > 0)]] = self.ignore_index
        out: dict[str, Any] = {
            "input_ids": flat.view(shape),
            "labels": labels.view(shape),
            "position_ids": position_ids.view(shape),
            "seq_idx": seq_idx.to(torch.int32).view(shape),
            "cu_seqlens": cu.to(torch.int32),
            "max_seqlen": max(seg_lens, default=0),
        }
        if self.attention_mask == "block":
            out["attention_mask"] = block_causal_mask(seq_idx.view(shape))
        elif self.attention_mask == "flex":
            out["attention_mask"] = flex_block_mask(seq_idx.view(shape))
        return out

    def _context_parallel(self, seqs: list[torch.Tensor]) -> dict[str, Any]:
        """The batch for context-parallel ranks: every document padded to a multiple of
        ``2·cp``; the whole rows, or rank ``cp_rank``'s zigzag share of them."""
        cap, cp = self.capacity, self.context_parallel
        m = 2 * cp
        lengths = [int(t.numel()) for t in seqs]
        padded = [-(-n // m) * m for n in lengths]
        row_of, needed = self._rows(padded)
        # segments: each document (real, padded), and in 2-D each row's tail (0 real tokens)
        parts: list[torch.Tensor] = []
        real: list[int] = []
        width: list[int] = []

        def pad(count: int) -> None:
            if count:
                parts.append(torch.full((count,), self.pad_id, dtype=torch.long))

        i = 0
        num_rows = needed if self.flatten or self.rows is None else self.rows
        for r in range(num_rows):
            used = 0
            while i < len(seqs) and row_of[i] == r:
                parts.append(seqs[i])
                pad(padded[i] - lengths[i])
                real.append(lengths[i])
                width.append(padded[i])
                used += padded[i]
                i += 1
            if not self.flatten and used < cap:
                pad(cap - used)
                real.append(0)
                width.append(cap - used)
        flat = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
        # index arithmetic in numpy (torch's repeat_interleave is slow on small views)
        real_a = np.asarray(real, dtype=np.int64)
        width_a = np.asarray(width, dtype=np.int64)
        cu_pad = np.zeros(width_a.size + 1, dtype=np.int64)
        np.cumsum(width_a, out=cu_pad[1:])
        cu_real = np.zeros(real_a.size + 1, dtype=np.int64)
        np.cumsum(real_a, out=cu_real[1:])
        total = int(cu_pad[-1])
        in_seg = np.arange(total, dtype=np.int64) - np.repeat(cu_pad[:-1], width_a)
        is_real = torch.from_numpy(in_seg < np.repeat(real_a, width_a))
        labels = flat.clone()
        labels[~is_real] = self.ignore_index
        labels[torch.from_numpy(cu_pad[:-1][real_a > 0])] = self.ignore_index
        shift = torch.full_like(labels, self.ignore_index)
        shift[:-1] = labels[1:]  # a document's last real token precedes padding or a start
        seq_idx = np.repeat(np.arange(width_a.size, dtype=np.int32), width_a)
        tensors = {
            "input_ids": flat,
            "labels": labels,
            "shift_labels": shift,
            "position_ids": torch.from_numpy(in_seg + self.position_start),
            "seq_idx": torch.from_numpy(seq_idx),
        }
        span = total if self.cp_rank is None else total // cp
        if self.cp_rank is not None:
            where = torch.from_numpy(_zigzag(cu_pad, cp, self.cp_rank))
            tensors = {k: v[where] for k, v in tensors.items()}
        shape = (1, span) if self.flatten else (num_rows, span // max(num_rows, 1))
        out: dict[str, Any] = {k: v.view(shape) for k, v in tensors.items()}
        out["cu_seqlens"] = torch.from_numpy(cu_real.astype(np.int32))
        out["cu_seqlens_padded"] = torch.from_numpy(cu_pad.astype(np.int32))
        out["max_seqlen"] = max(width, default=0)
        return out

    def __repr__(self) -> str:
        cp = ""
        if self.context_parallel > 1:
            cp = f", context_parallel={self.context_parallel}, cp_rank={self.cp_rank}"
        return (
            f"collate_packed(capacity={self.capacity}, max_per_row={self.max_per_row}, "
            f"rows={self.rows}, flatten={self.flatten}, position_start={self.position_start}"
            + cp
            + (f", attention_mask={self.attention_mask!r})" if self.attention_mask else ")")
        )


def _check_cp(capacity: int, context_parallel: Any, cp_rank: Any) -> tuple[int, int | None]:
    """Checked ``(context_parallel, cp_rank)`` for rows of ``capacity`` tokens."""
    cp = positive("context_parallel", context_parallel)
    m = 1 if cp == 1 else 2 * cp
    if capacity % m:
        raise ValueError(
            f"capacity must be a multiple of 2 * context_parallel = {m} (every document is "
            f"padded to a multiple of it), got capacity={capacity} with context_parallel={cp}"
        )
    rank = check_int("cp_rank", cp_rank, minimum=0, allow_none=True)
    if rank is not None and rank >= cp:
        raise ValueError(
            f"cp_rank must be in [0, context_parallel) = [0, {cp}), got cp_rank={rank}"
        )
    return cp, rank


def zigzag_indices(cu_seqlens_padded: Any, context_parallel: int, cp_rank: int) -> torch.Tensor:
    """Positions in the whole (flattened) batch of the tokens context-parallel rank
    ``cp_rank`` holds, in the order it holds them (int64).

    Each segment ``[cu[i], cu[i + 1])`` (its length a multiple of ``2·cp``) is cut into ``2·cp``
    chunks of ``c``; the rank takes chunk ``cp_rank``, then chunk ``2·cp − 1 − cp_rank``, segment
    after segment (what Transformer Engine's ``thd_get_partitioned_indices`` computes). Use it to
    cut any other per-token tensor of a :func:`collate_packed` batch the same way; with
    ``context_parallel=1``, every position.

    Cost: O(tokens / cp).

    >>> zigzag_indices([0, 8, 12], 2, 0).tolist()
    [0, 1, 6, 7, 8, 11]
    """
    cp = positive("context_parallel", context_parallel)
    rank = check_int("cp_rank", cp_rank, minimum=0)
    if rank is None or rank >= cp:
        raise ValueError(f"cp_rank must be in [0, context_parallel) = [0, {cp}), got {rank}")
    cu = _bounds(cu_seqlens_padded)
    lens = np.diff(cu)
    if cu.size == 0 or int(cu[0]) != 0 or bool((lens < 0).any()):
        raise ValueError(
            "cu_seqlens_padded must be non-decreasing bounds starting at 0, got "
            f"{cu.tolist()!r:.80}"
        )
    if cp == 1:
        return torch.arange(int(cu[-1]))
    m = 2 * cp
    if bool((lens % m).any()):
        bad = int(lens[lens % m != 0][0])
        raise ValueError(
            f"cu_seqlens_padded must bound segments of a multiple of 2 * context_parallel = {m} "
            f"tokens, got a segment of {bad}"
        )
    return torch.from_numpy(_zigzag(cu, cp, rank))


def _bounds(value: Any) -> np.ndarray:
    """``cu_seqlens_padded`` as 1-D int64 (a tensor, array or list of ints), or a named error."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):
        arr = np.asarray(None)
    if arr.dtype.kind not in "iu" or arr.ndim != 1:
        raise TypeError(
            "cu_seqlens_padded must be a 1-D sequence of int bounds (a collate_packed batch's "
            f"cu_seqlens_padded), got {type(value).__name__} {value!r:.60}"
        )
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > INT64_MAX:
        raise ValueError(f"cu_seqlens_padded must fit in int64, got {int(arr.max())}")
    return arr.astype(np.int64)


def _zigzag(cu: np.ndarray, cp: int, rank: int) -> np.ndarray:
    """:func:`zigzag_indices` of checked int64 bounds (each segment a multiple of ``2·cp``)."""
    m = 2 * cp
    c = np.diff(cu) // m
    starts = np.stack([cu[:-1] + rank * c, cu[:-1] + (m - 1 - rank) * c], 1).reshape(-1)
    counts = np.repeat(c, 2)
    before = np.cumsum(counts) - counts  # where each run begins in the rank's share
    local = np.arange(int(counts.sum()), dtype=np.int64)
    return np.repeat(starts - before, counts) + local


_SHARED = ("input_ids", "labels", "shift_labels", "position_ids", "seq_idx")


def join_cp_shares(shares: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Reassemble the whole batch from every context-parallel rank's share.

    ``shares[r]`` is what ``collate_packed(..., context_parallel=cp, cp_rank=r)`` returned for
    the batch (``cp = len(shares)``); the result is what ``cp_rank=None`` returns: the rows
    with every document padded, ``input_ids``, ``labels``, ``shift_labels``, ``position_ids``
    and ``seq_idx`` put back in place (:func:`zigzag_indices`), the bounds and ``max_seqlen``
    as the shares give them. A check, and a way to gather per-token outputs (give them under
    those keys).

    Cost: O(tokens).

    >>> c = [collate_packed(8, context_parallel=2, cp_rank=r) for r in range(2)]
    >>> batch = [[1, 2, 3, 4, 5], [6, 7]]
    >>> join_cp_shares([f(batch) for f in c])["input_ids"].tolist()
    [[1, 2, 3, 4, 5, 0, 0, 0], [6, 7, 0, 0, 0, 0, 0, 0]]
    """
    if isinstance(shares, (str, bytes, Mapping)) or not isinstance(shares, Sequence):
        raise TypeError(
            "shares must be a sequence of the CP ranks' batches (dicts), rank order, got "
            f"{type(shares).__name__}"
        )
    if not shares:
        raise ValueError("shares must hold one batch per context-parallel rank, got none")
    for r, share in enumerate(shares):
        if not isinstance(share, Mapping) or "cu_seqlens_padded" not in share:
            raise TypeError(
                f"shares[{r}] must be a batch of collate_packed(..., context_parallel=...) (a "
                f"dict with cu_seqlens_padded), got {type(share).__name__}"
            )
    cp = len(shares)
    cu = torch.as_tensor(shares[0]["cu_seqlens_padded"])
    for r, share in enumerate(shares[1:], 1):
        if not torch.equal(torch.as_tensor(share["cu_seqlens_padded"]), cu):
            raise ValueError(
                f"shares[{r}] has other cu_seqlens_padded than shares[0]: the shares must be "
                "the ranks' cuts of one batch"
            )
    total = int(cu[-1]) if cu.numel() else 0
    out: dict[str, Any] = {k: v for k, v in shares[0].items() if k not in _SHARED}
    where = [zigzag_indices(cu, cp, r) for r in range(cp)] if cp > 1 else [torch.arange(total)]
    for key in _SHARED:
        if not all(key in share for share in shares):
            continue
        parts = [torch.as_tensor(share[key]) for share in shares]
        for r, part in enumerate(parts):
            if part.numel() * cp != total or part.shape != parts[0].shape:
                raise ValueError(
                    f"shares[{r}][{key!r}] holds {part.numel()} tokens of shape "
                    f"{tuple(part.shape)}; a rank's share of {total} tokens holds {total // cp}, "
                    "shaped like shares[0]'s"
                )
        whole = torch.empty(total, dtype=parts[0].dtype)
        for r, part in enumerate(parts):
            whole[where[r]] = part.reshape(-1)
        rows = parts[0].shape[0] if parts[0].ndim == 2 else 1
        out[key] = whole.view(rows, total // max(rows, 1))
    return out


@checks_keywords()
def collate_packed(
    capacity: Any,
    *,
    max_per_row: int | None = None,
    rows: int | None = None,
    flatten: bool = False,
    position_start: int = 0,
    pad_id: int = 0,
    ignore_index: int = -100,
    key: str = "input_ids",
    truncate: bool = False,
    attention_mask: str | None = None,
    context_parallel: int | None = None,
    cp_rank: int | None = None,
) -> PackedCollate:
    """Make a collate function for :class:`padless.PackingSampler` batches (varlen attention).

    The function takes the batch's samples in the order the sampler yielded their indices, cuts
    them back into the planned rows (:func:`padless.planners.packing.next_fit_rows`: rows come in
    the order they were opened, so a new row starts exactly where the next sample does not fit
    or the row holds ``max_per_row``), and returns:

    - ``input_ids``: (rows, capacity), each row's sequences back to back and ``pad_id`` after
      them; or with ``flatten=True``, (1, total) with no padding at all.
    - ``cu_seqlens``: int32 segment bounds into ``input_ids.view(-1)``, starting at 0. In the 2-D
      layout each row's padding tail is a segment of its own, so ``cu_seqlens`` covers the whole
      tensor and can go straight to ``flash_attn_varlen_func``; no real token attends to padding.
    - ``max_seqlen``: the longest segment, a Python int.
    - ``position_ids``: restarting at ``position_start`` at every segment (2 for RoBERTa-style
      models).
    - ``seq_idx``: int32, the segment number of every token (Mamba-style), shaped like input_ids.
    - ``labels``: the token ids, with ``ignore_index`` at the first token of every sequence (so
      no sequence learns to predict across a boundary: with the usual shift, position t predicts
      labels[t + 1]) and on padding.

    Args:
        capacity: the sampler's capacity (tokens per row).
        max_per_row: the sampler's ``max_per_row``.
        rows: output exactly this many rows (pad with empty rows, e.g. ``rows_per_batch`` for a
            fixed shape); an error if the batch needs more. With ``flatten`` it is only checked.
        flatten: return the (1, total) layout.
        position_start: first position id of every sequence.
        pad_id: token id of padding.
        ignore_index: label of positions not to learn.
        key: the token field when samples are mappings; otherwise samples are token sequences.
        truncate: keep the first ``capacity`` tokens of a longer sample instead of raising
            (for ``oversize="truncate"`` without :meth:`PackingSampler.pieces`).
        attention_mask: ``"block"`` adds ``attention_mask``, the float block-diagonal causal mask
            (rows, 1, capacity, capacity), 0 where a token may attend and the float32 minimum
            elsewhere: the custom 4-D mask transformers passes through unchanged (eager and sdpa
            honour it, with or without a cache), for models that do not derive the mask from
            ``position_ids`` (OPT) or loops that keep ``use_cache=True``. It costs rows *
            capacity**2 * 4 bytes; :func:`check_packed` tells whether a model needs it.
            ``"flex"`` adds the same mask as a flex-attention ``BlockMask``
            (:func:`flex_block_mask`: O(capacity) tensors and (capacity / 128)² tile entries
            per row) for ``attn_implementation="flex_attention"``.
        context_parallel: the rows are shared by this many context-parallel ranks (the spec's
            ``context_parallel`` by default when ``capacity`` is a spec or sampler; else 1).
            Above 1, every document is padded to a multiple of ``2·cp`` (as planned: rows are
            cut next fit over the padded lengths) and the batch comes in Transformer Engine's
            THD convention, below. ``capacity`` must be a multiple of ``2·cp``; not with
            ``attention_mask``.
        cp_rank: with ``context_parallel > 1``, return this rank's zigzag share of the batch;
            None returns the whole padded rows (what Megatron's ``get_batch_on_this_cp_rank``
            cuts itself).

    With ``context_parallel = cp > 1`` the batch holds, for rows of segments (each document
    padded to a multiple of ``2·cp``, then in 2-D each row's tail as a segment with no real
    tokens; ``flatten=True`` leaves the tails out):

    - ``input_ids``, ``labels``, ``position_ids``, ``seq_idx`` as above, on the padded rows
      (padding inside a document keeps counting positions; its labels are ``ignore_index``),
      and ``shift_labels``: the labels one token on (``labels[t + 1]`` within the row,
      ``ignore_index`` at every document's last real token), which a rank needs since its
      share is not contiguous and cannot shift its own labels;
    - with ``cp_rank=r``, each of those is rank r's share only: of every segment, of length
      ``2·cp·c``, chunks ``r`` and ``2·cp − 1 − r`` of ``c`` tokens, segment after segment
      (:func:`zigzag_indices`), shaped (rows, capacity / cp) or (1, total / cp);
    - ``cu_seqlens``: int32, the bounds of the segments' real tokens, cumulative over the
      whole batch (all ranks alike; Transformer Engine derives each rank's own);
    - ``cu_seqlens_padded``: int32, the bounds of the padded segments in the whole batch;
    - ``max_seqlen``: the longest padded segment.

    :func:`join_cp_shares` puts the ranks' shares back together.

    Samples must have exactly the lengths the sampler planned with. Cost: one concatenation of
    the batch's tokens plus O(samples) Python steps.

    >>> collate = collate_packed(8)
    >>> out = collate([[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16, 17], [18]])
    >>> out["input_ids"].tolist()
    [[5, 6, 7, 8, 9, 10, 11, 12], [13, 14, 15, 16, 17, 18, 0, 0]]
    >>> out["cu_seqlens"].tolist(), out["max_seqlen"]
    ([0, 6, 8, 13, 14, 16], 6)
    >>> out["position_ids"][1].tolist(), out["labels"][1].tolist()
    ([0, 1, 2, 3, 4, 0, 0, 1], [-100, 14, 15, 16, 17, -100, -100, -100])

    >>> cp = collate_packed(8, context_parallel=2, cp_rank=1)([[1, 2, 3, 4, 5], [6, 7]])
    >>> cp["input_ids"].tolist(), cp["position_ids"].tolist()
    ([[3, 4, 5, 0], [7, 0, 0, 0]], [[2, 3, 4, 5], [1, 2, 1, 2]])
    >>> cp["cu_seqlens"].tolist(), cp["cu_seqlens_padded"].tolist()
    ([0, 5, 7, 7], [0, 8, 12, 16])

    ``capacity`` may also be the ``Packing`` spec or the packing sampler itself, so capacity,
    ``max_per_row`` and ``context_parallel`` are never typed twice (``collate_for(sampler, ...)``
    does this); a ``max_per_row`` or ``context_parallel`` given beside it must then agree.
    """
    form = form_of(capacity)
    if form is not None and form.capacities is not None:
        raise ValueError(
            f"capacity is a packing with one capacity per field (capacity={form.capacities}): "
            "collate its (source, target) rows with padless.torch.collate_packed_pairs(sampler) "
            "or collate_for(sampler)"
        )
    if form is not None and form.packed:
        if max_per_row is not None and max_per_row != form.max_per_row:
            raise ValueError(
                f"max_per_row must match the packing spec's max_per_row={form.max_per_row}, "
                f"got {max_per_row}"
            )
        if context_parallel is not None and context_parallel != form.context_parallel:
            raise ValueError(
                "context_parallel must match the packing spec's context_parallel="
                f"{form.context_parallel}, got {context_parallel!r}"
            )
        capacity, max_per_row = form.capacity, form.max_per_row
        context_parallel = form.context_parallel
    return PackedCollate(
        capacity,
        max_per_row=max_per_row,
        rows=rows,
        flatten=flatten,
        position_start=position_start,
        pad_id=pad_id,
        ignore_index=ignore_index,
        key=key,
        truncate=truncate,
        attention_mask=attention_mask,
        context_parallel=1 if context_parallel is None else context_parallel,
        cp_rank=cp_rank,
    )
