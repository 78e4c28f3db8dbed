"""Dataset decomposition (Pouransari et al. 2024): power-of-two pieces, batches of one length.

Each document of length ``L`` is cut into its binary decomposition: ``L // max_length`` pieces
of ``max_length`` tokens, then one piece of ``2**k`` tokens for each bit ``k`` set in the
remainder, largest first, all in document order (offsets ascending). A piece is never longer
than ``max_length`` and never crosses a document boundary, so attention never looks across
documents and costs ``O(2**k)`` per token instead of ``O(max_length)``. Pieces shorter than
``min_length`` (the document's last ones: bits descend) are dropped and counted, or kept with
``keep_short=True`` (then batched like the others, in buckets of their own length).

Pieces are grouped into buckets by length; a batch takes ``tokens_per_batch // 2**k`` pieces of
one bucket, so every batch is a dense ``(B, 2**k)`` block with no padding and the same tokens.
A bucket's last batch holds what is left (``leftovers="partial"``, fewer pieces, still no
padding) or is left out (``"drop"``, counted, as OLMo-core's ``NumpyVSLDataset`` does).

The order of the batches is the **curriculum**, part of the plan (a pure function of
``(lengths, spec, seed, epoch)``); samplers keep it (``Spec.orders_batches``):

- ``"natural"``: shuffled, with one batch of the longest bucket first (an out-of-memory error
  shows at the first step, not hours in);
- ``"grow_p2"`` / ``"grow_linear"`` (OLMo-core's ``VSLGrowP2Curriculum`` /
  ``VSLGrowLinearCurriculum``): ``cycles`` cycles, each holding its share of every bucket's
  batches; a cycle is cut into one sub-cycle per bucket, and bucket ``i``'s batches of the
  cycle are shared among the sub-cycles ``j`` in proportion to odds that peak at ``j = i``
  (:func:`grow_odds`), so lengths grow from short to long within each cycle; each sub-cycle is
  shuffled, and a batch of the longest bucket is moved to the front. Unlike OLMo-core, no
  batch is dropped to make the counts multiples of ``cycles`` (every kept piece is trained once
  per epoch), and the shares are rounded to sum exactly (largest remainders);
- ``"short_to_long"``: every batch of the shortest bucket first, then the next (shuffled within
  a bucket).

Pieces are yielded as codes ``index + piece · N`` (``piece``: the piece's number within its
document, counting every piece of the decomposition); :meth:`Decomposition.pieces` wraps a
dataset so the codes give back the pieces' tokens, and ``collate_for(sampler)`` stacks them into
``(B, 2**k)`` tensors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from ..core import _rng
from ..core._check import check_bool, check_choice, positive
from ..core.plan import BatchPlan, PiecePlan
from .packing import PieceDataset, piece_of
from .spec import CollateForm, Planner, Spec, setting

CURRICULA = ("natural", "grow_p2", "grow_linear", "short_to_long")
LEFTOVERS = ("partial", "drop")
MAX_PIECE = 1 << 30  # max_length at most 2**30: a piece stays below the 2**31 lengths bound


def check_power_of_two(name: str, value: Any) -> int:
    """Check a piece length: a power of two in [1, 2**30].

    >>> check_power_of_two("max_length", 300)
    Traceback (most recent call last):
    ...
    ValueError: max_length must be a power of two (pieces are 2**k tokens), got 300
    """
    n = positive(name, value)
    if n > MAX_PIECE:
        raise ValueError(f"{name} must be <= 2**30, got {n}")
    if n & (n - 1):
        raise ValueError(f"{name} must be a power of two (pieces are 2**k tokens), got {n}")
    return n


def _popcount(values: np.ndarray) -> np.ndarray:
    return np.bitwise_count(values).astype(np.int64)


def decompose(sizes: np.ndarray, max_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every piece of every document's binary decomposition: ``(document, start, length)``,
    int64, documents in order and each document's pieces in order (largest first).

    Cost: O(N · log2(max_length)) vectorised steps, O(pieces) memory.

    >>> doc, start, length = decompose(np.array([5, 10]), 8)
    >>> doc.tolist(), start.tolist(), length.tolist()
    ([0, 0, 1, 1], [0, 4, 0, 8], [4, 1, 8, 2])
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    full, rest = np.divmod(sizes, max_length)
    counts = full + _popcount(rest)
    first = np.cumsum(counts) - counts  # each document's first piece
    total = int(counts.sum())
    doc = np.repeat(np.arange(sizes.size, dtype=np.int64), counts)
    start = np.empty(total, dtype=np.int64)
    length = np.empty(total, dtype=np.int64)
    # the max_length pieces: numbers 0 .. full - 1
    owner = np.repeat(np.arange(sizes.size, dtype=np.int64), full)
    number = np.arange(owner.size, dtype=np.int64) - np.repeat(np.cumsum(full) - full, full)
    at = first[owner] + number
    start[at], length[at] = number * max_length, max_length
    # then one piece per set bit of the remainder, from the highest bit down
    for k in range(max_length.bit_length() - 2, -1, -1):
        has = np.flatnonzero((rest >> k) & 1)
        if not has.size:
            continue
        above = (rest[has] >> (k + 1)) << (k + 1)  # the tokens of the larger remainder pieces
        at = first[has] + full[has] + _popcount(above)
        start[at] = full[has] * max_length + above
        length[at] = 1 << k
    return doc, start, length


def piece_numbers(start: np.ndarray, max_length: int) -> np.ndarray:
    """The number of the piece starting at ``start`` within its document's decomposition:
    ``start // max_length`` full pieces before it, plus one per larger remainder piece.

    >>> piece_numbers(np.array([0, 4, 0, 8]), 8).tolist()
    [0, 1, 0, 1]
    """
    start = np.asarray(start, dtype=np.int64)
    return start // max_length + _popcount(start % max_length)


def piece_bounds(
    sizes: np.ndarray, numbers: np.ndarray, max_length: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(start, stop)`` of piece ``numbers[i]`` of a document of ``sizes[i]`` tokens; a number
    past the document's pieces gives an empty range at its end.

    >>> [x.tolist() for x in piece_bounds(np.array([13, 13, 13]), np.array([0, 1, 2]), 8)]
    [[0, 8, 12], [8, 12, 13]]
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    numbers = np.asarray(numbers, dtype=np.int64)
    full, rest = np.divmod(sizes, max_length)
    start = np.minimum(numbers, full) * max_length
    length = np.where(numbers < full, max_length, 0)
    left = np.where(numbers >= full, numbers - full, -1)  # remainder pieces still to pass
    for k in range(max_length.bit_length() - 2, -1, -1):
        bit = ((rest >> k) & 1).astype(bool) & (left >= 0)
        hit = bit & (left == 0)
        length = np.where(hit, 1 << k, length)
        start = np.where(bit & (left > 0), start + (1 << k), start)
        left = np.where(bit, left - 1, left)
    start = np.where((length == 0) & (numbers >= full), sizes, start)
    return start, start + length


def _split_counts(total: int, parts: int) -> np.ndarray:
    """``total`` split into ``parts`` counts, the larger ones first (OLMo-core's
    ``divide_into_buckets``: each takes the ceiling of what is left over what remains)."""
    out = np.empty(parts, dtype=np.int64)
    for p in range(parts):
        out[p] = -(-total // (parts - p))
        total -= int(out[p])
    return out


def grow_odds(kind: str, buckets: int) -> np.ndarray:
    """The odds of bucket ``i`` (rows, shortest first) in sub-cycle ``j`` (columns) of a grow
    curriculum, as OLMo-core's ``_get_bucket_odds_for_cycle``: ``e = B - i + j`` up to the
    bucket's own sub-cycle (``j <= i``), ``B - j`` after it; ``grow_linear`` takes ``e``,
    ``grow_p2`` ``2**(e - 1)``.

    >>> grow_odds("grow_p2", 3).tolist()
    [[4, 2, 1], [2, 4, 1], [1, 2, 4]]
    """
    i = np.arange(buckets)[:, None]
    j = np.arange(buckets)[None, :]
    e = np.where(j <= i, buckets - i + j, buckets - j)
    return (1 << (e - 1)) if kind == "grow_p2" else e


def _allot(total: int, odds: np.ndarray) -> np.ndarray:
    """``total`` split in proportion to ``odds``, summing exactly (largest remainders get the
    units rounding left over; ties to the later part)."""
    share = total * odds / odds.sum()
    out = np.floor(share).astype(np.int64)
    short = total - int(out.sum())
    if short:
        frac = share - out
        # stable sort of -frac over reversed parts: ties go to the later part, like OLMo-core's
        # remainder on its last sub-cycle
        order = (odds.size - 1) - np.argsort(-frac[::-1], kind="stable")
        out[order[:short]] += 1
    return out


def curriculum_order(
    curriculum: str,
    bucket_of: np.ndarray,
    sizes: np.ndarray,
    cycles: int,
    gen: np.random.Generator,
) -> np.ndarray:
    """The order of batches under a curriculum, from each batch's bucket (0 = shortest; a
    bucket's batches contiguous) and size. ``natural`` and the grow curricula put a batch of
    the longest bucket first, one of its fullest (not a short last batch).

    Cost: O(batches) plus one shuffle per sub-cycle.
    """
    nb = int(bucket_of.size)
    if nb == 0:
        return np.zeros(0, dtype=np.int64)
    top = int(bucket_of.max())
    lead = (bucket_of == top) & (sizes == sizes[bucket_of == top].max())
    if curriculum == "short_to_long":
        keys = gen.permutation(nb)
        return np.lexsort((keys, bucket_of)).astype(np.int64)
    if curriculum == "natural":
        longest = np.flatnonzero(lead)
        first = int(longest[gen.integers(longest.size)])
        rest = np.delete(np.arange(nb, dtype=np.int64), first)
        gen.shuffle(rest)
        return np.concatenate([[first], rest]).astype(np.int64)
    present = np.unique(bucket_of)
    odds = grow_odds(curriculum, int(present.size))
    starts = np.searchsorted(bucket_of, present)  # batches of a bucket are contiguous
    sizes = np.diff(np.append(starts, nb))
    # chunk[b][c][j]: bucket b's batches of cycle c, sub-cycle j
    subs: list[list[list[np.ndarray]]] = [[[] for _ in range(present.size)] for _ in range(cycles)]
    for b in range(present.size):
        batches = np.arange(starts[b], starts[b] + sizes[b], dtype=np.int64)
        per_cycle = _split_counts(int(sizes[b]), cycles)
        at = 0
        for c in range(cycles):
            alloted = _allot(int(per_cycle[c]), odds[b])
            for j in range(present.size):
                n = int(alloted[j])
                subs[c][j].append(batches[at : at + n])
                at += n
    parts = []
    for c in range(cycles):
        for j in range(present.size):
            part = np.concatenate(subs[c][j])
            gen.shuffle(part)
            parts.append(part)
    order = np.concatenate(parts)
    at = int(np.argmax(lead[order]))  # the first of the longest bucket's fullest batches
    order[[0, at]] = order[[at, 0]]
    return order


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decomposition(Spec):
    """Dataset decomposition: power-of-two pieces of the documents, batches of one length with
    the same tokens each, ordered by a length curriculum (see the module docstring).

    Args:
        tokens_per_batch: tokens of every full batch (``tokens_per_batch // 2**k`` pieces of
            ``2**k``); a multiple of ``max_length``.
        max_length: the longest piece, a power of two.
        min_length: the shortest piece kept, a power of two <= ``max_length``.
        curriculum: ``"natural"``, ``"grow_p2"``, ``"grow_linear"`` or ``"short_to_long"``.
        cycles: cycles of a grow curriculum (OLMo-core's ``num_cycles``); only with those.
        keep_short: keep the pieces shorter than ``min_length`` (in buckets of their own)
            instead of dropping them.
        leftovers: ``"partial"`` keeps each bucket's last, short batch; ``"drop"`` leaves its
            pieces out (counted in ``info["leftover_pieces"]``).

    >>> plan = Decomposition(min_length=2, max_length=8, tokens_per_batch=8).plan([13, 4, 9])
    >>> sorted(plan.piece_lengths.tolist()), len(plan), plan.stats([13, 4, 9]).padding_fraction
    ([4, 4, 8, 8], 3, 0.0)
    >>> plan.info["dropped_pieces"], plan.info["dropped_tokens"]  # the 1-token pieces
    (2, 2)
    """

    tokens_per_batch: int = setting(positive)
    max_length: int = setting(check_power_of_two, default=8192)
    min_length: int = setting(check_power_of_two, default=256)
    curriculum: str = setting(partial(check_choice, choices=CURRICULA), default="natural")
    cycles: int = setting(positive, default=8)
    keep_short: bool = setting(check_bool, default=False)
    leftovers: str = setting(partial(check_choice, choices=LEFTOVERS), default="partial")

    name = "decomposition"
    state_tag = "Decomposition"
    about = {
        **Spec.about,
        "tokens_per_batch": "tokens of every full batch of power-of-two pieces",
        "max_length": "the longest piece sequences are cut into, a power of two",
        "min_length": "the shortest piece kept, a power of two",
        "curriculum": "the order of piece lengths over the epoch",
        "cycles": "cycles of a grow curriculum",
        "keep_short": "keep the pieces shorter than min_length",
    }
    orders_batches = True

    def _settle(self) -> None:
        if self.min_length > self.max_length:
            raise ValueError(
                f"min_length must be <= max_length={self.max_length}, got {self.min_length}"
            )
        if self.tokens_per_batch % self.max_length:
            raise ValueError(
                f"tokens_per_batch must be a multiple of max_length={self.max_length} (every "
                f"bucket's batches then hold exactly tokens_per_batch tokens), got "
                f"{self.tokens_per_batch}"
            )
        if self.cycles != 8 and not self.curriculum.startswith("grow_"):
            raise ValueError(
                f"cycles applies to the grow_p2 and grow_linear curricula, got cycles="
                f"{self.cycles} with curriculum={self.curriculum!r}"
            )

    def bind(self, lengths: np.ndarray) -> DecompositionPlanner:
        return DecompositionPlanner(self, lengths)

    def for_windows(self, src: Any) -> Spec:
        raise ValueError(
            "window must be None with Decomposition: its curriculum orders the batches of the "
            "whole epoch, which windows plan one at a time"
        )

    def needs_pieces(self, sizes: np.ndarray) -> str | None:
        return "Decomposition yields the codes of power-of-two pieces of each document"

    def collate_form(self) -> CollateForm:
        """Dense blocks: ``collate_padded`` with nothing to pad, refusing unequal lengths."""
        return CollateForm(equal_lengths=True)

    def pieces(
        self,
        dataset: Any,
        *,
        num_sequences: int | None = None,
        keys: Sequence[str] = ("input_ids",),
    ) -> DecomposedDataset:
        """Wrap ``dataset`` so the codes a sampler of this spec yields give back the pieces.

        >>> spec = Decomposition(min_length=1, max_length=4, tokens_per_batch=4)
        >>> ds = spec.pieces([[1, 2, 3, 4, 5, 6, 7], [8]])
        >>> ds[0], ds[2], ds[4], ds[1]
        ([1, 2, 3, 4], [5, 6], [7], [8])
        """
        return DecomposedDataset(
            dataset, max_length=self.max_length, num_sequences=num_sequences, keys=keys
        )


class DecomposedDataset(PieceDataset):
    """The pieces a :class:`Decomposition` sampler yields codes for: item ``index + piece · N``
    is piece ``piece`` of the binary decomposition of ``dataset[index]`` (its own length
    decides the cut, so nothing but ``max_length`` is needed). Mappings have the values under
    ``keys`` sliced, the first key's length deciding.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        max_length: int,
        num_sequences: int | None = None,
        keys: Sequence[str] = ("input_ids",),
    ) -> None:
        max_length = check_power_of_two("max_length", max_length)
        super().__init__(dataset, capacity=max_length, num_sequences=num_sequences, keys=keys)

    def __getitem__(self, code: int) -> Any:
        index, piece = piece_of(code, self.num_sequences)
        item = self.dataset[index]
        tokens = (
            next((item[k] for k in self.keys if k in item), None)
            if isinstance(item, Mapping)
            else item
        )
        size = len(tokens) if tokens is not None else 0
        lo, hi = (
            int(x[0]) for x in piece_bounds(np.array([size]), np.array([piece]), self.capacity)
        )
        if hi <= lo:
            raise IndexError(
                f"code {code} asks for piece {piece} of sequence {index}, whose {size} tokens "
                "have fewer pieces; were the sampler's lengths computed from this dataset?"
            )
        if isinstance(item, Mapping):
            return {k: (v[lo:hi] if k in self.keys else v) for k, v in item.items()}
        return item[lo:hi]


