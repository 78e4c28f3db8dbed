"""Helpers shared by the benchmark scripts (run them from the repository root)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """Best wall time of ``repeat`` calls, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def best_in_rounds(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Best wall time of each function over ``rounds`` rounds that call them in turn, so a
    change of machine speed during the run falls on every measure alike."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def lognormal_lengths(n: int, seed: int = 0) -> np.ndarray:
    """The planning benchmarks' lengths: lognormal(ln 23, 0.55), mean about 27, in [1, 1024]."""
    rs = np.random.default_rng(seed)
    raw = rs.lognormal(mean=np.log(23.0), sigma=0.55, size=n)
    return np.clip(np.round(raw), 1, 1024).astype(np.int64)
