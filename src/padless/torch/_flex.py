"""Flex-attention block masks for packed rows: the block-diagonal causal mask (and the
shared-prefix one) as a ``torch.nn.attention.flex_attention.BlockMask``, never a T×T tensor.

:func:`block_causal_mask` (the 4-D float mask) costs ``rows · T² · 4`` bytes: 1 GiB for one row
of 16,384 tokens. The same mask as flex-attention metadata is a ``mask_mod`` over three O(T)
int32 tensors per row (where a token's segment starts, and its prompt's span) plus, per
``block_size`` tile, which key blocks a query block sees partly or fully: ``(T / block_size)²``
entries. The tile metadata is computed here from the segments' bounds (a token sees the key
interval from its segment's start to itself, and its prompt's interval), one segment's share of
a query block at a time, so no step materialises the T×T mask either: one row of 16,384
tokens in 3-12 ms where the 4-D mask took 0.3-1.3 s to fill (a shared 2-core machine).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..core._check import positive

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

__all__ = ["SegmentMaskMod", "flex_block_mask"]


class SegmentMaskMod:
    """The ``mask_mod`` of :func:`flex_block_mask` (picklable, so a DataLoader worker can return
    a batch holding it): query ``q`` of row ``b`` sees key ``kv`` when ``start[b, q] <= kv <= q``
    (its own segment, causally) or ``prompt_start[b, q] <= kv < prompt_end[b, q]`` (its prompt,
    whole; an empty span where it has none). The tensors are (rows, T) int32."""

    def __init__(
        self, start: torch.Tensor, prompt_start: torch.Tensor, prompt_end: torch.Tensor
    ) -> None:
        self.start, self.prompt_start, self.prompt_end = start, prompt_start, prompt_end

    def __call__(
        self, b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
    ) -> torch.Tensor:
        own = (kv >= self.start[b, q]) & (kv <= q)
        return own | ((kv >= self.prompt_start[b, q]) & (kv < self.prompt_end[b, q]))

    def to(self, device: torch.device | str) -> SegmentMaskMod:
        """The same mask_mod with its tensors on ``device``."""
        return SegmentMaskMod(
            self.start.to(device), self.prompt_start.to(device), self.prompt_end.to(device)
        )

    def nbytes(self) -> int:
        """Bytes of the tensors it holds."""
        return sum(t.numel() * t.element_size() for t in self._tensors())

    def _tensors(self) -> tuple[torch.Tensor, ...]:
        return self.start, self.prompt_start, self.prompt_end


def _spans(
    seq_idx: torch.Tensor, prompt_of: torch.Tensor | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per token: its segment's start, and its prompt's [start, end) (0, 0 without one).

    Segments are runs of equal ids, as :func:`block_causal_mask` reads them; a run's prompt is
    ``prompt_of`` at the run's first token, naming a segment id of the same row (the last run
    of that id, as the dense mask takes it)."""
    ids = seq_idx.detach().cpu().numpy()
    rows, width = ids.shape
    start = np.zeros((rows, width), dtype=np.int32)
    p_start = np.zeros((rows, width), dtype=np.int32)
    p_end = np.zeros((rows, width), dtype=np.int32)
    pro = None if prompt_of is None else prompt_of.detach().cpu().numpy()
    for r in range(rows):
        row = ids[r]
        cuts = np.flatnonzero(row[1:] != row[:-1]) + 1
        firsts = np.concatenate([[0], cuts]).astype(np.int64)
        ends = np.concatenate([cuts, [width]]).astype(np.int64)
        if width == 0:
            continue
        start[r] = np.repeat(firsts, ends - firsts)
        if pro is None:
            continue
        where = {int(row[a]): (a, b) for a, b in zip(firsts.tolist(), ends.tolist(), strict=True)}
        for a, b in zip(firsts.tolist(), ends.tolist(), strict=True):
            p = int(pro[r, a])
            if p < 0:
                continue
            if p not in where:
                raise ValueError(
                    f"prompt_of names segment {p} for the segment at row {r}, token {a}, but "
                    f"row {r} has no segment {p}"
                )
            p_start[r, a:b], p_end[r, a:b] = where[p]
    return start, p_start, p_end


