"""``TokenDataset``: planned batches gathered straight from a memory-mapped token file.

A padless sampler plans batches of item indices; the usual recipe then loads every item as a
Python object and a collate function pads or packs them. A :class:`TokenDataset` serves the
whole batch in one call instead (``__getitems__``, the DataLoader's batched fetch): the items'
token ranges are looked up in the token store's index, and one compiled pass
(:mod:`padless._kernels.collate`) writes every tensor of the batch: the tokens copied from the
mapped file (dtype converted, padding written) and, from the lengths, the mask or the labels,
positions, segment ids and ``cu_seqlens``. The batches are the ones ``collate_padded`` /
``collate_packed`` would build from the same items, key for key.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .. import _kernels as K
from ..core._check import check_bool, check_choice, check_int64
from ..core._keywords import checks_keywords
from ..io.tokens import open_tokens
from ..planners.packing import (
    Packing,
    layout_rows,
    next_fit_rows,
    refuse_grouped_rows,
    scheduled_stride,
    untag,
)
from ..planners.shapes import shape_for
from ..planners.spec import CollateForm, Spec
from ..sampling.placed import refuse_placements
from ._collate import PackedCollate, form_of
from ._loaders import _pinned_memory_available
from ._packed_check import block_causal_mask

__all__ = ["TokenDataset"]

_OUT_DTYPES: dict[str, tuple[torch.dtype, type[np.signedinteger[Any]]]] = {
    "int64": (torch.int64, np.int64),
    "int32": (torch.int32, np.int32),
}
_STORE_PARTS = ("tokens", "lengths", "starts", "dtype")


def _is_store(source: Any) -> bool:
    return all(hasattr(source, part) for part in _STORE_PARTS) and hasattr(source, "__len__")


def _as_store(source: Any, dtype: Any, eos: Any, documents: bool) -> Any:
    if _is_store(source):
        if dtype is not None or eos is not None or documents:
            raise ValueError(
                "dtype, eos and documents describe a file; a token store given as source "
                "already has them: pass the store alone, or its path with them"
            )
        return source
    if isinstance(source, (str, os.PathLike)):
        return open_tokens(source, dtype=dtype, eos=eos, documents=documents)
    raise TypeError(
        "source must be a token file or prefix (an indexed dataset's .idx/.bin, or a raw token "
        "file with dtype= and eos=) or a token store (padless.io.indexed.IndexedDataset, "
        f"padless.io.tokens.RawTokens), got {type(source).__name__} {source!r:.60}"
    )


def _planned_lengths(plan: Any) -> np.ndarray | None:
    lengths = getattr(plan, "lengths", None)
    if lengths is None or not isinstance(lengths, np.ndarray):
        return None
    return lengths


class TokenDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A map-style dataset over a token file that serves whole planned batches.

    ``dataset[i]`` is item ``i``'s tokens (a 1-D tensor); ``dataset.__getitems__(indices)`` is
    the batch of those items, built as the plan's collate would build it:

    - padded plans (token budget, exact length, buckets, fixed shapes): ``input_ids``
      (rows, width) right-padded with ``pad_id`` to the longest item rounded up to the plan's
      ``pad_to_multiple_of`` (or to the batch's static shape, dummy rows included),
      ``attention_mask`` and ``lengths``: as :func:`padless.torch.collate_padded`;
    - packing plans: the batch's indices are the sampler's codes (split pieces included), cut
      back into the planned rows; ``input_ids``, ``labels``, ``position_ids``, ``seq_idx``,
      ``cu_seqlens``, ``max_seqlen`` as :func:`padless.torch.collate_packed` (2-D rows, or
      ``flatten=True``: one (1, total) row without padding);
    - a capacity warm-up (``Packing(capacity=Schedule)``): a step at ``C = C_max / f`` yields
      the planned codes tagged with ``f``; each planned row of ``C_max`` is laid out as ``f``
      rows of ``C`` (:func:`padless.planners.packing.layout_rows`), as ``collate_for(sampler)``
      lays out ``sampler.pieces(dataset)``'s samples; untagged codes are served as above.

    Use it with the sampler as the DataLoader's ``batch_sampler`` and the identity collate
    (the batch is already built): ``dataset.loader(sampler, num_workers=2)``, or
    ``DataLoader(dataset, batch_sampler=sampler, collate_fn=TokenDataset.collate)``. Workers
    map the file themselves (the dataset pickles as its paths).

    Args:
        source: an indexed dataset (``prefix``, ``prefix.idx`` or ``prefix.bin``: Megatron or
            fairseq), a raw token file (with ``dtype`` and ``eos``: documents end at each
            ``eos``), or a token store (:class:`padless.io.indexed.IndexedDataset`,
            :class:`padless.io.tokens.RawTokens`).
        plan: the sampler (or spec) whose batches this serves; its collate form picks padded or
            packed batches. A sampler's lengths must be the store's (checked once, here: the
            batches then hold exactly the planned tokens). None: padded batches, width as is.
        dtype, eos, documents: how to read ``source`` when it is a path (see
            :func:`padless.io.tokens.open_tokens`).
        pad_id: token id of padding; ``ignore_index``: label of positions not to learn.
        flatten, rows, position_start, attention_mask: as in :func:`collate_packed` (packing
            plans only).
        out_dtype: ``"int64"`` (default) or ``"int32"`` token tensors (``nn.Embedding`` takes
            both; int32 halves the bytes).
        pin_memory: allocate the token tensors in pinned memory (needs an accelerator).

    Indices are integers (floats, bools and text are a TypeError, never truncated), each in
    ``[0, N)``, or for a plan with ``oversize="split"`` any piece's code whose piece starts
    inside its item; a plan that never splits (``"error"``, ``"drop"``) yields no item longer
    than ``capacity``, so such an item is refused, never cut. The codes carry no capacity (a
    warm-up's only its ``f``): a batch from another sampler than ``plan`` is read with
    ``plan``'s capacity. A batch whose codes carry different ``f`` is a ValueError naming two.

    Cost per batch: one compiled pass writing the batch's tensors (about half the speed of a
    bare copy of as many bytes, ``benchmarks/bench_ingest.py``) plus O(items) numpy steps (the
    indices checked, the offsets looked up); nothing is read from the file but the batch's
    tokens. A warm-up step below ``C_max`` adds O(items · f) Python steps (the layout) and, in
    2-D, a numpy pass putting the pieces in their rows.
    """

    serves_codes = True  # the codes of its plan's pieces, read from the file (MixtureDataset asks)

    @checks_keywords()
    def __init__(
        self,
        source: Any,
        *,
        plan: Any = None,
        dtype: Any = None,
        eos: int | None = None,
        documents: bool = False,
        pad_id: int = 0,
        ignore_index: int = -100,
        flatten: bool = False,
        rows: int | None = None,
        position_start: int = 0,
        attention_mask: str | None = None,
        out_dtype: str = "int64",
        pin_memory: bool = False,
    ) -> None:
        documents = check_bool("documents", documents)
        self.plan = plan  # dropped when pickled (into DataLoader workers): the batches need it not
        self.store = _as_store(source, dtype, eos, documents)
        self.num_items = len(self.store)
        store_dtype = np.dtype(self.store.dtype)
        if store_dtype not in K.ingest.TOKEN_DTYPES:
            listed = ", ".join(d.name for d in K.ingest.TOKEN_DTYPES)
            raise TypeError(
                f"source {getattr(self.store, 'path', source)!r} holds {store_dtype.name} values; "
                f"TokenDataset serves token ids of {listed}"
            )
        refuse_placements(plan, "TokenDataset(plan=)")
        if isinstance(getattr(plan, "samplers", None), dict):  # a MixtureSampler
            raise TypeError(
                f"plan must be the sampler of this token file's corpus, got a "
                f"{type(plan).__name__} of the corpora {list(plan.samplers)}: a TokenDataset "
                "serves one token file; build one per corpus (plan=mixture.samplers[name]) and "
                "serve the mixture with padless.torch.mixture_dataset({name: TokenDataset(...)}, "
                "mixture) (each batch is then built by its corpus's TokenDataset)"
            )
        form = form_of(plan) if plan is not None else CollateForm()
        if form is None:
            raise TypeError(
                "plan must be a padless sampler or spec (e.g. the PackingSampler that plans "
                f"these batches), or None, got {type(plan).__name__}"
            )
        if plan is not None and not isinstance(plan, Spec) and not hasattr(plan, "lengths"):
            raise TypeError(
                f"plan must be a sampler of item indices (a PlanSampler over this file's "
                f"lengths) or a spec, got {type(plan).__name__}, which yields the items "
                "themselves, not indices into a token file: serve its batches with its own "
                "collate (padless.torch.collate_for(batcher))"
            )
        refuse_grouped_rows(plan, "TokenDataset")
        spec = getattr(plan, "spec", plan)
        warm_up = isinstance(spec, Packing) and spec.capacity_schedule is not None
        # what the plan yields beyond plain indices, split pieces and a warm-up's tagged codes
        why = spec.needs_pieces(np.zeros(0, dtype=np.int64)) if isinstance(spec, Spec) else None
        if why is not None and not warm_up:
            raise ValueError(
                f"plan {spec.describe()} cannot be served by TokenDataset: {why}, which only "
                "spec.pieces(dataset) serves; TokenDataset serves plain items, split pieces and a "
                "capacity warm-up's tagged codes "
                "(serve a dataset of the items through sampler.pieces(dataset) and "
                "padless.torch.collate_for(sampler))"
            )
        if form.capacities is not None:
            raise ValueError(
                f"plan must pack rows of one field here: TokenDataset serves one token file, "
                f"but the plan packs (source, target) pairs (capacity={form.capacities}); serve "
                "the pairs to collate_packed_pairs(sampler) instead"
            )
        if form.context_parallel > 1:
            raise ValueError(
                "plan must not pack for context parallelism here: TokenDataset builds rows of "
                f"the lengths as they are, but the plan padded every document to a multiple of "
                f"{2 * form.context_parallel} (context_parallel={form.context_parallel}); serve "
                "the dataset's items to collate_packed(sampler, cp_rank=...) instead"
            )
        self.form = form
        # pieces of longer items are codes >= N only where the plan splits them
        self._oversize = str(getattr(spec, "oversize", "split")) if form.packed else "split"
        # a warm-up's codes >= stride carry the step's f: rows of capacity / f
        self._stride = (
            scheduled_stride(self.num_items, form.capacity) if warm_up and len(self) else 0
        )
        self.out_dtype = check_choice("out_dtype", out_dtype, tuple(_OUT_DTYPES))
        self._torch_dtype, self._np_dtype = _OUT_DTYPES[self.out_dtype]
        info = np.iinfo(self._np_dtype)
        self.pad_id = check_int64("pad_id", pad_id)
        self.ignore_index = check_int64("ignore_index", ignore_index)
        for name, value in (("pad_id", self.pad_id), ("ignore_index", self.ignore_index)):
            if not info.min <= value <= info.max:
                raise ValueError(
                    f"{name} must fit out_dtype={self.out_dtype} ([{info.min}, {info.max}]), "
                    f"got {value}"
                )
        self.flatten = check_bool("flatten", flatten)
        self.pin_memory = check_bool("pin_memory", pin_memory)
        if self.pin_memory and not _pinned_memory_available():
            raise ValueError(
                "pin_memory=True needs CUDA or another accelerator backend, got pin_memory=True "
                "on a machine without one"
            )
        if self.form.packed:
            # the packed settings, checked once by the collate that builds the same batches
            self._packed = PackedCollate(
                self.form.capacity,
                max_per_row=self.form.max_per_row,
                rows=rows,
                flatten=flatten,
                position_start=position_start,
                pad_id=self.pad_id,
                ignore_index=self.ignore_index,
                attention_mask=attention_mask,
            )
        elif rows is not None or flatten or position_start or attention_mask is not None:
            raise ValueError(
                "flatten, rows, position_start and attention_mask shape packed batches; "
                "plan is not a packing plan (pass the PackingSampler as plan=)"
            )
        self._check_plan_lengths(plan)

    # ------------------------------------------------------------------ checks
    def _check_plan_lengths(self, plan: Any) -> None:
        planned = _planned_lengths(plan)
        if planned is None:
            return
        if planned.ndim != 1:
            raise ValueError(
                f"plan's lengths have shape {planned.shape}; a token file holds one field, so "
                "the plan must be made on (N,) lengths"
            )
        if planned.shape[0] != self.num_items:
            raise ValueError(
                f"plan was made on {planned.shape[0]} lengths but the token file holds "
                f"{self.num_items} items; plan on the store's lengths "
                "(e.g. PackingSampler(store.lengths, ...))"
            )
        if planned is self.store.lengths:
            return
        stored = self.store.lengths
        step = 1 << 22
        for lo in range(0, self.num_items, step):
            a = np.asarray(planned[lo : lo + step])
            b = np.asarray(stored[lo : lo + step])
            if not np.array_equal(a, b):
                at = lo + int(np.flatnonzero(a != b)[0])
                raise ValueError(
                    f"plan's lengths differ from the token file's at item {at}: planned "
                    f"{int(planned[at])} tokens, the file holds {int(stored[at])}; the batches "
                    "would not be the ones planned (plan on store.lengths)"
                )

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "plan"} | {"plan": None}

    # ------------------------------------------------------------------ map-style protocol
    def __len__(self) -> int:
        return self.num_items

    def __getitem__(self, index: int) -> torch.Tensor:
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"index must be an int, got {type(index).__name__} {index!r}")
        tokens = np.asarray(self.store[int(index)])
        info = np.iinfo(self._np_dtype)
        if tokens.size and not np.can_cast(tokens.dtype, self._np_dtype):
            lo, hi = int(tokens.min()), int(tokens.max())
            if lo < info.min or hi > info.max:
                bad = lo if lo < info.min else hi
                raise ValueError(
                    f"item {int(index)} holds the token {bad}, outside out_dtype="
                    f"{self.out_dtype}'s range [{info.min}, {info.max}]: use out_dtype='int64'"
                )
        return torch.from_numpy(tokens.astype(self._np_dtype))

    def __getitems__(self, indices: Sequence[int]) -> dict[str, Any]:
        arr = np.asarray(indices) if not isinstance(indices, np.ndarray) else indices
        if arr.ndim != 1:
            raise ValueError(
                f"indices must be a 1-D sequence of item indices (one batch), got shape {arr.shape}"
            )
        items = self._indices(arr, indices)
        if self.form.packed:
            if self._stride and items.size and int(items.max()) >= self._stride:
                return self._scheduled_batch(items)
            return self._packed_batch(items)
        return self._padded_batch(items)

    def _indices(self, arr: np.ndarray, given: Any) -> np.ndarray:
        """A batch's indices as int64, integers only (never truncated floats, bools, text), each
        non-negative and, unless they are codes of split pieces, below the item count."""
        n = self.num_items
        if arr.size == 0:
            return np.zeros(0, dtype=np.int64)
        if arr.dtype.kind not in "iu":
            if arr.dtype.kind in "fO" and isinstance(given, (list, tuple)):
                # Python ints beyond int64 make numpy infer float64 or object; floats: refused
                values = list(given)
                if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                    bad = next(v for v in values if not 0 <= v <= np.iinfo(np.int64).max)
                    raise ValueError(
                        f"index {bad} is out of range for a token file of {n} items"
                        if bad >= 0
                        else f"indices must be non-negative, got {bad}"
                    )
            raise TypeError(f"indices must be integer item indices, got dtype {arr.dtype}")
        if arr.dtype == np.uint64 and int(arr.max()) > np.iinfo(np.int64).max:
            bad = int(arr.max())
            raise ValueError(f"index {bad} is out of range for a token file of {n} items")
        items = arr.astype(np.int64, copy=False)
        if int(items.min()) < 0:
            raise ValueError(f"indices must be non-negative, got {int(items[items < 0][0])}")
        if self._stride and int(items.max()) >= self._stride:
            return items  # a warm-up's tagged codes: their planned codes are checked untagged
        self._check_range(items, items)
        return items

    def _check_range(self, items: np.ndarray, given: np.ndarray) -> None:
        """Refuse planned codes past the items, unless they are codes of split pieces
        (``given``: the codes as the batch gave them, for the message)."""
        n = self.num_items
        codes = self.form.packed and self._oversize == "split"
        if (not codes or n == 0) and int(items.max()) >= n:
            what = (
                ""
                if not self.form.packed
                else (f" (the plan, oversize={self._oversize!r}, yields no codes of pieces)")
            )
            at = int(np.argmax(items >= n))
            planned = "" if given is items else f" (planned code {int(items[at])})"
            raise ValueError(
                f"index {int(given[at])}{planned} is out of range for a token file of {n} "
                f"items{what}"
            )

    def _untagged(self, codes: np.ndarray) -> tuple[np.ndarray, int]:
        """A warm-up batch's planned codes and its ``f`` (rows of ``capacity / f``), read as
        :class:`padless.planners.packing.PieceDataset` reads them (:func:`untag`); a batch of
        several capacities, or an ``f`` that does not divide the capacity, is a ValueError."""
        capacity = self._packed.capacity
        planned, factors = untag(codes, self._stride)
        f = int(factors[0])
        if bool((factors != f).any()):
            at = int(np.argmax(factors != f))
            g = int(factors[at])
            raise ValueError(
                f"codes {int(codes[0])} and {int(codes[at])} of one batch ask for rows of "
                f"capacity / {f} and capacity / {g} (capacity={capacity}): a batch is one "
                "step's, at one capacity; were the codes one batch of the sampler?"
            )
        if capacity % f:
            raise ValueError(
                f"code {int(codes[0])} asks for rows of capacity / {f}, but {f} does not divide "
                f"capacity={capacity}; were capacity and the lengths the sampler's?"
            )
        self._check_range(planned, codes)
        return planned, f

    @staticmethod
    def collate(batch: Any) -> Any:
        """The DataLoader's ``collate_fn`` for this dataset: the batch is already built."""
        return batch

    def loader(self, batch_sampler: Any, **options: Any) -> torch.utils.data.DataLoader:  # type: ignore[type-arg]
        """A DataLoader over this dataset with ``batch_sampler`` and the identity collate."""
        if "collate_fn" in options:
            raise ValueError("collate_fn is the dataset's own (TokenDataset.collate); drop it")
        return torch.utils.data.DataLoader(
            self, batch_sampler=batch_sampler, collate_fn=TokenDataset.collate, **options
        )

    # ------------------------------------------------------------------ gathering
    def _empty(self, count: int) -> tuple[torch.Tensor, np.ndarray]:
        if self.pin_memory:
            out = torch.empty(count, dtype=self._torch_dtype, pin_memory=True)
            return out, out.numpy()
        flat = np.empty(count, dtype=self._np_dtype)  # numpy's allocation is the quicker one
        return torch.from_numpy(flat), flat

    def _spans(self, items: np.ndarray, capacity: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Element offsets and lengths of the items (codes of pieces when ``capacity``), checked
        by :meth:`_indices`."""
        if not capacity:
            starts = self.store.starts(items)
            return starts, np.asarray(self.store.lengths[items], dtype=np.int64)
        whole_items = not items.size or int(items.max()) < self.num_items  # no piece past the first
        piece, index = (None, items) if whole_items else np.divmod(items, self.num_items)
        starts = self.store.starts(index)
        whole = np.asarray(self.store.lengths[index], dtype=np.int64)
        longest = int(whole.max()) if whole.size else 0
        if longest <= capacity and whole_items:
            return starts, whole  # whole sequences that fit: the common case
        if self._oversize in ("error", "drop", "skip") and longest > capacity:
            at = int(np.argmax(whole > capacity))
            raise ValueError(
                f"item {int(index[at])} holds {int(whole[at])} tokens, more than capacity="
                f"{capacity}: the plan (oversize={self._oversize!r}) never yields it; plan "
                "with oversize='split' or 'truncate' to serve its pieces"
            )
        if piece is None:  # first pieces only (oversize="truncate", or short splits)
            return starts, np.minimum(whole, capacity)
        lo = piece * capacity
        if np.any((lo >= whole) & (piece > 0)):
            at = int(np.flatnonzero((lo >= whole) & (piece > 0))[0])
            raise ValueError(
                f"code {int(items[at])} asks for tokens from {int(lo[at])} of item "
                f"{int(index[at])}, which holds {int(whole[at])}; were the sampler's lengths "
                "and capacity this file's?"
            )
        return starts + lo, np.minimum(whole - lo, capacity)

    def _padded_batch(self, items: np.ndarray) -> dict[str, Any]:
        starts, lengths = self._spans(items)
        count = int(items.size)
        longest = int(lengths.max()) if count else 0
        form = self.form
        num_rows = count
        if form.shapes is not None:
            at = shape_for(form.shapes, count, longest, form.pad_batches)
            if at < 0:
                raise ValueError(
                    f"the batch of {count} items (longest {longest} tokens) fits none of the "
                    f"shapes {[list(s) for s in form.shapes]}; were the shapes and lengths the "
                    "sampler's?"
                )
            shape_rows, width = form.shapes[at]
            if form.pad_batches:
                num_rows = shape_rows
        else:
            width = -(-longest // form.multiple_of) * form.multiple_of
        ids, flat = self._empty(num_rows * width)
        mask = np.empty(num_rows * width, dtype=np.int64)
        K.padded_batch(self.store.tokens, starts, lengths, num_rows, width, self.pad_id, flat, mask)
        all_lengths = np.zeros(num_rows, dtype=np.int64)
        all_lengths[:count] = lengths
        return {
            "input_ids": ids.view(num_rows, width),
            "attention_mask": torch.from_numpy(mask).view(num_rows, width),
            "lengths": torch.from_numpy(all_lengths),
        }

    def _packed_batch(self, items: np.ndarray) -> dict[str, Any]:
        packed = self._packed
        cap = packed.capacity
        per_row = packed.max_per_row or 0
        starts, lengths = self._spans(items, cap)
        count = int(items.size)
        needed = K.next_fit_count(lengths, cap, per_row)
        if packed.rows is not None and needed > packed.rows:
            raise ValueError(
                f"the batch needs {needed} rows of capacity={cap}, more than "
                f"rows={packed.rows}; were capacity and max_per_row the sampler's, and its "
                "lengths the file's?"
            )
        if packed.flatten:
            rows, shape = 0, (1, int(lengths.sum()))
        else:
            rows = packed.rows if packed.rows is not None else needed
            shape = (rows, cap)
        total = shape[0] * shape[1]
        ids, flat_ids = self._empty(total)
        labels, flat_labels = self._empty(total)
        positions = np.empty(total, dtype=np.int64)
        seq_idx = np.empty(total, dtype=np.int32)
        cu = np.empty(count + rows + 1, dtype=np.int32)
        segments, longest = K.packed_batch(
            self.store.tokens, starts, lengths, cap, per_row, rows, packed.flatten,
            packed.pad_id, packed.ignore_index, packed.position_start,
            flat_ids, flat_labels, positions, seq_idx, cu,
        )  # fmt: skip
        return self._packed_out(shape, ids, labels, positions, seq_idx, cu[: segments + 1], longest)

    def _scheduled_batch(self, codes: np.ndarray) -> dict[str, Any]:
        """A warm-up step's batch: the planned rows (next fit at the planned capacity, as
        ``collate_packed`` finds them) each laid out as ``f`` rows of ``capacity / f``
        (:func:`layout_rows`), every piece a sequence of its own. The kernel writes the pieces'
        tokens back to back (``flatten``: that is the flat batch); in 2-D they are put in their
        rows, each row's padding tail a segment of its own. (The kernel's own rows, next fit over
        the pieces, are not the layout's: a planned row's layout may leave rows empty.)"""
        packed = self._packed
        planned_cap = packed.capacity
        planned, f = self._untagged(codes)
        cap = planned_cap // f
        starts, lengths = self._spans(planned, planned_cap)
        row_of = next_fit_rows(lengths, capacity=planned_cap, max_per_row=packed.max_per_row)
        needed = int(row_of[-1]) + 1 if row_of.size else 0
        if packed.rows is not None and needed > packed.rows:
            raise ValueError(
                f"the batch needs {needed} rows of capacity={planned_cap}, more than "
                f"rows={packed.rows}; were capacity and max_per_row the sampler's, and its "
                "lengths the file's?"
            )
        planned_rows = packed.rows if packed.rows is not None and not packed.flatten else needed
        layout = layout_rows(lengths.tolist(), row_of.tolist(), cap, f, planned_rows)
        pieces = np.array([p for row in layout for p in row], dtype=np.int64).reshape(-1, 3)
        piece_starts = starts[pieces[:, 0]] + pieces[:, 1]
        piece_lengths = pieces[:, 2] - pieces[:, 1]
        real = int(piece_lengths.sum())
        total = real if packed.flatten else len(layout) * cap
        if total > np.iinfo(np.int32).max:  # the kernel's rule, for the grid it does not write
            raise ValueError(
                f"the batch holds {total} tokens, more than cu_seqlens' int32 can index (2**31 - 1)"
            )
        if packed.flatten:
            ids, flat_ids = self._empty(real)
            labels, flat_labels = self._empty(real)
        else:
            flat_ids = np.empty(real, dtype=self._np_dtype)
            flat_labels = np.empty(real, dtype=self._np_dtype)
        positions = np.empty(real, dtype=np.int64)
        seq_idx = np.empty(real, dtype=np.int32)
        cu = np.empty(pieces.shape[0] + 1, dtype=np.int32)
        segments, longest = K.packed_batch(
            self.store.tokens, piece_starts, piece_lengths, cap, 0, 0, True,
            packed.pad_id, packed.ignore_index, packed.position_start,
            flat_ids, flat_labels, positions, seq_idx, cu,
        )  # fmt: skip
        if packed.flatten:
            shape = (1, real)
        else:
            # the grid's segments in order: each row's pieces, then its padding tail
            seg_lens: list[int] = []
            seg_real: list[bool] = []
            at = 0
            for row in layout:
                used = 0
                for n in piece_lengths[at : at + len(row)].tolist():
                    seg_lens.append(n)
                    seg_real.append(True)
                    used += n
                at += len(row)
                if used < cap:
                    seg_lens.append(cap - used)
                    seg_real.append(False)
            shape = (len(layout), cap)
            lens = np.array(seg_lens, dtype=np.int64)
            bounds = np.zeros(lens.size + 1, dtype=np.int64)
            np.cumsum(lens, out=bounds[1:])
            is_real = np.repeat(np.array(seg_real, dtype=bool), lens)
            ids, grid_ids = self._empty(total)
            labels, grid_labels = self._empty(total)
            grid_ids[is_real] = flat_ids
            grid_ids[~is_real] = packed.pad_id
            grid_labels[is_real] = flat_labels
            grid_labels[~is_real] = packed.ignore_index
            positions = np.arange(total, dtype=np.int64) - np.repeat(bounds[:-1], lens)
            positions += packed.position_start
            seq_idx = np.repeat(np.arange(lens.size, dtype=np.int32), lens)
            cu, segments = bounds.astype(np.int32), int(lens.size)
            longest = int(lens.max()) if lens.size else 0
        return self._packed_out(shape, ids, labels, positions, seq_idx, cu[: segments + 1], longest)

    def _packed_out(
        self,
        shape: tuple[int, int],
        ids: torch.Tensor,
        labels: torch.Tensor,
        positions: np.ndarray,
        seq_idx: np.ndarray,
        cu: np.ndarray,
        longest: int,
    ) -> dict[str, Any]:
        """A packed batch's dict (``collate_packed``'s keys) from its written arrays."""
        out: dict[str, Any] = {
            "input_ids": ids.view(shape),
            "labels": labels.view(shape),
            "position_ids": torch.from_numpy(positions).view(shape),
            "seq_idx": torch.from_numpy(seq_idx).view(shape),
            "cu_seqlens": torch.from_numpy(cu),
            "max_seqlen": longest,
        }
        if self._packed.attention_mask == "block":
            out["attention_mask"] = block_causal_mask(out["seq_idx"].to(torch.long))
        return out

    def __repr__(self) -> str:
        kind = "packed" if self.form.packed else "padded"
        return f"TokenDataset({self.store!r}, {len(self)} items, {kind} batches)"
