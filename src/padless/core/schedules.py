"""Schedules: a quantity as a function of the global optimizer step (0, 1, 2, ...).

A :class:`Schedule` is a small frozen value — a batch size, a sequence length, a token budget or a
mixture weight that changes over a run. It is JSON-safe (:meth:`Schedule.as_dict` /
:meth:`Schedule.from_dict` round trip exactly), hashable and equal by content, so it goes into a
spec's ``as_dict()`` and a state's fingerprint. A plain number means a constant
(:meth:`Schedule.of`).

The kinds (formulas in docs/schedules.md, with where they differ from DeepSpeed's and
OLMo-core's): ``constant``, ``piecewise`` (values from given steps on), ``linear`` and ``cosine``
ramps, and DeepSpeed's curriculum schedules ``fixed_linear``, ``fixed_root`` and
``fixed_discrete``, which reproduce DeepSpeed's difficulty at every step exactly.

An *integer* schedule (batch sizes, lengths, tokens) yields ints: ramps round down, to a
multiple of ``multiple_of``. A float schedule (mixture weights) yields floats.
"""

from __future__ import annotations

import bisect
import functools
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from ._check import _is_int, check_bool, check_int, check_real

__all__ = ["Schedule"]

MAX_VALUE = 1 << 62  # integer values and steps stay below this: int64 arithmetic never wraps

# each kind's parameters in the order of its constructor (and of as_dict and repr)
_PARAMS: dict[str, tuple[str, ...]] = {
    "constant": ("value", "integer", "multiple_of"),
    "piecewise": ("steps", "values", "integer", "multiple_of"),
    "linear": ("start", "end", "steps", "begin", "integer", "multiple_of"),
    "cosine": ("start", "end", "steps", "begin", "integer", "multiple_of"),
    "fixed_linear": ("start", "end", "total_steps", "multiple_of"),
    "fixed_root": ("start", "end", "total_steps", "degree", "multiple_of"),
    "fixed_discrete": ("values", "steps", "integer", "multiple_of"),
}
# parameters shown in repr only when they differ from these (``integer`` is never shown: the
# values' types say it)
_DEFAULTS: dict[str, Any] = {"begin": 0, "multiple_of": 1}

Number = int | float


def _step(name: str, value: Any) -> int:
    """A step: an int in [0, 2**62]."""
    out = cast(int, check_int(name, value, minimum=0))
    if out > MAX_VALUE:
        raise ValueError(f"{name} must be <= 2**62 (steps stay in int64 arithmetic), got {out}")
    return out


def _count(name: str, value: Any) -> int:
    """A number of steps: an int in [1, 2**62]."""
    out = cast(int, check_int(name, value, minimum=1))
    if out > MAX_VALUE:
        raise ValueError(f"{name} must be <= 2**62 (steps stay in int64 arithmetic), got {out}")
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _step_values(
    values: Sequence[Any], integer: Any, multiple_of: Any
) -> tuple[bool, int, list[Number]]:
    """The checked ``values`` of a stepped schedule (piecewise, fixed_discrete), whether they
    are integers, and the multiple they must be of."""
    kind = _infer_integer(integer, values)
    m = _multiple_of(multiple_of, kind)
    vals = [_number(f"values[{i}]", v, kind) for i, v in enumerate(values)]
    for i, v in enumerate(vals):
        _check_multiple(f"values[{i}]", v, m)
    return kind, m, vals


def _infer_integer(integer: Any, values: Sequence[Any]) -> bool:
    if integer is None:
        return all(_is_int(v) for v in values)
    return check_bool("integer", integer)


def _number(name: str, value: Any, integer: bool) -> Number:
    """A schedule's value: an int in [0, 2**62] for integer schedules, else a finite float."""
    if not _is_number(value):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not integer:
        return check_real(name, value, positive_only=False) + 0.0  # no -0.0: as_dict is canonical
    if not _is_int(value):
        real = float(value)
        if not (math.isfinite(real) and real.is_integer()):
            raise ValueError(
                f"{name} must be a whole number for an integer schedule (integer=True), "
                f"got {value!r}"
            )
        value = int(real)
    out = int(value)
    if not 0 <= out <= MAX_VALUE:
        raise ValueError(
            f"{name} must be in [0, 2**62] for an integer schedule (int64 arithmetic), got {out}"
        )
    return out


