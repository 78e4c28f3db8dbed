"""Multi-corpus batching: zipped corpora and temperature mixtures of per-corpus samplers.

Two schemes for training on many corpora (language pairs, domains) at once:

* :func:`zip_lengths` for corpora used side by side, one example of each per index: the combined
  length of index ``i`` is the max over corpora of corpus ``k``'s length at ``i mod n_k``. Any
  planner or sampler then runs on the result.
* :class:`MixtureSampler` for a temperature mixture: every batch comes from one corpus, drawn with
  probability ``p_k ∝ (n_k / Σn)^(1/T)`` (or from explicit weights), batched by that corpus's own
  padless sampler.

Global indices of a mixture follow ``torch.utils.data.ConcatDataset`` of the corpora in the
order of the ``samplers`` dict: corpus ``k``'s index ``i`` is ``offset_k + i`` where ``offset_k``
is the total size of the corpora before it (``padless.torch.mixture_dataset`` builds that dataset).
"""

from __future__ import annotations

import bisect
import math
import numbers
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np

from ..core import _rng
from ..core._check import check_bool, check_choice, check_int, check_seed, positive_or_none
from ..core._keywords import checks_keywords
from ..core._schedule import steps_left
from ..core._state import Resumable, check_history, fingerprint, part_worlds
from ..core.plan import BatchPlan
from ..core.schedules import MAX_VALUE, Schedule
from ..io import lengths_of
from ..planners.spec import Planner
from .sampler import PlanSampler, _TokensPerStep, check_ranks

__all__ = [
    "MixtureSampler",
    "MixtureSchedule",
    "ZippedLengths",
    "stratified_counts",
    "temperature_probabilities",
    "zip_lengths",
]

UNITS = ("sentences", "tokens")
PHASE_BINS = 16  # stats(): at most this many phases per epoch (a ramp is cut in equal bins)
DRAWS = ("stratified", "independent")


# ---------------------------------------------------------------------------------------- zip
class ZippedLengths:
    """Combined lengths of corpora used side by side, and how much each shorter corpus repeats.

    It behaves as a lengths array (``np.asarray(z)``, ``len(z)``), so every planner and sampler
    accepts it in place of lengths.

    Attributes:
        lengths: int64 (N,) or (N, F) combined lengths, N = the longest corpus's size.
        sizes: each corpus's own size n_k.
        repeated: per corpus, how many examples were reused past its end to reach N (N − n_k;
            0 for the longest corpus). A corpus of size n_k is used N / n_k times over
            (:attr:`passes`).
    """

    __slots__ = ("lengths", "sizes", "repeated")

    def __init__(self, lengths: np.ndarray, sizes: tuple[int, ...]) -> None:
        self.lengths = lengths
        self.sizes = sizes
        n = int(lengths.shape[0])
        self.repeated = tuple(n - s for s in sizes)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy:
            return np.array(self.lengths, dtype=dtype, copy=True)
        return np.asarray(self.lengths, dtype=dtype)

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def passes(self) -> tuple[float, ...]:
        """How many times over each corpus is used (N / n_k; 1.0 for the longest)."""
        n = len(self)
        return tuple(n / s for s in self.sizes)

    def source_indices(self, corpus: int, indices: Any) -> np.ndarray:
        """Map combined indices to corpus ``corpus``'s own indices (``i mod n_k``).

        >>> zip_lengths([[1, 2, 3, 4, 5], [7, 8]]).source_indices(1, [0, 3, 4]).tolist()
        [0, 1, 0]
        """
        k = check_int("corpus", corpus, minimum=0)
        if k is None or k >= len(self.sizes):
            raise ValueError(f"corpus must be in [0, {len(self.sizes)}), got {corpus}")
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise ValueError(f"indices must lie in [0, {len(self)}), got {idx.min()}..{idx.max()}")
        return idx % self.sizes[k]

    def __repr__(self) -> str:
        return (
            f"ZippedLengths(size={len(self)}, sizes={list(self.sizes)}, "
            f"repeated={list(self.repeated)})"
        )


def _wrap_max(out: np.ndarray, src: np.ndarray) -> None:
    """``out[i] = max(out[i], src[i mod len(src)])`` in place, without tiling ``src``."""
    n, total = src.shape[0], out.shape[0]
    full = total // n
    if full:
        view = out[: full * n].reshape(full, n, *out.shape[1:])
        np.maximum(view, src, out=view)
    rest = total - full * n
    if rest:
        tail = out[full * n :]
        np.maximum(tail, src[:rest], out=tail)


def zip_lengths(corpora: Sequence[Any]) -> ZippedLengths:
    """Combine corpora used side by side into one lengths array (max over corpora, wrap-around).

    Index ``i`` of the result stands for example ``i mod n_k`` of every corpus ``k``; its length is
    the max of those lengths, so a token budget planned on it holds for every corpus. The combined
    size is the longest corpus's; shorter corpora wrap around, and ``repeated`` says how many of
    their examples were reused. Per-field lengths ((n_k, F), the same F for all) combine field by
    field.

    Args:
        corpora: a list of lengths, one per corpus (anything :func:`padless.lengths_of` takes).

    Returns:
        A :class:`ZippedLengths`, usable directly as lengths by every planner and sampler.

    Raises:
        TypeError: ``corpora`` is not a list of lengths.
        ValueError: no corpora, an empty corpus, or corpora with different field counts.

    Cost: O(N · K) time, one (N,) or (N, F) int64 output; no tiled copies of shorter corpora.

    >>> z = zip_lengths([[3, 9, 4, 1, 2], [5, 2]])
    >>> z.lengths.tolist(), z.repeated
    ([5, 9, 5, 2, 5], (0, 3))
    """
    if isinstance(corpora, (str, bytes, np.ndarray, Mapping)) or not isinstance(corpora, Sequence):
        raise TypeError(
            f"corpora must be a list of lengths, one per corpus, got {type(corpora).__name__}"
        )
    if len(corpora) == 0:
        raise ValueError("corpora must hold at least one corpus, got an empty list")
    arrays: list[np.ndarray] = []
    for k, item in enumerate(corpora):
        try:
            lens = lengths_of(item)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"corpora[{k}]: {exc}") from exc
        if lens.shape[0] == 0:
            raise ValueError(
                f"corpora[{k}] is empty; every corpus needs at least one example to wrap around"
            )
        if arrays and lens.shape[1:] != arrays[0].shape[1:]:
            raise ValueError(
                f"corpora must all have the same fields: corpora[0] has shape "
                f"{arrays[0].shape}, corpora[{k}] has shape {lens.shape}"
            )
        arrays.append(lens)
    longest = max(range(len(arrays)), key=lambda i: arrays[i].shape[0])
    out = np.array(arrays[longest], dtype=np.int64, copy=True, order="C")
    for k, lens in enumerate(arrays):
        if k != longest:
            _wrap_max(out, lens)
    return ZippedLengths(out, tuple(int(a.shape[0]) for a in arrays))


# ---------------------------------------------------------------------------------------- mixture
@dataclass(frozen=True, eq=False)
class MixtureSchedule:
    """One mixture epoch's global batch schedule (all ranks, before sharding).

    Slot ``j`` is batch ``batch[j]`` of the plan that corpus ``corpus[j]``'s sampler returns for
    its epoch ``sub_epoch[j]`` (``sampler.epoch_plan(sub_epoch[j])``), in local indices; add
    ``offsets[corpus[j]]`` for global ones.
    """

    names: tuple[str, ...]
    offsets: tuple[int, ...]
    corpus: np.ndarray
    sub_epoch: np.ndarray
    batch: np.ndarray

    def __len__(self) -> int:
        return int(self.corpus.shape[0])


def _yields_tokens(sub: Any) -> bool:
    """Whether a corpus yields token arrays (an ``LMStream``: it says so, ``yields``, and serves
    a mixture through ``epoch_plan`` and ``mixture_batch``) rather than indices of a dataset."""
    return getattr(sub, "yields", "indices") == "tokens"


def _fresh(sub: Any) -> bool:
    """Whether a corpus starts a fresh epoch of its own at every mixture epoch: a shuffling
    sampler, or an LM stream (each epoch its own offset); else its one order continues."""
    return True if _yields_tokens(sub) else bool(sub.shuffle)


def _check_corpus(name: str, sub: Any) -> None:
    """Refuse, when the mixture is built, a corpus whose batches a mixture cannot deliver as
    that corpus would: a mixture reads each corpus's batches from its whole-epoch plan."""
    skips = getattr(sub, "_skips", ())
    if skips:
        raise ValueError(
            f"samplers[{name!r}] has batches left out by skip() ({len(skips)} ranges), and a "
            "MixtureSampler reads each corpus's whole-epoch plan from its own position: call "
            "skip() on the MixtureSampler, whose positions are the mixed batches"
        )
    if _yields_tokens(sub):
        if not callable(getattr(sub, "mixture_batch", None)):
            raise TypeError(
                f"samplers[{name!r}] yields tokens but cannot serve a mixture (no "
                f"mixture_batch), got {type(sub).__name__}"
            )
        return
    if not isinstance(sub, PlanSampler):
        raise TypeError(
            f"samplers[{name!r}] must be a padless sampler over one corpus (a PlanSampler: "
            f"PlanSampler(lengths, spec) or a shortcut such as TokenBudgetSampler) or an "
            f"LMStream, got {type(sub).__name__}; a MixtureSampler mixes corpora (a "
            "StreamBatcher or another mixture is not a corpus of one)"
        )
    if sub.window is not None:
        raise ValueError(
            f"samplers[{name!r}] plans its epochs in windows (window={sub.window!r}), and a "
            "MixtureSampler draws from each corpus's whole-epoch plan: build that corpus's "
            "sampler without window= (or mix the corpora's lengths into one windowed sampler)"
        )
    if sub.batches_per_step is not None:
        raise ValueError(
            f"samplers[{name!r}] groups its batches into optimizer steps ("
            f"{_steps_text(sub.batches_per_step):.80}), and a MixtureSampler yields one mixed batch per "
            "slot without steps of a corpus's own: build that corpus's sampler without "
            "batches_per_step= or tokens_per_step= (accumulate over the mixture's batches in "
            "the training loop)"
        )


