"""The samplers the contract suite runs: one factory each. A new sampler adds one entry here.

A factory builds a sampler from the common options (``shuffle``, ``seed``, ``rank``,
``world_size``, ``drop_last`` and, where ``balance`` is true, ``balance``). ``key`` turns one
yielded batch into something hashable; ``units`` (optional) lists the dataset units a batch
covers, for the "every unit exactly once per epoch" check; ``elastic`` says whether a state
loads at another world size; ``batch_sampler`` says whether its batches are lists of dataset keys
that a ``torch.utils.data.DataLoader`` can take as its ``batch_sampler``. Every test runs every
factory: a test that does not apply to one asks these attributes, never the factory's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

import padless
from padless.lhotse import CutSampler
from padless.planners.decomposition import decompose, piece_numbers
from padless.planners.packing import scheduled_stride
from padless.sampling.mixing import MixtureSampler

LENGTHS = np.random.default_rng(7).lognormal(3.5, 0.8, 600).astype(np.int64).clip(1, 300)
PAIRS = np.stack([LENGTHS, (LENGTHS * 1.1).astype(np.int64).clip(1, 300)], axis=1)
TOKENS = np.arange(5_000, dtype=np.int64)


def _list_key(batch: Any) -> Any:
    return tuple(batch)


# PAIRS as cuts: field 0 their durations in 10 ms ticks, field 1 their transcripts' characters
CUTS = [
    SimpleNamespace(id=str(i), duration=d / 100, supervisions=[SimpleNamespace(text="x" * t)])
    for i, (d, t) in enumerate(PAIRS.tolist())
]


def _cut_key(batch: Any) -> Any:
    return tuple(c.id for c in batch)


def _cut_units(batch: Any) -> list[int]:
    return [int(c.id) for c in batch]


def _lm_key(batch: Any) -> Any:
    x, y = batch
    return (x.shape, x.tobytes(), y.tobytes())


def _lm_units(batch: Any) -> list[int]:
    return batch[1].ravel().tolist()  # target tokens: each once per epoch


@dataclass(frozen=True)
class Factory:
    name: str
    make: Callable[..., Any]
    balance: bool = True
    elastic: bool = True
    batch_sampler: bool = True  # False: it yields arrays (LM streams), not lists of dataset keys
    key: Callable[[Any], Any] = _list_key
    units: Callable[[Any], list[int]] | None = list
    all_units: Callable[[Any], list[int]] | None = None  # None: every index of LENGTHS

    def __call__(self, **options: Any) -> Any:
        if not self.balance:
            options.pop("balance", None)
        return self.make(**options)


def _mixture(**options: Any) -> MixtureSampler:
    subs = {
        "a": padless.TokenBudgetSampler(LENGTHS[:300], max_tokens=500, seed=1),
        "b": padless.PackingSampler(LENGTHS[300:], capacity=400, seed=2),
    }
    return MixtureSampler(subs, temperature=2.0, num_batches=40, **options)


def _ramp(**options: Any) -> padless.PlanSampler:
    """A batch-size ramp: 600, 1200 then 2400 tokens per optimizer step at steps 0, 2, 4, i.e. 1,
    2 then 4 global batches of max_tokens=600, rounded up to a multiple of the world size (the
    setting is the same at every world size, so a state loads at another one)."""
    ramp = padless.Schedule.piecewise([0, 2, 4], [600, 1200, 2400])
    return padless.PlanSampler(
        LENGTHS, padless.TokenBudget(max_tokens=600), tokens_per_step=ramp, **options
    )


def _mixture_schedule(**options: Any) -> MixtureSampler:
    """Weights that change at steps 1 and 2: inside epoch 0 at every world size the suite runs
    (its other epochs compare draws across world sizes, whose steps differ; see the report)."""
    subs = {
        "a": padless.TokenBudgetSampler(LENGTHS[:300], max_tokens=500, seed=1),
        "b": padless.PackingSampler(LENGTHS[300:], capacity=400, seed=2),
    }
    weights = {"a": padless.Schedule.piecewise([0, 1, 2], [3.0, 1.0, 0.5]), "b": 1.0}
    return MixtureSampler(subs, weights=weights, num_batches=40, **options)


def _lm_flat_key(batch: Any) -> Any:
    """The batch's tokens in order, whatever its shape: a warm-up cuts the same chunks into
    rows of the step's length, and the step of a global batch depends on the world size."""
    x, y = batch
    return (x.tobytes(), y.tobytes())


# a capacity warm-up: rows of 64, 128 then 256 tokens at optimizer steps 0, 2, 4
WARMUP = padless.Schedule.piecewise([0, 2, 4], [64, 128, 256])
WARMUP_STRIDE = scheduled_stride(len(LENGTHS), 256)


