"""Memory models: the peak memory of a training step as a function of its batch's shape.

A padded batch of ``B`` sequences, padded to ``L_f`` on each field ``f`` (audio frames, text
tokens), holds activations in proportion to ``B``: each sequence keeps ``a_f·L_f`` bytes of
per-token activations and ``b_f·L_f²`` of attention scores (dense attention, or its softmax
saved for backward), plus a little per sequence. Weights, gradients and optimizer state do not
grow with the batch. Hence the model

    ``peak(B, L) = fixed + B · Σ_f cost_f(L_f)``,  ``cost_f(l) = per_sequence + linear_f·l +
    quadratic_f·l²``

with non-negative coefficients, fitted to a few measured steps (:func:`padless.torch.probe_memory`
measures them on your model and device). Because the batch term is a :class:`padless.Cost`
times the count, the model *is* a token budget: ``TokenBudget(cost=model.costs(),
max_cost=model.max_cost(limit))`` closes every batch before its predicted peak passes
``limit``. :meth:`MemoryModel.bucket_batch_sizes` gives ``Buckets(batch_sizes=...)`` and
:meth:`MemoryModel.shapes` a shape table for :class:`padless.FixedShapes`; :meth:`MemoryModel.table`
the batch size for any list of shapes.

Terms that couple fields (CTC's alignment lattice, ``B·T·S``; cross-attention) are not in the
form: the fit spreads them over each field's own terms, which is close while one field's lengths
follow the other's (audio and its transcript); check the error on shapes held out of the fit.

Limits are bytes: an int (``80 * 2**30``), a whole float (``8e10``) or a string with a unit,
binary (``"80GiB"``, ``"512MiB"``) or decimal (``"80GB"``, ``"500MB"``); see :func:`as_bytes`.

>>> points = [(b, (l,), 1000 + b * (10 + 2 * l)) for b in (1, 2, 4) for l in (8, 16, 32)]
>>> model = MemoryModel.fit(points)
>>> round(model.predict(3, 12)), model.batch_size(12, limit=2000)
(1102, 29)
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._check import MAX_BUDGET, _is_int, check_int, check_record, positive_or_none
from ._output import load_json, save_json
from .cost import Cost
from .plan import check_shapes

__all__ = ["MemoryModel", "as_bytes"]

KIND = "padless.MemoryModel"
VERSION = 1
MAX_FIELDS = 64

# one measured step: (batch size, padded length per field, peak bytes)
Point = tuple[int, tuple[int, ...], int]

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_AMOUNT = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*")


def as_bytes(value: Any, name: str = "limit") -> int:
    """A memory amount in bytes: a positive int, a whole float, or a string with a unit.

    Units: ``B``; decimal ``kB``, ``MB``, ``GB``, ``TB`` (powers of 1000); binary ``KiB``,
    ``MiB``, ``GiB``, ``TiB`` (powers of 1024); case does not matter. A fractional amount is
    rounded down to whole bytes (``"1.5KiB"`` is 1536). At most 2**62.

    >>> as_bytes("80GiB"), as_bytes("1.5 kB"), as_bytes(4096), as_bytes(8e9)
    (85899345920, 1500, 4096, 8000000000)
    """
    if isinstance(value, str):
        found = _AMOUNT.fullmatch(value)
        unit = found.group(2).lower() if found else None
        if found is None or unit not in _UNITS:
            raise ValueError(
                f"{name} must be bytes, as an int or a string such as '80GiB' or '500MB' (units "
                f"B, kB, MB, GB, TB, KiB, MiB, GiB, TiB), got {value!r:.60}"
            )
        amount = float(found.group(1)) * _UNITS[unit]
        out = math.floor(amount) if math.isfinite(amount) else -1
    elif _is_int(value):
        out = int(value)
    elif isinstance(value, (float, np.floating)):
        if not (math.isfinite(value) and float(value).is_integer()):
            raise ValueError(f"{name} must be a whole number of bytes, got {value!r}")
        out = int(value)
    else:
        raise TypeError(
            f"{name} must be bytes, as an int or a string such as '80GiB', got "
            f"{type(value).__name__} {value!r:.60}"
        )
    if not 1 <= out <= MAX_BUDGET:
        raise ValueError(f"{name} must be between 1 byte and 2**62 bytes, got {value!r:.60}")
    return out


def _check_coefficient(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r:.60}")
    out = float(value)
    if not (math.isfinite(out) and out >= 0):
        raise ValueError(f"{name} must be a non-negative finite number, got {value!r}")
    return out


def _check_coefficients(name: str, value: Any) -> tuple[float, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(
            f"{name} must be a list of numbers (one per field), got {type(value).__name__}"
        )
    out = tuple(_check_coefficient(f"{name}[{i}]", v) for i, v in enumerate(value))
    if not 1 <= len(out) <= MAX_FIELDS:
        raise ValueError(
            f"{name} must hold 1 to {MAX_FIELDS} numbers (one per field), got {len(out)}"
        )
    return out


def _check_lengths(name: str, value: Any, fields: int | None) -> tuple[int, ...]:
    """One padded length per field: an int (one field) or a sequence of ints."""
    if _is_int(value):
        out: tuple[int, ...] = (int(value),)
    elif isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, (str, bytes)):
        items = list(value)
        if not all(_is_int(v) for v in items):
            raise TypeError(f"{name} must be ints (one length per field), got {value!r:.60}")
        out = tuple(int(v) for v in items)
    else:
        raise TypeError(
            f"{name} must be a length (an int) or one length per field (a tuple of ints), got "
            f"{type(value).__name__} {value!r:.60}"
        )
    if not 1 <= len(out) <= MAX_FIELDS:
        raise ValueError(f"{name} must hold 1 to {MAX_FIELDS} lengths, got {len(out)}")
    if fields is not None and len(out) != fields:
        raise ValueError(
            f"{name} must hold one length per field of the model ({fields}), got {len(out)}: "
            f"{value!r:.60}"
        )
    if min(out) < 0 or max(out) > MAX_BUDGET:
        raise ValueError(f"{name} must be lengths in [0, 2**62], got {value!r:.60}")
    return out


def _check_points(value: Any, fields: int | None = None) -> tuple[Point, ...]:
    """``(batch_size, lengths, bytes)`` triples, all with the same number of fields."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(
            f"points must be a list of (batch_size, lengths, bytes) triples, got "
            f"{type(value).__name__}"
        )
    out = []
    for i, item in enumerate(value):
        if isinstance(item, (str, bytes)) or not isinstance(item, Sequence) or len(item) != 3:
            raise TypeError(
                f"points[{i}] must be a (batch_size, lengths, bytes) triple, got {item!r:.60}"
            )
        size, lengths, peak = item
        size = check_int(f"points[{i}] batch_size", size, minimum=1)
        if size > MAX_BUDGET:  # type: ignore[operator]
            raise ValueError(f"points[{i}] batch_size must be <= 2**62, got {size}")
        lens = _check_lengths(f"points[{i}] lengths", lengths, fields)
        fields = len(lens)
        peak = check_int(f"points[{i}] bytes", peak, minimum=0)
        if peak > MAX_BUDGET:  # type: ignore[operator]
            raise ValueError(f"points[{i}] bytes must be <= 2**62, got {peak}")
        out.append((int(size), lens, int(peak)))  # type: ignore[arg-type]
    return tuple(out)


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares: ``argmin ||a·x − b||`` over ``x ≥ 0`` (Lawson and Hanson's
    active set method: free the coefficient whose gradient most wants to grow, solve the free
    ones by least squares, step back to the boundary where one would turn negative).

    >>> nnls(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([2.0, -1.0])).tolist()
    [2.0, 0.0]

    Cost: at most ``3·n`` outer steps of one least-squares solve on ``a``'s free columns.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n = a.shape[1]
    x = np.zeros(n)
    free = np.zeros(n, dtype=np.bool_)
    tol = (
        10 * np.finfo(np.float64).eps * max(a.shape) * max(float(np.abs(a).sum(axis=0).max()), 1.0)
    )
    for _ in range(3 * n):
        grad = a.T @ (b - a @ x)
        if free.all() or float(grad[~free].max()) <= tol:
            break
        free[int(np.argmax(np.where(free, -np.inf, grad)))] = True
        while True:
            trial = np.zeros(n)
            trial[free] = np.linalg.lstsq(a[:, free], b, rcond=None)[0]
            if float(trial[free].min()) > 0:
                break
            shrink = free & (trial <= 0)
            step = float(np.min(x[shrink] / (x[shrink] - trial[shrink])))
            x = x + step * (trial - x)
            free &= x > tol
            x[~free] = 0.0
            if not free.any():
                trial = x
                break
        x = trial
    return np.maximum(x, 0.0)