class DecompositionPlanner(Planner):
    """:class:`Decomposition` bound to 1-D lengths: the pieces are cut once, here; each
    ``(seed, epoch)`` shuffles them within their buckets and orders the batches."""

    spec: Decomposition

    def __init__(self, spec: Decomposition, lengths: np.ndarray) -> None:
        super().__init__(spec, lengths)
        if lengths.ndim != 1:
            raise ValueError(
                f"lengths must be 1-D with Decomposition (pieces of one token sequence each), "
                f"got shape {lengths.shape}"
            )
        doc, start, length = decompose(self.sizes, spec.max_length)
        keep = length >= spec.min_length
        if spec.keep_short:
            keep[:] = True
        self.pieces_total = int(doc.size)
        self.dropped_pieces = int(doc.size - keep.sum())
        self.dropped_tokens = int(length[~keep].sum())
        self.doc, self.start, self.length = doc[keep], start[keep], length[keep]
        self.bucket = (np.log2(self.length).astype(np.int8)) if self.length.size else self.length
        covered = np.zeros(self.sizes.size, dtype=bool)
        covered[self.doc] = True
        self.uncovered = np.flatnonzero(~covered).astype(np.int64)  # documents with no piece

    def plan(self, seed: int, epoch: int) -> PiecePlan:
        return self._plan_pieces(None, seed, epoch)

    def plan_rest(
        self, done: Any, before: Planner, seed: int, epoch: int
    ) -> tuple[BatchPlan, np.ndarray]:
        """The pieces ``done`` (codes of ``before``, this strategy under the epoch's earlier
        settings) left, planned with these settings. At the same ``max_length`` the pieces are
        the same: the ones not yet yielded are left (whatever ``min_length`` keeps of them). At
        another ``max_length`` documents cut differently: the ones with no piece yielded are
        left, and a document with some of its pieces yielded is a ``ValueError``."""
        n = int(self.sizes.size)
        done = np.asarray(done, dtype=np.int64)
        old = before.spec.max_length if isinstance(before.spec, Decomposition) else None
        if old == self.spec.max_length:
            codes = self.doc + piece_numbers(self.start, self.spec.max_length) * n
            left = np.flatnonzero(~np.isin(codes, done)).astype(np.int64)
        else:
            given = np.bincount(done % max(n, 1), minlength=n)
            whole = np.bincount(getattr(before, "doc", np.zeros(0, np.int64)), minlength=n)
            partial = np.flatnonzero((given > 0) & (given < whole))
            if partial.size:
                raise ValueError(
                    f"max_length changed from {old} to {self.spec.max_length} while "
                    f"{partial.size} documents (e.g. index {int(partial[0])}) had only some of "
                    "their pieces yielded: their other pieces are cut at the old max_length; "
                    "change max_length at an epoch's start"
                )
            left = np.flatnonzero(given[self.doc] == 0).astype(np.int64)
        plan = self._plan_pieces(left, seed, epoch)
        return plan, self.values(plan)

    def _plan_pieces(self, sel: np.ndarray | None, seed: int, epoch: int) -> PiecePlan:
        """The plan of the pieces ``sel`` (positions in this planner's pieces; None: all)."""
        s = self.spec
        if sel is None:
            doc, start, length, bucket = self.doc, self.start, self.length, self.bucket
        else:
            doc, start, length = self.doc[sel], self.start[sel], self.length[sel]
            bucket = self.bucket[sel]
        n = int(doc.size)
        shuffled = _rng.rng(seed, epoch, _rng.GROUP_SHUFFLE).permutation(n)
        grouped = shuffled[np.argsort(bucket[shuffled], kind="stable")]  # by bucket, shuffled
        kinds, counts = np.unique(bucket[grouped], return_counts=True)
        per = s.tokens_per_batch >> kinds.astype(np.int64)  # pieces per full batch
        full, tail = np.divmod(counts, per)
        if s.leftovers == "drop":
            tail = np.zeros_like(tail)
        nbatches = full + (tail > 0)
        bucket_of = np.repeat(np.arange(kinds.size, dtype=np.int64), nbatches)
        # batch sizes bucket by bucket: full ones, then the tail
        sizes = np.repeat(per, nbatches)
        last = np.cumsum(nbatches) - 1
        has_tail = tail > 0
        sizes[last[has_tail]] = tail[has_tail]
        bucket_first = np.cumsum(counts) - counts  # the bucket's first entry in ``grouped``
        batch_first = np.repeat(np.cumsum(nbatches) - nbatches, nbatches)
        within = np.arange(bucket_of.size, dtype=np.int64) - batch_first
        lo = bucket_first[bucket_of] + within * per[bucket_of]
        gen = _rng.rng(seed, epoch, _rng.BATCH_ORDER)
        order = curriculum_order(s.curriculum, bucket_of, sizes, s.cycles, gen)
        out_sizes = sizes[order]
        offsets = np.zeros(order.size + 1, dtype=np.int64)
        np.cumsum(out_sizes, out=offsets[1:])
        entry = np.repeat(lo[order] - offsets[:-1], out_sizes) + np.arange(
            offsets[-1], dtype=np.int64
        )
        picked = grouped[entry]
        leftover = n - int(offsets[-1])
        skipped = self.uncovered
        if leftover:  # documents of these pieces with none picked are left out too
            gone = np.zeros(self.sizes.size, dtype=bool)
            gone[self.uncovered] = True
            gone[doc] = True
            gone[doc[picked]] = False
            skipped = np.flatnonzero(gone).astype(np.int64)
        info: dict[str, Any] = {
            "curriculum": s.curriculum,
            "pieces": self.pieces_total,
            "dropped_pieces": self.dropped_pieces,
            "dropped_tokens": self.dropped_tokens,
            "leftover_pieces": leftover,
            "leftover_tokens": int(length[grouped].sum() - length[picked].sum()),
            "bucket_batches": {
                str(1 << int(k)): int(b)
                for k, b in zip(kinds.tolist(), nbatches.tolist(), strict=True)
            },
        }
        return PiecePlan(
            doc[picked],
            offsets,
            start[picked],
            start[picked] + length[picked],
            num_sequences=int(self.sizes.size),
            skipped=skipped,
            info=info,
        )

    def costs(self, plan: BatchPlan) -> np.ndarray:
        """Tokens of each batch (every batch is dense: real = padded)."""
        csum = np.zeros(plan.indices.size + 1, dtype=np.int64)
        np.cumsum(plan.entry_lengths(self.sizes), out=csum[1:])
        return csum[plan.offsets[1:]] - csum[plan.offsets[:-1]]

    def values(self, plan: BatchPlan) -> np.ndarray:
        """Codes ``index + piece · N`` (``piece``: the piece's number within its document)."""
        if not isinstance(plan, PiecePlan):
            raise TypeError(f"decomposition plans must be PiecePlan, got {type(plan).__name__}")
        return plan.indices + piece_numbers(plan.piece_start, self.spec.max_length) * int(
            self.sizes.size
        )

    def yielded_lengths(self, values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Tokens of the pieces the codes name."""
        n = int(lengths.shape[0])
        index, number = (values % n, values // n) if n else (values, values)
        lo, hi = piece_bounds(
            np.asarray(lengths, dtype=np.int64)[index], number, self.spec.max_length
        )
        return hi - lo
