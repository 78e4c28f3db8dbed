"""The collate of packed (source, target) pairs: rows of each field, for encoder–decoder models.

``Packing(capacity=(C_src, C_tgt))`` plans rows whose pairs fit both capacities; this collate
cuts a batch's pairs back into those rows (next fit over both fields) and gives every field
its own packed rows, segment ``k`` of the target rows being the target of segment ``k`` of the
source rows (so one pair of ``cu_seqlens`` serves the encoder, the decoder and the cross
attention).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..core._check import INT64_MAX, check_int, check_int64, positive, positive_or_none
from ..core._keywords import checks_keywords
from ..planners.packing import next_fit_rows
from ..planners.spec import Spec
from ._collate import _MAX_SEQUENCE, _as_ids

__all__ = ["PackedPairsCollate", "collate_packed_pairs"]

_SUFFIXES = ("src", "tgt")


def _check_pair(name: str, value: Any) -> tuple[int, int]:
    """A pair (source, target) of positive ints."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        raise TypeError(
            f"{name} must be a pair (source, target) of ints (or the Packing spec or sampler "
            f"with capacity=(C_src, C_tgt)), got {type(value).__name__} {value!r:.60}"
        )
    return positive(f"{name}[0]", value[0]), positive(f"{name}[1]", value[1])


def _check_keys(keys: Any) -> tuple[str, str]:
    if (
        isinstance(keys, (str, bytes))
        or not isinstance(keys, Sequence)
        or len(keys) != 2
        or not all(isinstance(k, str) for k in keys)
    ):
        raise TypeError(
            "keys must be a pair of field names (source, target), e.g. ('input_ids', 'labels'), "
            f"got {keys!r:.60}"
        )
    return keys[0], keys[1]


