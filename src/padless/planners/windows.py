"""Windowed plans: plan a corpus of any size one window at a time, in bounded memory.

A global plan holds the whole corpus at once (an order array of 8 bytes per item, and for
packing several more). :func:`plan_windows` plans the epoch as a sequence of windows of about
``window`` items instead: each window is planned exactly as the spec plans those items
(``spec.plan(lengths[items])``), with global indices, and nothing of size N is ever allocated,
so the lengths may be a read-only memory-mapped ``.npy`` file (int32 or int64, (N,) or (N, F))
of a billion items or more.

**Which items share a window.** The positions ``0 … N−1`` are cut into blocks of at most 4096
consecutive items (at least 16 blocks per window, so small windows mix too), and a window is
``blocks_per_window`` blocks picked by a keyed bijection of the block numbers (a Feistel
network, computed on the fly: no permutation array). Before cutting, the positions are rotated
by a random offset. Both the key and the offset come from ``(seed, epoch)``, so:

- two items ``d`` positions apart share a block (and so a window) with probability
  ``max(0, 1 − d / block)`` in an epoch (the rotation moves the block boundaries);
- two items in different blocks share a window with probability
  ``(blocks_per_window − 1) / (num_blocks − 1)``, about ``window / N``, independently from one
  epoch to the next: over E epochs any two items meet with probability ``1 − (1 − window/N)^E``.

A window is read block by block: runs of thousands of consecutive lengths, so a file larger than
the page cache is read almost sequentially.

**What it costs.** A window plan is as good as a global plan of a corpus of ``window`` items with
the same length distribution: token-budget padding and packing efficiency depend on the length
histogram, which a window of 10^6 random items samples closely (figures in BENCHMARKS.md,
"Windowed plans"). Strategies that keep per-group leftovers (exact length, buckets) have one
partial batch per group per window instead of per epoch.

**Samplers.** ``PlanSampler(lengths, spec, window=W)`` (and every named sampler, through
``window=``) runs the windows one after the other, each window's batches in a shuffled order
(:mod:`padless.epochs.windows`), with every sampler's guarantees: equal steps on every rank, the
tail policy, ``balance`` (within each window), ``len()`` (one counting pass over the lengths per
epoch, cached), O(1) state dicts, exact and elastic resume (a restore counts the windows'
batches and plans one window).

Windows plan in parallel threads (``threads``; the compiled token-budget and packing planners
release the GIL); every window's plan depends only on ``(seed, epoch, window number)``, never on
the thread count.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from .. import _kernels as K
from ..core import _rng
from ..core._check import MAX_BUDGET, check_seed, non_negative, positive
from ..core.lengths import MAX_LENGTH, MappedFile, sizes_of
from ..core.plan import BatchPlan, PlanStats
from ..io import lengths_of
from .spec import Spec, round_up

KW = K.windows

if TYPE_CHECKING:
    from .spec import Planner, Spec, WindowKernel

__all__ = ["WindowLayout", "WindowedPlanner", "plan_windows"]

BLOCK = 4096  # most items per block: 16 KB of int32 lengths read in one run
MIN_BLOCKS = 16  # fewest blocks per window (smaller windows get smaller blocks)
CHUNK = 1 << 20  # rows per chunk of the checking pass
MAX_THREADS = 8
_REBUILT = ("_rows", "_fast")  # a planner's state that unpickling builds again

T = TypeVar("T")


# ---------------------------------------------------------------------------------- layout


@dataclasses.dataclass(frozen=True)
class WindowLayout:
    """How N items are cut into blocks and windows (the same for every epoch).

    ``blocks_per_window = max(ceil(window / 4096), min(16, window))`` blocks of
    ``block = window // blocks_per_window`` items make a window, so a window holds
    ``blocks_per_window · block`` items (``window`` rounded down to a multiple of the block),
    except the last window and the one holding the last, shorter block.

    >>> layout = WindowLayout(1_000_000, 10_000)
    >>> layout.block, layout.blocks_per_window, layout.num_windows
    (625, 16, 100)
    >>> items = layout.items(3, seed=0, epoch=1)
    >>> items.size, int(items.min()) >= 0, np.unique(items).size
    (10000, True, 10000)
    """

    n: int
    window: int

    def __post_init__(self) -> None:
        n = non_negative("n", self.n)
        if n > MAX_BUDGET:
            raise ValueError(f"n must be <= 2**62 (positions stay in int64 arithmetic), got {n}")
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "window", positive("window", self.window))

    @property
    def blocks_per_window(self) -> int:
        return max(-(-self.window // BLOCK), min(MIN_BLOCKS, self.window))

    @property
    def block(self) -> int:
        return self.window // self.blocks_per_window

    @property
    def num_blocks(self) -> int:
        return -(-self.n // self.block)

    @property
    def num_windows(self) -> int:
        return -(-self.num_blocks // self.blocks_per_window)

    def membership(self, seed: int, epoch: int) -> Membership:
        """The epoch's block bijection and rotation."""
        return Membership(self, check_seed("seed", seed), check_seed("epoch", epoch))

    def items(self, w: int, *, seed: int = 0, epoch: int = 0) -> np.ndarray:
        """Global ids of window ``w``'s items in ``(seed, epoch)``, block after block.

        ``w`` is a window number in ``[0, num_windows)``.
        """
        w = self._window_number(w)
        return self.membership(seed, epoch).items(w)

    def _window_number(self, w: Any) -> int:
        if isinstance(w, (bool, np.bool_)) or not isinstance(w, (int, np.integer)):
            raise TypeError(f"w (the window number) must be an int, got {type(w).__name__} {w!r}")
        if not 0 <= w < self.num_windows:
            raise ValueError(f"w (the window number) must be in [0, {self.num_windows}), got {w}")
        return int(w)

    def share_probability(self, distance: int) -> float:
        """Probability that two items ``distance`` positions apart share a window in an epoch.

        Exact for N a multiple of the window (up to the bijection being a random one).

        >>> round(WindowLayout(1600, 160).share_probability(800), 4)
        0.0943
        """
        distance = non_negative("distance", distance)
        d = min(distance % max(self.n, 1), self.n - distance % max(self.n, 1))
        same_block = max(0.0, 1.0 - d / self.block)
        other = (self.blocks_per_window - 1) / max(self.num_blocks - 1, 1)
        return same_block + (1.0 - same_block) * other


