"""Global plans from the lengths' histogram: the whole epoch at global quality, for any corpus.

Sequences of equal width are interchangeable to a token-budget plan: its batches (count ×
widest width under the budget, fairseq's rule) depend only on the sorted widths, that is on the
histogram. :class:`HistogramPlanner` counts the histogram once (in threads, chunk by chunk,
straight from memory-mapped lengths), cuts the batches on it with the same kernel the global
plan uses (``budget_ends_runs``), and builds a by-width index of the sequences (a stable
counting sort, kept in memory up to :data:`IN_MEMORY` sequences, else in a temporary file).
The batch shapes are then exactly the global plan's: the same padding, for 1e9 sequences as
for 1e3.

Each epoch assigns the sequences to the slots of their width by a keyed bijection of the width's
ranks (a Feistel network from ``(seed, epoch, TIE_BREAK)`` and the width): batch membership
varies by epoch as in the global plan, whose ties are shuffled by a Fisher-Yates pass instead
(so the two assign different sequences to the same shapes). The batch order is drawn as a
whole-corpus plan's is (:mod:`padless.epochs.histogram`: shuffled from ``(seed, epoch,
BATCH_ORDER)``, or balanced steps, re-balanced after an elastic resume). A batch's sequences
are computed when the batch is asked for, so memory is O(distinct widths + batches) plus the
index, and a restore is O(1): nothing is replayed.

Use it through ``PlanSampler(lengths, TokenBudget(...), window="histogram")``.
"""

from __future__ import annotations

import tempfile
from typing import Any

import numpy as np

from .. import _kernels as K
from .._kernels import windows as KW
from .._splitmix import mix64_reference
from ..core import _rng
from ..core.lengths import MAX_LENGTH
from ..core.plan import PlanStats
from .packing import row_layout
from .spec import Spec, round_up
from .windows import _chunks, _in_order, _threads, source_lengths

__all__ = ["HistogramPlanner", "IN_MEMORY", "MAX_WIDTHS"]

# sequences whose by-width index is kept in memory (4 bytes each); more go to a temporary file
IN_MEMORY = 1 << 26
# the histogram's bins (widths up to this): 8 bytes each, a quarter of a GiB at most
MAX_WIDTHS = 1 << 25