class PackedPairsCollate:
    """Collate function built by :func:`collate_packed_pairs` (a picklable callable)."""

    def __init__(
        self,
        capacity: Any,
        *,
        max_per_row: int | None = None,
        rows: int | None = None,
        keys: Sequence[str] = ("input_ids", "labels"),
        position_start: int = 0,
        pad_id: int = 0,
        ignore_index: int = -100,
        decoder_start_id: int | None = None,
    ) -> None:
        self.capacity = _check_pair("capacity", capacity)
        self.max_per_row = positive_or_none("max_per_row", max_per_row)
        self.rows = positive_or_none("rows", rows)
        self.keys = _check_keys(keys)
        self.position_start = check_int("position_start", position_start, minimum=0) or 0
        span = min(max(self.capacity), _MAX_SEQUENCE)  # the longest segment a row can hold
        if self.position_start > INT64_MAX - span + 1:
            raise ValueError(
                "position_start + capacity - 1 (the last position id) must fit in int64, the "
                f"position ids' dtype: with capacity={self.capacity}, position_start must be at "
                f"most {INT64_MAX - span + 1}, got {self.position_start}"
            )
        self.pad_id = check_int64("pad_id", pad_id)
        self.ignore_index = check_int64("ignore_index", ignore_index)
        self.decoder_start_id = (
            None if decoder_start_id is None else check_int64("decoder_start_id", decoder_start_id)
        )

    def _pairs(self, samples: Sequence[Any]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        src: list[torch.Tensor] = []
        tgt: list[torch.Tensor] = []
        for i, s in enumerate(samples):
            if isinstance(s, Mapping):
                missing = [k for k in self.keys if k not in s]
                if missing:
                    raise ValueError(
                        f"sample [{i}] has no field {missing[0]!r} (keys={list(self.keys)}); "
                        f"it has {sorted(map(str, s))!r:.80}"
                    )
                parts = (s[self.keys[0]], s[self.keys[1]])
            elif isinstance(s, (tuple, list)) and len(s) == 2:
                parts = (s[0], s[1])
            else:
                raise TypeError(
                    f"sample [{i}] must be a (source, target) pair or a mapping with keys "
                    f"{list(self.keys)}, got {type(s).__name__}"
                )
            src.append(_as_ids(parts[0], f"the source of sample [{i}]"))
            tgt.append(_as_ids(parts[1], f"the target of sample [{i}]"))
        return src, tgt

    def __call__(self, samples: Sequence[Any]) -> dict[str, Any]:
        src, tgt = self._pairs(samples)
        sizes = np.array([[a.numel(), b.numel()] for a, b in zip(src, tgt, strict=True)])
        sizes = sizes.reshape(-1, 2).astype(np.int64)
        over = np.flatnonzero((sizes > np.array(self.capacity)).any(axis=1))
        if over.size:
            i = int(over[0])
            raise ValueError(
                f"sample [{i}] has {tuple(sizes[i].tolist())} tokens (source, target), more than "
                f"capacity={self.capacity} in some field; were capacity and the lengths the "
                "sampler's?"
            )
        row_of = next_fit_rows(sizes, capacity=self.capacity, max_per_row=self.max_per_row)
        needed = int(row_of[-1]) + 1 if row_of.size else 0
        if self.rows is not None and needed > self.rows:
            raise ValueError(
                f"the batch needs {needed} rows of capacity={self.capacity}, more than "
                f"rows={self.rows}; were capacity and max_per_row the sampler's, and its lengths "
                "the dataset's?"
            )
        num_rows = needed if self.rows is None else self.rows
        out: dict[str, Any] = {}
        for f, (seqs, suffix) in enumerate(zip((src, tgt), _SUFFIXES, strict=True)):
            out.update(self._field(seqs, sizes[:, f], row_of, num_rows, f, suffix))
        return out

    def _field(
        self,
        seqs: list[torch.Tensor],
        lengths: np.ndarray,
        row_of: np.ndarray,
        num_rows: int,
        f: int,
        suffix: str,
    ) -> dict[str, Any]:
        """One field's rows: its sequences back to back, each row's tail one more segment (of
        0 tokens when the row is full), so both fields have the same segments."""
        cap = self.capacity[f]
        used = np.bincount(row_of, weights=lengths, minlength=num_rows).astype(np.int64)
        counts = np.bincount(row_of, minlength=num_rows)
        # segments, row after row: the row's sequences, then its tail
        seg_row = np.concatenate([row_of, np.arange(num_rows)])
        seg_len = np.concatenate([lengths, cap - used])
        seg_real = np.concatenate([np.ones(row_of.size, bool), np.zeros(num_rows, bool)])
        order = np.argsort(seg_row, kind="stable")  # a row's sequences in order, then its tail
        seg_len, seg_real = seg_len[order], seg_real[order]
        parts: list[torch.Tensor] = []
        k = 0
        for r in range(num_rows):
            parts.extend(seqs[k : k + int(counts[r])])
            k += int(counts[r])
            parts.append(torch.full((int(cap - used[r]),), self.pad_id, dtype=torch.long))
        flat = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
        cu = np.zeros(seg_len.size + 1, dtype=np.int64)
        np.cumsum(seg_len, out=cu[1:])
        total = int(cu[-1])
        starts = np.repeat(cu[:-1], seg_len)
        real = torch.from_numpy(np.repeat(seg_real, seg_len))
        shape = (num_rows, cap)
        result: dict[str, Any] = {
            f"position_ids_{suffix}": torch.from_numpy(
                np.arange(total, dtype=np.int64) - starts + self.position_start
            ).view(shape),
            f"seq_idx_{suffix}": torch.from_numpy(
                np.repeat(np.arange(seg_len.size, dtype=np.int32), seg_len)
            ).view(shape),
            f"cu_seqlens_{suffix}": torch.from_numpy(cu.astype(np.int32)),
            f"max_seqlen_{suffix}": int(seg_len.max()) if seg_len.size else 0,
        }
        if f == 0:
            result["input_ids"] = flat.view(shape)
            return result
        labels = flat.clone()
        labels[~real] = self.ignore_index
        result["labels"] = labels.view(shape)
        if self.decoder_start_id is not None:
            # each target shifted right by one within its segment, the start id first
            dec = torch.full_like(flat, self.pad_id)
            dec[1:] = flat[:-1]
            firsts = torch.from_numpy(cu[:-1][seg_real & (seg_len > 0)])
            dec[firsts] = self.decoder_start_id
            dec[~real] = self.pad_id
            result["decoder_input_ids"] = dec.view(shape)
        return result

    def __repr__(self) -> str:
        return (
            f"collate_packed_pairs(capacity={self.capacity}, max_per_row={self.max_per_row}, "
            f"rows={self.rows}, keys={self.keys}, decoder_start_id={self.decoder_start_id})"
        )


@checks_keywords()
def collate_packed_pairs(
    capacity: Any,
    *,
    max_per_row: int | None = None,
    rows: int | None = None,
    keys: Sequence[str] = ("input_ids", "labels"),
    position_start: int = 0,
    pad_id: int = 0,
    ignore_index: int = -100,
    decoder_start_id: int | None = None,
) -> PackedPairsCollate:
    """Make the collate of ``Packing(capacity=(C_src, C_tgt))`` batches: packed rows of each
    field for encoder–decoder models (translation and other sequence-to-sequence data).

    Each sample is a ``(source, target)`` pair of token sequences, or a mapping holding them
    under ``keys``, in the order the sampler yielded their indices. The pairs are cut back into
    the planned rows (:func:`padless.planners.packing.next_fit_rows` over both fields), and
    every row gives one row of each field: the row's sources back to back in ``C_src`` slots,
    its targets in ``C_tgt``, padding after them. Per field (suffix ``_src``, ``_tgt``):

    - ``input_ids`` (rows, C_src): the sources; ``labels`` (rows, C_tgt): the targets, with
      ``ignore_index`` on padding (every target token is learned: no shift is applied);
    - ``decoder_input_ids`` (rows, C_tgt), when ``decoder_start_id`` is given: each target
      shifted right by one inside its own segment, ``decoder_start_id`` first;
    - ``cu_seqlens_src`` / ``cu_seqlens_tgt``: int32 segment bounds into the flattened rows.
      Segments are the pairs' sequences, row after row, and after each row's sequences its
      padding tail (a segment of 0 tokens when the row is full): both fields have the same
      number of segments, segment ``k`` of the targets being the target of segment ``k`` of
      the sources, so ``flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu_seqlens_tgt,
      cu_seqlens_k=cu_seqlens_src, ...)`` is the cross attention;
    - ``max_seqlen_src`` / ``max_seqlen_tgt``: the longest segment (Python ints);
    - ``position_ids_src`` / ``position_ids_tgt``: restarting at ``position_start`` in every
      segment; ``seq_idx_src`` / ``seq_idx_tgt``: int32 segment numbers, equal for a pair.

    Args:
        capacity: ``(C_src, C_tgt)``, or the ``Packing`` spec or sampler (then ``max_per_row``
            comes from it too; one given beside it must agree).
        max_per_row: the sampler's ``max_per_row``.
        rows: output exactly this many rows (empty rows after the batch's); an error if the
            batch needs more.
        keys: the field names of mapping samples (source, target).
        position_start, pad_id, ignore_index: as :func:`padless.torch.collate_packed`.
        decoder_start_id: the decoder's start token; None: no ``decoder_input_ids``.

    Samples must have exactly the lengths the sampler planned with; a row never holds more
    than its capacity in any field. Cost: one concatenation of each field's tokens plus
    O(samples) Python steps.

    >>> collate = collate_packed_pairs((6, 4), decoder_start_id=9)
    >>> out = collate([([1, 2, 3], [4, 5]), ([6, 7], [8]), ([1, 1, 1, 1], [2, 2, 2])])
    >>> out["input_ids"].tolist(), out["labels"].tolist()
    ([[1, 2, 3, 6, 7, 0], [1, 1, 1, 1, 0, 0]], [[4, 5, 8, -100], [2, 2, 2, -100]])
    >>> out["decoder_input_ids"].tolist()
    [[9, 4, 9, 0], [9, 2, 2, 0]]
    >>> out["cu_seqlens_src"].tolist(), out["cu_seqlens_tgt"].tolist()
    ([0, 3, 5, 6, 10, 12], [0, 2, 3, 4, 7, 8])
    """
    spec = getattr(capacity, "spec", capacity)
    if isinstance(spec, Spec):
        form = spec.collate_form()
        if not form.packed or form.capacities is None:
            raise ValueError(
                f"capacity must be a pair or a Packing spec with capacity=(C_src, C_tgt), got "
                f"{spec.describe()}; its batches are collated by padless.torch.collate_for"
            )
        if max_per_row is not None and max_per_row != form.max_per_row:
            raise ValueError(
                f"max_per_row must match the packing spec's max_per_row={form.max_per_row}, "
                f"got {max_per_row}"
            )
        capacity, max_per_row = form.capacities, form.max_per_row
    return PackedPairsCollate(
        capacity,
        max_per_row=max_per_row,
        rows=rows,
        keys=keys,
        position_start=position_start,
        pad_id=pad_id,
        ignore_index=ignore_index,
        decoder_start_id=decoder_start_id,
    )