def _multiple_of(value: Any, integer: bool) -> int:
    out = _count("multiple_of", value)
    if out > 1 and not integer:
        raise ValueError(
            f"multiple_of rounds integer schedules; multiple_of={out} needs int values "
            "(or integer=True), got a float schedule"
        )
    return out


def _check_multiple(name: str, value: Number, multiple_of: int) -> None:
    if multiple_of > 1 and cast(int, value) % multiple_of:
        raise ValueError(f"{name} must be a multiple of multiple_of={multiple_of}, got {value}")


def _sequence(name: str, value: Any) -> list[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a list of numbers, got {type(value).__name__} {value!r}")
    out = list(value.tolist() if isinstance(value, np.ndarray) else value)
    if not out:
        raise ValueError(f"{name} must not be empty, got {value!r}")
    return out


def _increasing(name: str, steps: list[Any], *, first: int) -> tuple[int, ...]:
    out = tuple(_step(f"{name}[{i}]", s) for i, s in enumerate(steps))
    if first == 0 and out[0] != 0:
        raise ValueError(f"{name} must start at step 0, got {name}[0]={out[0]}")
    if out[0] < first:
        raise ValueError(f"{name} must start at step >= {first}, got {name}[0]={out[0]}")
    for i in range(1, len(out)):
        if out[i] <= out[i - 1]:
            raise ValueError(
                f"{name} must be strictly increasing, got {name}[{i - 1}]={out[i - 1]} "
                f"and {name}[{i}]={out[i]}"
            )
    return out


class Schedule:
    """A quantity as a function of the global optimizer step: a frozen, JSON-safe value.

    Build one with a constructor (:meth:`constant`, :meth:`piecewise`, :meth:`linear`,
    :meth:`cosine`, :meth:`fixed_linear`, :meth:`fixed_root`, :meth:`fixed_discrete`) or
    :meth:`of` (a number, a schedule or its dict); ask it :meth:`value`, :meth:`values`,
    :meth:`changes`, :attr:`final`, :meth:`first_step_reaching`, :attr:`is_constant`.

    >>> s = Schedule.linear(256, 4096, steps=1000, multiple_of=256)
    >>> s.value(0), s.value(500), s.value(10**6), s.final
    (256, 2048, 4096, 4096)
    >>> Schedule.from_dict(s.as_dict()) == s, s
    (True, Schedule.linear(start=256, end=4096, steps=1000, multiple_of=256))

    Cost: :meth:`value` O(1) (O(log k) for k pieces); :meth:`values` O(n) numpy for constant,
    piecewise and linear kinds, one Python evaluation per distinct ramp step for the others.
    """

    __slots__ = ("_kind", "_key", "_p", "_stop")

    _kind: str
    _key: tuple[tuple[str, Any], ...]
    _p: dict[str, Any]
    _stop: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "build a Schedule with one of its constructors: Schedule.constant, .piecewise, "
            ".linear, .cosine, .fixed_linear, .fixed_root, .fixed_discrete, .of or .from_dict"
        )

    @classmethod
    def _make(cls, kind: str, **params: Any) -> Schedule:
        self = object.__new__(cls)
        key = tuple(
            (name, tuple(params[name]) if isinstance(params[name], list) else params[name])
            for name in _PARAMS[kind]
        )
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_p", dict(key))
        object.__setattr__(self, "_stop", 0)
        object.__setattr__(self, "_stop", self._find_stop())
        return self

    # ---- constructors ---------------------------------------------------------------------

    @classmethod
    def constant(
        cls, value: Number, *, integer: bool | None = None, multiple_of: int = 1
    ) -> Schedule:
        """The same ``value`` at every step.

        >>> Schedule.constant(8).value(10**9)
        8
        """
        integer = _infer_integer(integer, [value])
        m = _multiple_of(multiple_of, integer)
        v = _number("value", value, integer)
        _check_multiple("value", v, m)
        return cls._make("constant", value=v, integer=integer, multiple_of=m)

    @classmethod
    def piecewise(
        cls,
        steps: Sequence[int],
        values: Sequence[Number],
        *,
        integer: bool | None = None,
        multiple_of: int = 1,
    ) -> Schedule:
        """``values[i]`` from ``steps[i]`` on (until ``steps[i + 1]``); ``steps`` start at 0.

        >>> s = Schedule.piecewise([0, 100, 300], [512, 1024, 2048])
        >>> s.value(99), s.value(100), s.value(299), s.value(300), s.changes()
        (512, 1024, 1024, 2048, (100, 300))
        """
        step_list, value_list = _sequence("steps", steps), _sequence("values", values)
        if len(step_list) != len(value_list):
            raise ValueError(
                "steps and values must have the same length (values[i] holds from steps[i] on), "
                f"got {len(step_list)} steps and {len(value_list)} values"
            )
        integer, m, vals = _step_values(value_list, integer, multiple_of)
        breaks = _increasing("steps", step_list, first=0)
        return cls._make(
            "piecewise", steps=list(breaks), values=vals, integer=integer, multiple_of=m
        )

    @classmethod
    def linear(
        cls,
        start: Number,
        end: Number,
        steps: int,
        *,
        begin: int = 0,
        integer: bool | None = None,
        multiple_of: int = 1,
    ) -> Schedule:
        """``start`` up to step ``begin``, then a straight line to ``end`` over ``steps`` steps.

        ``value(begin + k) = start + (end - start)·k/steps`` for ``0 <= k <= steps`` (rounded down
        to a multiple of ``multiple_of`` for integer schedules, computed exactly in integers),
        ``end`` from step ``begin + steps`` on. ``start`` may exceed ``end`` (a decay).

        >>> Schedule.linear(0.0, 1.0, steps=4, begin=2).values(np.arange(8)).tolist()
        [0.0, 0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
        """
        return cls._ramp("linear", start, end, steps, begin, integer, multiple_of)

    @classmethod
    def cosine(
        cls,
        start: Number,
        end: Number,
        steps: int,
        *,
        begin: int = 0,
        integer: bool | None = None,
        multiple_of: int = 1,
    ) -> Schedule:
        """Like :meth:`linear`, along a half cosine: slow at both ends, fastest in the middle.

        ``value(begin + k) = end + (start - end)·(1 + cos(π·k/steps))/2`` (integer schedules:
        rounded down, to a multiple of ``multiple_of``), ``start`` at ``k = 0``, ``end`` from
        ``k = steps`` on.

        >>> Schedule.cosine(1.0, 0.0, steps=4).values(np.arange(5)).round(3).tolist()
        [1.0, 0.854, 0.5, 0.146, 0.0]
        """
        return cls._ramp("cosine", start, end, steps, begin, integer, multiple_of)

    @classmethod
    def _ramp(
        cls,
        kind: str,
        start: Any,
        end: Any,
        steps: Any,
        begin: Any,
        integer: Any,
        multiple_of: Any,
    ) -> Schedule:
        integer = _infer_integer(integer, [start, end])
        m = _multiple_of(multiple_of, integer)
        a, b = _number("start", start, integer), _number("end", end, integer)
        _check_multiple("start", a, m)
        _check_multiple("end", b, m)
        return cls._make(
            kind,
            start=a,
            end=b,
            steps=_count("steps", steps),
            begin=_step("begin", begin),
            integer=integer,
            multiple_of=m,
        )

    @classmethod
    def fixed_linear(
        cls, start: int, end: int, total_steps: int, *, multiple_of: int = 1
    ) -> Schedule:
        """DeepSpeed's ``fixed_linear`` curriculum: :meth:`fixed_root` with ``degree=1``.

        >>> Schedule.fixed_linear(64, 1024, 100, multiple_of=8).values(np.array([0, 1, 50, 99]))
        array([  72,   80,  552, 1024])
        """
        a, b, total, m = cls._deepspeed_args(start, end, total_steps, multiple_of)
        return cls._make("fixed_linear", start=a, end=b, total_steps=total, multiple_of=m)

    @classmethod
    def fixed_root(
        cls, start: int, end: int, total_steps: int, degree: int, *, multiple_of: int = 1
    ) -> Schedule:
        """DeepSpeed's ``fixed_root`` curriculum (``min_difficulty=start``,
        ``max_difficulty=end``, ``total_curriculum_step``, ``root_degree``, ``difficulty_step``).

        Step ``s`` gets DeepSpeed's difficulty for its step ``s + 1`` (DeepSpeed counts the step
        being trained from 1): with ``g = s + 1``,
        ``d = floor((g/total_steps)**(1/degree)·(end - start) + start)``, then
        ``d -= d % multiple_of`` and ``min(d, end)`` — DeepSpeed's rounding, which may fall below
        ``start`` and reaches an ``end`` that is not a multiple only after ``total_steps``.

        >>> Schedule.fixed_root(8, 1024, 100, 2, multiple_of=8).values(np.array([0, 1, 24, 99]))
        array([ 104,  144,  512, 1024])
        """
        a, b, total, m = cls._deepspeed_args(start, end, total_steps, multiple_of)
        deg = _count("degree", degree)
        return cls._make("fixed_root", start=a, end=b, total_steps=total, degree=deg, multiple_of=m)

    @staticmethod
    def _deepspeed_args(
        start: Any, end: Any, total_steps: Any, multiple_of: Any
    ) -> tuple[int, ...]:
        for name, value in (("start", start), ("end", end)):
            if not _is_int(value):
                raise TypeError(
                    f"{name} must be an int (a DeepSpeed difficulty), "
                    f"got {type(value).__name__} {value!r}"
                )
        a, b = _number("start", start, True), _number("end", end, True)
        if a > b:
            raise ValueError(
                "start must be <= end (DeepSpeed's curriculum only grows: "
                f"min_difficulty <= max_difficulty), got start={a} and end={b}"
            )
        return int(a), int(b), _count("total_steps", total_steps), _multiple_of(multiple_of, True)

    @classmethod
    def fixed_discrete(
        cls,
        values: Sequence[Number],
        steps: Sequence[int],
        *,
        integer: bool | None = None,
        multiple_of: int = 1,
    ) -> Schedule:
        """DeepSpeed's ``fixed_discrete`` curriculum: ``values`` (its ``difficulty``) with one more
        entry than ``steps`` (its ``max_step``); ``values[i]`` is trained while DeepSpeed's step
        (from 1) is <= ``steps[i]``, the last value after ``steps[-1]``.

        In padless's steps (from 0): ``values[0]`` on steps ``0 .. steps[0] - 1``, ``values[i]``
        from step ``steps[i - 1]`` on — :meth:`piecewise` with steps ``[0, *steps]``.

        >>> s = Schedule.fixed_discrete([1, 2, 3], [5, 10])
        >>> s.values(np.array([0, 4, 5, 9, 10])).tolist(), s.changes()
        ([1, 1, 2, 2, 3], (5, 10))
        """
        value_list, step_list = _sequence("values", values), _sequence("steps", steps)
        if len(value_list) != len(step_list) + 1:
            raise ValueError(
                "values must have one more entry than steps (DeepSpeed's difficulty and "
                f"max_step: the last value holds after the last step), got {len(value_list)} "
                f"values and {len(step_list)} steps"
            )
        integer, m, vals = _step_values(value_list, integer, multiple_of)
        max_steps = _increasing("steps", step_list, first=1)
        return cls._make(
            "fixed_discrete", values=vals, steps=list(max_steps), integer=integer, multiple_of=m
        )

    @classmethod
    def of(cls, value: Any, *, name: str = "value") -> Schedule:
        """``value`` as a schedule: a number is a constant, a schedule itself, a dict its
        :meth:`from_dict`. ``name`` is the parameter the errors name.

        >>> Schedule.of(4096) == Schedule.constant(4096), Schedule.of({"kind": "constant", "value": 0.5})
        (True, Schedule.constant(0.5))
        """
        if isinstance(value, Schedule):
            return value
        if isinstance(value, Mapping):
            return cls.from_dict(value, name=name)
        if _is_number(value):
            try:
                return cls.constant(value)
            except (TypeError, ValueError) as err:  # name the caller's parameter, not "value"
                text = str(err)
                shown = f"{name}{text[5:]}" if text.startswith("value") else f"{name}: {text}"
                raise type(err)(shown) from None
        raise TypeError(
            f"{name} must be a number, a Schedule or a schedule's dict (Schedule.as_dict()), "
            f"got {type(value).__name__} {value!r}"
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, name: str = "data") -> Schedule:
        """The schedule :meth:`as_dict` wrote (keys it omits take the constructor's defaults)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"{name} must be a dict, got {type(data).__name__} {data!r}")
        kind = data.get("kind")
        if kind not in _PARAMS:
            listed = ", ".join(repr(k) for k in _PARAMS)
            raise ValueError(f"{name}['kind'] must be one of {listed}, got {kind!r}")
        params = {k: v for k, v in data.items() if k != "kind"}
        unknown = sorted(set(params) - set(_PARAMS[kind]), key=str)
        if unknown:
            allowed = ", ".join(_PARAMS[kind])
            raise ValueError(
                f"{name} of kind {kind!r} takes {allowed}; got unknown key(s) "
                + ", ".join(repr(k) for k in unknown)
            )
        build = cast(Callable[..., Schedule], getattr(cls, kind))
        return build(**params)

    # ---- the value ------------------------------------------------------------------------

    @property
    def kind(self) -> str:
        """The kind's name: ``"constant"``, ``"piecewise"``, ``"linear"``, ..."""
        return self._kind

    @property
    def integer(self) -> bool:
        """Whether the values are ints (batch sizes, lengths, tokens) or floats (weights)."""
        return self._kind in ("fixed_linear", "fixed_root") or bool(self._p["integer"])

    def as_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (``"kind"`` and every parameter, lists for sequences), the same for
        equal schedules; :meth:`from_dict` reads it back."""
        out: dict[str, Any] = {"kind": self._kind}
        for name, value in self._key:
            out[name] = list(value) if isinstance(value, tuple) else value
        return out

    def __repr__(self) -> str:
        shown = [
            f"{name}={list(value) if isinstance(value, tuple) else value!r}"
            for name, value in self._key
            if name != "integer" and _DEFAULTS.get(name, object()) != value
        ]
        if self._kind == "constant":
            shown[0] = repr(self._p["value"])
        return f"Schedule.{self._kind}({', '.join(shown)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return self._kind == other._kind and self._key == other._key

    def __hash__(self) -> int:
        return hash((self._kind, self._key))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Schedule is immutable; cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Schedule is immutable; cannot delete {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_from_dict, (self.as_dict(),))

    # ---- queries ----------------------------------------------------------------------------

    def value(self, step: int) -> Number:
        """The value at global optimizer ``step`` (an int >= 0).

        Cost: O(1); O(log k) for k pieces.
        """
        return self._at(_step("step", step))

    def values(self, steps: Any) -> np.ndarray:
        """:meth:`value` of every step in ``steps`` (ints >= 0), as int64 (integer schedules) or
        float64, equal to :meth:`value` element by element.

        >>> Schedule.piecewise([0, 2], [0.5, 0.25]).values([0, 1, 2, 3])
        array([0.5 , 0.5 , 0.25, 0.25])
        """
        raw = np.asarray(steps)
        if raw.size and (raw.dtype == np.bool_ or not np.issubdtype(raw.dtype, np.integer)):
            raise TypeError(f"steps must be an array of ints, got dtype {raw.dtype}")
        if raw.size and (int(raw.min()) < 0 or int(raw.max()) > MAX_VALUE):
            bad = int(raw.min()) if int(raw.min()) < 0 else int(raw.max())
            raise ValueError(f"steps must be ints in [0, 2**62], got {bad}")
        s = raw.astype(np.int64)
        dtype = np.int64 if self.integer else np.float64
        p, kind = self._p, self._kind
        if kind == "constant":
            return np.full(s.shape, p["value"], dtype=dtype)
        if kind in ("piecewise", "fixed_discrete"):
            breaks, vals = self._pieces()
            idx = np.searchsorted(np.asarray(breaks, np.int64), s, side="right") - 1
            return np.asarray(vals, dtype=dtype)[idx]
        if kind == "linear" and (not self.integer or self._linear_fits()):
            k = np.clip(s - p["begin"], 0, p["steps"])
            a, b, n = p["start"], p["end"], p["steps"]
            if self.integer:
                v = a + ((b - a) * k) // n
                return cast(np.ndarray, v - v % p["multiple_of"])
            out = a + ((b - a) * k.astype(np.float64)) / n
            return np.where(k >= n, b, out)
        # one scalar evaluation per distinct key: the same arithmetic as value()
        if kind in ("linear", "cosine"):
            key = np.clip(s - p["begin"], 0, p["steps"]) + p["begin"]
        else:
            key = np.minimum(s, self._stop)
        uniq, inverse = np.unique(key.ravel(), return_inverse=True)
        table = np.array([self._at(u) for u in uniq.tolist()], dtype=dtype)
        return table[inverse].reshape(s.shape)

    def _at(self, step: int) -> Number:
        p, kind = self._p, self._kind
        if kind == "constant":
            return cast(Number, p["value"])
        if kind in ("piecewise", "fixed_discrete"):
            breaks, vals = self._pieces()
            return cast(Number, vals[bisect.bisect_right(breaks, step) - 1])
        if kind in ("linear", "cosine"):
            return self._ramp_at(min(max(step - p["begin"], 0), p["steps"]))
        return p["end"] if step >= self._stop else self._deepspeed(step + 1)

    def _pieces(self) -> tuple[tuple[int, ...], tuple[Number, ...]]:
        if self._kind == "piecewise":
            return self._p["steps"], self._p["values"]
        return (0, *self._p["steps"]), self._p["values"]

    def _linear_fits(self) -> bool:
        p = self._p
        return abs(p["end"] - p["start"]) * p["steps"] < 1 << 63

    def _ramp_at(self, k: int) -> Number:
        p = self._p
        a, b, n, m = p["start"], p["end"], p["steps"], p["multiple_of"]
        if k >= n:
            return cast(Number, b)
        if self._kind == "linear":
            if self.integer:
                v = a + ((b - a) * k) // n
                return cast(int, v - v % m)
            return cast(float, a + ((b - a) * k) / n)
        if k == 0:
            return cast(Number, a)
        real = b + (a - b) * ((1.0 + math.cos(math.pi * k / n)) / 2.0)
        if not self.integer:
            return cast(float, real)
        v = min(max(math.floor(real), min(a, b)), max(a, b))
        return cast(int, v - v % m)

    def _deepspeed(self, g: int) -> int:
        """DeepSpeed's ``__fixed_root_get_difficulty(g)``, operation for operation."""
        p = self._p
        degree = p.get("degree", 1)
        start, end = p["start"], p["end"]
        x = (float(g) / p["total_steps"]) ** (1.0 / degree)
        d = math.floor(x * (end - start) + start)
        d -= d % p["multiple_of"]
        return cast(int, min(d, end))

    def _find_stop(self) -> int:
        """DeepSpeed kinds: the first step whose value is ``end`` (it stays there)."""
        if not self._kind.startswith("fixed_") or self._kind == "fixed_discrete":
            return 0
        end = self._p["end"]
        if self._p["start"] == end:  # DeepSpeed never updates a difficulty that starts at max
            return 0
        hi = self._p["total_steps"]
        while self._deepspeed(hi + 1) < end:
            hi *= 2
            if hi > MAX_VALUE:
                raise ValueError(
                    f"{self._kind} reaches end={end} only after step 2**62; "
                    "lower multiple_of or degree"
                )
        lo = 0
        while lo < hi:
            mid = (lo + hi) // 2
            if self._deepspeed(mid + 1) >= end:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _span(self) -> tuple[int, int]:
        """Steps ``(first, last)``: the value can change only at steps in first..last."""
        p = self._p
        if self._kind in ("linear", "cosine"):
            return p["begin"] + 1, p["begin"] + p["steps"]
        return 1, self._stop

    def changes(self) -> tuple[int, ...]:
        """The steps ``s`` whose value differs from step ``s - 1``'s, in order: a piecewise
        schedule's steps (where the value differs), a ramp's steps where its (rounded) value
        moves — every step of a float ramp, within its span ``begin + 1 .. begin + steps``.

        Cost: O(number of pieces); O(the ramp's steps) for ramps.
        """
        if self._kind == "constant":
            return ()
        if self._kind in ("piecewise", "fixed_discrete"):
            breaks, vals = self._pieces()
            return tuple(breaks[i] for i in range(1, len(vals)) if vals[i] != vals[i - 1])
        first, last = self._span()
        if last < first:
            return ()
        v = self.values(np.arange(first - 1, last + 1, dtype=np.int64))
        return tuple((np.flatnonzero(v[1:] != v[:-1]) + first).tolist())

    @property
    def final(self) -> Number:
        """The value the schedule ends at (and holds from its last change on)."""
        p = self._p
        if self._kind == "constant":
            return cast(Number, p["value"])
        if self._kind in ("piecewise", "fixed_discrete"):
            return cast(Number, p["values"][-1])
        return cast(Number, p["end"])

    @property
    def is_constant(self) -> bool:
        """Whether every step has the same value."""
        p, kind = self._p, self._kind
        if kind == "constant":
            return True
        if kind in ("piecewise", "fixed_discrete"):
            return len(set(p["values"])) == 1
        if kind in ("linear", "cosine"):
            return bool(p["start"] == p["end"])
        return self._stop == 0

    def _non_decreasing(self) -> bool:
        p, kind = self._p, self._kind
        if kind in ("piecewise", "fixed_discrete"):
            vals = p["values"]
            return all(vals[i] <= vals[i + 1] for i in range(len(vals) - 1))
        if kind in ("linear", "cosine"):
            return bool(p["start"] <= p["end"])
        return True

    def first_step_reaching(self, value: Number) -> int:
        """The first step whose value is >= ``value``, for a non-decreasing schedule.

        >>> Schedule.linear(1024, 8192, steps=7, multiple_of=1024).first_step_reaching(4096)
        3

        Cost: O(log steps) evaluations.
        """
        target = check_real("value", value, positive_only=False)
        if not self._non_decreasing():
            raise ValueError(f"first_step_reaching needs a non-decreasing schedule, got {self!r}")
        if self._at(0) >= target:
            return 0
        if self.final < target:
            raise ValueError(
                f"value must be at most the schedule's final value {self.final!r} "
                f"(no step reaches it), got {value!r}"
            )
        if self._kind in ("piecewise", "fixed_discrete"):
            breaks, vals = self._pieces()
            return next(breaks[i] for i in range(len(vals)) if vals[i] >= target)
        lo, hi = self._span()
        while lo < hi:
            mid = (lo + hi) // 2
            if self._at(mid) >= target:
                hi = mid
            else:
                lo = mid + 1
        return lo