class Membership:
    """Which blocks make each window in one ``(seed, epoch)``: a keyed bijection of the blocks."""

    __slots__ = ("layout", "round_keys", "rotation")

    def __init__(self, layout: WindowLayout, seed: int, epoch: int) -> None:
        gen = _rng.rng(seed, epoch, _rng.WINDOWS)
        self.layout = layout
        self.round_keys = K.feistel_round_keys(int(gen.integers(0, 2**63)))
        self.rotation = int(gen.integers(0, max(layout.n, 1)))

    def blocks(self, w: int) -> np.ndarray:
        lay = self.layout
        k, nb = lay.blocks_per_window, lay.num_blocks
        ids = np.arange(w * k, min((w + 1) * k, nb), dtype=np.int64)
        if ids.size == 0:
            return ids
        return K.feistel_permute(ids, nb, self.round_keys)

    def items(self, w: int) -> np.ndarray:
        lay = self.layout
        w = lay._window_number(w)
        return KW.window_items(lay.n, lay.block, self.rotation, self.blocks(w))


def child_sequence(seed: int, epoch: int, stream: int, w: int) -> np.random.SeedSequence:
    """Child ``w`` of the stream ``(seed, epoch, stream)``: ``seed_sequence(...).spawn(w + 1)[w]``."""
    parent = _rng.seed_sequence(seed, epoch, stream)
    return np.random.SeedSequence(parent.entropy, spawn_key=(w,), pool_size=parent.pool_size)


def window_seed(seed: int, epoch: int, w: int) -> int:
    """The seed window ``w`` is planned with (at epoch 0 of that seed)."""
    state = child_sequence(seed, epoch, _rng.WINDOWS, w).generate_state(1, np.uint64)
    return int(state[0])


