"""splitmix64 in plain Python: the constants, the output function and :class:`SplitMix`.

The compiled generators (``padless._kernels.rng`` and the shuffle's ``padless.shuffle._kernels``)
use these constants and give the same numbers; every kernel's reference runs on
:class:`SplitMix`. A module of its own, outside the ``_kernels`` package, so that the shuffle
loads only its own kernels (the package's import defines every planning kernel: a tenth of a
second).
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_MASK32 = np.uint64(0xFFFFFFFF)
_MASK64 = (1 << 64) - 1


def mix64_reference(z: int) -> int:
    """:func:`_mix64` on Python ints."""
    z &= _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class SplitMix:
    """Plain-Python twin of the compiled generator (same outputs, for references and tests)."""

    def __init__(self, key: int) -> None:
        self.state = int(key) & _MASK64

    def next64(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK64
        return mix64_reference(self.state)

    def below(self, bound: int) -> int:
        m = (self.next64() >> 32) * bound
        low = m & 0xFFFFFFFF
        if low < bound:
            limit = ((1 << 32) - bound) % bound
            while low < limit:
                m = (self.next64() >> 32) * bound
                low = m & 0xFFFFFFFF
        return m >> 32