def _from_dict(data: dict[str, Any]) -> Schedule:  # pickle's way back
    return Schedule.from_dict(data)


@functools.lru_cache(maxsize=64)
def change_points(schedule: Schedule) -> tuple[tuple[int, ...], tuple[Number, ...]]:
    """``(steps, values)``: step 0 and every step where ``schedule``'s value changes, and the
    value from each on, so step ``s`` has ``values[bisect_right(steps, s) - 1]``.

    Cost: O(the ramp's steps) once (cached).

    >>> change_points(Schedule.piecewise([0, 10, 20], [4, 4, 8]))
    ((0, 20), (4, 8))
    """
    steps = (0, *schedule.changes())
    return steps, tuple(schedule.values(np.array(steps, dtype=np.int64)).tolist())


def divisor_schedule(
    name: str,
    schedule: Schedule,
    *,
    largest: str,
    why: str,
    check: Callable[[str, Any], Any] | None = None,
) -> int:
    """Check a length warm-up, an integer schedule whose every value divides its largest one
    (a step of value ``v`` cuts pieces of the largest into rows of ``v``), at step 0 and every
    step where it changes (so every step a run reaches is covered), naming the step; return
    the largest. ``check(f"{name} at step {s}", v)`` checks each value (default: a positive
    int); ``largest`` names the largest value and ``why`` the cut in the message.

    >>> divisor_schedule("n", Schedule.piecewise([0, 5], [2, 8]), largest="longest n", why="")
    8
    """
    steps, values = change_points(schedule)
    top = int(max(values))
    for step, value in zip(steps, values, strict=True):
        if check is not None:
            check(f"{name} at step {step}", value)
        elif value < 1:
            raise ValueError(f"{name} at step {step} is {value}, not a positive int")
        if top % value:
            raise ValueError(
                f"{name} at step {step} is {value}, which does not divide the {largest} {top} of "
                f"{schedule!r} ({why}; a power-of-two warm-up does)"
            )
    return top
