"""Time a model's forward and backward on chosen lengths, and fit a :class:`padless.MeshCost`.

:func:`calibrate_cost` is the timing twin of :func:`padless.torch.probe_memory`: it runs your
``forward`` on a sequence of each length of a grid (built by your ``make_batch``), times the
forward and the backward apart (the device synchronised around each: ``torch.cuda.synchronize``
on CUDA; CPU seconds on the CPU with ``torch.set_num_threads(1)``, wall seconds otherwise),
takes the fastest of a few rounds over all lengths, and fits each pass's
``per_sequence + linear·L + quadratic·L²`` seconds by non-negative least squares on relative
errors. Lengths held out of the fit check it: the report gives the predicted and measured step
time of each and the largest relative error.

What it does not measure: the ring exchange of context parallelism (it needs the ranks of a
group). Pass ``kv_bytes``, ``bandwidth`` and ``latency`` of your links (or measure them with
``torch.distributed`` all-to-all timings) and they are stored with the fitted compute terms.
A pipeline stage is the model you pass: calibrate each stage's module for per-stage costs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from ..core._check import check_int
from ..core.cost import Cost
from ..core.memory import nnls
from ..core.mesh import MeshCost

__all__ = ["Calibration", "calibrate_cost", "time_passes"]


class Calibration(NamedTuple):
    """What :func:`calibrate_cost` found.

    Attributes:
        cost: the fitted :class:`padless.MeshCost` (``cost.save(path)`` writes it as JSON).
        points: ``(length, forward seconds, backward seconds)`` of every fitted length.
        heldout: ``(length, measured seconds, predicted seconds)`` of every held-out length
            (forward + backward).
        error: the largest relative error ``|predicted − measured| / measured`` over the held-out
            lengths (0.0 without any).
    """

    cost: MeshCost
    points: tuple[tuple[int, float, float], ...]
    heldout: tuple[tuple[int, float, float], ...]
    error: float


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_passes(
    forward: Callable[[Any], torch.Tensor],
    batch: Any,
    *,
    repeats: int = 5,
    device: Any = None,
) -> tuple[float, float]:
    """Median seconds of ``forward(batch)`` and of the backward of its (scalar) result, over
    ``repeats`` runs: wall-clock seconds (synchronised on an accelerator), or the process's CPU
    seconds on the CPU with one torch thread (what the step computes, not the time other
    processes hold the core)."""
    if not callable(forward):
        raise TypeError(
            f"forward must be a callable returning a scalar tensor, got {forward!r:.60}"
        )
    runs = check_int("repeats", repeats, minimum=1) or 1
    dev = _device("device", device) if device is not None else _device_of(batch)
    # CPU seconds only where they are the step's own: on the CPU with one torch thread (more
    # threads spin while they wait, and their CPU seconds would count that)
    one = dev.type == "cpu" and torch.get_num_threads() == 1
    clock = time.process_time if one else time.perf_counter
    fw, bw = [], []
    for _ in range(runs):
        _sync(dev)
        t0 = clock()
        loss = forward(batch)
        _sync(dev)
        t1 = clock()
        loss.backward()
        _sync(dev)
        t2 = clock()
        fw.append(t1 - t0)
        bw.append(t2 - t1)
    return statistics.median(fw), statistics.median(bw)


def _device(name: str, value: Any) -> torch.device:
    """``value`` as a torch device (a device, or its name such as ``"cpu"``, ``"cuda:0"``)."""
    if isinstance(value, torch.device):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a torch.device or its name, got {type(value).__name__}")
    try:
        return torch.device(value)
    except RuntimeError as err:
        raise ValueError(
            f"{name} must name a torch device (e.g. 'cpu'), got {value!r:.40}"
        ) from err


def _device_of(batch: Any) -> torch.device:
    if isinstance(batch, torch.Tensor):
        return batch.device
    if isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], torch.Tensor):
        return batch[0].device
    if isinstance(batch, dict):
        for v in batch.values():
            if isinstance(v, torch.Tensor):
                return v.device
    return torch.device("cpu")


def _fit(lengths: np.ndarray, seconds: np.ndarray) -> Cost:
    lf = lengths.astype(np.float64)
    a = np.stack([np.ones_like(lf), lf, lf * lf], axis=1) / seconds[:, None]
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    x = nnls(a / scale, np.ones_like(lf)) / scale
    if not (x > 0).any():
        x[1] = float(np.median(seconds / lf))
    return Cost(per_sequence=float(x[0]), linear=float(x[1]), quadratic=float(x[2]))


def _settled(runs: list[tuple[float, float]], agree: float) -> bool:
    """Whether the two fastest of ``runs`` (forward + backward) agree within ``agree``."""
    if len(runs) < 2:
        return False
    a, b = sorted(f + w for f, w in runs)[:2]
    return b <= a * (1.0 + agree)


def _lengths(name: str, value: Any) -> list[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a list of positive ints, got {type(value).__name__}")
    out = [check_int(f"{name}[{i}]", v, minimum=1) for i, v in enumerate(value)]
    return [int(v) for v in out if v is not None]


def calibrate_cost(
    forward: Callable[[Any], torch.Tensor],
    make_batch: Callable[[int], Any],
    lengths: Any,
    *,
    holdout: Any = (),
    repeats: int = 5,
    warmup: int = 2,
    agree: float | None = 0.03,
    device: Any = None,
    kv_bytes: float = 0.0,
    bandwidth: float = 1e11,
    latency: float = 0.0,
) -> Calibration:
    """Time ``forward`` and its backward on a sequence of each of ``lengths``, fit a
    :class:`padless.MeshCost`, and check it on ``holdout``.

    Args:
        forward: ``forward(batch)`` runs the model (one pipeline stage, or the whole) and
            returns a scalar tensor whose ``backward()`` is the backward pass (set gradients to
            None inside, as in training, if their memory should not carry over).
        make_batch: ``make_batch(length)`` builds one packed row of ``length`` tokens on the
            device (a sequence of that length; it is not timed).
        lengths: the lengths to fit: three or more distinct (spread them: the quadratic term
            shows at the long end).
        holdout: lengths timed but left out of the fit, to measure its error.
        repeats: rounds over all the lengths (the fastest run of each length counts).
        warmup: untimed runs of every length (lazy initialisation, kernel selection, caches).
        agree: after ``repeats`` rounds, more rounds (up to ``4 × repeats`` in all) until the
            two fastest runs of every length agree within this fraction (a busy machine only
            slows runs down: a fastest run seen twice is the length's own time); None: exactly
            ``repeats`` rounds.
        device: where to synchronise (None: the batch's device).
        kv_bytes, bandwidth, latency: the ring exchange's terms, stored as given.

    >>> import torch
    >>> layer = torch.nn.Linear(8, 8)
    >>> cal = calibrate_cost(lambda x: layer(x).sum(), lambda n: torch.randn(n, 8),
    ...                      [64, 128, 256, 512], holdout=[384], repeats=1, warmup=1)
    >>> len(cal.points), len(cal.heldout), cal.cost.forward.linear >= 0
    (4, 1, True)
    """
    if not callable(forward) or not callable(make_batch):
        raise TypeError("forward and make_batch must be callables")
    fit_lengths = _lengths("lengths", lengths)
    held = _lengths("holdout", holdout)
    if len(set(fit_lengths)) < 3:
        raise ValueError(
            f"lengths must hold three or more distinct lengths (one per term), got {fit_lengths}"
        )
    reps = check_int("repeats", repeats, minimum=1)
    warm = check_int("warmup", warmup, minimum=0)
    assert reps is not None and warm is not None
    if agree is not None:
        if isinstance(agree, bool) or not isinstance(agree, (int, float)):
            raise TypeError(f"agree must be a fraction or None, got {type(agree).__name__}")
        if not 0.0 < float(agree) < 1.0:
            raise ValueError(f"agree must be in (0, 1) (a fraction), got {agree}")

    # round-robin over every length, the fastest run of each pass counts: a busy machine slows
    # runs down, never speeds them up, and the rounds spread its bursts over all lengths
    every = fit_lengths + held
    batches = [make_batch(n) for n in every]
    for _ in range(warm):
        for batch in batches:
            time_passes(forward, batch, repeats=1, device=device)
    runs: list[list[tuple[float, float]]] = [[] for _ in every]
    for r in range(4 * reps if agree is not None else reps):
        if r >= reps and agree is not None and all(_settled(x, float(agree)) for x in runs):
            break
        for j, batch in enumerate(batches):
            runs[j].append(time_passes(forward, batch, repeats=1, device=device))
    best = np.array([min(x, key=sum) for x in runs], dtype=np.float64).reshape(-1, 2)
    k = len(fit_lengths)
    points = tuple((n, float(best[j, 0]), float(best[j, 1])) for j, n in enumerate(fit_lengths))
    lens = np.array(fit_lengths, dtype=np.int64)
    where = str(device) if device is not None else None
    cost = MeshCost(
        forward=_fit(lens, best[:k, 0]),
        backward=_fit(lens, best[:k, 1]),
        kv_bytes=kv_bytes,
        bandwidth=bandwidth,
        latency=latency,
        device=where,
    )
    checked = [(n, float(best[k + j].sum()), float(cost.time(n, 1))) for j, n in enumerate(held)]
    error = max((abs(p - m) / m for _, m, p in checked if m > 0), default=0.0)
    return Calibration(cost=cost, points=points, heldout=tuple(checked), error=float(error))