# ---------------------------------------------------------------------------------- lengths


def source_lengths(lengths: Any) -> np.ndarray:
    """The lengths as an (N,) or (N, F) integer array, without a copy when they are one already.

    A ``pathlib.Path`` to a ``.npy`` file is memory-mapped read-only. Anything else goes
    through :func:`padless.lengths_of` (an int64 array in memory).
    """
    if isinstance(lengths, os.PathLike) and os.fspath(lengths).endswith(".npy"):
        try:
            mapped = np.load(lengths, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError):
            return lengths_of(lengths)  # its error names what is wrong with the file
        lengths = mapped
    if (
        isinstance(lengths, np.ndarray)
        and lengths.dtype.kind in "iu"
        and lengths.dtype.itemsize <= (8 if lengths.dtype.kind == "i" else 4)
        and lengths.dtype.isnative
        and lengths.ndim in (1, 2)
        and not (lengths.ndim == 2 and lengths.shape[1] == 0 and lengths.shape[0] > 0)
    ):
        return lengths
    return lengths_of(lengths)


def _chunks(n: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + CHUNK, n)) for lo in range(0, n, CHUNK)]


def _threads(threads: Any) -> int:
    if threads is None:
        return max(1, min(os.cpu_count() or 1, MAX_THREADS))
    return positive("threads", threads)


def _in_order(fn: Callable[[int], T], count: int, threads: int) -> Iterator[T]:
    """``fn(0), fn(1), …`` computed by ``threads`` threads, at most ``threads + 1`` ahead."""
    if threads <= 1 or count <= 1:
        for i in range(count):
            yield fn(i)
        return
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="padless-window")
    pending: OrderedDict[int, Future[T]] = OrderedDict()
    try:
        nxt = 0
        for i in range(count):
            while nxt < count and nxt <= i + threads:
                pending[nxt] = pool.submit(fn, nxt)
                nxt += 1
            yield pending.pop(i).result()
    finally:
        for fut in pending.values():
            fut.cancel()
        pool.shutdown(wait=True)


def _bad_position(rows: np.ndarray, lo: int, one_d: bool) -> str:
    bad = (rows < 0) | (rows >= MAX_LENGTH)
    i, f = (int(v) for v in np.argwhere(bad)[0])
    value = rows[i, f].item()
    where = f"[{lo + i}]" if one_d else f"[{lo + i}, {f}]"
    return f"lengths must be whole numbers in [0, 2**31), got {value!r} at position {where}"


_INDEX = re.compile(r"index (\d+)")


def shift_index(message: str, lo: int) -> str:
    """A planner's message about a chunk starting at ``lo``, with its first index made global."""
    return _INDEX.sub(lambda m: f"index {lo + int(m.group(1))}", message, count=1)


# ---------------------------------------------------------------------------------- planner


