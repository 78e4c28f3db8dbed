"""LM streams: a keyed permutation of [0, n) evaluated one index at a time, and row gathers."""

from __future__ import annotations

import numpy as np

from .. import _core
from .rng import SplitMix, mix64_reference

FEISTEL_ROUNDS = 6


def feistel_round_keys(key: int) -> np.ndarray:
    """Round keys of the LM-stream permutation: the first outputs of ``SplitMix(key)``."""
    gen = SplitMix(key)
    return np.array([gen.next64() for _ in range(FEISTEL_ROUNDS)], dtype=np.uint64)


def feistel_permute(ids: np.ndarray, n: int, round_keys: np.ndarray) -> np.ndarray:
    """Images of ``ids`` (each in [0, n)) under the keyed permutation of [0, n).

    Each round maps ``x = L·2^b + R`` (L of a bits, R of b bits) to ``R·2^a + (L ^ F(R))``, a
    bijection of [0, 2^bits) for any split a + b = bits (``2**bits`` the next power >= n); the
    split alternates so odd widths work. Cycle walking re-applies the network until the value
    falls below n.
    """
    return _core.feistel_permute(ids, n, round_keys)


def _feistel_one_reference(i: int, n: int, round_keys: list[int]) -> int:
    bits = max(n - 1, 0).bit_length()
    x = i
    while True:
        right = bits >> 1
        left = bits - right
        for k in round_keys:
            hi, lo = x >> right, x & ((1 << right) - 1)
            z = mix64_reference(lo ^ k)
            x = (lo << left) | (hi ^ (z & ((1 << left) - 1)))
            left, right = right, left
        if x < n:
            return x


def feistel_permute_reference(ids: np.ndarray, n: int, round_keys: np.ndarray) -> np.ndarray:
    keys = [int(k) for k in round_keys]
    return np.array([_feistel_one_reference(int(i), n, keys) for i in ids], dtype=np.int64)


def lm_gather(src: np.ndarray, starts: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
    """Row b of x is ``src[starts[b]:starts[b] + w]`` and row b of y the same shifted by one.

    ``src``: any integer dtype (a read-only memory map too); ``x``, ``y``: C-ordered int64, int32
    or uint16 arrays of ``(rows, w)``, written in place.
    """
    _core.lm_gather(src, starts, x, y)


def lm_gather_reference(src: np.ndarray, starts: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
    w = x.shape[1]
    cols = np.arange(w, dtype=np.int64)
    x[...] = src[starts[:, None] + cols].astype(x.dtype)
    y[...] = src[starts[:, None] + cols + 1].astype(y.dtype)


def lm_random_batch(
    src: np.ndarray,
    first: int,
    n: int,
    offset: int,
    round_keys: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
) -> None:
    """Fill x, y with the subsequences at shuffled positions ``first, first + 1, …`` (mod n).

    Position p holds subsequence ``perm(p mod n)``, which starts at token
    ``offset + perm(p mod n) · num_steps`` with ``num_steps = x.shape[1]``.
    """
    _core.lm_random_batch(src, first, n, offset, round_keys, x, y)


def lm_random_batch_reference(
    src: np.ndarray,
    first: int,
    n: int,
    offset: int,
    round_keys: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
) -> None:
    rows = x.shape[0]
    ids = (first + np.arange(rows, dtype=np.int64)) % n
    starts = offset + feistel_permute_reference(ids, n, round_keys) * x.shape[1]
    lm_gather_reference(src, starts, x, y)
