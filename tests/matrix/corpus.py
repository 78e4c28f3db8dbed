"""The corpus every cell runs on, its token files, and how a delivered batch is read back.

Every token says where it comes from: token ``1 + item · K + position`` (``K`` = 64 > the
longest item), so a batch the consumer delivers (padded rows, packed rows, a flat row, an LM
stream's targets) is read back into (item, position) pairs whatever its layout, padding (id 0)
left out. "Every token exactly once per epoch" is then counted on what the model would receive.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

N = 160  # items
HALF = N // 2  # a mixture's corpus "a" is items [0, HALF), "b" the rest
K = 64  # token = 1 + item * K + position
LONGEST = 48


def make_lengths(seed: int = 40) -> np.ndarray:
    """Long-tailed lengths in [1, LONGEST]."""
    rs = np.random.default_rng(seed)
    return np.clip(rs.lognormal(2.8, 0.6, N).astype(np.int64), 1, LONGEST)


LENGTHS = make_lengths()


def token(item: int, position: int) -> int:
    return 1 + item * K + position


def item_tokens(item: int, length: int) -> list[int]:
    return [token(item, p) for p in range(length)]


def make_groups() -> np.ndarray:
    """Pairs (issue 42's DPO pairs) whose two items lie apart: the k-th shortest item with the
    k-th longest, so every pair fits the smallest packed row of the matrix (64 tokens)."""
    order = np.argsort(LENGTHS, kind="stable")
    out = np.zeros(N, dtype=np.int64)
    out[order[: N // 2]] = np.arange(N // 2)
    out[order[::-1][: N // 2]] = np.arange(N // 2)
    return out


GROUPS = make_groups()  # the "groups" layer's ids: two items each

ITEMS: list[list[int]] = [item_tokens(i, int(n)) for i, n in enumerate(LENGTHS.tolist())]
FEATURES: list[dict[str, Any]] = [{"input_ids": list(t)} for t in ITEMS]
STREAM_TOKENS = np.concatenate([np.asarray(t, dtype=np.int64) for t in ITEMS])


def all_tokens(items: range | None = None) -> set[int]:
    """Every token of the items (default: the whole corpus)."""
    chosen = range(N) if items is None else items
    return {t for i in chosen for t in ITEMS[i]}


def decomposition_tokens(max_length: int, min_length: int) -> set[int]:
    """The tokens of the kept pieces of a dataset decomposition, from the lengths alone: as many
    ``max_length`` pieces as fit, then the binary digits of the rest, largest first; pieces
    shorter than ``min_length`` dropped."""
    out: set[int] = set()
    for i, n in enumerate(LENGTHS.tolist()):
        pieces = [max_length] * (n // max_length)
        rest = n % max_length
        pieces += [1 << b for b in range(rest.bit_length() - 1, -1, -1) if rest >> b & 1]
        start = 0
        for size in pieces:
            if size >= min_length:
                out.update(token(i, p) for p in range(start, start + size))
            start += size
    return out


def valid(value: int) -> bool:
    """Whether ``value`` is a token of the corpus."""
    if value < 1:
        return False
    item, pos = divmod(value - 1, K)
    return item < N and pos < LENGTHS[item]


@dataclass
class Got:
    """One delivered batch, read back: the real tokens of each row, the tensor's shape."""

    rows: list[np.ndarray]
    shape: tuple[int, ...]
    kind: str  # "padded" (attention mask), "packed" (pad id 0), "lm" (x, y)
    step: int = 0  # the micro-batch step on its rank (its index in the epoch)
    opt: int = 0  # the optimizer step
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> np.ndarray:
        if not self.rows:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(self.rows)

    @property
    def key(self) -> tuple[int, ...]:
        """The batch's identity: its tokens, sorted (a warm-up changes only the layout)."""
        return tuple(sorted(self.tokens.tolist()))

    @property
    def layout(self) -> tuple[Any, ...]:
        """Its tokens in place: the batch exactly as delivered."""
        return (self.shape, tuple(tuple(r.tolist()) for r in self.rows))


def _array(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def read(batch: Any) -> Got:
    """A delivered batch read back (a collate's dict, an HF collator's dict, an LM ``(x, y)``)."""
    if isinstance(batch, (tuple, list)) and len(batch) == 2 and not isinstance(batch[0], Mapping):
        x, y = _array(batch[0]), _array(batch[1])
        return Got([row.astype(np.int64) for row in y], tuple(x.shape), "lm")
    if not isinstance(batch, Mapping) or "input_ids" not in batch:
        raise TypeError(f"the consumer delivered {type(batch).__name__}, not a batch of tensors")
    ids = _array(batch["input_ids"]).astype(np.int64)
    if ids.ndim == 1:
        ids = ids[None, :]
    if "attention_mask" in batch and _array(batch["attention_mask"]).ndim == 2:
        mask = _array(batch["attention_mask"]).astype(bool)
        rows = [ids[r][mask[r]] for r in range(ids.shape[0])]
        kind = "padded"
    else:
        rows = [ids[r][ids[r] != 0] for r in range(ids.shape[0])]
        kind = "packed"
    meta: dict[str, Any] = {"keys": frozenset(batch)}
    positions = batch.get("position_ids")
    if kind == "packed" and positions is not None:
        pos = _array(positions).astype(np.int64).reshape(ids.shape)
        meta["positions"] = [pos[r][ids[r] != 0] for r in range(ids.shape[0])]
    return Got(rows, tuple(ids.shape), kind, meta=meta)


def runs(row: np.ndarray, positions: np.ndarray | None = None) -> list[np.ndarray]:
    """A row cut where its tokens stop following each other, or its position ids restart (one
    run per sequence: an item, or a piece of one)."""
    if row.size == 0:
        return []
    breaks = np.diff(row) != 1
    if positions is not None and positions.shape == row.shape:
        breaks |= np.diff(positions) != 1
    return np.split(row, np.flatnonzero(breaks) + 1)


def write_token_files(folder: Path) -> dict[str, str]:
    """The corpus as a Megatron pair (``prefix.idx``/``.bin``, uint16) in ``folder``, and a
    mixture's two corpora (items [0, HALF) and [HALF, N)) as a pair each."""
    from padless import write_indexed

    out = {}
    for name, items in (("prefix", ITEMS), ("a", ITEMS[:HALF]), ("b", ITEMS[HALF:])):
        prefix = folder / f"{'corpus' if name == 'prefix' else name}_text_document"
        write_indexed([np.asarray(t, dtype=np.int64) for t in items], str(prefix), dtype=np.uint16)
        out[name] = str(prefix)
    return out | {"bin": out["prefix"] + ".bin"}
