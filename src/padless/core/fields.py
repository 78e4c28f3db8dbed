"""Lengths with units, and budgets per field.

Speech lengths are durations: float seconds. padless plans whole numbers, so a duration becomes
a count of *ticks* once, up front (:func:`durations`, ``resolution`` seconds per tick, rounded up
so that a budget in ticks bounds the real durations), and a budget given in seconds becomes
whole ticks (:func:`to_ticks`, rounded down) by the spec that holds it (``resolution=``).

(N, F) lengths hold one length per field (audio ticks and text tokens; source and target
tokens). A spec given one budget per field (``max_tokens=(200.0, 4096)``) keeps every field of
every batch within its own budget: ``count × longest_f <= budget_f`` for each field ``f``. That is
one budget on one size in disguise (:func:`field_scales`): scaled by ``lcm / budget_f``, each
field's width is a share of the same limit, and a batch fits every budget exactly when it fits
the limit with each sequence's largest scaled width. So every token-budget kernel plans per-field
budgets unchanged.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._check import MAX_BUDGET, budget_or_none, check_real
from .lengths import UNIT_HINT

__all__ = ["durations", "to_ticks", "check_field_budgets", "check_resolution", "field_scales"]

MAX_TICKS = 1 << 31  # a duration in ticks is a length: below 2**31
_NOISE = 1e-6  # of a tick: float error in seconds / resolution, not a part of a tick


def check_resolution(name: str, value: Any) -> float | tuple[float | None, ...] | None:
    """Check a ``resolution`` setting: seconds (or any unit) per tick, a positive finite number;
    one per field as a tuple (None for a field counted in whole tokens); or None (whole tokens).

    >>> check_resolution("resolution", (0.01, None))
    (0.01, None)
    """
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError(f"{name} must name one resolution per field, got an empty {value!r}")
        out = tuple(
            None if v is None else check_real(f"{name}[{i}]", v) for i, v in enumerate(value)
        )
        if all(v is None for v in out):
            raise ValueError(f"{name} must give a resolution for some field, got {list(value)!r}")
        return out
    return check_real(name, value)


def _budget_entry(name: str, value: Any) -> int | float | None:
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r:.60}")
    if isinstance(value, numbers.Integral):
        return budget_or_none(name, int(value))
    out = float(value)
    if not math.isfinite(out) or out <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return out


def check_field_budgets(name: str, value: Any) -> int | float | tuple[Any, ...] | None:
    """Check a budget that is one number or one per field (a tuple or list; None entries put no
    budget on their field). A float budget needs a ``resolution`` (the spec checks that).

    >>> check_field_budgets("max_tokens", [200.0, 4096])
    (200.0, 4096)
    """
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError(f"{name} must name one budget per field, got an empty {value!r}")
        out = tuple(_budget_entry(f"{name}[{i}]", v) for i, v in enumerate(value))
        if all(v is None for v in out):
            raise ValueError(f"{name} must budget some field, got {list(value)!r}")
        return out
    if isinstance(value, (float, np.floating)):
        return _budget_entry(name, value)
    return budget_or_none(name, value)


def to_ticks(name: str, value: int | float, resolution: float | None) -> int:
    """A budget in the unit of ``resolution`` as whole ticks, rounded down (so a batch within the
    ticks is within the budget); an int without a resolution is already whole tokens.

    >>> to_ticks("max_tokens", 200.0, 0.01), to_ticks("max_tokens", 0.3, 0.1), to_ticks("b", 7, None)
    (20000, 3, 7)
    """
    if resolution is None:
        if not isinstance(value, numbers.Integral):
            if isinstance(value, float) and value.is_integer():  # 4096.0: a count, typed float
                raise TypeError(
                    f"{name} must be an int, got float {value!r}: pass {name}={int(value)} "
                    f"(a budget in seconds takes resolution=: {UNIT_HINT})"
                )
            raise TypeError(f"{name} must be an int, got float {value!r}; {UNIT_HINT}")
        return int(value)
    ticks = float(value) / resolution
    whole = round(ticks)
    out = whole if abs(ticks - whole) <= _NOISE else math.floor(ticks)
    if out < 1:
        raise ValueError(
            f"{name}={value!r} is less than one tick of resolution={resolution!r}: "
            "no sequence fits it"
        )
    if out > MAX_BUDGET:
        raise ValueError(f"{name}={value!r} is over 2**62 ticks of resolution={resolution!r}")
    return int(out)


def durations(seconds: Any, *, resolution: float = 0.01) -> np.ndarray:
    """Durations in seconds as whole ticks of ``resolution`` seconds: int64 lengths to plan.

    Each duration is rounded up to a whole tick (a part of a tick counts as one, so a budget in
    ticks bounds the real seconds); float error of less than a millionth of a tick is not a
    part (``0.3`` s at ``0.1`` is 3 ticks). ``seconds`` is (N,) or (N, F) (every field in
    seconds); give other fields (text tokens) as they are and stack the columns.

    >>> durations([1.0, 2.345, 0.3], resolution=0.01).tolist()
    [100, 235, 30]
    """
    res = check_real("resolution", resolution)
    arr = np.asarray(seconds)
    if arr.dtype == object or arr.dtype.kind not in "iuf" or arr.dtype == np.bool_:
        raise TypeError(
            f"seconds must be a numeric array of durations, got {type(seconds).__name__} "
            f"of dtype {arr.dtype}"
        )
    if arr.ndim not in (1, 2):
        raise ValueError(f"seconds must be 1-D (N,) or 2-D (N, F), got shape {arr.shape}")
    sec = arr.astype(np.float64, copy=False)
    bad = ~(np.isfinite(sec) & (sec >= 0))
    if bad.any():
        pos = tuple(int(p) for p in np.argwhere(bad)[0])
        raise ValueError(
            f"seconds must be finite and non-negative, got {arr[pos].item()!r} at position "
            f"{list(pos)}"
        )
    ticks = sec / res
    up = np.ceil(ticks - _NOISE)
    if up.size and float(up.max()) >= MAX_TICKS:
        pos = tuple(int(p) for p in np.argwhere(up >= MAX_TICKS)[0])
        raise ValueError(
            f"seconds[{', '.join(map(str, pos))}]={arr[pos].item()!r} is 2**31 ticks or more of "
            f"resolution={res!r}; use a coarser resolution"
        )
    return np.maximum(up, 0).astype(np.int64)


def field_scales(budgets: Sequence[int | None]) -> tuple[np.ndarray, int]:
    """``(scales, limit)``: per-field token budgets as one budget on one size.

    ``limit`` is the least common multiple of the budgets and ``scales[f] = limit // budget_f``
    (0 for a field without a budget). With ``size = max_f(width_f × scales[f])``, a batch has
    ``count × max(size) <= limit`` exactly when every budgeted field has
    ``count × max(width_f) <= budget_f``.

    >>> scales, limit = field_scales((20000, 4096))
    >>> scales.tolist(), limit
    ([128, 625], 2560000)
    """
    given = [int(b) for b in budgets if b is not None]
    if not given:
        raise ValueError("budgets must budget some field")
    limit = 1
    for b in given:
        limit = limit * b // math.gcd(limit, b)
        if limit > MAX_BUDGET:
            raise ValueError(
                f"budgets {list(budgets)} have a least common multiple over 2**62, which the "
                "per-field plan counts in; round them to numbers sharing more factors "
                "(e.g. multiples of 64)"
            )
    scales = np.array([0 if b is None else limit // int(b) for b in budgets], dtype=np.int64)
    return scales, limit


def scaled_sizes(widths: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """``max_f(widths[:, f] × scales[f])``: each sequence's share of the per-field limit (int64;
    a ValueError where a product would pass 2**62)."""
    wide = np.asarray(widths, dtype=np.int64)
    if wide.ndim != 2 or wide.shape[1] != scales.size:
        raise ValueError(
            f"per-field budgets name {scales.size} fields, but the lengths have shape {wide.shape}"
        )
    if wide.size and int(wide.max()) > 0:
        top = max(int(wide[:, f].max()) * int(s) for f, s in enumerate(scales))
        if top > MAX_BUDGET:
            raise ValueError(
                "a sequence's width times its field's scale passes 2**62: the per-field "
                "budgets' least common multiple is too large for these lengths; round the "
                "budgets to numbers sharing more factors"
            )
    if wide.shape[0] == 0:
        return np.zeros(0, np.int64)
    return (wide * scales[None, :]).max(axis=1)
