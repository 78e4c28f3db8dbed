"""The plan types: which indices go together, in what order (flat int64 indices + CSR offsets).

:class:`BatchPlan` is the plain plan; :class:`PackedPlan` (rows of packed sequences, from the
packing strategy; :class:`VectorPackedPlan` with a capacity per field) and :class:`ShapedPlan`
(batches tagged with fixed shapes, from ``FixedShapes``) extend it. This module is the floor of
value types: it imports numpy and padless's lowest modules only (``_check``, ``lengths``;
``_kernels`` and ``_output`` inside the functions using them).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import import_module
from typing import Any, cast

import numpy as np

from ._check import MAX_BUDGET, _is_int, check_bool, non_negative, positive
from ._moved import MOVED
from ._output import write_exactly
from .lengths import as_lengths, sizes_of

PLAN_FORMAT = "padless-plan-1"
PLAN_MARKER = "padless_plan"  # the archive member holding the JSON record of a saved plan
# saved type name -> (module, class); plans saved before the record are told apart by their arrays
_PLAN_TYPES = {
    "BatchPlan": ("padless.core.plan", "BatchPlan"),
    "PackedPlan": ("padless.core.plan", "PackedPlan"),
    "PiecePlan": ("padless.core.plan", "PiecePlan"),
    "VectorPackedPlan": ("padless.core.plan", "VectorPackedPlan"),
}
_PLAN_ARRAYS = {"indices", "offsets", "skipped"}
_PACKED_ARRAYS = {"row_bounds", "row_offsets", "piece_start", "piece_stop", "packing"}
MAX_SHAPE_SIDE = 1 << 31  # rows and lengths stay below this, so rows × length fits int64


def json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON-safe: {type(value).__name__}")


def plan_meta(data: Any) -> dict[str, Any]:
    """The JSON record of a saved plan, from an opened ``.npz`` (``{}`` for an old plain plan).

    Plans saved before the record existed are recognised by their arrays.
    """
    import json  # stdlib, but 4 ms of start-up: only plans that are saved or loaded need it

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


def spec_record(spec: Any) -> dict[str, Any]:
    """``{"strategy": spec.name, **spec.as_dict()}``, the record :meth:`BatchPlan.save` keeps of
    a spec (:func:`padless.planners.spec.spec_to_dict`'s record, asked of the spec itself: a
    spec is whatever answers ``name`` and ``as_dict()``; this floor does not import planners).
    """
    if (
        isinstance(spec, type)
        or not isinstance(getattr(spec, "name", None), str)
        or not callable(getattr(spec, "as_dict", None))
    ):
        raise TypeError(not_a_spec(spec))
    return {"strategy": spec.name, **spec.as_dict()}


def not_a_spec(value: Any) -> str:
    """The refusal of a ``spec=`` that is not a padless spec."""
    return f"spec must be a padless spec (e.g. TokenBudget), got {type(value).__name__}"


def saved_type(meta: dict[str, Any], where: str) -> type[BatchPlan]:
    """The plan class a saved record names (only padless's own modules are imported)."""
    name = str(meta.get("type", "BatchPlan"))
    module = meta.get("module")
    if module is None and name in _PLAN_TYPES:
        module, name = _PLAN_TYPES[name]
    module = MOVED.get(module, module) if isinstance(module, str) else module
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


def _piece_ranges(n: int, piece_start: Any, piece_stop: Any) -> tuple[np.ndarray, np.ndarray]:
    """The ``piece_start`` and ``piece_stop`` of ``n`` entries, checked (``piece_start=None``:
    all zeros, a read-only view)."""
    if piece_start is None:
        start = np.broadcast_to(np.zeros(1, dtype=np.int64), (n,))
    else:
        start = _as_int64_vector("piece_start", piece_start)
    stop = _as_int64_vector("piece_stop", piece_stop)
    if start.size != n or stop.size != n:
        raise ValueError(
            f"piece_start and piece_stop must have one entry per index ({n}), got "
            f"{start.size} and {stop.size}"
        )
    return start, stop


def _check_in_sequences(indices: np.ndarray, num_sequences: int) -> None:
    """Every index in ``[0, num_sequences)``."""
    if indices.size and not 0 <= int(indices.min()) <= int(indices.max()) < num_sequences:
        raise ValueError(
            f"indices must lie in [0, num_sequences={num_sequences}), got "
            f"{int(indices.min())}..{int(indices.max())}"
        )


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

    # ------------------------------------------------------------------ what generic code asks
    def entry_lengths(self, sizes: np.ndarray) -> np.ndarray:
        """Tokens of every entry (parallel to ``indices``), given one size per sequence: the
        sequence's size here, the piece's length in a packed plan."""
        return sizes[self.indices]

    def work_costs(self, cost: Any, widths: np.ndarray) -> np.ndarray:
        """What every batch costs under ``cost`` (a :class:`padless.Cost`), float64: here count ×
        cost(longest width) (``widths``: one per sequence, the size the collate pads to); a
        packed plan: its rows, padded to capacity.

        Cost: one pass over the plan's entries.
        """
        from .._kernels import segment_max

        if len(self) == 0:
            return np.zeros(0, dtype=np.float64)
        units = cost.of(np.ascontiguousarray(widths[self.indices]))
        return self.sizes * segment_max(units, self.offsets)

    def with_indices(
        self, indices: np.ndarray, num_sequences: int, skipped: Any = None
    ) -> BatchPlan:
        """A copy whose entries are ``indices`` (same batches, same info), for a plan made over
        ``num_sequences`` sequences; ``skipped`` replaces the skipped ones when given. This is how a
        plan of some items becomes a plan of the whole corpus, and back."""
        out = copy.copy(self)
        out.indices = indices
        if skipped is not None:
            out.skipped = skipped
        return out

    # ------------------------------------------------------------------ persistence
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The arrays :meth:`save` writes, by name (subclasses add theirs; 0-d arrays hold
        scalars). :meth:`from_arrays` of them, with ``{"info": plan.info}``, is the plan again.

        >>> sorted(BatchPlan([1, 0], [0, 1, 2]).to_arrays())
        ['indices', 'offsets', 'skipped']
        """
        return {"indices": self.indices, "offsets": self.offsets, "skipped": self.skipped}

    @classmethod
    def from_arrays(cls, data: Any, meta: dict[str, Any], where: str) -> BatchPlan:
        """Rebuild a plan from the arrays :meth:`to_arrays` gave (``data``: an opened ``.npz``,
        or any mapping of names to arrays with a ``files`` list of its names), ``meta`` the
        saved record (its ``"info"``); ``where`` names the source in errors.

        >>> class Arrays(dict):
        ...     files = property(list)
        >>> plan = BatchPlan([1, 0], [0, 1, 2])
        >>> BatchPlan.from_arrays(Arrays(plan.to_arrays()), {}, "here") == plan
        True
        """
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
        import json

        kind = type(self)
        meta: dict[str, Any] = {
            "format": PLAN_FORMAT,
            "type": kind.__name__,
            "module": kind.__module__,
        }
        if spec is not None:
            meta["spec"] = spec_record(spec)
        try:
            meta["info"] = json.loads(json.dumps(self.info, default=json_default))
        except (TypeError, ValueError):
            pass  # info that is not JSON-safe is not saved
        arrays: dict[str, Any] = {**self.to_arrays(), PLAN_MARKER: np.array(json.dumps(meta))}
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
            plan_type = saved_type(meta, where)
            if not issubclass(plan_type, cls):
                wanted = "packing plan" if cls.__name__ == "PackedPlan" else cls.__name__
                raise ValueError(
                    f"{where} is not a padless {wanted}: it holds a {plan_type.__name__}"
                )
            plan = plan_type.from_arrays(data, meta, where)
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
        from .._kernels import segment_max

        lens = as_lengths(lengths)
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

    def field_stats(self, lengths: Any) -> list[PlanStats]:
        """Padding figures per field of (N, F) lengths (one :class:`PlanStats` per field; one
        for (N,) lengths): each field's batches padded to that field's longest, as a collate
        pads each field of a batch on its own.

        Cost: O(F · len(indices)).

        >>> [s.padded_slots for s in BatchPlan([0, 1], [0, 2]).field_stats(np.array([[3, 1], [1, 2]]))]
        [6, 4]
        """
        lens = as_lengths(lengths)
        if lens.ndim == 1:
            return [self.stats(lens)]
        return [self.stats(np.ascontiguousarray(lens[:, f])) for f in range(lens.shape[1])]


class PackedPlan(BatchPlan):
    """A packing plan: rows of sequence pieces, grouped into batches of rows.

    Entry ``e`` (one position of ``indices``) is tokens ``piece_start[e]:piece_stop[e]`` of sequence
    ``indices[e]``; unsplit sequences have ``(0, length)``. Row ``r`` is entries
    ``row_bounds[r]:row_bounds[r + 1]``, i.e. ``plan.rows[r]``; batch ``b`` is rows
    ``row_offsets[b]:row_offsets[b + 1]``, and ``plan[b]`` (its ``indices``) is the concatenation
    of those rows. Within a batch, rows come in the order they were opened and entries longest
    first, which lets :func:`padless.planners.packing.next_fit_rows` rebuild the rows from the lengths alone.

    Args:
        indices: int64 sequence index of every entry, row after row.
        row_bounds: int64 CSR offsets of the rows into ``indices`` (length rows + 1).
        row_offsets: int64 CSR offsets of the batches into the rows (length batches + 1).
        piece_start, piece_stop: int64 token range of every entry within its sequence;
            ``piece_start=None`` means all zeros (nothing split), kept as a read-only view that
            takes no memory.
        capacity: tokens per row.
        num_sequences: N, the number of sequences the plan was made for.
        skipped: sequences left out (``oversize="drop"``), sorted.
        info: JSON-safe figures (efficiency, rows, oversize reports...).

    >>> from padless import plan_packing
    >>> plan = plan_packing([5, 3, 3, 8, 1], capacity=8)
    >>> plan.num_rows, plan.efficiency
    (3, 0.8333333333333334)
    >>> sorted(sorted(r.tolist()) for r in plan.rows)
    [[0, 1], [2, 4], [3]]
    """

    __slots__ = ("rows", "row_offsets", "piece_start", "piece_stop", "capacity", "num_sequences")

    def __init__(
        self,
        indices: Any,
        row_bounds: Any,
        row_offsets: Any,
        piece_start: Any,
        piece_stop: Any,
        *,
        capacity: int,
        num_sequences: int,
        skipped: Any = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        info = _check_info(info)
        indices = _as_int64_vector("indices", indices)
        rows = BatchPlan(indices, _check_offsets("row_bounds", row_bounds, indices.size))
        num_sequences = non_negative("num_sequences", num_sequences)
        if num_sequences > MAX_BUDGET:
            raise ValueError(f"num_sequences must be <= 2**62, got {num_sequences}")
        _check_in_sequences(indices, num_sequences)
        row_offsets = _as_int64_vector("row_offsets", row_offsets)
        if row_offsets.size == 0 or row_offsets[0] != 0 or row_offsets[-1] != len(rows):
            raise ValueError(f"row_offsets must run from 0 to the number of rows ({len(rows)})")
        if np.any(np.diff(row_offsets) < 0):
            raise ValueError("row_offsets must be non-decreasing")
        super().__init__(rows.indices, rows.offsets[row_offsets], skipped=skipped, info=info)
        self.rows = rows
        self.row_offsets = row_offsets
        self.piece_start, self.piece_stop = _piece_ranges(
            self.indices.size, piece_start, piece_stop
        )
        self.capacity = positive("capacity", capacity)
        self.num_sequences = num_sequences

    @classmethod
    def _built(
        cls,
        indices: np.ndarray,
        row_bounds: np.ndarray,
        row_offsets: np.ndarray,
        offsets: np.ndarray,
        piece_start: np.ndarray | None,
        piece_stop: np.ndarray,
        *,
        capacity: int,
        num_sequences: int,
        skipped: np.ndarray | None,
        info: dict[str, Any],
    ) -> PackedPlan:
        """The plan of arrays a padless planner has just made, unchecked (private).

        The arrays are the ones ``PackedPlan(...)`` would keep: 1-D contiguous int64, consistent
        (``row_bounds`` and ``row_offsets`` CSR offsets over the entries and the rows, ``offsets``
        equal to ``row_bounds[row_offsets]``, indices in ``[0, num_sequences)``), and owned by the
        plan. Plans given by users (``PackedPlan(...)``, a loaded plan) are checked by
        ``__init__``; this path only skips checking what padless built itself.
        """
        none = np.zeros(0, dtype=np.int64)
        rows = BatchPlan.__new__(BatchPlan)
        rows.indices, rows.offsets, rows.skipped, rows.info = indices, row_bounds, none, {}
        plan = cls.__new__(cls)
        plan.indices, plan.offsets, plan.info = indices, offsets, dict(info)
        plan.skipped = none.copy() if skipped is None else skipped
        plan.rows, plan.row_offsets = rows, row_offsets
        if piece_start is None:
            piece_start = np.broadcast_to(np.zeros(1, dtype=np.int64), (indices.size,))
        plan.piece_start, plan.piece_stop = piece_start, piece_stop
        plan.capacity, plan.num_sequences = int(capacity), int(num_sequences)
        return plan

    # ------------------------------------------------------------------ figures
    @property
    def num_rows(self) -> int:
        """Number of rows."""
        return len(self.rows)

    @property
    def piece_lengths(self) -> np.ndarray:
        """Tokens of every entry (``piece_stop - piece_start``)."""
        return self.piece_stop - self.piece_start

    @property
    def real_tokens(self) -> int:
        """Tokens placed in rows (kept tokens: truncated or dropped ones are not counted)."""
        return int(self.piece_lengths.sum())

    @property
    def efficiency(self) -> float:
        """Real tokens ÷ (rows × capacity); 1.0 for a plan with no rows."""
        slots = self.num_rows * self.capacity
        return self.real_tokens / slots if slots else 1.0

    def entry_lengths(self, sizes: np.ndarray) -> np.ndarray:
        """The length of every piece (``sizes`` is not needed: pieces carry theirs)."""
        return self.piece_lengths

    def work_costs(self, cost: Any, widths: Any = None) -> np.ndarray:
        """Cost of every batch: its rows, each padded to capacity (``widths`` is not used).

        Cost: one pass over the plan's entries.
        """
        from .._kernels import cost as KC

        if len(self) == 0:
            return np.zeros(0, dtype=np.float64)
        extras = cost.extra(self.piece_lengths)
        base = cost.linear * self.capacity
        return KC.packed_batch_costs(extras, self.rows.offsets, self.row_offsets, base)

    def with_indices(
        self, indices: np.ndarray, num_sequences: int, skipped: Any = None
    ) -> PackedPlan:
        out = cast(PackedPlan, super().with_indices(indices, num_sequences, skipped))
        out.rows = BatchPlan(indices, self.rows.offsets)
        out.num_sequences = num_sequences
        return out

    @property
    def codes(self) -> np.ndarray:
        """What :class:`padless.PackingSampler` yields per entry: ``index + (piece_start // capacity) · N``.

        Equal to ``indices`` unless sequences were split (piece ``k`` starts at ``k · capacity``).
        """
        return self.indices + (self.piece_start // self.capacity) * self.num_sequences

    def batch_rows(self, b: int) -> list[np.ndarray]:
        """Return the rows of batch ``b`` (sequence indices per row).

        >>> from padless import plan_packing
        >>> plan = plan_packing([4, 4, 4], capacity=8, rows_per_batch=2)
        >>> [r.tolist() for r in plan.batch_rows(0)]
        [[0, 2], [1]]
        """
        self[b]  # range and type check
        b = int(b) % len(self)
        return [self.rows[r] for r in range(int(self.row_offsets[b]), int(self.row_offsets[b + 1]))]

    def stats(self, lengths: Any) -> PlanStats:
        """Return packing figures over ``lengths`` (the lengths the plan was made for).

        ``padded_slots`` is rows × capacity, ``padding_fraction`` is 1 − efficiency and
        ``sentences`` counts entries (a split sequence counts once per piece).

        >>> from padless import plan_packing
        >>> plan_packing([5, 3, 3, 8, 1], capacity=8).stats([5, 3, 3, 8, 1]).padded_slots
        24
        """
        n = as_lengths(lengths).shape[0]
        if n != self.num_sequences:
            raise ValueError(
                f"lengths must hold the {self.num_sequences} sequences the plan was made for, got {n}"
            )
        padded = self.num_rows * self.capacity
        return PlanStats.of(self.sizes, self.indices.size, self.real_tokens, padded)

    def field_stats(self, lengths: Any) -> list[PlanStats]:
        """Packing figures per field of (N, F) ``lengths`` (one for (N,)): field ``f``'s rows
        hold ``capacity`` slots each, and its real tokens are what each entry's piece covers
        of that field (a piece ``[s, e)`` of a sequence holds ``clip(l_f - s, 0, e - s)``).

        Cost: O(len(indices) · F).

        >>> from padless import plan_packing
        >>> lengths = np.array([[5, 2], [3, 3]])
        >>> [f.real_tokens for f in plan_packing(lengths, capacity=8).field_stats(lengths)]
        [8, 5]
        """
        picked = self._field_lengths(lengths)
        start, stop = self.piece_start[:, None], self.piece_stop[:, None]
        held = np.clip(picked - start, 0, stop - start)
        return self._per_field(held, [self.capacity] * picked.shape[1])

    def _field_lengths(self, lengths: Any) -> np.ndarray:
        """The (entries, F) lengths of every entry's sequence, ``lengths`` checked against the
        sequences the plan was made for."""
        lens = as_lengths(lengths)
        if lens.shape[0] != self.num_sequences:
            raise ValueError(
                f"lengths must hold the {self.num_sequences} sequences the plan was made for, "
                f"got {lens.shape[0]}"
            )
        picked = lens[self.indices]
        return picked[:, None] if picked.ndim == 1 else picked

    def _per_field(self, held: np.ndarray, capacities: Sequence[int]) -> list[PlanStats]:
        """One PlanStats per column of ``held`` (every entry's tokens of that field), rows of
        ``capacities[f]`` slots."""
        entries = self.indices.size
        return [
            PlanStats.of(self.sizes, entries, int(held[:, f].sum()), self.num_rows * int(c))
            for f, c in enumerate(capacities)
        ]

    # ------------------------------------------------------------------ protocol
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BatchPlan):
            return NotImplemented
        if not isinstance(other, PackedPlan):
            return False
        return (
            BatchPlan.__eq__(self, other) is True
            and np.array_equal(self.rows.offsets, other.rows.offsets)
            and np.array_equal(self.row_offsets, other.row_offsets)
            and np.array_equal(self.piece_start, other.piece_start)
            and np.array_equal(self.piece_stop, other.piece_stop)
            and self.capacity == other.capacity
            and self.num_sequences == other.num_sequences
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"PackedPlan(batches={len(self)}, rows={self.num_rows}, entries={self.indices.size}, "
            f"capacity={self.capacity}, efficiency={self.efficiency:.4f}, "
            f"skipped={self.skipped.size})"
        )

    def to_arrays(self) -> dict[str, np.ndarray]:
        import json

        meta = {"capacity": self.capacity, "num_sequences": self.num_sequences, "info": self.info}
        return {
            **super().to_arrays(),
            "row_bounds": self.rows.offsets,
            "row_offsets": self.row_offsets,
            "piece_start": self.piece_start,
            "piece_stop": self.piece_stop,
            "packing": np.array(json.dumps(meta)),
        }

    @classmethod
    def from_arrays(cls, data: Any, meta: dict[str, Any], where: str) -> PackedPlan:
        need = {"indices", "row_bounds", "row_offsets", "piece_start", "piece_stop", "packing"}
        missing = need - set(data.files)
        if missing:
            raise ValueError(f"{where} is not a padless packing plan: missing {sorted(missing)}")
        import json

        packing = json.loads(str(data["packing"]))
        return cls(
            data["indices"],
            data["row_bounds"],
            data["row_offsets"],
            data["piece_start"],
            data["piece_stop"],
            capacity=packing["capacity"],
            num_sequences=packing["num_sequences"],
            skipped=data["skipped"] if "skipped" in data.files else None,
            info=packing["info"],
        )


class VectorPackedPlan(PackedPlan):
    """A packing plan with one capacity per field: rows of whole sequences whose lengths sum, in
    every field ``f``, to at most ``capacities[f]`` (sources and targets packed together for
    encoder–decoder models, ``Packing(capacity=(C_src, C_tgt))``).

    The arrays are :class:`PackedPlan`'s, every entry a whole sequence (``piece_start`` 0);
    ``piece_stop`` holds each entry's tokens over all fields and ``capacity`` is
    ``sum(capacities)``, so ``real_tokens``, ``efficiency`` and :meth:`stats` count the slots of
    all the fields' rows together; :meth:`field_stats` gives each field's figures. Within a
    batch, rows come in the order they were opened and a row's first entry fits in none of the
    rows before it, so :func:`padless.planners.packing.next_fit_rows` over the (entries, F)
    lengths rebuilds the rows.

    Args:
        indices, row_bounds, row_offsets, piece_stop, num_sequences, skipped, info: as
            :class:`PackedPlan` (``piece_stop``: every entry's tokens summed over its fields).
        capacities: tokens per row in each field (at least two fields).

    >>> from padless import Packing
    >>> lengths = np.array([[5, 2], [3, 3], [4, 4]])
    >>> plan = Packing(capacity=(8, 6)).plan(lengths)
    >>> plan.num_rows, plan.capacities, [f.real_tokens for f in plan.field_stats(lengths)]
    (2, (8, 6), [12, 9])
    """

    __slots__ = ("capacities",)

    def __init__(
        self,
        indices: Any,
        row_bounds: Any,
        row_offsets: Any,
        piece_stop: Any,
        *,
        capacities: Any,
        num_sequences: int,
        skipped: Any = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        caps = _check_capacities(capacities)
        super().__init__(
            indices,
            row_bounds,
            row_offsets,
            None,
            piece_stop,
            capacity=sum(caps),
            num_sequences=num_sequences,
            skipped=skipped,
            info=info,
        )
        if self.piece_stop.size and int(self.piece_stop.min()) < 0:
            raise ValueError("piece_stop must hold every entry's tokens, >= 0")
        self.capacities = caps

    @classmethod
    def _built_fields(
        cls,
        indices: np.ndarray,
        row_bounds: np.ndarray,
        row_offsets: np.ndarray,
        offsets: np.ndarray,
        piece_stop: np.ndarray,
        *,
        capacities: tuple[int, ...],
        num_sequences: int,
        skipped: np.ndarray | None,
        info: dict[str, Any],
    ) -> VectorPackedPlan:
        """The plan of arrays a padless planner has just made, unchecked (as
        :meth:`PackedPlan._built`)."""
        plan = cast(
            VectorPackedPlan,
            cls._built(
                indices, row_bounds, row_offsets, offsets, None, piece_stop,
                capacity=sum(capacities), num_sequences=num_sequences, skipped=skipped, info=info,
            ),
        )  # fmt: skip
        plan.capacities = tuple(capacities)
        return plan

    def entry_lengths(self, sizes: np.ndarray) -> np.ndarray:
        """``sizes`` of every entry's sequence (entries are whole sequences)."""
        return sizes[self.indices]

    def field_stats(self, lengths: Any) -> list[PlanStats]:
        """Packing figures per field: field ``f`` holds ``rows × capacities[f]`` slots and its
        entries' lengths in that field.

        Cost: O(len(indices) · F).
        """
        picked = self._field_lengths(lengths)
        if picked.shape[1] != len(self.capacities):
            raise ValueError(
                f"lengths must have one field per capacity ({len(self.capacities)}), got "
                f"{picked.shape[1]}"
            )
        return self._per_field(picked, self.capacities)

    def __eq__(self, other: object) -> bool:
        same = PackedPlan.__eq__(self, other)
        if same is not True:
            return same
        return isinstance(other, VectorPackedPlan) and self.capacities == other.capacities

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"VectorPackedPlan(batches={len(self)}, rows={self.num_rows}, "
            f"entries={self.indices.size}, capacities={self.capacities}, "
            f"efficiency={self.efficiency:.4f}, skipped={self.skipped.size})"
        )

    def to_arrays(self) -> dict[str, np.ndarray]:
        out = super().to_arrays()
        out["capacities"] = np.array(self.capacities, dtype=np.int64)
        return out

    @classmethod
    def from_arrays(cls, data: Any, meta: dict[str, Any], where: str) -> VectorPackedPlan:
        need = {"indices", "row_bounds", "row_offsets", "piece_stop", "capacities", "packing"}
        missing = need - set(data.files)
        if missing:
            raise ValueError(
                f"{where} is not a padless vector packing plan: missing {sorted(missing)}"
            )
        import json

        packing = json.loads(str(data["packing"]))
        return cls(
            data["indices"],
            data["row_bounds"],
            data["row_offsets"],
            data["piece_stop"],
            capacities=data["capacities"].tolist(),
            num_sequences=packing["num_sequences"],
            skipped=data["skipped"] if "skipped" in data.files else None,
            info=packing["info"],
        )


def _check_capacities(value: Any) -> tuple[int, ...]:
    """Capacities per field: a sequence of at least two positive ints."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) < 2:
        raise TypeError(
            "capacities must be a sequence of one positive int per field (at least two), got "
            f"{type(value).__name__} {value!r:.60}"
        )
    return tuple(positive(f"capacities[{f}]", c) for f, c in enumerate(value))


class PiecePlan(BatchPlan):
    """A plan of pieces: entry ``e`` is tokens ``piece_start[e]:piece_stop[e]`` of sequence
    ``indices[e]``; batch ``b`` is entries ``offsets[b]:offsets[b + 1]`` (as in a BatchPlan).

    Dataset decomposition (:class:`padless.Decomposition`) makes these: each batch holds pieces
    of one length, so a batch is a dense ``(count, length)`` block with no padding.

    Args:
        indices, offsets, skipped, info: as :class:`padless.BatchPlan`.
        piece_start, piece_stop: int64 token range of every entry within its sequence.
        num_sequences: N, the number of sequences the plan was made for.

    >>> plan = PiecePlan([0, 0, 1], [0, 2, 3], [0, 4, 0], [4, 8, 2], num_sequences=2)
    >>> plan.piece_lengths.tolist(), plan.stats([9, 2]).padding_fraction
    ([4, 4, 2], 0.0)
    """

    __slots__ = ("piece_start", "piece_stop", "num_sequences")

    def __init__(
        self,
        indices: Any,
        offsets: Any,
        piece_start: Any,
        piece_stop: Any,
        *,
        num_sequences: int,
        skipped: Any = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(indices, offsets, skipped=skipped, info=info)
        if piece_start is None:
            raise TypeError("piece_start must be the pieces' starts, got None")
        n = self.indices.size
        self.piece_start, self.piece_stop = _piece_ranges(n, piece_start, piece_stop)
        if n and (self.piece_start.min() < 0 or np.any(self.piece_stop < self.piece_start)):
            raise ValueError("pieces must satisfy 0 <= piece_start <= piece_stop")
        self.num_sequences = non_negative("num_sequences", num_sequences)
        _check_in_sequences(self.indices, self.num_sequences)

    @property
    def piece_lengths(self) -> np.ndarray:
        """Tokens of every entry (``piece_stop - piece_start``)."""
        return self.piece_stop - self.piece_start

    @property
    def real_tokens(self) -> int:
        """Tokens the plan's pieces hold."""
        return int(self.piece_lengths.sum())

    def entry_lengths(self, sizes: np.ndarray) -> np.ndarray:
        """The length of every piece (``sizes`` is not needed: pieces carry theirs)."""
        return self.piece_lengths

    def work_costs(self, cost: Any, widths: Any = None) -> np.ndarray:
        """Cost of every batch: count × cost(longest piece) (``widths`` is not used).

        Cost: one pass over the plan's entries.
        """
        from .._kernels import segment_max

        if len(self) == 0:
            return np.zeros(0, dtype=np.float64)
        units = cost.of(np.ascontiguousarray(self.piece_lengths))
        return self.sizes * segment_max(units, self.offsets)

    def with_indices(
        self, indices: np.ndarray, num_sequences: int, skipped: Any = None
    ) -> PiecePlan:
        out = cast(PiecePlan, super().with_indices(indices, num_sequences, skipped))
        out.num_sequences = num_sequences
        return out

    def stats(self, lengths: Any) -> PlanStats:
        """Padding figures: every batch padded to its longest piece (none when its pieces share
        one length); ``sentences`` counts pieces.

        Cost: O(len(indices)).
        """
        from .._kernels import segment_max

        n = as_lengths(lengths).shape[0]
        if n != self.num_sequences:
            raise ValueError(
                f"lengths must hold the {self.num_sequences} sequences the plan was made for, got {n}"
            )
        pieces = np.ascontiguousarray(self.piece_lengths)
        padded = int((segment_max(pieces, self.offsets) * self.sizes).sum()) if len(self) else 0
        return PlanStats.of(self.sizes, self.indices.size, int(pieces.sum()), padded)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BatchPlan):
            return NotImplemented
        if not isinstance(other, PiecePlan):
            return False
        return (
            BatchPlan.__eq__(self, other) is True
            and np.array_equal(self.piece_start, other.piece_start)
            and np.array_equal(self.piece_stop, other.piece_stop)
            and self.num_sequences == other.num_sequences
        )

    __hash__ = None  # type: ignore[assignment]

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {
            **super().to_arrays(),
            "piece_start": self.piece_start,
            "piece_stop": self.piece_stop,
            "num_sequences": np.array(self.num_sequences, dtype=np.int64),
        }

    @classmethod
    def from_arrays(cls, data: Any, meta: dict[str, Any], where: str) -> PiecePlan:
        need = {"indices", "offsets", "piece_start", "piece_stop", "num_sequences"}
        missing = need - set(data.files)
        if missing:
            raise ValueError(f"{where} is not a padless piece plan: missing {sorted(missing)}")
        return cls(
            data["indices"],
            data["offsets"],
            data["piece_start"],
            data["piece_stop"],
            num_sequences=int(data["num_sequences"]),
            skipped=data["skipped"] if "skipped" in data.files else None,
            info=meta.get("info"),
        )


def check_shapes(shapes: Any, name: str = "shapes") -> tuple[tuple[int, int], ...]:
    """Check a list of ``(batch_size, length)`` pairs; return them sorted by (length, batch_size).

    >>> check_shapes([(8, 128), (32, 32)])
    ((32, 32), (8, 128))
    """
    if isinstance(shapes, np.ndarray):
        shapes = shapes.tolist()
    if isinstance(shapes, (str, bytes)) or not isinstance(shapes, Sequence):
        raise TypeError(
            f"{name} must be a list of (batch_size, length) pairs, got {type(shapes).__name__}"
        )
    if not shapes:
        raise ValueError(f"{name} must hold at least one (batch_size, length) pair, got none")
    out = []
    for i, pair in enumerate(shapes):
        if isinstance(pair, np.ndarray):
            pair = pair.tolist()
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise TypeError(f"{name}[{i}] must be a (batch_size, length) pair, got {pair!r:.60}")
        rows, length = pair
        for what, value in (("batch_size", rows), ("length", length)):
            if not _is_int(value):
                raise TypeError(
                    f"{name}[{i}] {what} must be an int, got {type(value).__name__} {value!r}"
                )
            if not 1 <= int(value) < MAX_SHAPE_SIDE:
                raise ValueError(f"{name}[{i}] {what} must be in [1, 2**31), got {int(value)}")
        out.append((int(rows), int(length)))
    ordered = sorted(out, key=lambda s: (s[1], s[0]))
    for a, b in zip(ordered, ordered[1:], strict=False):
        if a == b:
            raise ValueError(f"{name} must not repeat a shape, got {a} twice")
    return tuple(ordered)


class ShapedPlan(BatchPlan):
    """A plan whose every batch is tagged with one of a few fixed shapes.

    Batch ``b`` is padded to ``shapes[shape_of[b]]``: its sequences to that length and, with
    ``pad_batches``, its rows up to that batch size.

    Args:
        indices, offsets, skipped, info: as :class:`padless.BatchPlan`.
        shapes: (k, 2) int64 ``(batch_size, length)`` rows, sorted by length.
        shape_of: int64 index into ``shapes`` per batch.
        pad_batches: whether a short batch is padded with dummy rows up to its batch size.

    >>> from padless import FixedShapes
    >>> plan = FixedShapes(shapes=[(2, 4), (1, 8)]).plan([3, 7, 4, 1])
    >>> [b.tolist() for b in plan], plan.batch_shapes.tolist()
    ([[3, 0], [2], [1]], [[2, 4], [2, 4], [1, 8]])
    """

    __slots__ = ("shapes", "shape_of", "pad_batches")

    def __init__(
        self,
        indices: Any,
        offsets: Any,
        *,
        shapes: Any,
        shape_of: Any,
        pad_batches: bool = True,
        skipped: Any = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(indices, offsets, skipped=skipped, info=info)
        self.shapes = np.array(check_shapes(shapes), dtype=np.int64).reshape(-1, 2)
        self.shape_of = _as_int64_vector("shape_of", shape_of)
        self.pad_batches = check_bool("pad_batches", pad_batches)
        if self.shape_of.size != len(self):
            raise ValueError(
                f"shape_of must hold one shape per batch ({len(self)}), got {self.shape_of.size}"
            )
        if self.shape_of.size and (
            self.shape_of.min() < 0 or self.shape_of.max() >= self.shapes.shape[0]
        ):
            bad = int(self.shape_of[(self.shape_of < 0) | (self.shape_of >= len(self.shapes))][0])
            raise ValueError(f"shape_of must index the {len(self.shapes)} shapes, got {bad}")
        rows = self.shapes[self.shape_of, 0]
        over = np.flatnonzero(self.sizes > rows)
        if over.size:
            b = int(over[0])
            raise ValueError(
                f"batch {b} holds {int(self.sizes[b])} sequences, more than its shape's "
                f"batch size {int(rows[b])}"
            )

    @property
    def batch_shapes(self) -> np.ndarray:
        """The ``(batch_size, length)`` of every batch, (batches, 2) int64."""
        return self.shapes[self.shape_of]

    @property
    def rows(self) -> np.ndarray:
        """Rows each batch occupies: its shape's batch size with ``pad_batches``, else its count."""
        return self.shapes[self.shape_of, 0] if self.pad_batches else self.sizes

    @property
    def dummy_rows(self) -> int:
        """Rows added to short batches (0 without ``pad_batches``)."""
        return int((self.rows - self.sizes).sum())

    def stats(self, lengths: Any) -> PlanStats:
        """Padding figures with every batch at its shape (dummy rows are padding slots).

        ``padded_slots`` is Σ rows × shape length (per field for (N, F) lengths), rows being the
        shape's batch size with ``pad_batches``. Raises ValueError when a batch's longest
        sequence in ``lengths`` is longer than its shape (lengths other than the plan's).

        Cost: O(len(indices)) time, one gather of the planned lengths.

        >>> from padless import FixedShapes
        >>> plan = FixedShapes(shapes=[(2, 4), (1, 8)]).plan([3, 7, 4, 1])
        >>> plan.stats([3, 7, 4, 1]).padded_slots  # 2·4 + 2·4 + 1·8
        24
        """
        from .._kernels import segment_max

        lens = as_lengths(lengths)
        if self.indices.size and (self.indices.min() < 0 or self.indices.max() >= lens.shape[0]):
            raise ValueError(f"plan indices fall outside lengths of size {lens.shape[0]}")
        picked = lens[self.indices]
        fields = 1 if picked.ndim == 1 else picked.shape[1]
        sizes = np.ascontiguousarray(sizes_of(picked))
        longest = segment_max(sizes, self.offsets)
        width = self.shapes[self.shape_of, 1]
        over = np.flatnonzero(longest > width)
        if over.size:
            b = int(over[0])
            raise ValueError(
                f"batch {b} has a sequence of length {int(longest[b])}, longer than its shape's "
                f"length {int(width[b])}: were these lengths the plan's?"
            )
        padded = int((self.rows * width).sum()) * fields
        return PlanStats.of(self.sizes, self.indices.size, int(picked.sum()), padded)

    def to_arrays(self) -> dict[str, np.ndarray]:
        # what a saved plan holds beside the plain arrays (for BatchPlan.save)
        return {
            **super().to_arrays(),
            "shapes": self.shapes,
            "shape_of": self.shape_of,
            "pad_batches": np.array(self.pad_batches),
        }

    @classmethod
    def from_arrays(cls, data: Any, meta: dict[str, Any], where: str) -> ShapedPlan:
        missing = {"indices", "offsets", "shapes", "shape_of", "pad_batches"} - set(data.files)
        if missing:
            raise ValueError(f"{where} is not a shaped plan: missing {sorted(missing)}")
        skipped = data["skipped"] if "skipped" in data.files else None
        return cls(
            data["indices"],
            data["offsets"],
            shapes=data["shapes"],
            shape_of=data["shape_of"],
            pad_batches=bool(data["pad_batches"]),
            skipped=skipped,
            info=meta.get("info"),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BatchPlan):
            return NotImplemented
        if not isinstance(other, ShapedPlan):
            return False
        return (
            BatchPlan.__eq__(self, other) is True
            and np.array_equal(self.shapes, other.shapes)
            and np.array_equal(self.shape_of, other.shape_of)
            and self.pad_batches == other.pad_batches
        )

    __hash__ = None  # type: ignore[assignment]
