"""Int64 arithmetic on sizes, counts and budgets (all >= 0) that never wraps around.

Supported inputs: lengths below 2**31 and budgets below 2**62 (checked up front by the callers),
any number of items; the kernels are exact beyond that too. A kernel compares ``count × size``
with a limit through ``mul_exceeds`` and accumulates padding and costs with ``sat_add`` /
``sat_mul``, which stop at ``INT64_MAX`` instead of wrapping to a negative number: the C++ twins
in ``csrc/sat.hpp`` (one add or multiply with its overflow flag). The functions here call those
same compiled helpers (for the tests); :func:`sat` is the plain twin the references use.
"""

from __future__ import annotations

from .. import _core

INT64_MAX = (1 << 63) - 1


def sat(x: int) -> int:
    """``min(x, INT64_MAX)`` of an exact Python int (what the saturating helpers return)."""
    return min(x, INT64_MAX)


def mul_exceeds(count: int, size: int, limit: int) -> bool:
    """``count × size > limit``, exactly, for non-negative int64 operands."""
    return bool(_core.mul_exceeds(int(count), int(size), int(limit)))


def sat_add(a: int, b: int) -> int:
    """``min(a + b, INT64_MAX)`` for non-negative int64 ``a``, ``b``."""
    return int(_core.sat_add(int(a), int(b)))


def sat_mul(a: int, b: int) -> int:
    """``min(a × b, INT64_MAX)`` for non-negative int64 ``a``, ``b``."""
    return int(_core.sat_mul(int(a), int(b)))