class HistogramPlanner:
    """A spec with a histogram form (:meth:`padless.Spec.histogram_limits`) bound to 1-D lengths.

    ``counts[w]`` sequences have width ``w`` (their length rounded up to the spec's
    ``pad_to_multiple_of``); ``starts`` the running total over the planned widths (those within
    ``max_tokens``); ``ends`` the batch ends in that width order (the budget kernel's cut);
    ``index`` the sequences by width, stable (int32 below 2**31 sequences). ``skipped`` counts the sequences over the budget
    (``oversize="drop"``; ``"error"`` names the first).

    Cost: two passes over the lengths (the histogram, in threads; the index, a compiled counting
    scatter chunk by chunk) and O(widths) for the cut. Memory: O(widths + batches), and the index (4
    bytes per sequence, in a temporary file past :data:`IN_MEMORY` sequences).

    >>> import padless
    >>> h = HistogramPlanner(padless.TokenBudget(max_tokens=8), np.array([5, 3, 3, 8, 1]))
    >>> h.ends.tolist(), h.batch(0, 1, 0).tolist(), h.batch(2, 1, 0).tolist()
    ([2, 3, 4, 5], [4, 1], [0])
    """

    def __init__(self, spec: Spec, lengths: Any, *, threads: Any = None) -> None:
        if not isinstance(spec, Spec):
            raise TypeError(
                f"spec must be a padless planner spec (e.g. padless.TokenBudget(max_tokens=4096)), "
                f"got {type(spec).__name__}"
            )
        form = spec.histogram_form()
        if form is None:
            raise ValueError(
                f"window='histogram' needs a strategy with a histogram form (TokenBudget without "
                f"a cost model and in its default sort; Packing of whole sequences without a cost model or context "
                f"parallelism); {spec.describe()} has none: use window=None or a window size"
            )
        self.spec = spec
        self.kind, self.limits = form
        self.threads = _threads(threads)
        src = source_lengths(lengths)
        if src.ndim != 1:
            raise ValueError(
                f"window='histogram' plans 1-D lengths (one per sequence), got shape {src.shape}"
            )
        self.lengths = src
        self.n = int(src.shape[0])
        self.pad = int(getattr(spec, "pad_to_multiple_of", 1))
        self._histogram()
        self._cut()
        self._file: Any = None
        self._layout: tuple[Any, np.ndarray] | None = None
        self.index = self._build_index()

    # ------------------------------------------------------------------ building
    def _widths(self, lo: int, hi: int) -> np.ndarray:
        part = np.asarray(self.lengths[lo:hi])
        if self.pad == 1 and part.dtype in (np.int32, np.int64):
            return part  # the counting sort reads int32 and int64 as they are
        return round_up(part.astype(np.int64), self.pad)

    def _histogram(self) -> None:
        chunks = _chunks(self.n)

        def count(c: int) -> tuple[int, int, np.ndarray]:
            lo, hi = chunks[c]
            part = np.asarray(self.lengths[lo:hi])
            low, high = (int(part.min()), int(part.max())) if part.size else (0, 0)
            if low < 0 or high >= MAX_LENGTH:
                bad = int(np.flatnonzero((part < 0) | (part >= MAX_LENGTH))[0])
                raise ValueError(
                    f"lengths must be whole numbers in [0, 2**31), got {int(part[bad])} at "
                    f"position [{lo + bad}]"
                )
            if high >= MAX_WIDTHS:
                raise ValueError(
                    f"window='histogram' plans lengths below 2**25 (a histogram bin per length), "
                    f"got {high} at position [{lo + int(np.argmax(part))}]: use a window size"
                )
            return low, high, np.bincount(part, minlength=1).astype(np.int64)

        sizes = np.zeros(1, dtype=np.int64)
        for _, _, hist in _in_order(count, len(chunks), self.threads):
            if hist.size > sizes.size:
                hist[: sizes.size] += sizes
                sizes = hist
            else:
                sizes[: hist.size] += hist
        self.size_counts = sizes  # sequences of each length
        values = np.arange(sizes.size, dtype=np.int64)
        if self.pad == 1:
            self.counts, self.real_by_width = sizes, sizes * values
        else:  # lengths (w - pad, w] have width w: fold each group of pad lengths into w
            firsts = np.concatenate([[0], np.arange(1, sizes.size, self.pad)]).astype(np.int64)
            at = round_up(firsts, self.pad)
            self.counts = np.zeros(int(at[-1]) + 1, dtype=np.int64)
            self.real_by_width = np.zeros_like(self.counts)
            self.counts[at] = np.add.reduceat(sizes, firsts)
            self.real_by_width[at] = np.add.reduceat(sizes * values, firsts)

    def _cut(self) -> None:
        limit = self.limits[0]  # max_tokens (0: none), or the rows' capacity
        what = "max_tokens" if self.kind == "budget" else "capacity"
        runs = self.counts.size
        if limit and runs - 1 > limit:
            over = int(self.counts[limit + 1 :].sum())
            if over and getattr(self.spec, "oversize", "error") == "error":
                first = self._first_over(limit)
                width = (
                    "" if self.pad == 1 else f" (width {int(self._widths(first, first + 1)[0])})"
                )
                raise ValueError(
                    f"index {first} has length {int(self.lengths[first])}{width}, which exceeds "
                    f'{what}={limit} (pass oversize="drop" to leave such items out)'
                )
            runs = limit + 1
        self.planned_widths = runs  # widths 0 .. runs - 1 are planned
        self.skipped = int(self.counts[runs:].sum())
        starts = np.zeros(runs + 1, dtype=np.int64)
        np.cumsum(self.counts[:runs], out=starts[1:])
        self.starts = starts
        if self.kind == "rows":
            self._fit_rows()
            return
        max_tokens, max_sentences, multiple = self.limits
        if multiple == 1:  # a batch at a time (a run's batches all hold the same count)
            ends = KW.budget_ends_runs1(starts, runs, max_tokens, max_sentences)
        else:  # the greedy rule item by item
            values = np.arange(runs, dtype=np.int64)
            ends = K.budget_ends_runs(values, starts, max_tokens, max_sentences, multiple)
        self.ends = np.asarray(ends, dtype=np.int64)
        firsts = np.concatenate([np.zeros(1, np.int64), self.ends[:-1]])
        self.batch_sizes = self.ends - firsts
        # a batch's widest width: the width of its last position
        self.batch_widths = np.searchsorted(starts, self.ends - 1, side="right") - 1

    def _fit_rows(self) -> None:
        """Best fit decreasing on the histogram (``best_fit_visits``: the rows of best fit over
        the sorted sizes, a run of equal sizes at a time), the visits grouped by row."""
        capacity, max_per_row, _ = self.limits
        visits = KW.best_fit_visits(self.starts, capacity, max_per_row)
        order = np.argsort(visits[:, 0], kind="stable")  # by row, each row's in walk order
        self.visits = visits[order]
        self.num_rows = int(visits[:, 0].max()) + 1 if visits.size else 0
        bounds = np.zeros(self.num_rows + 1, dtype=np.int64)
        np.cumsum(np.bincount(visits[:, 0], minlength=self.num_rows), out=bounds[1:])
        self.row_bounds = bounds
        tokens = self.visits[:, 2] * self.visits[:, 3]
        csum = np.zeros(tokens.size + 1, dtype=np.int64)
        np.cumsum(tokens, out=csum[1:])
        self.row_tokens = csum[bounds[1:]] - csum[bounds[:-1]]
        entries = np.zeros(self.visits.shape[0] + 1, dtype=np.int64)
        np.cumsum(self.visits[:, 2], out=entries[1:])
        self.row_entries = entries[bounds[1:]] - entries[bounds[:-1]]
        # the walk takes the sizes largest first: size s's first walk position
        self.walk_first = self.starts[-1] - self.starts[1:]

    def _first_over(self, limit: int) -> int:
        for lo, hi in _chunks(self.n):
            over = np.flatnonzero(self._widths(lo, hi) > limit)
            if over.size:
                return lo + int(over[0])
        return -1  # pragma: no cover - called only when some width is over

    def _build_index(self) -> np.ndarray:
        planned = int(self.starts[-1])
        dtype = np.int32 if self.n < 1 << 31 else np.int64
        if planned <= IN_MEMORY:
            index = np.empty(planned, dtype=dtype)
        else:
            self._file = tempfile.TemporaryFile(prefix="padless-histogram-")
            self._file.truncate(planned * np.dtype(dtype).itemsize)
            index = np.memmap(self._file, dtype=dtype, mode="r+", shape=(planned,))
        cursor = np.ascontiguousarray(self.starts[:-1], dtype=np.int64).copy()
        runs = self.planned_widths
        chunks = _chunks(self.n)
        # the chunks in order, each placed by a compiled counting scatter straight into the
        # index (no per-chunk order or temporaries); with threads, each thread places a range
        # of widths holding an equal share of the sequences (disjoint places), reading every
        # chunk
        parts = self.threads if planned >= 1 << 22 else 1
        shares = np.searchsorted(self.starts, np.arange(1, parts) * planned // parts)
        bounds = [0, *[int(b) for b in shares], runs]

        def place(part: int) -> None:
            for lo, hi in chunks:
                KW.width_scatter(
                    self._widths(lo, hi), lo, bounds[part + 1], cursor, index, bounds[part]
                )

        for _ in _in_order(place, parts, parts):
            pass
        return index

    def close(self) -> None:
        """Delete the temporary file of the index, if any (also done when collected)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    # ------------------------------------------------------------------ batches
    def _round_keys(self, base: int, width: int) -> np.ndarray:
        return K.feistel_round_keys(mix64_reference(base + width * 0x9E3779B97F4A7C15))

    def _members(self, width: int, lo: int, hi: int, base: int) -> np.ndarray:
        """The sequences at ranks ``lo .. hi - 1`` of ``width`` (its ranks permuted by its keyed
        bijection from ``base``)."""
        first, end = int(self.starts[width]), int(self.starts[width + 1])
        ranks = np.arange(lo, hi, dtype=np.int64)
        perm = K.feistel_permute(ranks, end - first, self._round_keys(base, width))
        return np.asarray(self.index[first + perm], dtype=np.int64)

    def layout(self, seed: int, epoch: int) -> np.ndarray:
        """Rows: the epoch's row order (:func:`padless.planners.packing.row_layout`)."""
        key = (seed, epoch)
        if self._layout is None or self._layout[0] != key:
            self._layout = (key, row_layout(self.num_rows, self.limits[2], seed, epoch))
        return self._layout[1]

    def batch(self, b: int, seed: int, epoch: int) -> np.ndarray:
        """The sequences of batch ``b`` for ``(seed, epoch)``. Budget: positions ``ends[b - 1] ..
        ends[b] - 1`` of the width order, each width's ranks permuted by its keyed bijection.
        Rows: the batch's rows of the epoch's row order, in the order they opened, each row's
        sequences longest first (what the packed collate rebuilds rows from)."""
        if self.kind == "rows":
            return self._rows_batch(b, seed, epoch)
        hi = int(self.ends[b])
        lo = int(self.ends[b - 1]) if b else 0
        base = int(_rng.key(seed, epoch, _rng.TIE_BREAK))
        starts = self.starts
        r = int(np.searchsorted(starts, lo, side="right")) - 1
        parts = []
        while lo < hi:
            first, end = int(starts[r]), int(starts[r + 1])
            top = min(hi, end)
            if top > lo:
                ranks = np.arange(lo - first, top - first, dtype=np.int64)
                perm = K.feistel_permute(ranks, end - first, self._round_keys(base, r))
                parts.append(np.asarray(self.index[first + perm], dtype=np.int64))
                lo = top
            r += 1
        return np.concatenate(parts) if len(parts) != 1 else parts[0]

    def _rows_batch(self, b: int, seed: int, epoch: int) -> np.ndarray:
        per = self.limits[2]
        rows = self.layout(seed, epoch)[b * per : (b + 1) * per]
        base = int(_rng.key(seed, epoch, _rng.TIE_BREAK))
        parts = []
        for row in rows.tolist():
            for v in range(int(self.row_bounds[row]), int(self.row_bounds[row + 1])):
                _, first, items, size = (int(x) for x in self.visits[v])
                lo = first - int(self.walk_first[size])
                parts.append(self._members(size, lo, lo + items, base))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def costs(self, seed: int = 0, epoch: int = 0) -> np.ndarray:
        """Every batch's cost: padded tokens (count × widest width) for a budget; for rows the
        real tokens of its rows (the packing cost; the epoch's row order decides them)."""
        if self.kind == "rows":
            return self._per_batch(self.row_tokens, seed, epoch)
        return self.batch_sizes * self.batch_widths

    def _per_batch(self, per_row: np.ndarray, seed: int, epoch: int) -> np.ndarray:
        """A per-row figure summed over each batch's rows, in the epoch's row order."""
        per = self.limits[2]
        values = per_row[self.layout(seed, epoch)]
        values = np.concatenate([values, np.zeros(-values.size % per, dtype=values.dtype)])
        return values.reshape(-1, per).sum(axis=1)

    # ------------------------------------------------------------------ Planner protocol
    @property
    def sizes(self) -> np.ndarray:
        return self.lengths

    @property
    def num_batches(self) -> int:
        if self.kind == "rows":
            return -(-self.num_rows // self.limits[2])
        return int(self.ends.size)

    def config(self) -> dict[str, Any]:
        return {**self.spec.as_dict(), "plan": "histogram"}

    def yielded_lengths(self, values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        return np.asarray(lengths[values], dtype=np.int64)

    def figures(self, seed: int = 0, epoch: int = 0) -> dict[str, Any]:
        """The plan's figures (the same every epoch): batches, sentences, tokens, padding."""
        batches = self.num_batches
        real = int(self.real_by_width[: self.planned_widths].sum())
        extra: dict[str, Any] = {}
        if self.kind == "rows":
            padded = self.num_rows * self.limits[0]
            sizes = self._per_batch(self.row_entries, seed, epoch)
            extra = {"rows": self.num_rows, "efficiency": real / padded if padded else 1.0}
        else:
            padded = int(self.costs().sum())
            sizes = self.batch_sizes
        return (
            PlanStats(
                batches=batches,
                sentences=int(self.starts[-1]),
                real_tokens=real,
                padded_slots=padded,
                padding_fraction=(1.0 - real / padded) if padded else 0.0,
                min_sentences=int(sizes.min()) if batches else 0,
                median_sentences=float(np.median(sizes)) if batches else 0.0,
                max_sentences=int(sizes.max()) if batches else 0,
                mean_sentences=float(sizes.mean()) if batches else 0.0,
            ).as_dict()
            | {"skipped": self.skipped}
            | extra
        )