def _steps_text(steps: Any) -> str:
    """How a sampler was given its optimizer steps, for a message."""
    return repr(steps) if isinstance(steps, _TokensPerStep) else f"batches_per_step={steps!r}"


def split_codes(
    codes: Any, offsets: Sequence[int], sizes: Sequence[int], coded: bool
) -> tuple[np.ndarray, np.ndarray]:
    """A mixture's codes (or plain indices: ``coded`` False) as (corpus number, the corpus's
    own code): the inverse of :func:`mixture_codes`."""
    idx = np.asarray(codes, dtype=np.int64)
    total = int(offsets[-1]) + int(sizes[-1])
    if coded:  # codes of pieces and warm-ups: any non-negative int64
        if idx.size and idx.min() < 0:
            raise ValueError(f"indices must be non-negative codes, got {idx.min()}")
        m = idx // total
        idx = idx - m * total
    elif idx.size and (idx.min() < 0 or idx.max() >= total):
        raise ValueError(f"indices must lie in [0, {total}), got {idx.min()}..{idx.max()}")
    k = np.searchsorted(np.asarray(offsets), idx, side="right") - 1
    local = idx - np.asarray(offsets, dtype=np.int64)[k]
    if coded:
        local = local + m * np.asarray(sizes, dtype=np.int64)[k]
    return k, local


def mixture_codes(codes: np.ndarray, offset: int, size: int, total: int) -> np.ndarray:
    """A corpus's codes as the mixture's: code ``i + m · size`` of the corpus at ``offset``
    (item ``i`` of its ``size``; ``m`` a piece or a warm-up's tag, 0 for a plain index) is
    ``offset + i + m · total`` (``total``: the items of all corpora). A plain index ``i`` is
    ``offset + i``, its index in the ConcatDataset of the corpora; :meth:`MixtureSampler.corpus_of`
    inverts it.

    >>> mixture_codes(np.array([0, 2, 3 + 2 * 4]), offset=5, size=4, total=9).tolist()
    [5, 7, 26]
    """
    m, i = np.divmod(codes, size)
    if m.size and int(m.max()) > (np.iinfo(np.int64).max - total) // total:
        raise ValueError(
            f"a corpus's code {int(codes[int(np.argmax(m))])} (a piece or warm-up tag of a corpus "
            f"of {size} items) passes int64 as a code of a mixture of {total} items: mix fewer "
            "items, or cut fewer pieces (a larger capacity)"
        )
    return offset + i + m * total


def _values(sub: PlanSampler, plan: BatchPlan) -> np.ndarray:
    """What corpus sampler ``sub`` yields of ``plan``'s batches, parallel to its indices:
    codes where it yields pieces (a mixture corpus plans whole epochs: windows are refused);
    an LM stream's plan holds its slots, which it gathers itself."""
    if _yields_tokens(sub):
        return plan.indices
    return cast(Planner, sub.planner).values(plan)