def _overlap(lo: np.ndarray, hi: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sizes of [lo, hi) ∩ [a, b), broadcast (query tokens as rows, key blocks as columns)."""
    return np.maximum(np.minimum(hi, b) - np.maximum(lo, a), 0)


def _tiles(
    start: np.ndarray, p_start: np.ndarray, p_end: np.ndarray, block: int
) -> tuple[np.ndarray, np.ndarray]:
    """(partial, full) booleans (rows, q blocks, kv blocks): a tile where some but not all
    (query, key) pairs are allowed, and one where all are. A ragged last block (T not a
    multiple of ``block``) is never full, as ``create_block_mask`` pads it with masked keys
    and queries.

    Each row is cut into portions, a segment's tokens within one query block, all with the
    same segment start and prompt span; a query ``q`` sees ``[start, q]`` and ``[ps, pe)``.
    A portion ``[a, b)`` touches a key block when its prompt span does or when ``start`` is
    before the block's end and ``b - 1`` at or after its start; it covers the key block when its
    first query ``a`` (the one seeing least) does. Cost: O((segments + T / block) · T / block)."""
    rows, width = start.shape
    nb = -(-width // block)
    k0 = np.arange(nb, dtype=np.int64) * block
    k1 = np.minimum(k0 + block, width)
    whole = np.where(k1 - k0 == block, block, -1)  # a count no ragged block reaches
    partial = np.zeros((rows, nb, nb), dtype=bool)
    full = np.zeros((rows, nb, nb), dtype=bool)
    for r in range(rows):
        cuts = np.flatnonzero(np.diff(start[r]) != 0) + 1  # where a segment starts
        a = np.union1d(cuts, k0)  # portion starts: segment starts and query block starts
        b = np.append(a[1:], width)
        s = start[r, a].astype(np.int64)[:, None]
        ps = p_start[r, a].astype(np.int64)[:, None]
        pe = p_end[r, a].astype(np.int64)[:, None]
        first = a[:, None]
        prompt = _overlap(ps, pe, k0, k1)
        touched = (prompt > 0) | ((s < k1) & (b[:, None] - 1 >= k0))
        # |own ∪ prompt| within each key block at the portion's first query
        count = _overlap(s, first + 1, k0, k1) + prompt
        count -= _overlap(np.maximum(s, ps), np.minimum(first + 1, pe), k0, k1)
        starts = np.searchsorted(a, k0)  # each query block's first portion
        seen = np.logical_or.reduceat(touched, starts, axis=0)
        every = np.logical_and.reduceat(count == whole, starts, axis=0)
        if width % block:  # a ragged last query block is padded with masked queries
            every[-1] = False
        partial[r] = seen & ~every
        full[r] = every
    return partial, full


def _ordered(tiles: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """(num_blocks, indices) of flex attention's layout: per query block, the count of marked
    key blocks and every key block index, the marked ones first (ascending)."""
    t = torch.from_numpy(tiles)
    num = t.sum(-1, dtype=torch.int32)
    order = torch.argsort(t.to(torch.int8), dim=-1, descending=True, stable=True)
    return num[:, None], order.to(torch.int32)[:, None]


def flex_block_mask(
    batch: Mapping[str, Any] | torch.Tensor,
    *,
    prompt_of: torch.Tensor | None = None,
    block_size: int = 128,
    device: torch.device | str | None = None,
) -> BlockMask:
    """Return the block-diagonal causal mask of a packed batch as a flex-attention ``BlockMask``.

    ``batch`` is a collate's output (its ``seq_idx`` and, from :func:`collate_groups`, its
    ``prompt_idx``) or the segment ids ``seq_idx`` (rows, T) themselves, with ``prompt_of``
    beside them. The mask is exactly :func:`block_causal_mask`'s (a token sees its own segment up
    to itself and, with ``prompt_of``, its prompt's segment whole) in flex attention's form:
    shape (rows, 1, T, T), a picklable :class:`SegmentMaskMod` over (rows, T) int32 tensors and
    block metadata per ``block_size`` tile, built without a T×T tensor. Pass it as
    ``attention_mask`` to a transformers model loaded with ``attn_implementation=
    "flex_attention"`` (transformers passes a 4-D BlockMask through unchanged), or as
    ``block_mask`` to ``flex_attention``. ``device``: where its tensors go (the batch's by
    default); ``BlockMask.to`` would leave the mask_mod's tensors behind, so build it on the
    device the attention runs on.

    >>> from padless.torch import collate_groups
    >>> batch = collate_groups(8, attention_mask=None)(
    ...     [{"group": 0, "prompt_ids": [5, 6], "completion_ids": [7, 8]},
    ...      {"group": 0, "prompt_ids": [5, 6], "completion_ids": [9]}])
    >>> mask = flex_block_mask(batch, block_size=4)
    >>> mask.shape, mask.to_dense()[0, 0].tolist()  # 4×4-token tiles: which are seen
    ((1, 1, 8, 8), [[1, 0], [1, 1]])
    >>> q, kv = torch.arange(8)[:, None], torch.arange(8)[None]
    >>> mask.mask_mod(torch.tensor(0), torch.tensor(0), q, kv)[4].int().tolist()
    [1, 1, 0, 0, 1, 0, 0, 0]
    """
    from torch.nn.attention.flex_attention import BlockMask

    size = positive("block_size", block_size)
    if isinstance(batch, Mapping):
        if "seq_idx" not in batch:
            raise ValueError(
                "batch has no 'seq_idx' (the segment ids flex_block_mask reads); it has "
                f"{sorted(map(str, batch))!r:.80}"
            )
        if prompt_of is not None:
            raise ValueError(
                "prompt_of must be None when batch is a collate's output (its 'prompt_idx' is "
                "taken); pass seq_idx itself to give prompt_of"
            )
        seq_idx, prompt_of = batch["seq_idx"], batch.get("prompt_idx")
    elif isinstance(batch, torch.Tensor):
        seq_idx = batch
    else:
        raise TypeError(
            "batch must be a collate's output (a mapping with 'seq_idx') or the segment ids, "
            f"a (rows, T) tensor, got {type(batch).__name__}"
        )
    if not isinstance(seq_idx, torch.Tensor) or seq_idx.ndim != 2:
        raise ValueError(
            "the segment ids (batch, or its 'seq_idx') must be a 2-D (rows, T) tensor, got "
            f"{type(seq_idx).__name__} of shape {tuple(getattr(seq_idx, 'shape', ()))}"
        )
    if prompt_of is not None and (
        not isinstance(prompt_of, torch.Tensor) or prompt_of.shape != seq_idx.shape
    ):
        raise ValueError(
            f"prompt_of must be a tensor of seq_idx's shape {tuple(seq_idx.shape)}, got "
            f"{tuple(getattr(prompt_of, 'shape', ()))}"
        )
    rows, width = seq_idx.shape
    if rows == 0 or width == 0:
        raise ValueError(
            "the segment ids (batch, or its 'seq_idx') must have at least one row and one "
            f"token, got shape {(rows, width)}"
        )
    where = torch.device(device) if device is not None else seq_idx.device
    start, p_start, p_end = _spans(seq_idx, prompt_of)
    partial, full = _tiles(start, p_start, p_end, size)
    kv_num, kv_idx = _ordered(partial)
    full_num, full_idx = _ordered(full)
    mod = SegmentMaskMod(
        torch.from_numpy(start), torch.from_numpy(p_start), torch.from_numpy(p_end)
    ).to(where)
    return BlockMask.from_kv_blocks(
        kv_num.to(where),
        kv_idx.to(where),
        full_num.to(where),
        full_idx.to(where),
        BLOCK_SIZE=size,
        mask_mod=mod,
        seq_lengths=(width, width),
    )


def block_mask_nbytes(mask: BlockMask) -> int:
    """Bytes of a ``BlockMask``'s tensors, its :class:`SegmentMaskMod`'s included."""
    total = 0
    for name in mask._TENSOR_ATTRS:
        t = getattr(mask, name, None)
        if isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
    mod = mask.mask_mod
    if isinstance(mod, SegmentMaskMod):
        total += mod.nbytes()
    return total
