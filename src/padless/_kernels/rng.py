"""Random numbers and hashing inside kernels: splitmix64, exact bounded draws, a 4-lane hash.

A stream is a splitmix64 counter seeded with a 64-bit key that ``padless._rng.key`` derives from
``np.random.SeedSequence([seed, epoch, stream])``; bounded draws use Lemire's multiply-and-reject
method, so they are exactly uniform. :class:`SplitMix` (``padless._splitmix``) is the plain-Python
twin every reference uses; its constants are shared with ``padless.shuffle._kernels``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._splitmix import _GOLDEN, _MASK32, _MASK64, _MIX1, _MIX2, SplitMix, mix64_reference


@njit(cache=True, inline="always")
def _mix64(z):  # pragma: no cover - compiled
    """splitmix64's output function (a bijection of uint64)."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, inline="always")
def _next64(state):  # pragma: no cover - compiled
    state[0] += _GOLDEN
    return _mix64(state[0])


@njit(cache=True, inline="always")
def _below(state, bound):  # pragma: no cover - compiled
    """Uniform int in [0, bound) for 1 <= bound < 2**32 (Lemire's method)."""
    b = np.uint64(bound)
    m = (_next64(state) >> np.uint64(32)) * b
    low = m & _MASK32
    if low < b:
        limit = ((_MASK32 + np.uint64(1)) - b) % b
        while low < limit:
            m = (_next64(state) >> np.uint64(32)) * b
            low = m & _MASK32
    return np.int64(m >> np.uint64(32))


@njit(cache=True)
def random_below(key, bounds):  # pragma: no cover - compiled
    """Draw one uniform int below each of ``bounds`` from the stream ``key`` (for tests)."""
    state = np.empty(1, np.uint64)
    state[0] = key
    out = np.empty(bounds.shape[0], np.int64)
    for i in range(bounds.shape[0]):
        out[i] = _below(state, bounds[i])
    return out


def random_below_reference(key: int, bounds: np.ndarray) -> np.ndarray:
    gen = SplitMix(key)
    return np.array([gen.below(int(b)) for b in bounds], dtype=np.int64)


@njit(cache=True, nogil=True)  # nogil: a restore hashes on one core while it plans on another
def hash_ints(values, seed):  # pragma: no cover - compiled
    """64-bit hash of an int64 array (order-sensitive), four independent lanes; ~0.3 ns per value.

    Lane j chains the values at positions i ≡ j (mod 4); the lanes are then mixed in order.
    """
    n = values.shape[0]
    base = np.uint64(seed) ^ np.uint64(n)
    h0 = base
    h1 = base + _GOLDEN
    h2 = base + _MIX1
    h3 = base + _MIX2
    quads = n // 4
    for q in range(quads):
        i = 4 * q
        h0 = _mix64(np.uint64(values[i]) + h0 + _GOLDEN)
        h1 = _mix64(np.uint64(values[i + 1]) + h1 + _GOLDEN)
        h2 = _mix64(np.uint64(values[i + 2]) + h2 + _GOLDEN)
        h3 = _mix64(np.uint64(values[i + 3]) + h3 + _GOLDEN)
    for i in range(4 * quads, n):
        h0 = _mix64(np.uint64(values[i]) + h0 + _GOLDEN)
    h = _mix64(h0 + _GOLDEN)
    h = _mix64(h ^ h1)
    h = _mix64(h ^ h2)
    return _mix64(h ^ h3)


def hash_ints_reference(values: np.ndarray, seed: int) -> int:
    mix = mix64_reference
    vals = [v & _MASK64 for v in values.tolist()]
    n = len(vals)
    base = (seed ^ n) & _MASK64
    lanes = [base, base + 0x9E3779B97F4A7C15, base + 0xBF58476D1CE4E5B9, base + 0x94D049BB133111EB]
    lanes = [x & _MASK64 for x in lanes]
    quads = n // 4
    for i in range(4 * quads):
        lanes[i % 4] = mix(vals[i] + lanes[i % 4] + 0x9E3779B97F4A7C15)
    for i in range(4 * quads, n):
        lanes[0] = mix(vals[i] + lanes[0] + 0x9E3779B97F4A7C15)
    h = mix(lanes[0] + 0x9E3779B97F4A7C15)
    for lane in lanes[1:]:
        h = mix(h ^ lane)
    return h