def _largest(fits: Callable[[int], bool], guess: int, cap: int) -> int:
    """The largest ``k`` in ``[0, cap]`` with ``fits(k)`` (``fits`` non-increasing, ``fits(0)``),
    searched from ``guess`` out, then bisected."""
    guess = min(max(guess, 0), cap)
    if fits(guess):
        lo, step = guess, 1
        while lo < cap and fits(min(lo + step, cap)):
            lo, step = min(lo + step, cap), step * 2
        hi = min(lo + step, cap + 1)
    else:
        hi, step = guess, 1
        while hi > 0 and not fits(max(hi - step, 0)):
            hi, step = max(hi - step, 0), step * 2
        lo = max(hi - step, 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoryModel:
    """Peak memory of a training step: ``fixed + B · Σ_f (per_sequence + linear_f·L_f +
    quadratic_f·L_f²)`` bytes for ``B`` sequences padded to ``L_f`` on each field ``f``.

    Fitted by :meth:`fit` (non-negative least squares on measured points, usually those of
    :func:`padless.torch.probe_memory`), saved with the experiment as JSON (:meth:`save`,
    :meth:`load`, :meth:`as_dict`). Frozen: a fitted model is a value.

    Args:
        fixed: bytes that do not grow with the batch (on CUDA the weights, gradients and
            optimizer state; on the CPU, where a probe measures what a step adds, the
            gradients and the step's fixed temporaries).
        per_sequence: bytes per sequence whatever its length.
        linear: bytes per sequence per padded token, one number per field.
        quadratic: bytes per sequence per squared padded length, one per field.
        points: the measured ``(batch_size, lengths, bytes)`` the model was fitted to (kept
            for the record; empty when built by hand).
        device: where the points were measured (e.g. ``"cuda:0 NVIDIA H200"``), or None.

    >>> m = MemoryModel(fixed=100.0, per_sequence=1.0, linear=(2.0,), quadratic=(0.0,))
    >>> m.predict(4, 10), m.batch_size(10, limit=200), m.max_cost(200)
    (184.0, 4, 100.0)

    Cost: O(fields) per prediction; a batch size is a few dozen predictions.
    """

    fixed: float
    per_sequence: float
    linear: tuple[float, ...]
    quadratic: tuple[float, ...]
    points: tuple[Point, ...] = dataclasses.field(default=(), repr=False)
    device: str | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "fixed", _check_coefficient("fixed", self.fixed))
        set_(self, "per_sequence", _check_coefficient("per_sequence", self.per_sequence))
        set_(self, "linear", _check_coefficients("linear", self.linear))
        set_(self, "quadratic", _check_coefficients("quadratic", self.quadratic))
        if len(self.linear) != len(self.quadratic):
            raise ValueError(
                "linear and quadratic must hold one number per field each, got "
                f"{len(self.linear)} and {len(self.quadratic)}"
            )
        set_(self, "points", _check_points(self.points, len(self.linear)))
        if self.device is not None and not isinstance(self.device, str):
            raise TypeError(f"device must be a str or None, got {type(self.device).__name__}")

    @property
    def fields(self) -> int:
        """How many length fields a shape has (1 for plain sequences)."""
        return len(self.linear)

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(cls, points: Any, *, device: str | None = None) -> MemoryModel:
        """The model that best fits measured ``(batch_size, lengths, bytes)`` points.

        Non-negative least squares on relative errors (each point's residual divided by its
        bytes), so small steps weigh as much as large ones; the columns are scaled to unit
        norm first. ``lengths`` is an int (one field) or a tuple of ints (one per field). The
        points must fix every coefficient (``2 + 2·fields``): two batch sizes or more, and
        ``1 + 2·fields`` shapes or more with three lengths or more per field, each field varied
        apart from the others.

        >>> pts = [(b, (l,), 50 + b * 3 * l * l) for b in (1, 2) for l in (4, 8, 16)]
        >>> [round(v, 6) for v in MemoryModel.fit(pts).quadratic]
        [3.0]
        """
        pts = _check_points(points)
        if not pts:
            raise ValueError("points must hold measured steps to fit, got none")
        fields = len(pts[0][1])
        width = 2 + 2 * fields
        if len(pts) < width:
            raise ValueError(
                f"points must hold at least {width} measured steps to fit a model of {fields} "
                f"field(s) ({width} coefficients), got {len(pts)}"
            )
        if len({p[0] for p in pts}) < 2:
            raise ValueError(
                "points must be measured at two batch sizes or more (fixed memory and memory per "
                f"sequence are told apart by the batch size), got only batch size {pts[0][0]}"
            )
        sizes = np.array([p[0] for p in pts], dtype=np.float64)
        lens = np.array([p[1] for p in pts], dtype=np.float64)
        peaks = np.array([p[2] for p in pts], dtype=np.float64)
        cols = [np.ones_like(sizes), sizes]
        for f in range(fields):
            cols += [sizes * lens[:, f], sizes * lens[:, f] ** 2]
        a = np.stack(cols, axis=1) / np.maximum(peaks, 1.0)[:, None]
        b = peaks / np.maximum(peaks, 1.0)
        norms = np.linalg.norm(a, axis=0)
        norms[norms == 0] = 1.0
        rank = int(np.linalg.matrix_rank(a / norms))
        if rank < width:
            raise ValueError(
                f"points must tell the model's {width} coefficients apart, but they fix only "
                f"{rank}: measure {width - 1} shapes or more, with three lengths or more per "
                "field, varying each field apart from the others (one field's lengths a "
                "multiple of another's fix no more)"
            )
        x = nnls(a / norms, b) / norms
        return cls(
            fixed=float(x[0]),
            per_sequence=float(x[1]),
            linear=tuple(float(v) for v in x[2::2]),
            quadratic=tuple(float(v) for v in x[3::2]),
            points=pts,
            device=device,
        )

    # ------------------------------------------------------------------ costs
    def _terms(self, field: int) -> tuple[float, float, float]:
        """``(per_sequence, linear, quadratic)`` of one field's cost: ``per_sequence`` rides on
        field 0, so the fields' costs add up to the model's bytes per sequence."""
        return (self.per_sequence if field == 0 else 0.0), self.linear[field], self.quadratic[field]

    def cost(self, field: int = 0) -> Cost:
        """Field ``field``'s :class:`padless.Cost` in bytes per sequence (``per_sequence`` is in
        field 0's, so the fields' costs add up to the model's bytes per sequence).

        >>> MemoryModel(fixed=0, per_sequence=8, linear=(2, 1), quadratic=(0, 0)).cost(1)
        Cost(linear=1.0, quadratic=0.0, per_sequence=0.0)
        """
        f = check_int("field", field, minimum=0)
        if f >= self.fields:  # type: ignore[operator]
            raise ValueError(f"field must be in [0, {self.fields}), got {f}")
        per, lin, quad = self._terms(f)  # type: ignore[arg-type]
        if per == 0 and lin == 0 and quad == 0:
            raise ValueError(
                f"field {f} adds no memory in this model (all its coefficients are 0), so it has "
                "no cost (costs() gives None for it)"
            )
        return Cost(linear=lin, quadratic=quad, per_sequence=per)

    def costs(self) -> Cost | tuple[Cost | None, ...]:
        """The ``cost=`` of a :class:`padless.TokenBudget` (or :class:`padless.Buckets`) that
        budgets this model's memory: one :class:`Cost` for one field; for several, a tuple of
        per-field costs, which the budget sums (``count × Σ_f cost_f(longest_f)``), None for a
        field that adds no memory. Pair it with :meth:`max_cost`.

        >>> MemoryModel(fixed=0, per_sequence=8, linear=(2, 0), quadratic=(0, 0)).costs()
        (Cost(linear=2.0, quadratic=0.0, per_sequence=8.0), None)
        """
        if self.fields == 1:
            return self.cost(0)
        out = tuple(None if not any(self._terms(f)) else self.cost(f) for f in range(self.fields))
        if all(c is None for c in out):
            raise ValueError("this model adds no memory per sequence, so it has no cost")
        return out

    def max_cost(self, limit: Any) -> float:
        """The ``max_cost=`` that keeps a batch's predicted peak within ``limit`` bytes: the
        largest ``m`` with ``fixed + m ≤ limit`` in float arithmetic, so that a batch whose
        ``count × cost`` is at most ``m`` is predicted within the limit."""
        top = float(as_bytes(limit))
        m = top - self.fixed
        if m <= 0:
            raise ValueError(
                f"limit must exceed the model's fixed memory ({self.fixed:.6g} bytes), got "
                f"{limit!r} ({top:.6g} bytes)"
            )
        while m > 0 and self.fixed + m > top:
            m = math.nextafter(m, 0.0)
        return m

    # ------------------------------------------------------------------ predictions
    def _per_sequence(self, lengths: tuple[int, ...]) -> float:
        """Bytes per sequence, ``Σ_f cost_f(L_f)`` summed left to right, each term as
        :meth:`padless.Cost.of` computes it."""
        total = 0.0
        for f, length in enumerate(lengths):
            per, lin, quad = self._terms(f)
            lf = float(length)
            term = (per + lin * lf) + quad * (lf * lf)
            total = term if f == 0 else total + term
        return total

    def predict(self, batch_size: int, lengths: Any) -> float:
        """Predicted peak bytes of a step on ``batch_size`` sequences padded to ``lengths``
        (an int for one field, a tuple of ints per field)."""
        size = check_int("batch_size", batch_size, minimum=0)
        if size > MAX_BUDGET:  # type: ignore[operator]
            raise ValueError(f"batch_size must be <= 2**62, got {size}")
        lens = _check_lengths("lengths", lengths, self.fields)
        return self._predict(size, lens)  # type: ignore[arg-type]

    def _predict(self, size: int, lens: tuple[int, ...]) -> float:
        return self.fixed + float(size) * self._per_sequence(lens)

    def batch_size(self, lengths: Any, limit: Any, *, max_batch_size: int | None = None) -> int:
        """The largest batch size ``B`` with ``predict(B, lengths) ≤ limit`` (0 if even one
        sequence passes it), at most ``max_batch_size`` when given.

        >>> MemoryModel(fixed=0, per_sequence=0, linear=(1,), quadratic=(0,)).batch_size(100, 1050)
        10
        """
        lens = _check_lengths("lengths", lengths, self.fields)
        top = float(as_bytes(limit))
        cap = positive_or_none("max_batch_size", max_batch_size) or MAX_BUDGET
        unit = self._per_sequence(lens)
        if unit == 0 and self.fixed <= top:
            if max_batch_size is None:
                raise ValueError(
                    f"lengths {lens} cost no memory per sequence in this model, so limit={limit!r} "
                    "bounds no batch size: pass max_batch_size"
                )
            return cap

        def fits(k: int) -> bool:
            return self._predict(k, lens) <= top

        guess = int(min((top - self.fixed) / unit, float(cap))) if top > self.fixed else 0
        found = _largest(fits, guess, cap) if self.fixed <= top else 0
        if found == MAX_BUDGET and max_batch_size is None:
            raise ValueError(
                f"limit={limit!r} holds more than 2**62 sequences of lengths {lens} in this "
                "model: pass max_batch_size"
            )
        return found

    def table(
        self,
        lengths: Any,
        limit: Any,
        *,
        multiple_of: int = 1,
        max_batch_size: int | None = None,
    ) -> list[tuple[int, Any]]:
        """``(batch_size, lengths)`` for each entry of ``lengths`` (a shape's or a bucket's
        longest: ints for one field, tuples per field), the batch size the largest that fits
        ``limit`` (:meth:`batch_size`), rounded down to a multiple of ``multiple_of`` where it
        is at least that. A plain list, in the order given: a bucket table for ``Buckets``.

        >>> m = MemoryModel(fixed=0, per_sequence=0, linear=(1,), quadratic=(0,))
        >>> m.table([100, 300], limit=1000, multiple_of=2)
        [(10, 100), (2, 300)]
        """
        entries = self._entries("lengths", lengths)
        sizes = self._sizes(entries, limit, multiple_of, max_batch_size, "lengths[{i}] = {lens}")
        return [(size, self._give(lens)) for size, lens in zip(sizes, entries, strict=True)]

    def _sizes(
        self,
        entries: list[tuple[int, ...]],
        limit: Any,
        multiple_of: Any,
        max_batch_size: Any,
        what: str,
    ) -> list[int]:
        """:meth:`table`'s batch sizes; ``what`` names an entry that fits no batch."""
        multiple = check_int("multiple_of", multiple_of, minimum=1)
        if multiple > MAX_BUDGET:  # type: ignore[operator]
            raise ValueError(f"multiple_of must be <= 2**62, got {multiple}")
        out = []
        for i, lens in enumerate(entries):
            size = self.batch_size(lens, limit, max_batch_size=max_batch_size)
            if size == 0:
                raise ValueError(
                    f"{what.format(i=i, lens=self._give(lens))} does not fit limit={limit!r} "
                    f"even one sequence at a time (predicted {self._predict(1, lens):.6g} bytes)"
                )
            if size >= multiple:  # type: ignore[operator]
                size -= size % multiple  # type: ignore[operator]
            out.append(size)
        return out

    def shapes(
        self,
        lengths: Any,
        limit: Any,
        *,
        multiple_of: int = 1,
        max_batch_size: int | None = None,
    ) -> list[tuple[int, int]]:
        """A :class:`padless.FixedShapes` shape table: ``(batch_size, length)`` for each length
        (one field; lengths ≥ 1), the largest batch that fits ``limit`` (see :meth:`table`),
        sorted by length. ``FixedShapes(shapes=model.shapes([256, 512, 1024], "80GiB"))``.

        >>> m = MemoryModel(fixed=0, per_sequence=0, linear=(1,), quadratic=(0,))
        >>> m.shapes([300, 100], limit=1000)
        [(10, 100), (3, 300)]
        """
        if self.fields != 1:
            raise ValueError(
                f"shapes needs a model of one field (FixedShapes pads one length), this one has "
                f"{self.fields}: use table() and the longest over fields"
            )
        rows = self.table(lengths, limit, multiple_of=multiple_of, max_batch_size=max_batch_size)
        return list(check_shapes(rows, "shapes"))

    def bucket_batch_sizes(
        self,
        boundaries: Any,
        limit: Any,
        *,
        longest: Any,
        multiple_of: int = 1,
        max_batch_size: int | None = None,
    ) -> list[int]:
        """``batch_sizes`` for ``Buckets(boundaries=boundaries, batch_sizes=...)``: one per
        bucket, in the buckets' order, the largest batch that fits ``limit`` (see :meth:`table`)
        padded to the bucket's longest.

        A bucket's longest on each field is its upper cut, or ``longest`` (the longest length
        of the data, one per field) for the last; 1-D cuts bound every field (a sequence's size
        is its longest field), 2-D boundaries ``(cuts, subs)`` bound the first field by
        ``cuts`` and the second by each row of ``subs`` (a model of two fields). Lengths in the
        model's units (ticks, frames, tokens); a ``pad_to_multiple_of`` pads past the cut, so
        pass the cuts rounded up to it.

        >>> m = MemoryModel(fixed=0, per_sequence=0, linear=(1,), quadratic=(0,))
        >>> m.bucket_batch_sizes([100, 200], limit=1000, longest=500)
        [10, 5, 2]
        """
        top = _check_lengths("longest", longest, self.fields)
        shapes = [
            tuple(v if c is None else min(c, v) for c, v in zip(cut, top, strict=True))
            for cut in self._bucket_cuts(boundaries)
        ]
        what = "bucket {i}, padded to {lens} (its upper cut, or longest),"
        return self._sizes(shapes, limit, multiple_of, max_batch_size, what)

    def _bucket_cuts(self, value: Any) -> list[tuple[int | None, ...]]:
        """Each bucket's upper cut per field (None: unbounded), in the buckets' order."""
        if isinstance(value, np.ndarray):
            value = value.tolist()
        rule = "boundaries must be Buckets' cuts (ints) or the 2-D pair (cuts, one list of cuts per bucket)"
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise TypeError(f"{rule}, got {type(value).__name__} {value!r:.60}")

        def ints(name: str, items: Any) -> list[int | None]:
            if isinstance(items, np.ndarray):
                items = items.tolist()
            if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
                raise TypeError(f"{rule}: {name} must be a list of ints, got {items!r:.60}")
            for v in items:
                if not _is_int(v) or not 0 <= int(v) <= MAX_BUDGET:
                    raise ValueError(
                        f"{rule}: {name} must hold lengths in [0, 2**62], got {v!r:.40}"
                    )
            return [*(int(v) for v in items), None]  # the last bucket has no upper cut

        grid = len(value) == 2 and not _is_int(value[0]) and not _is_int(value[1])
        if not grid:
            return [(c,) * self.fields for c in ints("boundaries", value)]
        if self.fields != 2:
            raise ValueError(
                f"boundaries in the 2-D form bound two fields, but this model has {self.fields}"
            )
        cuts, subs = value
        firsts = ints("boundaries[0]", cuts)
        if (
            isinstance(subs, (str, bytes))
            or not isinstance(subs, Sequence)
            or len(subs) != len(firsts)
        ):
            raise ValueError(
                f"{rule}: boundaries[1] must hold one list of cuts per first-field bucket "
                f"({len(firsts)}), got {subs!r:.60}"
            )
        return [(c, s) for i, c in enumerate(firsts) for s in ints(f"boundaries[1][{i}]", subs[i])]

    def _entries(self, name: str, value: Any) -> list[tuple[int, ...]]:
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise TypeError(
                f"{name} must be a list of lengths (ints, or tuples of one length per field), "
                f"got {type(value).__name__}"
            )
        if not value:
            raise ValueError(f"{name} must hold at least one entry, got none")
        return [_check_lengths(f"{name}[{i}]", v, self.fields) for i, v in enumerate(value)]

    def _give(self, lens: tuple[int, ...]) -> Any:
        return lens[0] if self.fields == 1 else lens

    # ------------------------------------------------------------------ records
    def as_dict(self) -> dict[str, Any]:
        """A JSON-safe dict: ``MemoryModel.from_dict(m.as_dict()) == m``."""
        return {
            "kind": KIND,
            "version": VERSION,
            "unit": "bytes",
            "fixed": self.fixed,
            "per_sequence": self.per_sequence,
            "linear": list(self.linear),
            "quadratic": list(self.quadratic),
            "device": self.device,
            "points": [[b, list(lens), peak] for b, lens, peak in self.points],
        }

    @classmethod
    def from_dict(cls, record: Any) -> MemoryModel:
        """The model of a dict made by :meth:`as_dict` (checked like the constructor)."""
        known = {"kind", "version", "unit", "fixed", "per_sequence", "linear", "quadratic"}
        known |= {"device", "points"}
        check_record(
            record, owner="MemoryModel", kind=KIND, version=VERSION, unit="bytes", known=known
        )
        missing = sorted(
            k for k in ("fixed", "per_sequence", "linear", "quadratic") if k not in record
        )
        if missing:
            raise ValueError(f"record must hold the model's coefficients, missing {missing}")
        return cls(
            fixed=record["fixed"],
            per_sequence=record["per_sequence"],
            linear=tuple(record["linear"]),
            quadratic=tuple(record["quadratic"]),
            points=record.get("points", ()),
            device=record.get("device"),
        )

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write the model as JSON to ``path`` atomically (a temporary file beside it, then a
        rename over it); return the path written."""
        return save_json(path, self.as_dict())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MemoryModel:
        """The model saved at ``path`` by :meth:`save`."""
        return cls.from_dict(load_json(path, "memory model"))
