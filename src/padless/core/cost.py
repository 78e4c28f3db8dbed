"""Cost models: what a batch costs the accelerator, for budgets and for balancing ranks.

padless counts cost in padded tokens (count × longest) unless told otherwise: what memory pays.
Time pays more for long sequences, since attention grows with the square of each sequence's
length. A :class:`Cost` says how much: ``cost(l) = per_sequence + linear·l + quadratic·l²``.
Every spec takes it (``cost=``), budgets in its units (``max_cost=``, ``Packing(max_row_cost=)``)
and balances steps by it (``balance=True``).

- A **padded** batch pays its longest member for every row: ``count × cost(longest)``.
- A **packed** row (varlen attention) pays ``Σ cost(lᵢ)`` over its sequences plus its padding at
  the linear rate: ``linear·capacity + Σ (per_sequence + quadratic·lᵢ²)``.

The arithmetic is float64, always in the same order (see :mod:`padless._kernels.cost`), so a
budget checked by a kernel holds when checked again by :meth:`Cost.padded`/:meth:`Cost.packed`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from ._check import check_bool, check_real, positive, positive_or_none
from .plan import BatchPlan

__all__ = ["Cost", "as_cost", "check_max_cost"]

COST_FIELDS = ("cost", "max_cost", "max_row_cost")


# the largest coefficient each term may have: a batch of 2**31 tokens (2**62 for the square)
# then costs at most about 1e290, and sums over a corpus stay finite
_LARGEST = {"linear": 1e280, "quadratic": 1e270, "per_sequence": 1e280}


@dataclasses.dataclass(frozen=True)
class Cost:
    """The cost of a sequence of length ``l``: ``per_sequence + linear·l + quadratic·l²``.

    Coefficients are non-negative finite numbers, not all zero (the default, ``linear=1.0``,
    counts tokens). Units are yours: tokens, FLOPs (:meth:`transformer`), milliseconds fitted
    to a profile. Inside a spec it is stored as given and written as a dict
    (``spec.as_dict()["cost"]``), which the spec reads back.

    >>> c = Cost(linear=1.0, quadratic=0.01)
    >>> c.of(100), c.padded([100, 20, 50]), c.packed([100, 20, 50], capacity=200)
    (200.0, 600.0, 329.0)

    Cost: O(1) per sequence.
    """

    linear: float = 1.0
    quadratic: float = 0.0
    per_sequence: float = 0.0

    def __post_init__(self) -> None:
        for name in ("linear", "quadratic", "per_sequence"):
            value = check_real(f"cost.{name}", getattr(self, name), positive_only=False)
            if value < 0:
                raise ValueError(f"cost.{name} must be a non-negative number, got {value!r}")
            if value > _LARGEST[name]:
                raise ValueError(
                    f"cost.{name} must be at most {_LARGEST[name]:g} (the cost of a batch of up "
                    f"to 2**31 tokens stays a finite float64: sums, ratios and JSON), got {value!r}"
                )
            object.__setattr__(self, name, value)
        if self.linear == 0 and self.quadratic == 0 and self.per_sequence == 0:
            raise ValueError(
                "cost must have a positive coefficient (linear, quadratic or per_sequence), "
                "got all zero"
            )

    # ------------------------------------------------------------------ per sequence
    def of(self, lengths: Any) -> Any:
        """Cost of each length (float64 array), or of one length (a float).

        >>> Cost(quadratic=1.0).of([1, 2, 3]).tolist()
        [2.0, 6.0, 12.0]
        """
        arr = _lengths_array(lengths)
        lf = arr.astype(np.float64)
        out = (self.per_sequence + self.linear * lf) + self.quadratic * (lf * lf)
        return float(out) if np.ndim(lengths) == 0 else out

    def extra(self, lengths: Any) -> np.ndarray:
        """What a sequence adds to a packed row beyond the row's linear cost:
        ``per_sequence + quadratic·l²`` (float64 array)."""
        lf = _lengths_array(lengths).astype(np.float64).reshape(-1)
        return self.per_sequence + self.quadratic * (lf * lf)

    # ------------------------------------------------------------------ per batch
    def padded(self, lengths: Any) -> float:
        """Cost of a padded batch of these lengths: ``count × cost(longest)`` (0.0 if empty).

        >>> Cost(quadratic=1.0).padded([3, 1])
        24.0
        """
        units = np.atleast_1d(self.of(lengths))
        return float(units.size * units.max()) if units.size else 0.0

    def packed(self, lengths: Any, *, capacity: int | None = None) -> float:
        """Cost of one packed row of these lengths (varlen attention: no cross-sequence term).

        With ``capacity`` the row is padded to it and the padding pays the linear rate:
        ``linear·capacity + Σ (per_sequence + quadratic·lᵢ²)``, summed left to right (what the
        packing planner checks ``max_row_cost`` with). Without, ``Σ cost(lᵢ)`` (a flattened
        batch with no padding).

        >>> Cost(quadratic=1.0).packed([3, 1]), Cost(quadratic=1.0).packed([3, 1], capacity=8)
        (14.0, 18.0)
        """
        lens = _lengths_array(lengths).reshape(-1)
        if capacity is None:
            return float(np.cumsum(self.of(lens))[-1]) if lens.size else 0.0

        capacity = positive("capacity", capacity)
        if lens.size and int(lens.sum()) > capacity:
            raise ValueError(
                f"lengths must fit in capacity={capacity} tokens, got {int(lens.sum())}"
            )
        acc = float(np.cumsum(self.extra(lens))[-1]) if lens.size else 0.0
        return self.linear * capacity + acc

    # ------------------------------------------------------------------ records
    def as_dict(self) -> dict[str, float]:
        """The coefficients as a JSON-safe dict: ``Cost(**c.as_dict()) == c``."""
        return {
            "linear": self.linear,
            "quadratic": self.quadratic,
            "per_sequence": self.per_sequence,
        }

    @classmethod
    def transformer(
        cls,
        d_model: int,
        n_layers: int,
        d_ff: int | None = None,
        vocab: int | None = None,
        causal: bool = True,
    ) -> Cost:
        """Training FLOPs (forward + backward) of a decoder or encoder transformer, per sequence.

        Derivation. A matrix product ``(l × m) @ (m × k)`` costs ``2·l·m·k`` FLOPs forward and
        twice that backward (the input's gradient and the weight's), so a weight matrix of
        ``m·k`` parameters costs ``6·m·k`` FLOPs per token in training. Per layer the
        projections Q, K, V, O hold ``4·d²`` parameters and the MLP ``2·d·d_ff``; the language
        model head (``vocab`` given) ``d·vocab``; embeddings are lookups (no FLOPs). Hence

        - ``linear = 6·(n_layers·(4·d² + 2·d·d_ff) + d·vocab)`` FLOPs per token (the familiar
          "6 × non-embedding parameters", plus the head);
        - attention multiplies ``Q·Kᵀ`` and ``P·V``: ``2·l²·d`` FLOPs each forward per layer,
          so ``12·l²·d`` per layer in training: ``quadratic = 12·n_layers·d``, halved with
          ``causal=True`` (kernels such as FlashAttention skip the masked half; a dense
          masked product does not);
        - ``per_sequence = 0``. Norms, softmax and activations (O(l·d)) are left out.

        ``d_ff`` defaults to ``4·d_model``; for a gated MLP (SwiGLU: three matrices of
        ``d × hidden``) pass ``d_ff = 1.5 × hidden``. Checked against
        ``torch.utils.flop_counter.FlopCounterMode`` on a small model (tests/test_cost.py):
        equal to 0.1% with dense attention.

        >>> c = Cost.transformer(4096, 32, d_ff=int(1.5 * 11008), vocab=32000)
        >>> f"{c.linear:.3g} FLOPs/token, attention {c.quadratic * 8192 / c.linear:.0%} at 8k"
        '3.96e+10 FLOPs/token, attention 16% at 8k'
        """
        d = positive("d_model", d_model)
        layers = positive("n_layers", n_layers)
        ff = positive_or_none("d_ff", d_ff)
        ff = 4 * d if ff is None else ff
        v = positive_or_none("vocab", vocab) or 0
        causal = check_bool("causal", causal)
        linear = 6.0 * (layers * (4.0 * d * d + 2.0 * d * ff) + float(d) * v)
        quadratic = 12.0 * layers * d * (0.5 if causal else 1.0)
        return cls(linear=linear, quadratic=quadratic, per_sequence=0.0)


def _lengths_array(lengths: Any) -> np.ndarray:
    """``lengths`` (an int or an array of ints in [0, 2**63)) as int64, or a named error."""
    try:
        arr = np.asarray(lengths)
    except (ValueError, TypeError):  # ragged nesting: numpy refuses to make one array
        raise TypeError(
            "lengths must be an int or an array of ints (equal-length rows), got a ragged "
            f"{type(lengths).__name__} {lengths!r:.60}"
        ) from None
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        if arr.size == 0:
            return np.zeros(arr.shape, np.int64)
        raise TypeError(
            f"lengths must be ints, got dtype {arr.dtype} ({type(lengths).__name__} "
            f"{lengths!r:.60})"
        )
    if arr.size and int(arr.min()) < 0:
        raise ValueError(f"lengths must be non-negative, got {int(arr.min())}")
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) >= 1 << 63:  # would wrap negative
        raise ValueError(f"lengths must be < 2**63 (int64), got {int(arr.max())}")
    return arr.astype(np.int64, copy=False)


def as_cost(value: Any, name: str = "cost") -> Cost | None:
    """``None``, a :class:`Cost`, or its dict (``spec.as_dict()["cost"]``) → ``Cost | None``.

    >>> as_cost({"quadratic": 0.5}) == Cost(quadratic=0.5)
    True
    """
    if value is None or isinstance(value, Cost):
        return value
    if isinstance(value, Mapping):
        known = {f.name for f in dataclasses.fields(Cost)}
        unknown = sorted(str(k) for k in value if k not in known)
        if unknown:
            raise ValueError(
                f"{name} must be a padless.Cost or a dict with keys {sorted(known)}, got "
                f"unknown keys {unknown}"
            )
        return Cost(**value)
    raise TypeError(
        f"{name} must be a padless.Cost (e.g. padless.Cost(quadratic=1e-4)) or its dict, got "
        f"{type(value).__name__} {value!r:.60}"
    )


def check_max_cost(name: str, value: Any) -> float | None:
    """An optional budget in cost units: a positive finite number (kept as a float)."""
    if value is None:
        return None
    return check_real(name, value)


def cost_settings(spec: Any, settings: dict[str, Any]) -> dict[str, Any]:
    """A spec's ``as_dict`` with its cost settings JSON-safe, and left out while unset.

    Leaving unset cost settings out keeps every record made before cost models existed
    (state fingerprints, saved plans, stream states) the same.
    """
    out = dict(settings)
    for key in COST_FIELDS:
        if key not in out:
            continue
        value = getattr(spec, key)
        if value is None:
            del out[key]
        elif isinstance(value, Cost):
            out[key] = value.as_dict()
    return out


def model_of(cost: Cost | None) -> Cost:
    """The cost model in force: the given one, or padded tokens (``Cost()``)."""
    return Cost() if cost is None else cost


# ---------------------------------------------------------------------------------- plans


def padded_batch_costs(cost: Cost, plan: Any, sizes: np.ndarray) -> np.ndarray:
    """``count × cost(longest)`` of every batch of a padded plan (float64).

    Cost: one pass over the plan's entries.
    """
    return BatchPlan.work_costs(plan, cost, sizes)


def packed_batch_costs(cost: Cost, plan: Any) -> np.ndarray:
    """Cost of every batch of a :class:`~padless.PackedPlan`: its rows, padded to capacity.

    Cost: one pass over the plan's entries.
    """
    return cast(np.ndarray, plan.work_costs(cost))


def cp_multiple(context_parallel: int) -> int:
    """The multiple a document is padded to for ``context_parallel`` ranks: ``2·cp``, or 1 (no
    padding) without context parallelism."""
    return 1 if context_parallel == 1 else 2 * context_parallel


def zigzag_work(lengths: Any, context_parallel: int) -> tuple[np.ndarray, np.ndarray]:
    """What each context-parallel rank's zigzag share of each document holds: ``(tokens, keys)``,
    two (N, cp) int64 arrays.

    A document of ``l`` real tokens is padded to ``L = 2·cp·c`` tokens (``L`` the multiple of
    ``2·cp`` at or above ``l``) and cut into ``2·cp`` chunks of ``c``; rank ``r`` holds chunks
    ``r`` and ``2·cp − 1 − r`` (Transformer Engine's THD layout). ``tokens[i, r]`` counts the real
    tokens of document ``i`` on rank ``r`` (padding is the document's tail); ``keys[i, r]`` the
    keys its real tokens attend under a causal mask, ``Σ (p + 1)`` over their positions ``p``.
    With ``cp = 1`` there is one rank holding the whole document (no padding).

    Balance: with no padding every rank attends exactly ``c·(L + 1)`` keys (chunk ``k`` attends
    ``c²·k + c(c+1)/2``, and ``k + (2cp − 1 − k)`` is the same for every rank). The padding
    removes the keys of positions ``l..L−1`` from the ranks holding them (rank 0 first: it holds
    the last chunk), so the ranks differ by at most ``Σ_{p=l}^{L−1} (p + 1) < (2cp − 1)·L``, a
    share at most ``2cp·(2cp − 1) / (L + 1)`` of a rank's ``c·(L + 1)``.

    Cost: O(N·cp) integer operations.

    >>> tokens, keys = zigzag_work([8, 7], 2)
    >>> tokens.tolist(), keys.tolist()
    ([[4, 4], [3, 4]], [[18, 18], [10, 18]])
    """
    lens = _lengths_array(lengths).reshape(-1)
    cp = positive("context_parallel", context_parallel)
    n = lens.size
    if cp == 1:
        return lens.reshape(n, 1).copy(), (lens * (lens + 1) // 2).reshape(n, 1)
    m = 2 * cp
    c = -(-lens // m)  # chunk length: the padded length is m·c
    tokens = np.empty((n, cp), dtype=np.int64)
    keys = np.empty((n, cp), dtype=np.int64)

    def upto(x: np.ndarray) -> np.ndarray:  # keys attended by the real tokens before x
        y = np.minimum(x, lens)
        return y * (y + 1) // 2

    for r in range(cp):
        lo1, lo2 = r * c, (m - 1 - r) * c
        tokens[:, r] = np.clip(lens - lo1, 0, c) + np.clip(lens - lo2, 0, c)
        keys[:, r] = upto(lo1 + c) - upto(lo1) + upto(lo2 + c) - upto(lo2)
    return tokens, keys


def context_parallel_costs(cost: Cost | None, plan: Any, context_parallel: int) -> np.ndarray:
    """What each context-parallel rank's share of every batch of a packed plan costs: a
    (batches, cp) array, each batch's rows cut into zigzag shares (:func:`zigzag_work`).

    Without a cost model, the rank's real tokens (int64). With one, float64: the rank holds
    ``capacity / cp`` slots of every row, paid at the linear rate (padding too, as in a packed
    row), plus for every piece of the batch its ``per_sequence`` cost (every rank holds a part
    of every document) and the rank's part of its attention, ``quadratic·l²`` times the rank's
    share of the keys attended (``keys[r] / Σ keys``). Summed over the ranks, the attention is
    the row's. The step time of a batch is its slowest rank: the max over axis 1.

    Cost: O(entries·cp).
    """
    cp = positive("context_parallel", context_parallel)
    num = len(plan)
    lens = plan.piece_lengths
    tokens, keys = zigzag_work(lens, cp)
    bounds = plan.offsets
    if cost is None:
        csum = np.zeros((lens.size + 1, cp), dtype=np.int64)
        np.cumsum(tokens, axis=0, out=csum[1:])
        return csum[bounds[1:]] - csum[bounds[:-1]]
    whole = (lens * (lens + 1) // 2).astype(np.float64)
    share = keys / np.where(whole > 0, whole, 1.0)[:, None]
    lf = lens.astype(np.float64)
    extra = cost.per_sequence + cost.quadratic * (lf * lf)[:, None] * share
    csum_f = np.zeros((lens.size + 1, cp), dtype=np.float64)
    np.cumsum(extra, axis=0, out=csum_f[1:])
    rows = np.diff(plan.row_offsets).astype(np.float64)
    base = cost.linear * (plan.capacity / cp) * rows
    out = csum_f[bounds[1:]] - csum_f[bounds[:-1]] + base[:, None]
    return out.reshape(num, cp)


def real_work(cost: Cost | None, plan: Any, sizes: np.ndarray) -> float:
    """Share of a plan's cost that is real work: ``Σ cost(lᵢ)`` over its sequences ÷ what its
    batches cost (padded: count × cost(longest), its width rounded up to the plan's
    ``pad_to_multiple_of``; packed: rows padded to capacity). Without a
    cost model, in padded tokens (1 − padding fraction). 1.0 for an empty plan.

    Cost: one pass over the plan's entries.
    """
    model = model_of(cost)
    if len(plan) == 0:
        return 1.0
    lens = plan.entry_lengths(sizes)
    multiple = int(plan.info.get("pad_to_multiple_of", 1))  # the width the collate pads to
    widths = sizes if multiple == 1 else -(-sizes // multiple) * multiple
    total = float(plan.work_costs(model, widths).sum())
    real = float(model.of(lens).sum()) if lens.size else 0.0
    return real / total if total > 0 else 1.0


def real_work_fields(costs: tuple[Cost | None, ...], plan: Any, lengths: np.ndarray) -> float:
    """:func:`real_work` with a cost model per field of (N, F) ``lengths``: the real cost of
    every field over what every field's padded batches cost (fields without a model left out).

    >>> from padless import BatchPlan
    >>> real_work_fields((Cost(), Cost()), BatchPlan([0, 1], [0, 2]), np.array([[2, 1], [4, 1]]))
    0.8
    """
    if len(plan) == 0:
        return 1.0
    real = total = 0.0
    for f, cost in enumerate(costs):
        if cost is not None:
            column = np.ascontiguousarray(lengths[:, f])
            whole = real_work(cost, plan, column)
            lens = plan.entry_lengths(column)
            part = float(cost.of(lens).sum()) if lens.size else 0.0
            real += part
            total += part / whole if whole > 0 else 0.0
    return real / total if total > 0 else 1.0


def unit_limit(cost: Cost, lengths: np.ndarray, max_cost: float) -> np.ndarray:
    """Most sequences of each length a padded batch holds within ``max_cost`` (at least 0).

    ``k = floor(max_cost / cost(l))``, corrected by one where the float product ``k·cost(l)``
    would still pass ``max_cost``; lengths of zero cost get 2**62 (no limit).
    """
    return units_limit(cost.of(np.asarray(lengths, dtype=np.int64)), max_cost)


def units_limit(units: np.ndarray, max_cost: float) -> np.ndarray:
    """:func:`unit_limit` of sequences whose padded cost is ``units`` each (float64)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        raw = np.floor(max_cost / units)
    raw = np.where(units > 0, np.minimum(raw, float(1 << 62)), float(1 << 62))
    k = raw.astype(np.int64)
    k = np.where((units > 0) & (k * units > max_cost), k - 1, k)
    return np.maximum(k, 0)


def format_cost(value: float) -> str:
    """``1.2e+15`` style for big figures, plain for small ones (for messages)."""
    return f"{value:.6g}" if math.isfinite(value) else str(value)
