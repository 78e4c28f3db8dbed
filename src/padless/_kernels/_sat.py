"""Int64 arithmetic on sizes, counts and budgets (all >= 0) that never wraps around.

Supported inputs: lengths below 2**31 and budgets below 2**62 (checked up front by the callers),
any number of items; the kernels are exact beyond that too. A kernel compares ``count × size``
with a limit through :func:`mul_exceeds` and accumulates padding and costs with
:func:`sat_add`/:func:`sat_mul`, which stop at ``INT64_MAX`` instead of wrapping to a negative
number. Each is one LLVM ``*.with.overflow`` operation (the multiply or add plus a flag test), so
the check costs next to nothing in a hot loop. :func:`sat` is the plain twin the references use.
"""

from __future__ import annotations

from numba import types
from numba.extending import intrinsic

INT64_MAX = (1 << 63) - 1
_I64 = types.int64


def sat(x: int) -> int:
    """``min(x, INT64_MAX)`` of an exact Python int (what the saturating helpers return)."""
    return min(x, INT64_MAX)


def _int64_args(context, builder, signature, args):  # pragma: no cover - compiled
    return [context.cast(builder, v, t, _I64) for v, t in zip(args, signature.args, strict=True)]


def _with_overflow(builder, op, a, b):  # pragma: no cover - compiled
    """``(a op b wrapped, overflow flag)`` from one LLVM ``*.with.overflow`` intrinsic."""
    pair = getattr(builder, op)(a, b)
    return builder.extract_value(pair, 0), builder.extract_value(pair, 1)


@intrinsic
def mul_exceeds(typingctx, count, size, limit):  # pragma: no cover - compiled
    """``count × size > limit``, exactly, for non-negative int64 operands (an overflowing product
    is at least 2**63, so it exceeds every limit)."""

    def codegen(context, builder, signature, args):
        c, s, lim = _int64_args(context, builder, signature, args)
        prod, over = _with_overflow(builder, "smul_with_overflow", c, s)
        return builder.or_(over, builder.icmp_signed(">", prod, lim))

    return types.boolean(count, size, limit), codegen


def _saturating(op):
    def typer(typingctx, a, b):  # pragma: no cover - compiled
        def codegen(context, builder, signature, args):
            x, y = _int64_args(context, builder, signature, args)
            value, over = _with_overflow(builder, op, x, y)
            return builder.select(over, context.get_constant(_I64, INT64_MAX), value)

        return _I64(a, b), codegen

    return typer


sat_add = intrinsic(_saturating("sadd_with_overflow"))
sat_add.__doc__ = "``min(a + b, INT64_MAX)`` for non-negative int64 ``a``, ``b``."
sat_mul = intrinsic(_saturating("smul_with_overflow"))
sat_mul.__doc__ = "``min(a × b, INT64_MAX)`` for non-negative int64 ``a``, ``b``."
