"""Outlier filters over (N, F) lengths: a ratio between two fields, and bounds per field.

Speech and translation corpora carry pairs that no batching can help: a 20 s cut with two
tokens of transcript, a one-word source with a 90-token target. Trainers drop them before
batching: fairseq's ``--max-source-positions`` / ``--max-target-positions`` and its length-ratio
check, NeMo's minimum and maximum duration and its tokens-per-second bounds. The two functions here
do that on lengths alone (numpy, no pass over the data), and say what they dropped: how many,
which share of every field's seconds or tokens, and the extreme values, so a bound that cuts
too deep shows in the log.

Fields measured in ticks (durations from :func:`padless.durations`) read in their unit when
``resolution`` gives the seconds per tick, as a spec's ``resolution`` does: a float for every
field, or a tuple with one entry per field (``None``: an integer field, e.g. tokens).

>>> import numpy as np
>>> cuts = np.array([[500, 60], [1200, 3], [300, 45], [800, 95]])   # [10 ms ticks, tokens]
>>> f = ratio_filter(cuts, min_ratio=1.0, max_ratio=12.0, resolution=(0.01, None))
>>> f.kept.tolist(), f.dropped.tolist(), f.low, f.high
([0, 3], [1, 2], 1, 1)
>>> f.ratios.round(2).tolist()
[12.0, 0.25, 15.0, 11.88]
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .fields import check_resolution
from .lengths import as_lengths

__all__ = ["Filtered", "length_filter", "ratio_filter"]


@dataclass(frozen=True, eq=False)
class Filtered:
    """What a filter kept and dropped, and why (a record built by the filters).

    ``kept`` and ``dropped`` are sorted int64 indices into the lengths (together every index
    once); ``mask`` is True where kept. ``low`` / ``high`` count the drops under the lower and over
    the upper bound (``undefined``: a ratio 0/0, which no bound admits). ``values`` holds what was
    compared: the ratios for :func:`ratio_filter`, the lengths in their units for
    :func:`length_filter`.
    """

    rule: str
    kept: np.ndarray
    dropped: np.ndarray
    low: int
    high: int
    undefined: int
    values: np.ndarray
    totals: tuple[tuple[str, float, float], ...]  # (field label, total, dropped), in units
    kind: str = "ratio"  # or "length"

    @property
    def ratios(self) -> np.ndarray | None:
        """(N,) float64 ratios of a ratio filter (inf: a zero denominator; nan: 0/0), else None."""
        return self.values if self.kind == "ratio" else None

    @property
    def mask(self) -> np.ndarray:
        """(N,) bool, True for a kept item."""
        out = np.zeros(self.kept.size + self.dropped.size, dtype=np.bool_)
        out[self.kept] = True
        return out

    def as_dict(self) -> dict[str, Any]:
        """The figures as a JSON-safe dict (no index arrays)."""
        total = self.kept.size + self.dropped.size
        out: dict[str, Any] = {
            "rule": self.rule,
            "items": int(total),
            "kept": int(self.kept.size),
            "dropped": int(self.dropped.size),
            "low": self.low,
            "high": self.high,
            "undefined": self.undefined,
            "fields": [
                {"field": name, "total": t, "dropped": d, "dropped_share": d / t if t else 0.0}
                for name, t, d in self.totals
            ],
        }
        if self.kind == "ratio":
            vals = self.values
            kept = vals[self.kept]
            out["ratio_range"] = _range(vals[np.isfinite(vals)])
            out["kept_range"] = _range(kept[np.isfinite(kept)])
            out["extremes"] = self._extremes()
        return out

    def _extremes(self, count: int = 3) -> dict[str, list[tuple[int, float]]]:
        """The few dropped items furthest below and above the bounds: (index, ratio)."""
        vals = self.values
        drop = self.dropped[~np.isnan(vals[self.dropped])]
        order = drop[np.argsort(vals[drop], kind="stable")]  # the lows, then the highs
        low = order[: min(count, self.low)]
        high = order[::-1][: min(count, self.high)]
        return {
            "lowest": [(int(i), float(vals[i])) for i in low],
            "highest": [(int(i), float(vals[i])) for i in high],
        }

    def report(self) -> str:
        """A few lines for a log: the rule, the counts, the share of each field dropped, extremes.

        >>> print(length_filter([3, 40, 7, 2], max_length=10).report())
        length filter: field 0 <= 10
          kept 3 of 4, dropped 1 (25.00%): 1 above
          field 0 (tokens): dropped 40 of 52 (76.92%)
        """
        d = self.as_dict()
        total = max(d["items"], 1)
        parts = [f"{d['low']} below"] if d["low"] else []
        parts += [f"{d['high']} above"] if d["high"] else []
        parts += [f"{d['undefined']} undefined (0/0)"] if d["undefined"] else []
        why = f": {', '.join(parts)}" if parts else ""
        lines = [
            self.rule,
            f"  kept {d['kept']:,} of {d['items']:,}, dropped {d['dropped']:,} "
            f"({100 * d['dropped'] / total:.2f}%){why}",
        ]
        for f in d["fields"]:
            share = 100 * f["dropped_share"]
            lines.append(
                f"  {f['field']}: dropped {_num(f['dropped'])} of {_num(f['total'])} ({share:.2f}%)"
            )
        if "ratio_range" in d and d["ratio_range"] is not None:
            lo, hi = d["ratio_range"]
            kept = d["kept_range"]
            kept_text = f"; kept {kept[0]:.4g} .. {kept[1]:.4g}" if kept is not None else ""
            lines.append(f"  ratio range {lo:.4g} .. {hi:.4g}{kept_text}")
            ex = d["extremes"]
            for side in ("lowest", "highest"):
                if ex[side]:
                    shown = ", ".join(f"#{i}: {v:.4g}" for i, v in ex[side])
                    lines.append(f"  {side} dropped: {shown}")
        return "\n".join(lines)


def _range(values: np.ndarray) -> tuple[float, float] | None:
    return (float(values.min()), float(values.max())) if values.size else None


def _num(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def _check_resolution(value: Any, fields: int) -> tuple[float | None, ...]:
    """``resolution`` as one entry per field: seconds per tick, or None for an integer field."""
    checked = check_resolution("resolution", value)
    if isinstance(checked, tuple):
        if len(checked) != fields:
            raise ValueError(
                f"resolution must have one entry per field of lengths ({fields}), got {len(checked)}: "
                f"{list(checked)!r:.80}"
            )
        return checked
    return (checked,) * fields


def _check_field(name: str, value: Any, fields: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a field index (an int), got {type(value).__name__}")
    if not 0 <= int(value) < fields:
        raise ValueError(f"{name} must be a field index in [0, {fields}), got {int(value)}")
    return int(value)


def _check_bound(name: str, value: Any, *, allow_zero: bool = True) -> float | None:
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number or None, got {type(value).__name__} {value!r}")
    out = float(value)
    if math.isnan(out) or out < 0 or (out == 0 and not allow_zero):
        raise ValueError(f"{name} must be a non-negative number, got {value!r}")
    return out


def _label(f: int, res: float | None) -> str:
    return f"field {f} ({'s' if res is not None else 'tokens'})"


def _in_units(column: np.ndarray, res: float | None) -> np.ndarray:
    return column * res if res is not None else column.astype(np.float64)


def _totals(
    lens: np.ndarray, res: tuple[float | None, ...], dropped: np.ndarray
) -> tuple[tuple[str, float, float], ...]:
    cols = lens if lens.ndim == 2 else lens[:, None]
    out = []
    for f in range(cols.shape[1]):
        r = res[f]
        scale = 1.0 if r is None else r
        total = int(cols[:, f].sum(dtype=np.int64))
        gone = int(cols[dropped, f].sum(dtype=np.int64))
        out.append((_label(f, r), total * scale, gone * scale))
    return tuple(out)


def _split(keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.flatnonzero(keep).astype(np.int64), np.flatnonzero(~keep).astype(np.int64)


def ratio_filter(
    lengths: Any,
    *,
    numerator: int = 1,
    denominator: int = 0,
    min_ratio: float | None = None,
    max_ratio: float | None = None,
    resolution: float | Sequence[float | None] | None = None,
) -> Filtered:
    """Keep the items whose ratio ``field numerator / field denominator`` lies in the bounds.

    Each field reads in its unit (``resolution``: seconds per tick, see the module doc), so
    with lengths ``[duration ticks, tokens]`` and ``resolution=(0.01, None)`` the default ratio
    (field 1 over field 0) is tokens per second — NeMo's TPS bounds; with two token fields it is
    fairseq's target/source length ratio. Bounds are inclusive and either may be None (not
    both). A zero denominator makes the ratio infinite (0/0 is undefined and always dropped).

    Args:
        lengths: (N, F) lengths, F >= 2 (an array: a list of lists reads as token lists, as
            everywhere in padless).
        numerator, denominator: field indices (distinct).
        min_ratio, max_ratio: inclusive bounds (non-negative numbers; ``inf`` allowed).
        resolution: seconds per tick for every field (a float), one entry per field (a tuple,
            None for an integer field), or None (all integer).

    Returns:
        :class:`Filtered` (``kept``, ``dropped``, ``mask``, ``ratios``, ``report()``).

    Cost: O(N) vectorised.

    >>> import numpy as np
    >>> f = ratio_filter(np.array([[10, 12], [10, 40], [0, 3]]), max_ratio=2.0)   # target/source <= 2
    >>> f.kept.tolist(), f.high
    ([0], 2)
    """
    lens = as_lengths(lengths)
    if lens.ndim != 2 or lens.shape[1] < 2:
        raise ValueError(
            f"lengths must be (N, F) with F >= 2 fields for a ratio between fields, got shape "
            f"{lens.shape}"
        )
    fields = lens.shape[1]
    num = _check_field("numerator", numerator, fields)
    den = _check_field("denominator", denominator, fields)
    if num == den:
        raise ValueError(f"numerator and denominator must be different fields, got {num} twice")
    lo = _check_bound("min_ratio", min_ratio)
    hi = _check_bound("max_ratio", max_ratio)
    if lo is None and hi is None:
        raise ValueError("pass min_ratio or max_ratio (or both): a filter needs a bound")
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"min_ratio must be <= max_ratio, got {lo} > {hi}")
    res = _check_resolution(resolution, fields)
    top = _in_units(lens[:, num], res[num])
    bottom = _in_units(lens[:, den], res[den])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = top / bottom
    undefined = np.isnan(ratios)
    below = ~undefined & (ratios < lo) if lo is not None else np.zeros(len(ratios), np.bool_)
    above = ~undefined & (ratios > hi) if hi is not None else np.zeros(len(ratios), np.bool_)
    kept, dropped = _split(~(undefined | below | above))
    per_second = res[den] is not None and res[num] is None
    left = "" if lo is None else f"{lo:g} <= "
    right = "" if hi is None else f" <= {hi:g}"
    unit = " (tokens per second)" if per_second else ""
    rule = f"ratio filter: {left}field {num} / field {den}{right}{unit}"
    return Filtered(
        rule=rule,
        kept=kept,
        dropped=dropped,
        low=int(below.sum()),
        high=int(above.sum()),
        undefined=int(undefined.sum()),
        values=ratios,
        totals=_totals(lens, res, dropped),
    )


def _per_field(name: str, value: Any, fields: int) -> tuple[float | None, ...]:
    if isinstance(value, (list, tuple)):
        if len(value) != fields:
            raise ValueError(
                f"{name} must have one entry per field of lengths ({fields}; None: no bound), got "
                f"{len(value)}: {list(value)!r:.80}"
            )
        return tuple(_check_bound(f"{name}[{i}]", v) for i, v in enumerate(value))
    return (_check_bound(name, value),) * fields


def length_filter(
    lengths: Any,
    *,
    min_length: float | Sequence[float | None] | None = None,
    max_length: float | Sequence[float | None] | None = None,
    resolution: float | Sequence[float | None] | None = None,
) -> Filtered:
    """Keep the items whose every field lies in its bounds (inclusive, in the field's unit).

    fairseq's ``--max-source-positions`` / ``--max-target-positions`` (``max_length=(1024,
    1024)``), NeMo's ``min_duration`` / ``max_duration`` (``min_length=(0.5, None),
    max_length=(20.0, None), resolution=(0.01, None)`` on ``[duration ticks, tokens]``).

    Args:
        lengths: (N,) or (N, F) lengths.
        min_length, max_length: a bound for every field (a number), one per field (a tuple,
            None: no bound on that field), or None.
        resolution: seconds per tick, as for :func:`ratio_filter`.

    Returns:
        :class:`Filtered`; its ``values`` are the lengths in their units.

    Cost: O(N·F) vectorised.

    >>> import numpy as np
    >>> length_filter(np.array([[500, 20], [2500, 80], [40, 2]]), min_length=(1.0, None),
    ...               max_length=(20.0, None), resolution=(0.01, None)).kept.tolist()
    [0]
    """
    lens = as_lengths(lengths)
    cols = lens if lens.ndim == 2 else lens[:, None]
    fields = cols.shape[1]
    lo = _per_field("min_length", min_length, fields)
    hi = _per_field("max_length", max_length, fields)
    if all(b is None for b in lo + hi):
        raise ValueError("pass min_length or max_length (or both): a filter needs a bound")
    for f, (a, b) in enumerate(zip(lo, hi, strict=True)):
        if a is not None and b is not None and a > b:
            raise ValueError(f"min_length must be <= max_length on field {f}, got {a} > {b}")
    res = _check_resolution(resolution, fields)
    values = np.stack([_in_units(cols[:, f], res[f]) for f in range(fields)], axis=1)
    below = np.zeros(len(cols), dtype=np.bool_)
    above = np.zeros(len(cols), dtype=np.bool_)
    terms = []
    for f in range(fields):
        unit = " s" if res[f] is not None else ""
        if lo[f] is not None:
            below |= values[:, f] < lo[f]
        if hi[f] is not None:
            above |= values[:, f] > hi[f]
        if lo[f] is not None or hi[f] is not None:
            left = "" if lo[f] is None else f"{lo[f]:g}{unit} <= "
            right = "" if hi[f] is None else f" <= {hi[f]:g}{unit}"
            terms.append(f"{left}field {f}{right}")
    kept, dropped = _split(~(below | above))
    return Filtered(
        rule=f"length filter: {', '.join(terms)}",
        kept=kept,
        dropped=dropped,
        low=int(below.sum()),
        high=int((above & ~below).sum()),
        undefined=0,
        values=values if lens.ndim == 2 else values[:, 0],
        totals=_totals(lens, res, dropped),
        kind="length",
    )
