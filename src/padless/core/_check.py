"""Argument checks shared by the public API: each error names the parameter, the rule and the value."""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any, cast

import numpy as np


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_int(
    name: str, value: Any, *, minimum: int | None = None, allow_none: bool = False
) -> int | None:
    """Return ``value`` as a Python int after checking its type and lower bound."""
    if value is None:
        if allow_none:
            return None
        raise TypeError(f"{name} must be an int, got None")
    if not _is_int(value):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        if minimum == 1:
            rule = "a positive int"
        elif minimum == 0:
            rule = "a non-negative int"
        else:
            rule = f"an int >= {minimum}"
        raise ValueError(f"{name} must be {rule}, got {value}")
    return value


INT64_MAX = (1 << 63) - 1


def check_int64(name: str, value: Any) -> int:
    """Check an int that goes into an int64 tensor (a token id, a label): in [-2**63, 2**63)."""
    out = cast(int, check_int(name, value))
    if not -INT64_MAX - 1 <= out <= INT64_MAX:
        raise ValueError(
            f"{name} must fit in int64 (the tensors' dtype), in [-2**63, 2**63 - 1], got {out}"
        )
    return out


def positive(name: str, value: Any) -> int:
    """Check a required positive int (sizes and counts: at most 2**62, so kernels never wrap)."""
    return cast(int, budget_or_none(name, value)) if value is not None else _none(name)


def positive_or_none(name: str, value: Any) -> int | None:
    """Check an optional positive int (at most 2**62)."""
    return budget_or_none(name, value)


def _none(name: str) -> int:
    raise TypeError(f"{name} must be an int, got None")


MAX_BUDGET = 1 << 62  # budgets (tokens, sentences, cost units) stay below this: no int64 wrap


def budget_or_none(name: str, value: Any) -> int | None:
    """Check an optional positive budget no larger than :data:`MAX_BUDGET` (2**62)."""
    out = check_int(name, value, minimum=1, allow_none=True)
    if out is not None and out > MAX_BUDGET:
        raise ValueError(
            f"{name} must be <= 2**62 (sizes and budgets stay in int64 arithmetic), got {out}"
        )
    return out


def budget(name: str, value: Any) -> int:
    """Check a required positive budget no larger than :data:`MAX_BUDGET` (2**62)."""
    if value is None:
        raise TypeError(f"{name} must be an int, got None")
    return cast(int, budget_or_none(name, value))


def non_negative(name: str, value: Any) -> int:
    """Check a required non-negative int."""
    return cast(int, check_int(name, value, minimum=0))


def check_seed(name: str, value: Any) -> int:
    """Check a seed or epoch: a non-negative int, not a bool."""
    return non_negative(name, value)


def check_bool(name: str, value: Any) -> bool:
    """Check a flag is a real bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """Check ``value`` is one of ``choices``."""
    options = tuple(choices)
    if not isinstance(value, str) or value not in options:
        listed = ", ".join(repr(c) for c in options)
        raise ValueError(f"{name} must be one of {listed}, got {value!r}")
    return value


def check_real(name: str, value: Any, *, positive_only: bool = True) -> float:
    """Check a finite real number (positive unless told otherwise)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    out = float(value)
    if not np.isfinite(out) or (positive_only and out <= 0):
        rule = "a positive finite number" if positive_only else "a finite number"
        raise ValueError(f"{name} must be {rule}, got {value!r}")
    return out


def check_record(
    record: Any, *, owner: str, kind: str, version: int, unit: str, known: set[str]
) -> None:
    """Check a saved record (``owner.as_dict()``): a dict of ``kind`` and ``version`` in
    ``unit``, with no key outside ``known``; each a ``TypeError``/``ValueError`` saying which."""
    if not isinstance(record, dict):
        raise TypeError(f"record must be a dict ({owner}.as_dict()), got {type(record).__name__}")
    if record.get("kind") != kind or record.get("version") != version:
        raise ValueError(
            f"record must be a {kind} of version {version}, got kind {record.get('kind')!r} "
            f"version {record.get('version')!r}"
        )
    unknown = sorted(str(k) for k in record if k not in known)
    if unknown or record.get("unit") != unit:
        raise ValueError(
            f"record must hold the keys {sorted(known)} in unit {unit!r}, got unknown keys "
            f"{unknown}, unit {record.get('unit')!r}"
        )