class WindowedPlanner:
    """A spec bound to (memory-mapped) lengths, planning window by window.

    Checks the lengths and the spec once, in one pass over the lengths in chunks (the lengths'
    range, the spec's rules such as ``oversize="error"``; :class:`padless.Buckets` with
    ``num_buckets`` gets boundaries fitted to the whole corpus' histogram), and then plans any
    window of any ``(seed, epoch)``. Token budget and packing over (N,) lengths run fused
    compiled kernels that read the lengths straight from the mapped file; every other case
    gathers the window's lengths and calls the spec's own planner.

    Cost: the checking pass reads the lengths once (about 1 ns per item, in threads); memory is
    O(window) per thread, never O(N) (except :attr:`sizes` of (N, F) lengths, computed on
    demand).

    **Shipping it.** A pickled planner carries what the checking pass found (a few kilobytes)
    and its lengths: memory-mapped lengths as their file (the receiver maps the file again, so
    a Ray task or a DataLoader worker never receives a copy), other lengths as they are. It
    plans the same windows there, with no second checking pass.

    >>> import pickle, padless
    >>> lens = np.arange(1, 1001) % 97 + 1
    >>> planner = WindowedPlanner(padless.TokenBudget(max_tokens=256), lens, 300)
    >>> again = pickle.loads(pickle.dumps(planner))
    >>> member = planner.layout.membership(1, 0)
    >>> again.plan_window(member, 2, 1, 0) == planner.plan_window(member, 2, 1, 0)
    True
    """

    def __init__(self, spec: Spec, lengths: Any, window: Any, *, threads: Any = None) -> None:
        if not isinstance(spec, Spec):
            raise TypeError(
                f"spec must be a padless planner spec (e.g. padless.TokenBudget(max_tokens=4096)), "
                f"got {type(spec).__name__}"
            )
        self.window = positive("window", window)
        self.threads = _threads(threads)
        src = source_lengths(lengths)
        self.lengths = src
        self.n = int(src.shape[0])
        self.fields = 1 if src.ndim == 1 else int(src.shape[1])
        self._rows = src.reshape(self.n, self.fields) if src.ndim == 1 else src
        self.layout = WindowLayout(self.n, self.window)
        self.size_min, self.size_max = self._scan()
        self.spec = spec
        self.window_spec = spec.for_windows(self)
        self._check_spec()
        empty = np.zeros((0,) if src.ndim == 1 else (0, self.fields), dtype=np.int64)
        self.template: Planner = self.window_spec.bind(empty)
        self._fast = self._fast_path()

    # ------------------------------------------------------------------ shipping
    def __getstate__(self) -> dict[str, Any]:
        # the rows view and the fused kernel (which holds this planner) are built again;
        # mapped lengths travel as their file, other lengths as they are
        state = {k: v for k, v in self.__dict__.items() if k not in _REBUILT}
        mapped = MappedFile.of(self.lengths)
        if mapped is not None:
            state["lengths"] = mapped
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        lengths = state["lengths"]
        if isinstance(lengths, MappedFile):
            lengths = lengths.open()
        self.__dict__.update(state)
        self.lengths = lengths
        self._rows = lengths.reshape(self.n, self.fields) if lengths.ndim == 1 else lengths
        self._fast = self._fast_path()

    # ------------------------------------------------------------------ checks
    def _scan(self) -> tuple[int, int]:
        chunks = _chunks(self.n)
        results = list(
            _in_order(
                lambda c: KW.scan_lengths(self._rows[slice(*chunks[c])]), len(chunks), self.threads
            )
        )
        size_min, size_max = 0, 0
        self._arg_min = self._arg_max = -1
        for (lo, hi), (low, high, s_lo, a_lo, s_hi, a_hi) in zip(chunks, results, strict=True):
            if low < 0 or high >= MAX_LENGTH:
                rows = np.asarray(self._rows[lo:hi])
                raise ValueError(_bad_position(rows, lo, self.lengths.ndim == 1))
            if self._arg_min < 0 or s_lo < size_min:
                size_min, self._arg_min = int(s_lo), lo + int(a_lo)
            if self._arg_max < 0 or s_hi > size_max:
                size_max, self._arg_max = int(s_hi), lo + int(a_hi)
        return size_min, size_max

    def _int64(self, rows: np.ndarray) -> np.ndarray:
        out = np.asarray(rows, dtype=np.int64)
        return out.reshape(-1) if self.lengths.ndim == 1 else out

    def size_chunks(self, multiple: int = 1) -> Iterator[np.ndarray]:
        """The sizes (max over fields), rounded up to ``multiple``, chunk by chunk (int64)."""
        for lo, hi in _chunks(self.n):
            yield round_up(sizes_of(self._int64(self._rows[lo:hi])), multiple)

    def row_chunks(self, multiple: int = 1) -> Iterator[np.ndarray]:
        """The lengths as (n, F) int64 rows, each field rounded up to ``multiple``, chunk by
        chunk (F = 1 for (N,) lengths)."""
        for lo, hi in _chunks(self.n):
            yield round_up(np.asarray(self._rows[lo:hi], dtype=np.int64), multiple)

    def _check_spec(self) -> None:
        """Bind the spec to the smallest and the largest sequence: every rule a spec checks at
        bind time holds for all sequences when it holds for those two. On failure, find the
        first offending sequence chunk by chunk and name its position in the whole array."""
        if self.n == 0:
            return
        spec = self.window_spec
        probe = self._int64(self._rows[[self._arg_min, self._arg_max]])
        try:
            spec.bind(probe)
        except ValueError:
            for lo, hi in _chunks(self.n):
                try:
                    spec.bind(self._int64(self._rows[lo:hi]))
                except ValueError as e:
                    raise ValueError(shift_index(str(e), lo)) from None
            raise

    def _fast_path(self) -> WindowKernel | None:
        if self.fields != 1 or self.n == 0:
            return None
        span = self.size_max + 1
        if span > 2 * self.window + (1 << 16):
            return None  # sparse huge lengths: the spec's planner ranks them
        return self.window_spec.window_kernel(self)

    @property
    def arg_min(self) -> int:
        """Position of the first shortest sequence (-1 for no sequences)."""
        return self._arg_min

    @property
    def first_field(self) -> np.ndarray:
        """The first field of every sequence (the lengths of (N,) lengths), as stored."""
        return self._rows[:, 0]

    # ------------------------------------------------------------------ Planner protocol
    @property
    def sizes(self) -> np.ndarray:
        """One size per sequence: the lengths themselves for (N,), the max over fields for
        (N, F) (computed now: N int64)."""
        if self.lengths.ndim == 1:
            return self.lengths
        return sizes_of(self._int64(self._rows))

    @property
    def num_windows(self) -> int:
        return self.layout.num_windows

    def config(self) -> dict[str, Any]:
        """The window spec's settings and the window, for state fingerprints."""
        return {**self.template.config(), "window": self.window}

    def values(self, plan: BatchPlan) -> np.ndarray:
        return self.template.values(plan)

    def costs(self, plan: BatchPlan) -> np.ndarray:
        """Balancing cost of each batch of a window plan: the spec's planner's ``costs``, bound
        to the lengths of the plan's entries."""
        rows = KW.gather_rows(self._rows, plan.indices)
        planner = self.window_spec.bind(self._int64(rows))
        return planner.costs(_indexing_entries(plan))

    def window_stats(self, plan: BatchPlan) -> PlanStats:
        """``plan.stats`` of a window plan, over the gathered lengths of its entries."""
        rows = KW.gather_rows(self._rows, plan.indices)
        return _indexing_entries(plan).stats(rows.reshape(-1) if self.lengths.ndim == 1 else rows)

    def __getattr__(self, name: str) -> Any:
        # what the bound spec resolved (boundaries...) and its collate
        if name.startswith("_") or "template" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["template"], name)

    # ------------------------------------------------------------------ planning
    def plan_window(self, member: Membership, w: int, seed: int, epoch: int) -> BatchPlan:
        """Window ``w``'s plan (global indices): the spec's plan of its items, seeded per window."""
        lay = self.layout
        sub = window_seed(seed, epoch, w)
        blocks = member.blocks(w)
        if self._fast is not None:
            return self._fast.plan(member, blocks, sub)
        items = KW.window_items(lay.n, lay.block, member.rotation, blocks)
        local = self.window_spec.bind(self._int64(KW.gather_rows(self._rows, items))).plan(sub, 0)
        return _to_global(local, items, self.n)

    def count_window(self, member: Membership, w: int, seed: int, epoch: int) -> int:
        """Number of batches of :meth:`plan_window` (cheaper with a fused kernel)."""
        if self._fast is not None:
            return self._fast.count(member, member.blocks(w))
        return len(self.plan_window(member, w, seed, epoch))

    def plans(self, seed: int, epoch: int, threads: int | None = None) -> Iterator[BatchPlan]:
        """Every window's plan of ``(seed, epoch)``, in window order (planned in threads)."""
        member = self.layout.membership(seed, epoch)
        return _in_order(
            lambda w: self.plan_window(member, w, seed, epoch),
            self.num_windows,
            self.threads if threads is None else threads,
        )

    def counts(self, seed: int, epoch: int, threads: int | None = None) -> np.ndarray:
        """Batches of every window of ``(seed, epoch)`` (one counting pass, in threads)."""
        member = self.layout.membership(seed, epoch)
        out = _in_order(
            lambda w: self.count_window(member, w, seed, epoch),
            self.num_windows,
            self.threads if threads is None else threads,
        )
        return np.fromiter(out, dtype=np.int64, count=self.num_windows)

    def plan(self, seed: int, epoch: int) -> BatchPlan:
        raise ValueError(
            "a windowed planner plans one window at a time (there is no plan of the whole epoch "
            "in memory): use plans(seed, epoch) or padless.plan_windows"
        )