class _FreshStream:
    """A shuffling corpus's batches in one mixture epoch: fresh sampler epochs laid end to end.

    Cycle ``c`` of mixture epoch ``e`` is the sampler's epoch ``e · num_batches + c``. Such
    numbers never collide: one mixture epoch cannot start more cycles of a corpus than it has
    batches. Cycle lengths are learned by planning, lazily, in order; the plans of cycle 0 and of
    the latest cycle used are kept (so ``stats()`` before iterating costs no re-planning).
    """

    def __init__(self, name: str, sub: PlanSampler, first_epoch: int) -> None:
        self.name = name
        self.sub = sub
        self.first_epoch = first_epoch
        self.starts = [0]  # starts[c] = position of cycle c's first batch; one extra at the end
        self.orders: list[np.ndarray] = []
        self.plans: dict[int, BatchPlan] = {}  # cycle 0 (for the tail repeats) and the latest
        self.values: dict[int, np.ndarray] = {}  # what the sampler yields of those plans

    def _keep(self, cycle: int, plan: BatchPlan) -> None:
        self.plans = {c: p for c, p in self.plans.items() if c == 0}
        self.plans[cycle] = plan
        self.values = {c: v for c, v in self.values.items() if c == 0}
        self.values[cycle] = _values(self.sub, plan)

    def _grow(self, position: int) -> None:
        while self.starts[-1] <= position:
            cycle = len(self.orders)
            epoch = self.first_epoch + cycle
            plan, order = self.sub.epoch_plan(epoch)
            if len(plan) == 0:
                raise ValueError(
                    f"corpus {self.name!r} has an epoch with no batches (its sampler's epoch "
                    f"{epoch}); a mixture needs at least one batch in every epoch it draws from"
                )
            self.orders.append(order)
            self.starts.append(self.starts[-1] + len(plan))
            self._keep(cycle, plan)

    def batch(self, position: int) -> np.ndarray:
        self._grow(position)
        cycle = bisect.bisect_right(self.starts, position) - 1
        plan = self.plans.get(cycle)
        if plan is None:
            plan, _ = self.sub.epoch_plan(self.first_epoch + cycle)
            self._keep(cycle, plan)
        b = int(self.orders[cycle][position - self.starts[cycle]])
        return self.values[cycle][plan.offsets[b] : plan.offsets[b + 1]]

    def locate(self, position: int) -> tuple[int, int]:
        """(the corpus's epoch, its batch) at ``position`` of this mixture epoch's stream."""
        self._grow(position)
        cycle = bisect.bisect_right(self.starts, position) - 1
        return self.first_epoch + cycle, int(self.orders[cycle][position - self.starts[cycle]])

    def schedule(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        if count == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        self._grow(count - 1)
        pos = np.arange(count, dtype=np.int64)
        cycles = np.searchsorted(np.asarray(self.starts), pos, side="right") - 1
        batches = np.concatenate(self.orders)[:count]
        return self.first_epoch + cycles, batches.astype(np.int64)

    def first_length(self) -> int:
        """Batches in the first sampler epoch of this mixture epoch."""
        self._grow(0)
        return self.starts[1]

    def cycles(self, count: int) -> tuple[int, float]:
        """Epochs of its own the corpus starts within its first ``count`` batches, and passes."""
        if count == 0:
            return 0, 0.0
        self._grow(count - 1)
        started = bisect.bisect_left(self.starts, count)
        last = started - 1
        used = count - self.starts[last]
        length = self.starts[last + 1] - self.starts[last]
        return started, last + used / length


class _FixedStream:
    """A non-shuffling corpus's batches: its one fixed plan order, repeated forever.

    The stream continues across mixture epochs (it starts where the previous epochs left it), so
    a corpus that is subsampled still uses every batch equally often over time.
    """

    def __init__(self, name: str, sub: PlanSampler, start: int) -> None:
        self.name = name
        self.sub = sub
        self.start = start
        self.plan, self.order = sub.epoch_plan(0)
        self.values = _values(sub, self.plan)
        self.length = len(self.plan)
        if self.length == 0:
            raise ValueError(
                f"corpus {name!r} has no batches (its sampler's plan is empty); a mixture needs "
                "at least one batch per corpus it draws from"
            )

    def batch(self, position: int) -> np.ndarray:
        b = int(self.order[(self.start + position) % self.length])
        return self.values[self.plan.offsets[b] : self.plan.offsets[b + 1]]

    def locate(self, position: int) -> tuple[int, int]:
        """(the pass over its order, its batch) at ``position`` of this mixture epoch's stream."""
        cycle, at = divmod(self.start + position, self.length)
        return cycle, int(self.order[at])

    def schedule(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        pos = self.start + np.arange(count, dtype=np.int64)
        return pos // self.length, self.order[pos % self.length].astype(np.int64)

    def cycles(self, count: int) -> tuple[int, float]:
        if count == 0:
            return 0, 0.0
        first, end = self.start, self.start + count
        started = (end - 1) // self.length - (first - 1) // self.length
        return started, count / self.length


class _MixEpoch:
    """One mixture epoch: the corpus of each global slot, its rank within that corpus, streams."""

    __slots__ = ("epoch", "parts", "choice", "occ", "counts", "streams")

    def __init__(
        self,
        epoch: int,
        parts: tuple[tuple[int, int], ...],
        choice: np.ndarray,
        occ: np.ndarray,
        counts: np.ndarray,
        streams: list[_FreshStream | _FixedStream],
    ) -> None:
        self.epoch = epoch
        self.parts = parts
        self.choice = choice
        self.occ = occ
        self.counts = counts
        self.streams = streams


def _check_temperature(value: Any) -> float:
    rule = "a positive number or float('inf')"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"temperature must be {rule}, got {type(value).__name__} {value!r}")
    t = float(value)
    if math.isnan(t) or t <= 0:
        raise ValueError(f"temperature must be {rule}, got {value!r}")
    return t


def _weight_entries(weights: Any, names: tuple[str, ...]) -> list[Any]:
    """``weights`` as one entry per corpus, in the samplers' order (a dict or a sequence)."""
    if isinstance(weights, Mapping):
        missing = [n for n in names if n not in weights]
        unknown = [k for k in weights if k not in names]
        if missing or unknown:
            raise ValueError(
                f"weights must have one entry per corpus {list(names)}; "
                f"missing {missing}, unknown {unknown}"
            )
        return [weights[n] for n in names]
    if isinstance(weights, (str, bytes, Schedule)) or not hasattr(weights, "__len__"):
        raise TypeError(
            "weights must be a dict name -> weight (a number or a Schedule) or a sequence of "
            f"them in the samplers' order, got {type(weights).__name__}"
        )
    values = list(weights)
    if len(values) != len(names):
        raise ValueError(
            f"weights must hold {len(names)} weights (one per corpus, in the samplers' "
            f"order), got {len(values)}"
        )
    return values


def _schedule_floor(schedule: Schedule) -> float:
    """The least value ``schedule`` takes: its values, or a ramp's ends (ramps are monotone)."""
    d = schedule.as_dict()
    found = [d[k] for k in ("value", "start", "end") if k in d] + list(d.get("values", []))
    return float(min(found))


def _check_weights(
    weights: Any, names: tuple[str, ...]
) -> tuple[np.ndarray, tuple[Schedule, ...] | None]:
    """Constant weights (float64, one per corpus), and the schedules when any weight changes
    over the steps (``None`` when all are constant: numbers or constant schedules)."""
    values = _weight_entries(weights, names)
    schedules: list[Schedule] = []
    for name, w in zip(names, values, strict=True):
        label = f"weights[{name!r}]"
        if isinstance(w, (Schedule, Mapping)):
            sched = Schedule.of(w, name=label)
            if not math.isfinite(_schedule_floor(sched)) or _schedule_floor(sched) < 0:
                raise ValueError(f"{label} must never be negative, got {sched!r}")
        elif isinstance(w, (bool, np.bool_)) or not isinstance(w, numbers.Real):
            raise TypeError(
                f"{label} must be a number, a Schedule or a schedule's dict, "
                f"got {type(w).__name__} {w!r}"
            )
        else:
            if not math.isfinite(float(w)) or float(w) < 0:
                raise ValueError(f"{label} must be a non-negative finite number, got {w!r}")
            sched = Schedule.constant(float(w))
        schedules.append(sched)
    out = np.array([float(s.value(0)) for s in schedules], dtype=np.float64)
    if all(s.is_constant for s in schedules):
        if out.sum() <= 0:
            raise ValueError(f"weights must not all be zero, got {[float(w) for w in out]}")
        return out, None
    return out, tuple(schedules)


def _candidate_steps(schedules: tuple[Schedule, ...]) -> np.ndarray:
    """Steps where weights that are all zero somewhere are all zero first: 0, every piece's
    start, every ramp's ends (each weight's zero steps are pieces, or one end of a monotone ramp,
    so where they all meet starts at one of these)."""
    found = {0}
    for sched in schedules:
        d = sched.as_dict()
        steps = d.get("steps", [])
        if isinstance(steps, list):
            found.update(steps)
        elif "begin" in d:
            found.update((d["begin"], d["begin"] + steps))
        if "total_steps" in d:
            found.add(d["total_steps"])
    return np.array(sorted(found), dtype=np.int64)


def _cuts(schedule: Schedule) -> list[int]:
    """The steps where ``stats()`` starts a phase for ``schedule``: its changes, or, when it has
    more than ``PHASE_BINS`` (a ramp), ``PHASE_BINS`` equal bins from its first change to its
    last (the ramp's end included)."""
    changes = schedule.changes()
    if len(changes) <= PHASE_BINS:
        return list(changes)
    edges = np.linspace(changes[0], changes[-1] + 1, PHASE_BINS + 1).round()
    return sorted({int(x) for x in edges})


def _weights_to_p(rows: np.ndarray, temperature: float | None) -> np.ndarray:
    """Probabilities from weight rows (…, K): ``p ∝ (w / Σw)^(1/T)``, ``w / Σw`` for ``T`` None
    or 1; a weight of 0 stays 0 (``T = inf``: uniform over the corpora of positive weight)."""
    if temperature is None or temperature == 1.0:
        return rows / rows.sum(axis=-1, keepdims=True)
    if math.isinf(temperature):
        raw = (rows > 0).astype(np.float64)
        return raw / raw.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        logs = np.log(rows / rows.sum(axis=-1, keepdims=True)) / temperature
    raw = np.exp(logs - logs.max(axis=-1, keepdims=True))
    return raw / raw.sum(axis=-1, keepdims=True)


def _stratified_rows(probs: np.ndarray, lens: np.ndarray, gen: np.random.Generator) -> np.ndarray:
    """:func:`stratified_counts` for many phases at once: row ``i`` splits ``lens[i]`` draws by
    ``probs[i]`` (floor or ceil of each ``p · len``, round-ups by systematic sampling with one
    uniform number per row, ``gen.random(len(lens))``). Vectorised: O(rows · K)."""
    rows, k = probs.shape
    target = probs * lens[:, None]
    base = np.floor(target).astype(np.int64)
    frac = target - base
    left = np.maximum(lens - base.sum(axis=1), 0)
    u = np.asarray(gen.random(rows))
    if not left.any():
        return base
    edges = np.cumsum(frac, axis=1)
    last = edges[:, -1].copy()
    live = left > 0
    edges[live] *= (left[live] / last[live])[:, None]
    edges[:, -1] = left
    offset = np.zeros(rows, dtype=np.float64)  # rows laid end to end, one apart
    np.cumsum(left[:-1] + 1, out=offset[1:])
    row = np.repeat(np.arange(rows), left)
    first = np.repeat(np.cumsum(left) - left, left)
    points = u[row] + (np.arange(row.size) - first) + offset[row]
    flat = (edges + offset[:, None]).ravel()
    picked = np.searchsorted(flat, points, side="right") - row * k
    top = k - 1 - np.argmax((frac > 0)[:, ::-1], axis=1)  # float round-off at a row's end
    picked = np.where(picked >= k, top[row], np.maximum(picked, 0))
    return base + np.bincount(row * k + picked, minlength=rows * k).reshape(rows, k)


def temperature_probabilities(amounts: Any, temperature: float) -> np.ndarray:
    """Return p_k ∝ (n_k / Σn)^(1/T) for corpus amounts n_k (T = inf: uniform).

    Computed in log space, so very small temperatures (p close to one-hot) do not underflow.

    >>> temperature_probabilities([900, 100], 1.0).tolist()
    [0.9, 0.1]
    >>> temperature_probabilities([900, 100], float("inf")).tolist()
    [0.5, 0.5]
    >>> temperature_probabilities([900, 100], 2.0).round(4).tolist()
    [0.75, 0.25]
    """
    try:
        n = np.asarray(amounts, dtype=np.float64)
    except (TypeError, ValueError):  # text, mappings, ragged lists: numbers they are not
        raise TypeError(
            f"amounts must be a list of non-negative numbers, got {type(amounts).__name__} "
            f"{amounts!r:.60}"
        ) from None
    t = _check_temperature(temperature)
    if n.ndim != 1 or n.size == 0 or np.any(n < 0) or not np.all(np.isfinite(n)):
        raise ValueError(f"amounts must be non-negative finite numbers, got {amounts!r}")
    if n.sum() <= 0:
        raise ValueError(f"amounts must not all be zero, got {amounts!r}")
    if math.isinf(t):
        return np.full(n.size, 1.0 / n.size)
    if t == 1.0:
        return n / n.sum()
    with np.errstate(divide="ignore"):
        logs = np.log(n / n.sum()) / t
    raw = np.exp(logs - logs.max())
    return raw / raw.sum()


def _check_draw(p: Any, total: Any, gen: Any) -> tuple[np.ndarray, int]:
    """:func:`stratified_counts`' arguments checked: probabilities, a draw count, a Generator."""
    if isinstance(p, (str, bytes)):
        raise TypeError(f"p must be an array of probabilities, got {type(p).__name__} {p!r:.40}")
    try:
        probs = np.asarray(p, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(
            f"p must be an array of probabilities, got {type(p).__name__} {p!r:.40}"
        ) from None
    ok = probs.ndim == 1 and probs.size > 0 and np.all(np.isfinite(probs)) and np.all(probs >= 0)
    if not ok or abs(float(probs.sum()) - 1.0) > 1e-9:
        raise ValueError(f"p must be a 1-D array of probabilities summing to 1, got {p!r:.60}")
    count = check_int("total", total, minimum=0)
    if count is None or count > 1 << 53:  # p_k · total must stay exact in float64
        raise ValueError(f"total must be <= 2**53 draws, got {total}")
    if not isinstance(gen, np.random.Generator):
        raise TypeError(f"gen must be a numpy.random.Generator, got {type(gen).__name__}")
    return probs, count


def stratified_counts(p: np.ndarray, total: int, gen: np.random.Generator) -> np.ndarray:
    """Split ``total`` draws into counts within one of ``p_k · total``, unbiased.

    Each count is ``p_k · total`` rounded down or up; the ``r`` round-ups go to corpora by
    systematic sampling (one uniform number), so corpus ``k`` is rounded up with probability
    equal to its fractional part and ``E[count_k] = p_k · total`` exactly. A corpus with
    ``p_k = 0`` never gets a draw.

    >>> gen = np.random.default_rng(0)
    >>> stratified_counts(np.array([0.5, 0.25, 0.25]), 10, gen).tolist() in ([5, 3, 2], [5, 2, 3])
    True
    """
    p, total = _check_draw(p, total, gen)
    target = p * total
    base = np.floor(target).astype(np.int64)
    frac = target - base
    left = int(total - base.sum())
    u = gen.random()
    if left <= 0:
        return base
    edges = np.cumsum(frac)
    edges *= left / edges[-1]
    edges[-1] = left
    points = u + np.arange(left, dtype=np.float64)
    picked = np.searchsorted(edges, points, side="right")
    picked[picked >= p.size] = int(np.flatnonzero(frac > 0)[-1])  # float round-off at the end
    return base + np.bincount(picked, minlength=p.size).astype(np.int64)


class MixtureSampler(Resumable):
    """Batch sampler mixing per-corpus padless samplers; each batch comes from one corpus.

    Each mixture epoch has ``num_batches`` global batches. The corpus of each is drawn at random
    (from the stream ``(seed, epoch, MIXTURE)``) with probability ``p_k ∝ (n_k / Σn)^(1/T)``,
    where ``n_k`` counts sentences or tokens (``unit``); ``T = 1`` is proportional to size and
    ``T = float('inf')`` uniform. Explicit ``weights`` replace the sizes ``n_k`` (with a
    temperature: ``p_k ∝ (w_k / Σw)^(1/T)``; without, ``p_k ∝ w_k``). With neither,
    ``T = 1``: a mixture then draws corpora in proportion to their sizes.

    ``draw="stratified"`` (default) gives corpus ``k`` exactly ``p_k · num_batches`` batches per
    epoch, rounded up or down at random without bias (:func:`stratified_counts`), in a uniformly
    random order: each slot is still from corpus ``k`` with probability ``p_k``, and the epoch's
    shares are within ``1 / num_batches`` of ``p_k`` (fairseq's sampled multi-corpus datasets
    also fix the per-epoch counts). ``draw="independent"`` draws every slot's corpus
    independently (shares then scatter by about ``sqrt(p_k (1 - p_k) / num_batches)``).

    A corpus's batches are those of its own sampler, epoch after epoch: when it runs out it starts
    its own next epoch, so small corpora are upsampled and large ones subsampled without bias.

    * A shuffling sampler (``shuffle=True``, the default) starts a fresh epoch at every mixture
      epoch: cycle ``c`` of mixture epoch ``e`` is its epoch ``e · num_batches + c`` (in mixture
      epoch 0: its epoch ``c``). Every sampler epoch is a new random order, so a subsampled
      corpus gets a uniformly random subset of its batches each mixture epoch.
    * A non-shuffling sampler's fixed plan order is one endless stream that continues across
      mixture epochs, so its batches are used in turn, equally often.

    ``stats()`` reports, per corpus, p_k, the observed share of batches, how many epochs of its
    own it started (``cycles``) and how many times over its batches were used (``passes``).

    Weights over time: a weight may be a :class:`padless.Schedule` (or its dict) of the global
    step, e.g. ``{"web": Schedule.piecewise([0, 9000], [0.7, 0.1]), "code": 0.3}`` for an
    annealing phase. The rules:

    * The step of global slot ``j`` of epoch ``e`` is ``e · steps_per_epoch + j // world_size``
      (:meth:`slot_steps`; ``steps_per_epoch`` = the epoch's steps per rank under the tail
      policy, counted at the world size the epoch starts at). After an elastic resume the slots
      from the new world size's first position on continue from the step reached there. Skips
      (:meth:`skip`) leave batches out without moving the schedule.
    * Each batch's corpus is drawn with the probabilities at its step, ``p_k(s) ∝ w_k(s)`` (with
      ``temperature``: ``(w_k(s) / Σw(s))^(1/T)``, a weight of 0 is never drawn). The epoch's
      steps are cut into phases, runs of steps with equal probabilities (a float ramp: every
      step its own); ``draw="stratified"`` gives each phase ``p_k · its slots`` batches of
      corpus ``k``, rounded up or down without bias, in a uniformly random order within the
      phase; ``"independent"`` draws each phase's counts from a multinomial. The draws of an
      epoch come from the stream ``(seed, epoch, MIXTURE_STEPS)`` (child: the position a world
      size's part starts at), vectorised: O(slots + phases · corpora), no replay on resume; a
      part run at another world size keeps the draws it had, so elastic resume stays exact.
    * A corpus whose weight is high in a phase runs out as with constant weights: it starts its
      own next epoch (shuffling samplers: a fresh one; others: their order again), so it is
      upsampled; ``cycles`` and ``passes`` count it.
    * Weights that never change (numbers, constant schedules) draw exactly as numbers always did
      (stream ``(seed, epoch, MIXTURE)``); only then does the fingerprint stay today's. The
      schedules (``as_dict()``) and the temperature are settings a run may change: a state
      saved under other weights or another temperature continues the epoch with the new ones
      (what the old ones drew is recomputed from the state; docs/schedules.md).
    * ``stats()`` adds ``phases``: the epoch's steps cut where a weight changes (a ramp of more
      than ``PHASE_BINS`` changes: that many equal bins over it), each with its batches and per
      corpus the mean scheduled ``p`` beside the realised ``share``.

    Global indices: corpus ``k``'s index ``i`` is yielded as ``offset_k + i``, where
    ``offset_k`` is the total size of the corpora before it in the dict's order, i.e. the index
    into ``torch.utils.data.ConcatDataset`` of the corpora in that order (see
    ``padless.torch.mixture_dataset``). Each yielded batch is what the corpus's sampler yields for
    that plan batch (``plan[b]``), shifted by its offset. A corpus whose sampler yields codes
    ``i + m · n_k`` (pieces of split or decomposed sequences, a warm-up's tags: ``m > 0``) has
    them yielded as ``offset_k + i + m · N`` (:func:`mixture_codes`; ``N`` the items of all
    corpora; :meth:`corpus_of` splits them back, :meth:`needs_pieces` says which corpus yields
    them), served by ``padless.torch.mixture_dataset(datasets, mixture)`` and laid out by
    ``padless.torch.collate_for(mixture)``. A corpus that warms up delivers each batch in the
    form of the mixture's step of its position: the step its weights are read at
    (:meth:`slot_steps`; the tail's repeats at their own step; skips do not move it).

    Ranks: global slot ``p + s · world_size + r`` goes to rank ``r``, as in
    :class:`padless.sampling.sampler.PlanSampler`: equal batch counts, the same tail policy
    (``drop_last=False`` completes the last step with the epoch's first batches), and the same
    global-position ``state_dict`` (elastic resume across world sizes).

    Args:
        samplers: dict name → padless sampler over one corpus (any strategy), each built with
            ``world_size=1``; the mixture shards over ranks itself. Their ``rank`` and
            ``drop_last`` are not used. A windowed or histogram sampler is refused when the
            mixture is built (a mixture reads whole-epoch plans), and so is one with
            ``batches_per_step`` or ``tokens_per_step`` or a ``skip()`` (the mixture's slots
            are its positions: skip the mixture). A corpus may warm up, split,
            truncate or decompose its sequences: the mixture yields its codes (below).
        temperature: T > 0, or ``float('inf')`` for uniform; with ``weights``, applied to them
            (``p ∝ (w / Σw)^(1/T)``; uniform over the corpora of positive weight for ``inf``).
        weights: dict name → weight, or a sequence in the samplers' order; each a number or a
            :class:`padless.Schedule` of the global step (or its ``as_dict()``), never negative,
            not all zero at any step. A corpus of weight 0 is never drawn.
        unit: ``"sentences"`` (n_k = corpus size) or ``"tokens"`` (n_k = Σ sizes, a sequence's
            size being its max over fields); used with the temperature.
        num_batches: global batches per mixture epoch; default, the sum of the corpora's batch
            counts in their epoch 0.
        seed: non-negative int for the corpus draws (each sampler keeps its own seed).
        rank, world_size: this process's shard.
        drop_last: drop the incomplete last step instead of completing it with repeats.
        draw: ``"stratified"`` (exact per-epoch shares) or ``"independent"`` (i.i.d. slots).

    Cost: per mixture epoch, O(num_batches) vectorised work for the corpus draws (weight
    schedules: O(num_batches log num_batches + steps · corpora), the schedules read once per
    step of the epoch, and once more per world-size part of an elastic resume), plus the
    corpora's own plans — lazily, one sampler epoch at a time as iteration reaches it.
    ``__len__`` plans nothing beyond what the default ``num_batches`` needs (each corpus's
    epoch 0). Resume recomputes the epoch's draws and the sampler epochs around the position; no
    batch is replayed. ``stats()`` and :meth:`epoch_schedule` plan every sampler epoch the
    mixture epoch touches. Memory: about 9 bytes per global batch, plus per corpus the plans of
    at most two of its epochs (the first of this mixture epoch and the current one) and the batch
    order of every epoch it started.

    >>> from padless.sampling.shortcuts import TokenBudgetSampler
    >>> a = TokenBudgetSampler([3, 5, 2, 7, 4, 6], max_tokens=8)
    >>> b = TokenBudgetSampler([2, 2], max_tokens=8)
    >>> mix = MixtureSampler({"a": a, "b": b}, temperature=float("inf"), num_batches=8, seed=3)
    >>> batches = list(mix)
    >>> len(batches), all(max(x) < 6 or min(x) >= 6 for x in batches)  # b's indices are 6, 7
    (8, True)
    """

    # a few words on each setting, for a wrong keyword given to another component
    about: ClassVar[dict[str, str]] = {
        "temperature": "p ∝ (n / Σn)^(1/T) over the corpora",
        "weights": "a weight per corpus, a number or a Schedule of the step",
        "unit": "what a corpus's size counts, 'sentences' or 'tokens'",
        "num_batches": "global batches per mixture epoch",
        "draw": "'stratified' or 'independent' corpus draws",
    }
    # what it says of a keyword it does not take
    keyword_notes: ClassVar[dict[str, str]] = {
        "shuffle": "shuffle is each corpus's sampler's setting (a shuffling one starts a fresh "
        "epoch at every mixture epoch, another continues its fixed order): give it to the "
        "PlanSampler of each corpus; the mixture draws which corpus each batch comes from",
    }

    @checks_keywords()
    def __init__(
        self,
        samplers: Mapping[str, Any],  # PlanSamplers or LMStreams (streams/ is beside sampling/)
        *,
        temperature: float | None = None,
        weights: Any = None,
        unit: str = "sentences",
        num_batches: int | None = None,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        draw: str = "stratified",
    ) -> None:
        if not isinstance(samplers, Mapping):
            raise TypeError(
                f"samplers must be a dict name -> padless sampler, got {type(samplers).__name__}"
            )
        if len(samplers) == 0:
            raise ValueError("samplers must hold at least one corpus, got an empty dict")
        for name, sub in samplers.items():
            if not isinstance(name, str):
                raise TypeError(
                    f"samplers keys must be corpus names (str), got {type(name).__name__} {name!r}"
                )
            _check_corpus(name, sub)
            if sub.world_size != 1:
                raise ValueError(
                    f"samplers[{name!r}] must be built with world_size=1 (MixtureSampler shards "
                    f"the mixed batches over ranks itself), got world_size={sub.world_size}"
                )
            if not _yields_tokens(sub) and sub.sizes.shape[0] == 0:
                raise ValueError(
                    f"samplers[{name!r}] has an empty corpus; every corpus needs at least one "
                    "sequence"
                )
        kinds = {n: _yields_tokens(sub) for n, sub in samplers.items()}
        if len(set(kinds.values())) > 1:
            lm = next(n for n, tokens in kinds.items() if tokens)
            seq = next(n for n, tokens in kinds.items() if not tokens)
            raise ValueError(
                f"samplers[{lm!r}] yields token arrays (an LMStream) and samplers[{seq!r}] "
                "indices of a dataset: a mixture's batches must be of one kind; mix LM streams "
                "with LM streams (a corpus of documents becomes one with "
                "LMStream(tokens of its documents)), or samplers with samplers"
            )
        #: what the mixture yields: "tokens" ((x, y) arrays of LM streams) or "indices"
        self.yields = "tokens" if any(kinds.values()) else "indices"
        self.unit = check_choice("unit", unit, UNITS)
        self.draw = check_choice("draw", draw, DRAWS)
        self.names: tuple[str, ...] = tuple(samplers)
        self.samplers: dict[str, PlanSampler] = dict(samplers)
        self._subs = [self.samplers[n] for n in self.names]
        # a corpus's items (an LM stream's: its tokens)
        self.corpus_sizes: tuple[int, ...] = tuple(
            int(s.num_tokens) if _yields_tokens(s) else int(s.sizes.shape[0]) for s in self._subs
        )
        self.corpus_offsets: tuple[int, ...] = tuple(
            int(x) for x in np.concatenate([[0], np.cumsum(self.corpus_sizes)[:-1]])
        )
        self._items = int(sum(self.corpus_sizes))
        # each corpus's step form (a warm-up: its batches in the form of their step), and
        # why its batches hold codes of pieces (None: plain indices)
        # (an LM stream cuts its warm-up itself: mixture_batch at the step)
        tokens = self.yields == "tokens"
        self._forms = [None if tokens else sub._step_form for sub in self._subs]
        self._pieces_of: dict[str, str | None] = {
            n: None if tokens else sub.spec.needs_pieces(sub.sizes)
            for n, sub in zip(self.names, self._subs, strict=True)
        }
        self._codes = any(why is not None for why in self._pieces_of.values())
        self.weights: np.ndarray | None = None
        self.weight_schedules: dict[str, Schedule] | None = None
        self._schedules: tuple[Schedule, ...] | None = None
        self.temperature: float | None = None
        if weights is not None:
            self.weights, self._schedules = _check_weights(weights, self.names)
            if temperature is not None:
                self.temperature = _check_temperature(temperature)
            if self._schedules is None:
                if self.temperature is None:
                    p = self.weights / self.weights.sum()
                else:
                    p = _weights_to_p(self.weights, self.temperature)
            else:
                self.weight_schedules = dict(zip(self.names, self._schedules, strict=True))
                self._probabilities(_candidate_steps(self._schedules))  # all zero at no step
                p = self._probabilities(np.zeros(1, dtype=np.int64))[0]
        else:
            self.temperature = 1.0 if temperature is None else _check_temperature(temperature)
            if self.unit == "sentences":
                amounts = np.asarray(self.corpus_sizes, dtype=np.float64)
            else:
                amounts = np.asarray(
                    [
                        float(s.num_tokens if _yields_tokens(s) else s.sizes.sum())
                        for s in self._subs
                    ]
                )
                if amounts.sum() <= 0:
                    raise ValueError(
                        "unit='tokens' needs at least one token over all corpora, got 0 tokens"
                    )
            p = temperature_probabilities(amounts, self.temperature)
        p.flags.writeable = False
        self.p: np.ndarray = p
        self._num_batches_arg = positive_or_none("num_batches", num_batches)
        self._num_batches = self._num_batches_arg
        self.seed = check_seed("seed", seed)
        self.rank, self.world_size = check_ranks(rank, world_size)
        self.drop_last = check_bool("drop_last", drop_last)
        self.epoch = 0
        self._reset_position()
        self._cache: _MixEpoch | None = None
        self._before: list[np.ndarray] = [np.zeros(len(self.names), dtype=np.int64)]
        self._before_at: dict[int, list[np.ndarray]] = {}  # schedules: per first world size
        self._fingerprint: str | None = None

    # ------------------------------------------------------------------ configuration
    @property
    def probabilities(self) -> dict[str, float]:
        """p_k per corpus name (with weight schedules: at step 0; see :meth:`probabilities_at`)."""
        return {n: float(x) for n, x in zip(self.names, self.p, strict=True)}

    @property
    def num_batches(self) -> int:
        """Global batches per mixture epoch (the default plans each corpus's epoch 0 once)."""
        if self._num_batches is None:
            total = sum(len(sub.epoch_plan(0)[0]) for sub in self._subs)
            if total == 0:
                raise ValueError(
                    "num_batches defaults to the corpora's batch count, which is 0 here; "
                    "pass num_batches"
                )
            self._num_batches = total
        return self._num_batches

    def needs_pieces(self) -> str | None:
        """Why this mixture yields codes that only its corpora's ``spec.pieces(dataset)`` serve
        (a corpus that warms up, splits or decomposes its sequences; the corpus named), or
        None: plain indices of the ConcatDataset of the corpora.
        ``padless.torch.mixture_dataset(datasets, mixture)`` serves both."""
        for name, why in self._pieces_of.items():
            if why is not None:
                return f"corpus {name!r}: {why}"
        return None

    def corpus_of(self, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        """Split global indices into (corpus number, index within that corpus).

        >>> from padless.sampling.shortcuts import TokenBudgetSampler
        >>> mix = MixtureSampler({"a": TokenBudgetSampler([1, 2, 3], max_tokens=4),
        ...                       "b": TokenBudgetSampler([4, 5], max_tokens=8)})
        >>> [x.tolist() for x in mix.corpus_of([0, 2, 3, 4])]
        [[0, 0, 1, 1], [0, 2, 0, 1]]
        """
        if self.yields == "tokens":
            raise ValueError(
                "a mixture of LM streams yields (x, y) token batches, not indices: there are no "
                "indices to split into corpora"
            )
        return split_codes(indices, self.corpus_offsets, self.corpus_sizes, self._codes)

    # ------------------------------------------------------------------ schedule
    def _draw_counts(self, gen: np.random.Generator) -> np.ndarray:
        """Batches of each corpus in a mixture epoch: the first draws of the epoch's generator."""
        m = self.num_batches
        if self.draw == "independent":
            return gen.multinomial(m, self.p).astype(np.int64)
        return stratified_counts(self.p, m, gen)

    def _counts(self, epoch: int, world: int | None = None) -> np.ndarray:
        if self._schedules is None:
            return self._draw_counts(_rng.rng(self.seed, epoch, _rng.MIXTURE))
        w = self.world_size if world is None else world
        counts, _, _ = self._phase_counts(epoch, 0, self.first_step(epoch, world=w), w)
        return counts.sum(axis=0)

    def corpus_counts(self, epoch: int | None = None) -> dict[str, int]:
        """Return how many of a mixture epoch's batches each corpus gives (default: this epoch).

        Cost: O(number of corpora); plans nothing (beyond the default ``num_batches``). With
        weight schedules, O(steps of the epoch · corpora).

        >>> from padless.sampling.shortcuts import TokenBudgetSampler
        >>> mix = MixtureSampler({"a": TokenBudgetSampler([1, 2], max_tokens=4),
        ...                       "b": TokenBudgetSampler([3], max_tokens=4)},
        ...                      weights={"a": 1, "b": 1}, num_batches=1000)
        >>> sum(mix.corpus_counts().values())
        1000
        """
        e = self.epoch if epoch is None else check_seed("epoch", epoch)
        if e == self.epoch and (self._changes or self._schedules is not None):
            counts = self._mix(e).counts
        else:
            counts = self._counts(e)
        return {n: int(c) for n, c in zip(self.names, counts, strict=True)}

    def _counts_before(self, epoch: int) -> np.ndarray:
        """Batches of each corpus in all mixture epochs before ``epoch`` (cached, O(epoch · K));
        with weight schedules, each earlier epoch drawn at the world size ``epoch`` starts at."""
        if self._schedules is None:
            before = self._before
            world = None
        else:
            world = self._parts(epoch)[0][1]
            before = self._before_at.setdefault(world, [self._before[0]])
        while len(before) <= epoch:
            e = len(before) - 1
            before.append(before[-1] + self._counts(e, world))
        return before[epoch]

    # ------------------------------------------------------------------ weight schedules
    @property
    def steps_per_epoch(self) -> int:
        """Steps (batches per rank) of a mixture epoch at this world size, tail policy included."""
        return steps_left(self.num_batches, 0, self.world_size, self.drop_last)

    def _parts(self, epoch: int) -> tuple[tuple[int, int], ...]:
        """``(first global position, world size)`` of each part of ``epoch`` run at one world
        size: the parts a loaded state ran at other world sizes, then this sampler's."""
        parts: list[tuple[int, int]] = []
        start = 0
        if epoch == self.epoch:
            for world, end in self._history:
                parts.append((start, world))
                start = end
        parts.append((start, self.world_size))
        return tuple(parts)

    def _check_epoch(self, epoch: int) -> None:
        """With weight schedules, refuse an epoch whose steps pass the schedules' 2**62 (when it
        is set or loaded, not at its first batch)."""
        if self._schedules is None:
            return
        end = (epoch + 1) * steps_left(self.num_batches, 0, 1, self.drop_last)
        if end > MAX_VALUE:
            raise ValueError(
                f"epoch {epoch} of a mixture with weight schedules reaches step {end}, past "
                "2**62 (the schedules' steps stay in int64 arithmetic); epochs count from 0"
            )

    def first_step(self, epoch: int | None = None, *, world: int | None = None) -> int:
        """The global step the weight schedules give epoch ``epoch``'s first batch (default: the
        current epoch): ``epoch · steps_per_epoch``, counted at the world size the epoch starts at
        (the first of a loaded state's elastic parts, else this sampler's).

        >>> from padless.sampling.shortcuts import TokenBudgetSampler
        >>> mix = MixtureSampler({"a": TokenBudgetSampler([1, 2], max_tokens=4)},
        ...                      num_batches=10, world_size=4)
        >>> mix.steps_per_epoch, mix.first_step(3)
        (3, 9)
        """
        e = self.epoch if epoch is None else check_seed("epoch", epoch)
        w = self._parts(e)[0][1] if world is None else world
        return e * steps_left(self.num_batches, 0, w, self.drop_last)

    def slot_steps(self, epoch: int | None = None) -> np.ndarray:
        """The global step of each of epoch ``epoch``'s ``num_batches`` global slots (default: the
        current epoch): within a part run at world size ``W`` from position ``a``, slot ``j`` is at
        ``step(a) + (j - a) // W``; a part's steps follow the earlier parts' (each ``ceil(its
        positions / its W)`` steps). The weight schedules are read at these steps.

        Cost: O(num_batches).
        """
        e = self.epoch if epoch is None else check_seed("epoch", epoch)
        return self._slot_steps(e, self._parts(e))

    def _slot_steps(self, epoch: int, parts: tuple[tuple[int, int], ...]) -> np.ndarray:
        m = self.num_batches
        out = np.empty(m, dtype=np.int64)
        for start, world, step in self._part_steps(epoch, parts):
            end = m
            later = [a for a, _ in parts if a > start]
            if later:
                end = min(later[0], m)
            out[start:end] = step + np.arange(end - start, dtype=np.int64) // world
        return out

    def _part_steps(
        self, epoch: int, parts: tuple[tuple[int, int], ...]
    ) -> list[tuple[int, int, int]]:
        """``(start, world size, step at start)`` of the parts that start inside the epoch."""
        m = self.num_batches
        step = self.first_step(epoch, world=parts[0][1])
        out = []
        for i, (start, world) in enumerate(parts):
            if start >= m:
                break
            out.append((start, world, step))
            if i + 1 < len(parts):
                end = min(parts[i + 1][0], m)
                step += -(-(end - start) // world)
        return out

    def _probabilities(self, steps: np.ndarray) -> np.ndarray:
        """(len(steps), K) probabilities at global ``steps`` from the weight schedules."""
        assert self._schedules is not None
        rows = np.stack([np.asarray(s.values(steps), np.float64) for s in self._schedules], -1)
        bad = ~np.isfinite(rows).all(axis=1) | (rows < 0).any(axis=1) | (rows.sum(axis=1) <= 0)
        if bad.any():
            i = int(np.argmax(bad))
            shown = {n: float(w) for n, w in zip(self.names, rows[i], strict=True)}
            raise ValueError(
                f"weights must be non-negative and not all zero at every step; at step "
                f"{int(steps[i])} they are {shown}"
            )
        return _weights_to_p(rows, self.temperature)

    def probabilities_at(self, steps: Any) -> np.ndarray:
        """The corpus probabilities at global ``steps`` (ints >= 0): a (len(steps), K) float64
        array, columns in the samplers' order (constant weights: ``p`` on every row).

        >>> from padless import Schedule
        >>> from padless.sampling.shortcuts import TokenBudgetSampler
        >>> mix = MixtureSampler({"a": TokenBudgetSampler([1, 2], max_tokens=4),
        ...                       "b": TokenBudgetSampler([3], max_tokens=4)},
        ...                      weights={"a": Schedule.piecewise([0, 10], [3, 1]), "b": 1})
        >>> mix.probabilities_at([0, 9, 10]).tolist()
        [[0.75, 0.25], [0.75, 0.25], [0.5, 0.5]]
        """
        s = np.asarray(steps)
        if s.ndim != 1:
            raise ValueError(f"steps must be a 1-D array of steps, got shape {s.shape}")
        if self._schedules is None:
            Schedule.constant(0).values(s)  # the same checks of the steps
            return np.tile(self.p, (s.size, 1))
        return self._probabilities(s)

    def _part_rng(self, epoch: int, start: int) -> np.random.Generator:
        """The generator of the part of ``epoch`` that starts at global position ``start``:
        child ``start`` of the stream ``(seed, epoch, MIXTURE_STEPS)``."""
        parent = _rng.seed_sequence(self.seed, epoch, _rng.MIXTURE_STEPS)
        child = np.random.SeedSequence(
            parent.entropy, spawn_key=(start,), pool_size=parent.pool_size
        )
        return np.random.default_rng(child)

    def _phase_counts(
        self, epoch: int, start: int, step: int, world: int
    ) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
        """Slots ``start .. num_batches - 1`` of ``epoch`` read at world size ``world`` from global
        ``step``, cut into phases (runs of steps with equal probabilities): each phase's batches
        per corpus (P, K), each phase's slots (P,), and the generator, which then orders them."""
        n = self.num_batches - start
        steps = step + np.arange(-(-n // world), dtype=np.int64)
        new = np.zeros(steps.size, dtype=bool)
        new[0] = True
        assert self._schedules is not None
        for sched in self._schedules:
            if not sched.is_constant:
                w = np.asarray(sched.values(steps))
                new[1:] |= w[1:] != w[:-1]
        firsts = np.flatnonzero(new)
        lens = np.diff(np.append(firsts * world, n)).astype(np.int64)
        probs = self._probabilities(steps[firsts])
        gen = self._part_rng(epoch, start)
        if self.draw == "independent":
            counts = gen.multinomial(lens, probs).astype(np.int64)
        else:
            counts = _stratified_rows(probs, lens, gen)
        return counts, lens, gen

    def _part_choice(self, epoch: int, start: int, step: int, world: int) -> np.ndarray:
        """The corpus of slots ``start .. num_batches - 1``, drawn as if the rest of the epoch ran
        at world size ``world``: each phase's counts in a uniformly random order within it."""
        counts, lens, gen = self._phase_counts(epoch, start, step, world)
        k = len(self.names)
        dtype = np.uint8 if k <= 256 else np.uint16 if k <= 65536 else np.int64
        corpus = np.tile(np.arange(k, dtype=dtype), lens.size)
        flat = np.repeat(corpus, counts.ravel())
        phase = np.repeat(np.arange(lens.size, dtype=np.int64), lens)
        return flat[np.lexsort((gen.random(flat.size), phase))]

    def _choice(
        self, epoch: int, parts: tuple[tuple[int, int], ...]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The corpus of each global slot of ``epoch`` and the batches per corpus.

        Constant weights: ``counts`` from the stream ``(seed, epoch, MIXTURE)``, then a shuffle.
        Weight schedules: part by part, the slots from the part's start on drawn from its own
        child stream as if the epoch ended at its world size; a part keeps its slots up to the
        next part's start (so what a part delivered never changes when the world size does).
        """
        m = self.num_batches
        k = len(self.names)
        if self._changes and epoch == self.epoch:
            return self._changed_choice(epoch)
        if self._schedules is None:
            return self._constant_choice(epoch)
        pieces = []
        spans = self._part_steps(epoch, parts)
        for i, (start, world, step) in enumerate(spans):
            end = spans[i + 1][0] if i + 1 < len(spans) else m
            pieces.append(self._part_choice(epoch, start, step, world)[: end - start])
        choice = np.concatenate(pieces)
        return choice, np.bincount(choice, minlength=k).astype(np.int64)

    def _constant_choice(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Constant weights' corpus of each slot: counts from ``(seed, epoch, MIXTURE)``, then a
        shuffle (world-size free)."""
        k = len(self.names)
        gen = _rng.rng(self.seed, epoch, _rng.MIXTURE)
        counts = self._draw_counts(gen)
        dtype = np.uint8 if k <= 256 else np.uint16 if k <= 65536 else np.int64
        choice = np.repeat(np.arange(k, dtype=dtype), counts)
        gen.shuffle(choice)
        return choice, counts

    def _changed_choice(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """The corpus of each slot of an epoch whose weights changed (resume across a change):
        each part keeps the slots its weights drew, up to the next part's start, and the rest
        of the epoch is drawn with the current weights (from its start's child stream, as an
        elastic part is); every corpus's batches then continue where its stream was."""
        spans: list[tuple[int, int, MixtureSampler]] = []
        start = 0
        for position, settings, world, elastic, _ in self._changes:
            old = self._shadow(settings)
            for part_world, end in elastic:
                spans.append((start, part_world, old))
                start = end
            spans.append((start, world, old))
            start = position
        for part_world, end in self._history:
            spans.append((start, part_world, self))
            start = end
        spans.append((start, self.world_size, self))
        m, k = self.num_batches, len(self.names)
        steps = self._part_steps(epoch, tuple((a, w) for a, w, _ in spans))
        pieces = []
        for i, (begin, world, step) in enumerate(steps):
            end = min(steps[i + 1][0], m) if i + 1 < len(steps) else m
            owner = spans[i][2]
            if owner._schedules is None:
                pieces.append(owner._constant_choice(epoch)[0][begin:end])
            else:
                pieces.append(owner._part_choice(epoch, begin, step, world)[: end - begin])
        choice = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint8)
        return choice, np.bincount(choice, minlength=k).astype(np.int64)

    def _mix(self, epoch: int) -> _MixEpoch:
        parts: Any = self._parts(epoch) if self._schedules is not None else ()
        if self._changes and epoch == self.epoch:
            parts = (self._changes, self._history)
        if self._cache is not None and self._cache.epoch == epoch and self._cache.parts == parts:
            return self._cache
        m = self.num_batches
        k = len(self.names)
        choice, counts = self._choice(epoch, parts)
        # ordinal of each slot among its corpus's slots: a stable (radix) sort by corpus
        by_corpus = np.argsort(choice, kind="stable")
        starts = np.zeros(k, dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        occ = np.empty(m, dtype=np.int64)
        occ[by_corpus] = np.arange(m, dtype=np.int64) - np.repeat(starts, counts)
        streams: list[_FreshStream | _FixedStream] = []
        before: np.ndarray | None = None
        for i, (name, sub) in enumerate(zip(self.names, self._subs, strict=True)):
            if _fresh(sub):
                streams.append(_FreshStream(name, sub, epoch * m))
            else:
                if before is None:
                    before = self._counts_before(epoch)
                streams.append(_FixedStream(name, sub, int(before[i])))
        self._cache = _MixEpoch(epoch, parts, choice, occ, counts, streams)
        return self._cache

    def epoch_schedule(self, epoch: int) -> MixtureSchedule:
        """Return a mixture epoch's global schedule (all ranks, before sharding).

        Cost: plans every sampler epoch the mixture epoch touches, plus O(num_batches).

        >>> from padless.sampling.shortcuts import TokenBudgetSampler
        >>> mix = MixtureSampler({"a": TokenBudgetSampler([1, 2, 3], max_tokens=3),
        ...                       "b": TokenBudgetSampler([4], max_tokens=8)},
        ...                      weights=[1, 0], num_batches=3)
        >>> s = mix.epoch_schedule(0)
        >>> s.corpus.tolist(), sorted(s.batch.tolist())
        ([0, 0, 0], [0, 1, 2])
        """
        mix = self._mix(check_seed("epoch", epoch))
        m = mix.choice.shape[0]
        sub_epoch = np.empty(m, dtype=np.int64)
        batch = np.empty(m, dtype=np.int64)
        by_corpus = np.argsort(mix.choice, kind="stable")
        start = 0
        for i, stream in enumerate(mix.streams):
            count = int(mix.counts[i])
            slots = by_corpus[start : start + count]
            sub_epoch[slots], batch[slots] = stream.schedule(count)
            start += count
        return MixtureSchedule(
            self.names, self.corpus_offsets, mix.choice.astype(np.int64), sub_epoch, batch
        )

    # ------------------------------------------------------------------ Resumable hooks
    def _total(self) -> int:
        return self.num_batches

    def _slot_ids(
        self, positions: np.ndarray, history: tuple[tuple[int, int], ...], world: int
    ) -> np.ndarray | None:
        # weight schedules draw each world size's part from its own stream; constant weights
        # draw the whole epoch at once
        if self._schedules is None:
            return None
        kept = (self._history, self.world_size)
        self._history, self.world_size = history, world
        try:
            mix = self._mix(self.epoch)
        finally:
            self._history, self.world_size = kept
        # a corpus's n-th batch of the epoch is the same batch in every order
        return mix.choice[positions].astype(np.int64) + len(self.names) * mix.occ[positions]

    def _batch_at(self, slot: int) -> list[int]:
        mix = self._mix(self.epoch)
        k = int(mix.choice[slot])
        local = mix.streams[k].batch(int(mix.occ[slot]))
        if not self._codes:  # plain indices of every corpus: the ConcatDataset's
            out: list[int] = (local + self.corpus_offsets[k]).tolist()
            return out
        return self._coded(k, local, None)

    def _coded(self, k: int, local: np.ndarray, step: int | None) -> list[int]:
        """Corpus ``k``'s batch ``local`` (its plan's values) as the mixture yields it at global
        ``step``: in the form of that step where the corpus warms up, as mixture codes."""
        form = self._forms[k]
        if form is not None and step is not None:
            key = form.keys_at(np.array([step], dtype=np.int64))[0]
            if key is not None:
                local = np.asarray(form.list_at(local, 0, local.shape[0], key), dtype=np.int64)
        size, total = self.corpus_sizes[k], self._items
        coded = mixture_codes(local, self.corpus_offsets[k], size, total)
        out: list[int] = coded.tolist()
        return out

    def __iter__(self) -> Iterator[Any]:
        if self.yields == "tokens":
            return self._share(0, 1)
        if not any(f is not None for f in self._forms):
            return self._run(self._batch_at)

        def batch_at(slot: int, position: int) -> list[int]:
            # a corpus that warms up follows the mixture's step of the batch's position: the
            # step its weights are read at (slot_steps; the tail's repeats at their own)
            mix = self._mix(self.epoch)
            k = int(mix.choice[slot])
            local = mix.streams[k].batch(int(mix.occ[slot]))
            return self._coded(k, local, self._position_step(position))

        return self._run(batch_at, positioned=True)

    def batches(self, empty: Any = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """A mixture of LM streams iterated as ``iter(mixture)``, each ``(x, y)`` the two halves
        of ``empty(shape, dtype)`` (None: numpy allocates), as ``LMStream.batches`` does."""
        return self._share(0, 1, empty)

    def _share(self, first: int, every: int, empty: Any = None) -> Iterator[Any]:
        """A mixture of LM streams: the next iteration's ``(x, y)`` batches at its steps
        ``first, first + every, ...`` (a DataLoader worker's share: ``padless.torch.LMDataset``).
        Each is its corpus's batch at the mixture's step of its position (a warm-up cut at it)."""
        if self.yields != "tokens":
            raise ValueError(
                "a mixture of samplers yields indices for a DataLoader's batch_sampler; only a "
                "mixture of LM streams yields (x, y) batches"
            )

        def batch_at(slot: int, position: int) -> tuple[np.ndarray, np.ndarray]:
            mix = self._mix(self.epoch)
            k = int(mix.choice[slot])
            epoch, b = mix.streams[k].locate(int(mix.occ[slot]))
            step = self._position_step(position)
            return cast(Any, self._subs[k]).mixture_batch(epoch, b, step, empty)

        return self._run(batch_at, positioned=True, first=first, every=every)

    def _position_step(self, position: int) -> int:
        """The global step of the current epoch's global ``position`` (the tail's included):
        within the part run at world size ``W`` from ``a``, ``step(a) + (position - a) // W``,
        as :meth:`slot_steps` counts."""
        parts = self._parts(self.epoch)
        step = self.first_step(self.epoch, world=parts[0][1])
        for (start, world), (end, _) in zip(parts, parts[1:], strict=False):
            if position < end:
                return step + (position - start) // world
            step += -(-(end - start) // world)
        start, world = parts[-1]  # the part going on, to the epoch's end and its tail
        return step + (position - start) // world

    # ------------------------------------------------------------------ figures
    def stats(self) -> dict[str, Any]:
        """Figures of the current epoch's full schedule (from position 0), per corpus too.

        ``corpora[name]`` holds ``p`` (its probability), ``share`` (observed share of the
        epoch's batches), ``batches``, ``cycles`` (epochs of its own it started in this mixture
        epoch; a corpus that runs out starts its next one), ``passes`` (how many times over its
        batches were used: 0.1 = subsampled to a tenth, 3.0 = upsampled threefold), ``size``,
        ``offset`` (its first global index) and ``epoch_batches`` (batches in its current epoch).

        Cost: plans every sampler epoch the mixture epoch touches.
        """
        mix = self._mix(self.epoch)
        total = self.num_batches
        phases, mean_p = self._phases(mix)
        corpora: dict[str, dict[str, Any]] = {}
        for i, name in enumerate(self.names):
            count = int(mix.counts[i])
            stream = mix.streams[i]
            cycles, passes = stream.cycles(count)
            if isinstance(stream, _FixedStream):
                epoch_batches = stream.length
            else:
                epoch_batches = stream.first_length()
            corpora[name] = {
                "p": float(mean_p[i]),
                "share": count / total,
                "batches": count,
                "cycles": cycles,
                "passes": passes,
                "size": self.corpus_sizes[i],
                "offset": self.corpus_offsets[i],
                "epoch_batches": int(epoch_batches),
            }
        steps = self._steps(total, 0)
        return {
            "epoch": self.epoch,
            "batches": total,
            "steps": steps,
            "batches_per_rank": steps,
            "world_size": self.world_size,
            "repeated": self.repeated,
            "dropped": self.dropped,
            "temperature": self.temperature,
            "unit": self.unit,
            "draw": self.draw,
            "corpora": corpora,
            "weights": None if self._schedules is None else self._weights_dicts(),
            "first_step": self.first_step(),
            "phases": phases,
        }

    def _weights_dicts(self) -> list[dict[str, Any]]:
        assert self._schedules is not None
        return [sched.as_dict() for sched in self._schedules]

    def _phases(self, mix: _MixEpoch) -> tuple[list[dict[str, Any]], np.ndarray]:
        """The epoch's phases for ``stats()`` and the epoch's mean probability per corpus.

        Phases: the epoch's steps cut where a weight schedule changes (:func:`_cuts`). Each
        phase: its steps ``[first_step, end_step)``, its batches, and per
        corpus ``p`` (the mean scheduled probability over its batches), the realised ``share``
        and ``batches``.
        """
        steps = self._slot_steps(mix.epoch, self._parts(mix.epoch))
        k = len(self.names)
        lo, hi = int(steps[0]), int(steps[-1]) + 1
        if self._schedules is None:
            ustep = np.array([lo], dtype=np.int64)
            probs = self.p[None, :]
            weight = np.array([steps.size], dtype=np.int64)
            cuts: list[int] = []
        else:
            ustep, weight = np.unique(steps, return_counts=True)
            probs = self._probabilities(ustep)
            cuts = sorted({c for sched in self._schedules for c in _cuts(sched) if lo < c < hi})
        edges = [lo, *cuts, hi]
        phases = []
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            i0, i1 = (int(x) for x in np.searchsorted(steps, [a, b]))
            u0, u1 = (int(x) for x in np.searchsorted(ustep, [a, b]))
            if self._schedules is None:
                u0, u1 = 0, 1
            n = i1 - i0
            got = np.bincount(mix.choice[i0:i1], minlength=k)
            p = (probs[u0:u1] * weight[u0:u1, None]).sum(axis=0) / max(weight[u0:u1].sum(), 1)
            phases.append(
                {
                    "first_step": a,
                    "end_step": b,
                    "batches": n,
                    "corpora": {
                        name: {
                            "p": float(p[j]),
                            "share": float(got[j]) / n if n else 0.0,
                            "batches": int(got[j]),
                        }
                        for j, name in enumerate(self.names)
                    },
                }
            )
        mean_p = (probs * weight[:, None]).sum(axis=0) / weight.sum()
        if self._schedules is None:
            mean_p = self.p
        return phases, mean_p

    # ------------------------------------------------------------------ state
    def _config(self) -> dict[str, Any]:
        parts = [sub._fingerprint_now().split("-") for sub in self._subs]
        config: dict[str, Any] = {
            "class": type(self).__name__,
            "names": list(self.names),
            "samplers": [p[1] for p in parts],
            "sampler_seeds": [sub.seed for sub in self._subs],
            "p": [float(x) for x in self.p],
            "num_batches": self._num_batches_arg,
            "draw": self.draw,
        }
        if self._schedules is not None:  # constant weights keep their fingerprint
            config["weights"] = self._weights_dicts()
            config["temperature"] = self.temperature
        return config

    def _fingerprint_now(self) -> str:
        if self._fingerprint is None:
            corpora = [sub._fingerprint_now().split("-")[0] for sub in self._subs]
            self._fingerprint = fingerprint(self._config(), data={"corpora": corpora})
        return self._fingerprint

    # ------------------------------------------------------------------ changes of weights
    _fixed_settings = ("class", "names", "samplers", "sampler_seeds", "num_batches", "draw")
    _changeable_text = (
        "its weights, temperature and world size, not its corpora, their samplers, "
        "num_batches or draw"
    )

    def _settings_record(self) -> dict[str, Any]:
        """The weights (schedules' dicts, numbers, or None: by size), temperature and unit."""
        weights: Any = None
        if self._schedules is not None:
            weights = self._weights_dicts()
        elif self.weights is not None:
            weights = [float(w) for w in self.weights]
        return {
            "weights": weights,
            "temperature": self.temperature,
            "unit": self.unit,
            "config": self._config(),
        }

    def _what_differs(self, name: str, saved: Any, now: Any) -> str | None:
        if name != "samplers" or not isinstance(saved, list) or len(saved) != len(self.names):
            return None
        other = [n for n, a, b in zip(self.names, saved, now, strict=True) if a != b]
        if not other:
            return None
        return (
            f"the sampler of corpus {other[0]!r} differs from the one the state was saved with "
            f"(its spec, lengths, seed, shuffle or balance; {len(other)} of {len(self.names)} "
            "corpora differ)"
        )

    def _refuse_fixed_elastic(self, state: Any, changes: tuple[Any, ...]) -> None:
        """Refuse a state of another world size where a corpus does not shuffle and the
        weights are scheduled: its one order continues across mixture epochs from the batches
        the earlier epochs drew of it, which the state does not record and which, under weight
        schedules, depend on the world size those epochs ran at (recounted at this one, some
        of its batches would come twice and others never)."""
        if self._schedules is None or not isinstance(state, dict):
            return
        fixed = [n for n, sub in zip(self.names, self._subs, strict=True) if not _fresh(sub)]
        if not fixed:
            return
        history = check_history(state.get("elastic", []), state.get("position"))
        worlds = part_worlds(state.get("world_size"), history, changes)
        other = sorted((w for w in worlds if w != self.world_size), key=repr)
        if other:
            raise ValueError(
                f"state was saved at world_size={other[0]!r} and this MixtureSampler has "
                f"world_size={self.world_size}, and corpus {fixed[0]!r} does not shuffle under "
                "weight schedules: its one order continues across mixture epochs from the "
                "batches earlier epochs drew of it, which depend on the world size they ran at "
                "(counted again at this one, some would come twice and others never). Resume at "
                f"world_size={other[0]!r}, shuffle the corpus, or give it constant weights"
            )

    def _changeable(self) -> None:
        fixed = [n for n, sub in zip(self.names, self._subs, strict=True) if not _fresh(sub)]
        if fixed:
            raise ValueError(
                f"state does not fit: the weights differ, and corpus {fixed[0]!r} does not "
                "shuffle: its fixed order continues across mixture epochs, counted under the "
                "weights from the run's start, which a change would move; resume with the "
                "weights the state was saved under"
            )

    def _checked_settings(self, record: Any) -> str:
        import json

        if not isinstance(record, dict) or not {"weights", "temperature", "config"} <= set(record):
            raise ValueError(
                f"a change's settings must hold weights, temperature and config, got {record!r:.80}"
            )
        settings = json.dumps(record, sort_keys=True, default=str)
        try:
            old = self._shadow(settings)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"state's weights do not make a mixture of these corpora: {err}"
            ) from err
        if json.dumps(old._config(), sort_keys=True, default=str) != json.dumps(
            record["config"], sort_keys=True, default=str
        ):
            raise ValueError(
                "state's settings do not agree with its config (edited, or from another padless)"
            )
        return settings

    def _shadow(self, settings: str) -> MixtureSampler:
        """This mixture under a recorded part's weights (its draws), over the same samplers."""
        import json

        cache = self.__dict__.setdefault("_shadows", {})
        if settings not in cache:
            record = json.loads(settings)
            cache[settings] = MixtureSampler(
                self.samplers,
                weights=record["weights"],
                temperature=record["temperature"],
                unit=record.get("unit", "sentences"),
                num_batches=self._num_batches_arg,
                seed=self.seed,
                drop_last=self.drop_last,
                draw=self.draw,
            )
        return cast(MixtureSampler, cache[settings])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` at the next iteration: no replay of batches.

        The state may come from another world size (elastic resume). The input is not modified.
        Cost: the next iteration recomputes the epoch's corpus draws (O(num_batches)) and, per
        corpus, plans its sampler epochs of this mixture epoch up to the one it resumes in (their
        batch counts locate the position): at most what computing the epoch from scratch costs,
        typically one or two plans per corpus. Non-shuffling corpora also redraw the per-corpus
        counts of earlier mixture epochs (O(epoch × corpora), no planning).

        **Resume across a change of weights.** A state saved under other weights or another
        temperature (numbers or schedules) continues the epoch with these: the slots before the
        state's position keep the corpora the old weights drew for them (recomputed from the
        state, which records its weights), the rest of the epoch is drawn with the new ones,
        and every corpus's batches continue where its stream was, so no batch is repeated or
        lost. The state keeps the epoch's changes for later resumes. The corpora, their
        samplers, ``num_batches``, ``draw`` and the seed cannot change, and every corpus must
        shuffle (a non-shuffling corpus's order continues across epochs, counted under the
        weights from the run's start): each a ``ValueError`` naming it. For the same reason,
        with weight schedules a non-shuffling corpus resumes only at the world size the state
        was saved at (the earlier epochs' draws depend on it): another is a ``ValueError``.
        """
        change = self._change_in(state)
        changes, resumed = change if change is not None else (self._changes_of(state), state)
        self._refuse_fixed_elastic(state, changes)
        previous = self._changes
        self._changes = changes
        try:
            super().load_state_dict(resumed)
        except Exception:
            self._changes = previous
            raise
