"""BatchPlan: which indices go together, in what order (flat int64 indices + CSR offsets)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class PlanStats:
    """Padding and shape figures of a plan over given lengths.

    ``padded_slots`` is the padded cost: Σ over batches of count × longest (summed over fields for
    2-D lengths); ``padding_fraction`` = 1 − real_tokens / padded_slots.
    """

    batches: int
    sentences: int
    real_tokens: int
    padded_slots: int
    padding_fraction: float
    min_sentences: int
    median_sentences: float
    max_sentences: int
    mean_sentences: float

    def as_dict(self) -> dict[str, Any]:
        """Return the figures as a JSON-safe dict."""
        return asdict(self)

    @classmethod
    def of(cls, batch_sizes: np.ndarray, entries: int, real: int, padded: int) -> PlanStats:
        """Build the figures from batch sizes, entry count, real tokens and padded slots."""
        nb = int(batch_sizes.size)
        return cls(
            batches=nb,
            sentences=int(entries),
            real_tokens=int(real),
            padded_slots=int(padded),
            padding_fraction=(1.0 - real / padded) if padded else 0.0,
            min_sentences=int(batch_sizes.min()) if nb else 0,
            median_sentences=float(np.median(batch_sizes)) if nb else 0.0,
            max_sentences=int(batch_sizes.max()) if nb else 0,
            mean_sentences=float(batch_sizes.mean()) if nb else 0.0,
        )


def _as_int64_vector(name: str, value: Any) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.int64)


class BatchPlan:
    """Batches as CSR: batch ``b`` is ``indices[offsets[b]:offsets[b + 1]]``.

    Args:
        indices: flat int64 dataset indices, batch after batch.
        offsets: int64 of length ``num_batches + 1``, starting at 0 and ending at ``len(indices)``.
        skipped: indices left out of the plan (too long, dropped leftovers...), sorted.
        info: small JSON-safe extra figures a planner reports (e.g. ``{"dropped": 3}``).

    >>> plan = BatchPlan([2, 0, 1], [0, 2, 3])
    >>> len(plan), plan[0].tolist(), [b.tolist() for b in plan]
    (2, [2, 0], [[2, 0], [1]])
    """

    __slots__ = ("indices", "offsets", "skipped", "info")

    def __init__(
        self,
        indices: Any,
        offsets: Any,
        *,
        skipped: Any = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        self.indices = _as_int64_vector("indices", indices)
        self.offsets = _as_int64_vector("offsets", offsets)
        if self.offsets.size == 0 or self.offsets[0] != 0:
            raise ValueError("offsets must start at 0")
        if self.offsets[-1] != self.indices.size:
            raise ValueError(
                f"offsets must end at len(indices)={self.indices.size}, got {self.offsets[-1]}"
            )
        if np.any(np.diff(self.offsets) < 0):
            raise ValueError("offsets must be non-decreasing")
        self.skipped = _as_int64_vector("skipped", [] if skipped is None else skipped)
        self.info = dict(info or {})

    # ------------------------------------------------------------------ sequence protocol
    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    def __getitem__(self, b: int) -> np.ndarray:
        n = len(self)
        if not isinstance(b, (int, np.integer)) or isinstance(b, bool):
            raise TypeError(f"batch index must be an int, got {type(b).__name__}")
        if b < 0:
            b += n
        if not 0 <= b < n:
            raise IndexError(f"batch index {b} out of range for a plan of {n} batches")
        return self.indices[self.offsets[b] : self.offsets[b + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        for b in range(len(self)):
            yield self.indices[self.offsets[b] : self.offsets[b + 1]]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BatchPlan):
            return NotImplemented
        if type(other) is not type(self):
            return False  # a packed plan and a plain one are different things, both ways round
        return (
            np.array_equal(self.indices, other.indices)
            and np.array_equal(self.offsets, other.offsets)
            and np.array_equal(self.skipped, other.skipped)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(batches={len(self)}, indices={self.indices.size}, "
            f"skipped={self.skipped.size})"
        )

    @property
    def sizes(self) -> np.ndarray:
        """Number of indices in each batch."""
        return np.diff(self.offsets)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the plan to ``path`` (``.npz``); written under a temporary name, then renamed."""
        path = os.fspath(path)
        tmp = f"{path}.tmp-{os.getpid()}.npz"
        try:
            np.savez(tmp, indices=self.indices, offsets=self.offsets, skipped=self.skipped)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> BatchPlan:
        """Read a plan written by :meth:`save`."""
        with np.load(os.fspath(path), allow_pickle=False) as data:
            missing = {"indices", "offsets"} - set(data.files)
            if missing:
                raise ValueError(
                    f"{os.fspath(path)} is not a padless plan: missing {sorted(missing)}"
                )
            skipped = data["skipped"] if "skipped" in data.files else None
            return cls(data["indices"], data["offsets"], skipped=skipped)

    # ------------------------------------------------------------------ figures
    def stats(self, lengths: Any) -> PlanStats:
        """Return padding figures of this plan over ``lengths`` ((N,) or (N, F)).

        Cost: O(len(indices)) time, one gather of the planned lengths.

        >>> BatchPlan([0, 1, 2], [0, 2, 3]).stats([3, 1, 2]).padded_slots
        8
        """
        from ._kernels import segment_max
        from .lengths import lengths_of

        lens = lengths_of(lengths)
        if self.indices.size and (self.indices.min() < 0 or self.indices.max() >= lens.shape[0]):
            raise ValueError(f"plan indices fall outside lengths of size {lens.shape[0]}")
        sizes = self.sizes
        picked = lens[self.indices]
        if picked.ndim == 1:
            picked = picked[:, None]
        padded = 0
        for f in range(picked.shape[1]):
            column = np.ascontiguousarray(picked[:, f])
            padded += int((segment_max(column, self.offsets) * sizes).sum())
        return PlanStats.of(sizes, self.indices.size, int(picked.sum()), padded)
