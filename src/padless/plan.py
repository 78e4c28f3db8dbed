"""BatchPlan: which indices go together, in what order (flat int64 indices + CSR offsets)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from importlib import import_module
from typing import Any

import numpy as np

PLAN_FORMAT = "padless-plan-1"
PLAN_MARKER = "padless_plan"  # the archive member holding the JSON record of a saved plan
# saved type name -> (module, class); plans saved before the record are told apart by their arrays
_PLAN_TYPES = {
    "BatchPlan": ("padless.plan", "BatchPlan"),
    "PackedPlan": ("padless.planners.packing", "PackedPlan"),
}
_PLAN_ARRAYS = {"indices", "offsets", "skipped"}
_PACKED_ARRAYS = {"row_bounds", "row_offsets", "piece_start", "piece_stop", "packing"}


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON-safe: {type(value).__name__}")


def plan_meta(data: Any) -> dict[str, Any]:
    """The JSON record of a saved plan, from an opened ``.npz`` (``{}`` for an old plain plan).

    Plans saved before the record existed are recognised by their arrays.
    """
    names = set(data.files)
    if PLAN_MARKER in names:
        try:
            meta = json.loads(str(data[PLAN_MARKER]))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"the {PLAN_MARKER} record is not readable JSON ({exc})") from exc
        if not isinstance(meta, dict):
            raise ValueError(f"the {PLAN_MARKER} record must be a JSON object, got {meta!r}")
        return meta
    if _PACKED_ARRAYS <= names:
        return {"type": "PackedPlan"}
    return {}


def _saved_type(meta: dict[str, Any], where: str) -> type[BatchPlan]:
    """The plan class a saved record names (only padless's own modules are imported)."""
    name = str(meta.get("type", "BatchPlan"))
    module = meta.get("module")
    if module is None and name in _PLAN_TYPES:
        module, name = _PLAN_TYPES[name]
    if not isinstance(module, str) or not (module == "padless" or module.startswith("padless.")):
        raise ValueError(f"{where} holds a plan of unknown type {name!r} (module {module!r})")
    try:
        found = getattr(import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"{where} holds a plan of unknown type {module}.{name}") from exc
    if not (isinstance(found, type) and issubclass(found, BatchPlan)):
        raise ValueError(f"{where} holds a plan of unknown type {module}.{name}")
    return found


def is_saved_plan(names: Any) -> bool:
    """Whether an ``.npz`` with these member names is a plan written by :meth:`BatchPlan.save`.

    >>> is_saved_plan(["indices", "offsets", "skipped"]), is_saved_plan(["tokens", "offsets"])
    (True, False)
    """
    names = set(names)
    if PLAN_MARKER in names:
        return True
    return {"indices", "offsets"} <= names and names <= _PLAN_ARRAYS | _PACKED_ARRAYS


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


def _check_info(info: Any) -> dict[str, Any]:
    """``info`` as a new dict: a mapping of figures, or None for none."""
    if info is None:
        return {}
    if not isinstance(info, Mapping):
        raise TypeError(
            f"info must be a mapping of JSON-safe figures (e.g. {{'dropped': 3}}) or None, "
            f"got {type(info).__name__} {info!r:.60}"
        )
    return dict(info)


def _check_offsets(name: str, value: Any, size: int) -> np.ndarray:
    """CSR offsets as int64: 1-D, from 0 to ``size``, non-decreasing; errors say ``name``."""
    offsets = _as_int64_vector(name, value)
    if offsets.size == 0 or offsets[0] != 0:
        raise ValueError(f"{name} must start at 0, got {offsets[:1].tolist()}")
    if offsets[-1] != size:
        raise ValueError(f"{name} must end at len(indices)={size}, got {offsets[-1]}")
    if np.any(np.diff(offsets) < 0):
        raise ValueError(f"{name} must be non-decreasing")
    return offsets


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
        info = _check_info(info)
        self.indices = _as_int64_vector("indices", indices)
        self.offsets = _check_offsets("offsets", offsets, self.indices.size)
        self.skipped = _as_int64_vector("skipped", [] if skipped is None else skipped)
        self.info = info

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
    def _arrays(self) -> dict[str, np.ndarray]:
        """The arrays :meth:`save` writes (subclasses add theirs)."""
        return {"indices": self.indices, "offsets": self.offsets, "skipped": self.skipped}

    @classmethod
    def _from_arrays(cls, data: Any, meta: dict[str, Any], where: str) -> BatchPlan:
        """Rebuild a plan from the arrays of a saved file (``data`` maps names to arrays)."""
        missing = {"indices", "offsets"} - set(data.files)
        if missing:
            raise ValueError(f"{where} is not a padless plan: missing {sorted(missing)}")
        skipped = data["skipped"] if "skipped" in data.files else None
        return cls(data["indices"], data["offsets"], skipped=skipped, info=meta.get("info"))

    def save(self, path: str | os.PathLike[str], *, spec: Any = None) -> None:
        """Write the plan to exactly ``path`` (an ``.npz`` archive; no suffix is added).

        ``spec`` (a padless spec such as ``TokenBudget(...)``) is recorded beside the arrays;
        :meth:`load` gives it back as ``plan.info["spec"]`` (a :func:`spec_to_dict` record).
        A regular file is written under a temporary name and renamed into place; a device or a
        pipe is written in place.

        Cost: one write of the plan's arrays.

        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "plan.bin")
        >>> BatchPlan([1, 0], [0, 1, 2]).save(path)
        >>> sorted(os.listdir(os.path.dirname(path))), BatchPlan.load(path)[0].tolist()
        (['plan.bin'], [1])
        """
        from ._output import write_exactly

        kind = type(self)
        meta: dict[str, Any] = {
            "format": PLAN_FORMAT,
            "type": kind.__name__,
            "module": kind.__module__,
        }
        if spec is not None:
            from .planners.spec import spec_to_dict

            meta["spec"] = spec_to_dict(spec)
        try:
            meta["info"] = json.loads(json.dumps(self.info, default=_json_default))
        except (TypeError, ValueError):
            pass  # info that is not JSON-safe is not saved
        arrays: dict[str, Any] = {**self._arrays(), PLAN_MARKER: np.array(json.dumps(meta))}
        write_exactly(path, lambda f: np.savez(f, **arrays), what="plan output")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> BatchPlan:
        """Read a plan written by :meth:`save`, as the type it was saved as.

        ``BatchPlan.load`` of a packing plan returns a :class:`padless.PackedPlan`;
        ``PackedPlan.load`` of a plain plan is refused. The recorded spec, if any, is in
        ``plan.info["spec"]``.

        Cost: one read of the plan's arrays.
        """
        import zipfile

        where = os.fspath(path)
        try:
            data = np.load(where, allow_pickle=False)
        except (ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise ValueError(f"{where} is not a padless plan (not a readable .npz: {exc})") from exc
        if not hasattr(data, "files"):
            raise ValueError(f"{where} is not a padless plan (it holds one array, not an archive)")
        with data:
            meta = plan_meta(data)
            plan_type = _saved_type(meta, where)
            if not issubclass(plan_type, cls):
                wanted = "packing plan" if cls.__name__ == "PackedPlan" else cls.__name__
                raise ValueError(
                    f"{where} is not a padless {wanted}: it holds a {plan_type.__name__}"
                )
            plan = plan_type._from_arrays(data, meta, where)
        if meta.get("spec") is not None:
            plan.info["spec"] = meta["spec"]
        return plan

    # ------------------------------------------------------------------ figures
    def stats(self, lengths: Any) -> PlanStats:
        """Return padding figures of this plan over ``lengths`` ((N,) or (N, F)).

        A plan made with ``pad_to_multiple_of`` (``info["pad_to_multiple_of"]``) counts each
        batch at the width its collate pads to: its longest rounded up to that multiple.

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
        multiple = int(self.info.get("pad_to_multiple_of", 1))
        for f in range(picked.shape[1]):
            column = np.ascontiguousarray(picked[:, f])
            width = segment_max(column, self.offsets)
            if multiple != 1:
                width = -(-width // multiple) * multiple
            padded += int((width * sizes).sum())
        return PlanStats.of(sizes, self.indices.size, int(picked.sum()), padded)