def _indexing_entries(plan: BatchPlan) -> BatchPlan:
    """A copy of ``plan`` whose entry ``e`` is index ``e`` (over lengths gathered in plan order)."""
    m = plan.indices.size
    return plan.with_indices(np.arange(m, dtype=np.int64), m)


def _to_global(plan: BatchPlan, items: np.ndarray, n: int) -> BatchPlan:
    """A window's plan with its local positions replaced by the items' global ids."""
    return plan.with_indices(items[plan.indices], n, np.sort(items[plan.skipped]))


# ---------------------------------------------------------------------------------- public


def plan_windows(
    lengths: Any,
    spec: Spec,
    *,
    window: int,
    seed: int = 0,
    epoch: int = 0,
    threads: int | None = None,
) -> Iterator[BatchPlan]:
    """Plan an epoch window by window: an iterator of per-window plans with global indices.

    Window ``w`` is planned exactly as ``spec.plan(lengths[items_w], seed=s_w)`` plans its items
    (``s_w`` derived from ``(seed, epoch, w)``), so its batches, their order and ``plan.info``
    are what the spec gives for those items; indices (and ``plan.skipped``) are global. (A
    setting fitted to the lengths, ``Buckets(num_buckets=k)``'s boundaries, is fitted once to
    all of them, so every window uses the same buckets.) Which
    items make each window changes with the epoch; see the module docstring for the mixing
    and :class:`WindowLayout` for the layout. Together the windows cover every sequence once
    (planned or skipped).

    Args:
        lengths: (N,) or (N, F) lengths: any integer numpy array (used without a copy), e.g. a
            read-only ``np.load(path, mmap_mode="r")`` of an int32 ``.npy``; a ``pathlib.Path``
            to a ``.npy`` file (memory-mapped); or anything :func:`padless.lengths_of` takes.
        spec: a planner spec (``padless.TokenBudget(max_tokens=4096)``...).
        window: about how many items a window holds (rounded down to a multiple of its block).
        seed, epoch: the window membership and every window's randomness.
        threads: windows planned at once (default: the CPU count, at most 8); the plans do not
            depend on it.

    Raises:
        TypeError, ValueError: as the spec's planner (named with global indices), for lengths
            outside [0, 2**31), a bad ``window``, ``seed``, ``epoch`` or ``threads``.

    Cost: one checking pass over the lengths when called (range and the spec's rules), then
    per window O(window + max length) time; memory O(window) per thread (no array of N items is
    allocated). Token budget and packing over (N,) lengths read the mapped lengths straight
    from their blocks (figures: BENCHMARKS.md, "Windowed plans").

    >>> from padless import TokenBudget
    >>> lengths = np.arange(1, 101) % 17 + 1
    >>> plans = list(plan_windows(lengths, TokenBudget(max_tokens=64), window=40, seed=1))
    >>> len(plans), sorted(int(i) for p in plans for i in p.indices) == list(range(100))
    (4, True)
    """
    check_seed("seed", seed)
    check_seed("epoch", epoch)
    planner = WindowedPlanner(spec, lengths, window, threads=threads)
    return planner.plans(seed, epoch)