def _untagged(batch: Any) -> list[int]:
    """The planned codes of a warm-up batch: its step's tag ``(f - 1) · stride`` taken off (the
    step of a global batch depends on the world size; the tags are tested in
    tests/test_packing_warmup.py)."""
    return [c % WARMUP_STRIDE for c in batch]


def _decomposition_units(max_length: int, min_length: int) -> list[int]:
    """Codes of the kept pieces, from the lengths alone (not from a plan)."""
    doc, start, length = decompose(LENGTHS, max_length)
    keep = length >= min_length
    return sorted((doc + piece_numbers(start, max_length) * len(LENGTHS))[keep].tolist())


# group ids (issue 42): DPO-like pairs whose two items lie apart in the corpus, and GRPO-like
# groups of 4 consecutive items
PAIR_IDS = np.random.default_rng(8).permutation(len(LENGTHS)) // 2
GROUP_IDS = np.arange(len(LENGTHS)) // 4

FACTORIES = [
    Factory("token_budget", lambda **o: padless.TokenBudgetSampler(LENGTHS, max_tokens=600, **o)),
    Factory(
        "token_budget_groups",
        lambda **o: padless.TokenBudgetSampler(LENGTHS, max_tokens=800, groups=PAIR_IDS, **o),
    ),
    Factory(
        "packing_groups",
        lambda **o: padless.PackingSampler(
            LENGTHS, capacity=1024, rows_per_batch=2, groups=GROUP_IDS, **o
        ),
    ),
    Factory(
        "token_budget_pairs",
        lambda **o: padless.TokenBudgetSampler(PAIRS, max_tokens=700, multiple_of=2, **o),
    ),
    Factory(
        "token_budget_fields",  # a budget per field (field 0 in ticks of 10 ms), costs summed
        lambda **o: padless.PlanSampler(
            PAIRS,
            padless.TokenBudget(
                max_tokens=(7.0, 650),
                resolution=(0.01, None),
                cost=(padless.Cost(quadratic=1e-3, linear=1.0), padless.Cost()),
                max_cost=1300.0,
            ),
            **o,
        ),
    ),
    Factory(
        "lhotse_cuts",  # CutSets of lhotse cuts, both budgets (7 s of audio, 650 characters)
        lambda **o: CutSampler(
            CUTS,
            padless.TokenBudget(max_tokens=(7.0, 650), resolution=(0.01, None)),
            tokens=len,
            **o,
        ),
        batch_sampler=False,  # it yields CutSets for lhotse's datasets, not lists of indices
        key=_cut_key,
        units=_cut_units,
    ),
    Factory("exact_length", lambda **o: padless.ExactLengthSampler(LENGTHS, batch_size=3, **o)),
    Factory(
        "exact_length_merge",
        lambda **o: padless.ExactLengthSampler(LENGTHS, max_tokens=400, leftovers="merge", **o),
    ),
    Factory(
        "buckets", lambda **o: padless.BucketSampler(LENGTHS, num_buckets=4, max_tokens=600, **o)
    ),
    Factory(
        "buckets_2d",  # 4 buckets on field 0, then up to 2 on field 1 in each; a budget per field
        lambda **o: padless.PlanSampler(
            PAIRS, padless.Buckets(num_buckets=(4, 2), max_tokens=(600, 700)), **o
        ),
    ),
    Factory(
        "packing",
        lambda **o: padless.PackingSampler(LENGTHS, capacity=256, rows_per_batch=2, **o),
    ),
    Factory(
        "packing_split",
        lambda **o: padless.PackingSampler(LENGTHS, capacity=64, oversize="split", **o),
        # units: piece codes ``index + piece * N``, ceil(length / 64) pieces per sequence
        all_units=lambda s: sorted(
            i + p * len(LENGTHS) for i, n in enumerate(LENGTHS.tolist()) for p in range(-(-n // 64))
        ),
    ),
    Factory(
        "packing_warmup",  # capacity as a schedule: planned at 256, delivered in rows of the step
        lambda **o: padless.PlanSampler(
            LENGTHS, padless.Packing(capacity=WARMUP, rows_per_batch=2, oversize="split"), **o
        ),
        units=_untagged,
        all_units=lambda s: sorted(
            i + p * len(LENGTHS)
            for i, n in enumerate(LENGTHS.tolist())
            for p in range(-(-n // 256))
        ),
    ),
    Factory(
        "packing_cp",  # rows for 4 context-parallel ranks: documents padded to multiples of 8
        lambda **o: padless.PlanSampler(
            LENGTHS, padless.Packing(capacity=256, rows_per_batch=2, context_parallel=4), **o
        ),
    ),
    Factory(
        "packing_pairs",  # a capacity per field: (source, target) pairs packed by vector best fit
        lambda **o: padless.PlanSampler(
            PAIRS, padless.Packing(capacity=(256, 288), rows_per_batch=2), **o
        ),
    ),
    Factory(
        "plan_sampler_spec",
        lambda **o: padless.PlanSampler(LENGTHS, padless.TokenBudget(max_tokens=900), **o),
    ),
    Factory(
        "windowed",  # windows of 128 items (5 windows), epochs change their members
        lambda **o: padless.PlanSampler(
            LENGTHS, padless.TokenBudget(max_tokens=600), window=128, **o
        ),
        all_units=lambda s: list(range(LENGTHS.shape[0])),  # no plan of the whole epoch
    ),
    Factory(
        "token_budget_histogram",  # the global plan's shapes, cut on the histogram
        lambda **o: padless.PlanSampler(
            LENGTHS, padless.TokenBudget(max_tokens=600), window="histogram", **o
        ),
        all_units=lambda s: list(range(LENGTHS.shape[0])),
    ),
    Factory(
        "packing_histogram",  # the global best fit's rows, from the histogram
        lambda **o: padless.PlanSampler(
            LENGTHS, padless.Packing(capacity=256, rows_per_batch=2), window="histogram", **o
        ),
        all_units=lambda s: list(range(LENGTHS.shape[0])),
    ),
    Factory(
        "fixed_shapes",
        lambda **o: padless.PlanSampler(
            PAIRS, padless.FixedShapes(shapes=[(8, 40), (3, 120), (2, 330)]), **o
        ),
    ),
    Factory(
        "token_budget_cost",  # quadratic cost model: max_cost beside max_tokens, balance by cost
        lambda **o: padless.TokenBudgetSampler(
            LENGTHS, max_tokens=900, cost=padless.Cost(quadratic=0.02), max_cost=2000.0, **o
        ),
    ),
    Factory(
        "decomposition",  # power-of-two pieces, one length per batch, in a grow-P2 curriculum
        lambda **o: padless.PlanSampler(
            LENGTHS,
            padless.Decomposition(
                min_length=8, max_length=64, tokens_per_batch=256, curriculum="grow_p2", cycles=2
            ),
            **o,
        ),
        balance=False,  # its plan orders the batches: balanced steps are refused
        # units: piece codes ``index + piece * N`` of every piece of at least min_length tokens
        all_units=lambda s: _decomposition_units(64, 8),
    ),
    Factory("mixture", _mixture, balance=False, units=None),  # draws by weight: no "each once"
    Factory(
        "mixture_schedule",
        _mixture_schedule,
        balance=False,
        units=None,
        # a state loads at another world size, but the rest of the epoch is drawn afresh there
        # (its steps differ), so the union is not a world-1 run's: the elastic checks don't apply
        elastic=False,
    ),
    Factory("token_budget_ramp", _ramp),  # tokens_per_step ramp (its batches are the plan's)
    Factory(
        "lm_warmup",  # sequence-length warm-up: rows of 4, 8 then 16 tokens, 64 tokens a batch
        lambda **o: padless.LMStream(
            TOKENS,
            num_steps=padless.Schedule.piecewise([0, 2, 4], [4, 8, 16]),
            tokens_per_batch=64,
            **o,
        ),
        balance=False,
        batch_sampler=False,
        key=_lm_flat_key,
        units=_lm_units,
        all_units=lambda s: list(
            range(s.offset + 1, s.offset + 1 + (len(TOKENS) - 1 - s.offset) // 16 * 16)
        ),
    ),
    Factory(
        "lm_random",
        lambda **o: padless.LMStream(TOKENS, batch_size=4, num_steps=16, **o),
        balance=False,
        batch_sampler=False,
        key=_lm_key,
        units=_lm_units,
        all_units=lambda s: list(
            range(s.offset + 1, s.offset + 1 + (len(TOKENS) - 1 - s.offset) // 16 * 16)
        ),
    ),
    Factory(
        "lm_sequential",
        lambda **o: padless.LMStream(TOKENS, batch_size=2, num_steps=16, mode="sequential", **o),
        balance=False,
        elastic=False,
        batch_sampler=False,
        key=_lm_key,
        units=_lm_units,  # every target in (o, o + S * L] once: S = 2 streams of L tokens
        all_units=lambda s: list(
            range(s.offset + 1, s.offset + 1 + (len(TOKENS) - 1 - s.offset) // 2 * 2)
        ),
    ),
]
