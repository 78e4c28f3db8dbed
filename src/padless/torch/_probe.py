"""Measure a training step's peak memory on your model and device, and fit a memory model.

:func:`probe_memory` runs one forward and backward pass (your ``step``) per probe, on batches
your ``make_batch`` builds, and for each shape of a grid finds the largest batch size that fits:
it doubles the batch size from 1 until a step runs out of memory or passes ``limit``, then
bisects until the largest fitting size is known within ``tolerance``. Every step that ran is a
measured point ``(batch_size, lengths, peak bytes)``; :meth:`padless.MemoryModel.fit` turns the
points into a model that predicts the peak of any shape (the lengths between and beyond the
grid's), and that model gives the batch size tables.

What a probe measures (:func:`measure_peak`):

- **CUDA**: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``: the peak of
  the tensors the step holds, weights, gradients and optimizer state included, the caching
  allocator's reserve and the CUDA context not. A step that raises
  ``torch.cuda.OutOfMemoryError`` is a failed probe (no point); the cache is emptied after
  every probe, so each starts as a fresh process would.
- **CPU** (Linux): what the step adds to the process's resident memory at its peak: ``VmHWM``
  of ``/proc/self/status``, reset to the current resident size just before the step (writing
  ``5`` to ``/proc/self/clear_refs``), less the resident size before the batch was made. The
  batch, the activations, the gradients (when ``step`` sets them to None first) and every
  temporary count; what the process holds between steps (the interpreter, libraries, weights,
  optimizer state, caches) does not, so resident memory that creeps up over many steps (oneDNN
  keeps a compiled kernel per new shape) does not blur the step's figure. ``ru_maxrss`` only
  grows, so it cannot tell one step from an earlier larger one; the reset can, in the process
  itself (no fork: a forked child would be another process, without torch's threads). Memory
  freed earlier goes back to the system first (``gc.collect`` of the young generations,
  glibc's ``malloc_trim``), so every step starts from the same resident floor. CPUs have no out-of-memory error to catch,
  so ``limit`` is required there: the bytes a step may add.

  glibc's allocator keeps memory freed within a step resident when its adaptive mmap threshold
  has grown, so the same step's figure varies by up to a quarter from run to run (the
  benchmark's held-out error: 29%, against 3.5% with the setting below). Set
  ``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=65536`` in the environment of the probe and of
  training for steady figures (large tensors are then always mapped and unmapped).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from ..core._check import check_int
from ..core.memory import MAX_FIELDS, MemoryModel, Point, as_bytes

__all__ = ["MemoryProbe", "measure_peak", "probe_memory"]

MAX_PROBE_BATCH = 1 << 31


class MemoryProbe(NamedTuple):
    """What :func:`probe_memory` found.

    Attributes:
        points: every measured step, ``(batch_size, lengths, peak bytes)`` (lengths a tuple,
            one per field), in the order run.
        model: :meth:`padless.MemoryModel.fit` of the points (they are kept in it, with the
            device: ``model.save(path)`` records the experiment).
        largest: ``(batch_size, lengths)`` per shape of the grid, in its order: the largest
            batch size measured to fit (0: not even one sequence).
    """

    points: tuple[Point, ...]
    model: MemoryModel
    largest: tuple[tuple[int, Any], ...]


# ---------------------------------------------------------------------------------- meters


def _device(value: Any) -> torch.device:
    if value is None:
        return (
            torch.device("cuda", torch.cuda.current_device())
            if torch.cuda.is_available()
            else torch.device("cpu")
        )
    if not isinstance(value, (str, torch.device)):
        raise TypeError(
            f"device must be None, a str such as 'cuda:0' or a torch.device, got "
            f"{type(value).__name__} {value!r:.60}"
        )
    try:
        dev = torch.device(value)
    except RuntimeError as exc:
        raise ValueError(f"device must name a torch device, got {value!r:.60}: {exc}") from None
    if dev.type not in ("cuda", "cpu"):
        raise ValueError(f"device must be a CUDA device or the CPU, got {value!r:.60}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device is {value!r} but CUDA is not available")
        dev = torch.device("cuda", torch.cuda.current_device() if dev.index is None else dev.index)
    return dev


def _describe(dev: torch.device) -> str:
    if dev.type == "cuda":
        return f"{dev} {torch.cuda.get_device_name(dev)} (max_memory_allocated)"
    return "cpu (resident memory a step adds, VmHWM)"


_LIBC: Any = None


def _trim() -> None:
    """Hand freed heap memory back to the system (glibc), so the resident size is what is live."""
    global _LIBC
    if _LIBC is None:
        name = ctypes.util.find_library("c")
        try:
            lib = ctypes.CDLL(name) if name else None
            _LIBC = lib if lib is not None and hasattr(lib, "malloc_trim") else False
        except OSError:  # pragma: no cover - no C library to load
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


def _status_bytes(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as stream:
        for line in stream:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024  # reported in kB
    raise RuntimeError(f"/proc/self/status has no {key} line")  # pragma: no cover


def _reset_high_water() -> None:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as stream:
            stream.write("5")  # 5: reset the peak resident size to the current one
    except OSError as exc:
        raise RuntimeError(
            "measuring CPU memory needs Linux's /proc/self/clear_refs (to reset the peak "
            f"resident size, VmHWM, before each step), which failed: {exc}"
        ) from None


def _check_callable(name: str, value: Any) -> Callable[..., Any]:
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__} {value!r:.60}")
    return value


def _out_of_memory() -> tuple[type[BaseException], ...]:
    kinds: list[type[BaseException]] = [torch.cuda.OutOfMemoryError]
    extra = getattr(torch, "OutOfMemoryError", None)
    if isinstance(extra, type) and extra not in kinds:
        kinds.append(extra)
    return tuple(kinds)


def _measure(step: Callable[[Any], Any], make: Callable[[], Any], dev: torch.device) -> int | None:
    """Peak bytes of ``step(make())`` on ``dev`` (None: CUDA ran out of memory).

    The young generations of garbage go first (``gc.collect(1)``: what the previous step left
    in reference cycles; a full collection costs a tenth of a second once torch is loaded)."""
    gc.collect(1)
    if dev.type == "cuda":
        failed = False
        try:
            torch.cuda.synchronize(dev)
            torch.cuda.reset_peak_memory_stats(dev)
            batch = make()
            step(batch)
            torch.cuda.synchronize(dev)
            peak = int(torch.cuda.max_memory_allocated(dev))
        except _out_of_memory():
            failed = True  # leave the except block first: its traceback holds the step's tensors
        batch = None
        if failed:
            gc.collect()
        torch.cuda.empty_cache()  # every probe starts from an empty cache, as a fresh process
        return None if failed else peak
    _trim()
    before = _status_bytes("VmRSS")
    batch = make()
    _reset_high_water()
    step(batch)
    peak = _status_bytes("VmHWM") - before
    batch = None
    return max(peak, 0)


def measure_peak(step: Callable[[Any], Any], batch: Any, *, device: Any = None) -> int | None:
    """Peak memory in bytes of one ``step(batch)`` on ``device`` (None: CUDA if available, else
    the CPU), measured as the module docstring says; None if CUDA ran out of memory. On the CPU
    the batch counts as resident before the step (it is, in training).

    >>> import torch
    >>> peak = measure_peak(lambda x: (x * 2).sum(), torch.ones(2**20), device="cpu")
    >>> isinstance(peak, int) and peak >= 0  # bytes (tests/test_memory.py checks the values)
    True
    """
    _check_callable("step", step)
    dev = _device(device)
    return _measure(step, lambda: batch, dev)


# ---------------------------------------------------------------------------------- probing


def _grid(value: Any) -> list[Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(
            "lengths_grid must be a list of shapes' lengths (ints, or tuples of one length per "
            f"field), got {type(value).__name__}"
        )
    if not value:
        raise ValueError("lengths_grid must hold at least one shape, got none")
    out, fields = [], None
    for i, entry in enumerate(value):
        if isinstance(entry, numbers.Integral) and not isinstance(entry, bool):
            lens: Any = int(entry)
            width = 1
        elif (
            isinstance(entry, Sequence)
            and not isinstance(entry, (str, bytes))
            and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in entry)
        ):
            lens = tuple(int(v) for v in entry)
            width = len(lens)
        else:
            raise TypeError(
                f"lengths_grid[{i}] must be a length (an int) or a tuple of ints, got "
                f"{type(entry).__name__} {entry!r:.60}"
            )
        flat = (lens,) if isinstance(lens, int) else lens
        if not 1 <= width <= MAX_FIELDS or min(flat) < 0 or max(flat) >= 1 << 40:
            raise ValueError(
                f"lengths_grid[{i}] must hold 1 to {MAX_FIELDS} lengths in [0, 2**40), got "
                f"{entry!r:.60}"
            )
        if fields is not None and width != fields:
            raise ValueError(
                f"lengths_grid must give every shape the same number of fields, got {fields} "
                f"then {width} at lengths_grid[{i}]"
            )
        fields = width
        out.append(lens)
    return out


def probe_memory(
    step: Callable[[Any], Any],
    make_batch: Callable[[int, Any], Any],
    lengths_grid: Any,
    *,
    device: Any = None,
    limit: Any = None,
    tolerance: float = 0.05,
    max_batch_size: int = 4096,
    warmup: bool = True,
) -> MemoryProbe:
    """Measure the peak memory of ``step`` on each shape of ``lengths_grid`` at growing batch
    sizes, and fit a :class:`padless.MemoryModel` to the measurements.

    Args:
        step: ``step(batch)`` runs one training step's forward and backward pass (zeroing the
            gradients first, as in training; an optimizer step too, if its memory counts).
        make_batch: ``make_batch(batch_size, lengths)`` builds a batch of ``batch_size``
            sequences padded to ``lengths`` (each grid entry as given: an int, or a tuple per
            field), on the device.
        lengths_grid: the shapes to probe: ``1 + 2·fields`` shapes or more, with three lengths
            or more per field, each field varied apart from the others, so the fit can tell
            the terms apart.
        device: where the step runs (None: CUDA if available, else the CPU); picks how memory is
            measured (see the module docstring). ``step`` and ``make_batch`` place the tensors.
        limit: bytes a step must stay within (see :func:`padless.core.memory.as_bytes`): a step whose
            peak passes it is too large (its point is still measured). Required on the CPU; on
            CUDA None grows until a step runs out of memory.
        tolerance: the bisection stops when the largest fitting batch size is known to within
            this fraction (or exactly, below ``1 / tolerance``).
        max_batch_size: growth stops here (a shape that fits it is not probed further).
        warmup: run one step first (batch size 1, the grid's first shape) and measure nothing,
            so lazily created state (gradients, optimizer state, library workspaces) is in every
            measured step.

    Each probe is one step; a shape needs about ``log2(largest) + log2(1 / tolerance)`` of
    them. Returns a :class:`MemoryProbe` (the points, the fitted model, the largest fitting
    batch size per shape).
    """
    _check_callable("step", step)
    _check_callable("make_batch", make_batch)
    grid = _grid(lengths_grid)
    dev = _device(device)
    top = None if limit is None else as_bytes(limit, "limit")
    if top is None and dev.type == "cpu":
        raise ValueError(
            "limit is required on the CPU (it has no out-of-memory error to stop the growth): "
            "pass the bytes a step may use, e.g. limit='8GiB'"
        )
    if isinstance(tolerance, bool) or not isinstance(tolerance, numbers.Real):
        raise TypeError(f"tolerance must be a number, got {type(tolerance).__name__} {tolerance!r}")
    tol = float(tolerance)
    if not (math.isfinite(tol) and 0 < tol <= 1):
        raise ValueError(f"tolerance must be in (0, 1], got {tolerance!r}")
    cap = check_int("max_batch_size", max_batch_size, minimum=1)
    if cap > MAX_PROBE_BATCH:  # type: ignore[operator]
        raise ValueError(f"max_batch_size must be <= 2**31, got {cap}")
    if not isinstance(warmup, bool):
        raise TypeError(f"warmup must be a bool, got {type(warmup).__name__} {warmup!r}")

    points: list[Point] = []
    gc.collect()  # once: the garbage of what ran before the probe
    if warmup:
        _measure(step, lambda: make_batch(1, grid[0]), dev)

    def fits(size: int, lens: Any) -> bool:
        peak = _measure(step, lambda: make_batch(size, lens), dev)
        if peak is None:
            return False
        points.append((size, lens if isinstance(lens, tuple) else (lens,), peak))
        return top is None or peak <= top

    largest = []
    for lens in grid:
        lo, hi, size = 0, 0, 1
        while True:
            if not fits(size, lens):
                hi = size
                break
            lo = size
            if size >= cap:  # type: ignore[operator]
                break
            size = min(2 * size, cap)  # type: ignore[type-var]
        while hi and hi - lo > 1 and hi - lo > tol * lo:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid, lens) else (lo, mid)
        largest.append((lo, lens))
    try:
        model = MemoryModel.fit(points, device=_describe(dev))
    except ValueError as exc:
        raise ValueError(
            f"lengths_grid: the {len(points)} steps measured do not fit a memory model ({exc}); "
            "probe more shapes, or a larger limit"
        ) from None
    return MemoryProbe(points=tuple(points), model=model, largest=tuple(largest))
