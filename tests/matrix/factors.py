"""The factors of the composition matrix and what each cell is built from.

The strategies come from the registry (``padless.strategies()``); each needs a row of
:data:`STRATEGIES` (small valid settings, the settings a change moves to, the setting a warm-up
schedules). A registered strategy without a row fails ``test_every_strategy_has_settings``.
``lm`` is the one row that is not a registered strategy: ``LMStream`` (concat-and-chunk), which
the issue's third run needs (an LM-stream warm-up inside a mixture).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from padless import Schedule, strategies

# ------------------------------------------------------------------------------ the numbers
WORLD = 2  # ranks of every run
ELASTIC_WORLD = 3  # ranks an elastic resume loads the state into
WARM_AT = 2  # the optimizer step at which every warm-up (and ramp) reaches its final value
SKIP_STEPS = (1, 3)  # sampler.skip(steps=SKIP_STEPS): global batches 2..5 at two ranks
RESUME_AT = 3  # micro-batch steps every rank trains before a checkpoint (fuzz: drawn)
WINDOW = 64  # items per window of the windowed form (the corpus holds 160: three windows)
STREAM_BUFFER = 32  # StreamBatcher buffer
RAMP = Schedule.piecewise([0, WARM_AT], [2, 4])  # global micro-batches per optimizer step
MIX_WEIGHTS = {"a": 1.0, "b": 3.0}  # constant mixture weights: p = (0.25, 0.75)
MIX_SCHEDULE = {  # weights that swap at step 3: p = (0.75, 0.25), then (0.25, 0.75)
    "a": Schedule.piecewise([0, 3], [3.0, 1.0]),
    "b": Schedule.piecewise([0, 3], [1.0, 3.0]),
}


def warm(start: int, end: int) -> Schedule:
    """A warm-up: ``start`` at steps 0 and 1, ``end`` from :data:`WARM_AT` on."""
    return Schedule.piecewise([0, WARM_AT], [start, end])


# ------------------------------------------------------------------------------ strategies
@dataclass(frozen=True)
class Strategy:
    """How a strategy is set up in the matrix.

    ``base``: its spec's keywords (small and valid on the corpus: every length fits);
    ``change``: the keywords a resume across a change of settings moves to (a bigger budget:
    the change shows in the batches after it); ``warmup``: the keywords of its warm-up (a
    schedule where the strategy has a size to grow; None where it has none); ``names``: words
    that name it in an error message (its class, registry name and the settings a user writes
    for it).
    """

    name: str
    base: dict[str, Any]
    change: dict[str, Any]
    warmup: dict[str, Any] | None
    names: tuple[str, ...]
    registered: bool = True


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in [
        Strategy(
            "token_budget",
            {"max_tokens": 192},
            {"max_tokens": 384},
            {"max_tokens": warm(96, 192)},
            ("token_budget", "TokenBudget", "token budget", "max_tokens", "max_sentences"),
        ),
        Strategy(
            "exact_length",
            {"max_tokens": 192},
            {"max_tokens": 384},
            {"max_tokens": warm(96, 192)},
            ("exact_length", "ExactLength", "exact length", "max_tokens", "batch_size"),
        ),
        Strategy(
            "buckets",
            {"num_buckets": 4, "max_tokens": 192},
            {"num_buckets": 4, "max_tokens": 384},
            {"num_buckets": 4, "max_tokens": warm(96, 192)},
            ("buckets", "Buckets", "max_tokens", "num_buckets", "boundaries"),
        ),
        Strategy(
            "packing",
            {"capacity": 64, "rows_per_batch": 2},
            {"capacity": 128, "rows_per_batch": 2},
            {"capacity": warm(32, 64), "rows_per_batch": 2},
            ("packing", "Packing", "packed", "capacity", "rows_per_batch"),
        ),
        Strategy(
            "fixed_shapes",
            {"shapes": [(12, 16), (6, 32), (4, 48)]},
            {"shapes": [(16, 24), (8, 48)]},
            None,  # a set of static shapes has no size to grow
            ("fixed_shapes", "FixedShapes", "shapes"),
        ),
        Strategy(
            "decomposition",
            {"tokens_per_batch": 64, "max_length": 16, "min_length": 4},
            {"tokens_per_batch": 128, "max_length": 16, "min_length": 4},
            # its length warm-up is its curriculum: pieces from short to long
            {
                "tokens_per_batch": 64,
                "max_length": 16,
                "min_length": 4,
                "curriculum": "short_to_long",
            },
            ("decomposition", "Decomposition", "tokens_per_batch", "max_length"),
        ),
        Strategy(
            "lm",
            {"batch_size": 4, "num_steps": 16},
            {"batch_size": 8, "num_steps": 16},
            {"tokens_per_batch": 64, "num_steps": warm(8, 16)},
            ("LMStream", "lm stream", "language-model stream", "num_steps"),
            registered=False,
        ),
    ]
}

# ------------------------------------------------------------------------------ the factors
FORMS = ("whole", "window", "histogram", "stream")
LAYERS = (
    "none",
    "mixture",  # the sampler as a corpus of a MixtureSampler, constant weights
    "mixture_schedule",  # ... with weights that change (a Schedule)
    "mixture_warmup",  # a mixture whose corpora warm up (the first run)
    "ramp",  # batches_per_step=Schedule
    "warmup",  # the strategy's warm-up (a capacity or length schedule)
    "change",  # resume across a change of settings
    "skip",  # sampler.skip(steps=...)
    "resume",  # resume at a position
    "elastic",  # state of 2 ranks loaded into 3
    "elastic_balance",  # the same with balance=True
    "context_parallel",  # context_parallel=2
    "groups",  # groups= (issue 42): pairs of items that stay in one batch
)
CONSUMERS = ("collate", "token_dataset", "checked", "hf", "torchdata")
FACTORS: dict[str, tuple[str, ...]] = {
    "strategy": tuple(STRATEGIES),
    "form": FORMS,
    "layer": LAYERS,
    "consumer": CONSUMERS,
}

# Words that name a part in an error message (case-insensitive). A refusal names both parts when
# it holds words of two different parts of the cell (the whole-corpus form and the empty layer
# are no part of a refusal).
NAMES: dict[str, tuple[str, ...]] = {
    "window": ("window",),
    "histogram": ("histogram",),
    "stream": ("stream", "StreamBatcher", "StreamDataset"),
    "mixture": ("mixture", "MixtureSampler", "samplers["),
    "mixture_schedule": ("mixture", "MixtureSampler", "samplers[", "weight"),
    "mixture_warmup": ("mixture", "MixtureSampler", "samplers[", "warm-up", "warmup", "schedule"),
    "ramp": ("batches_per_step", "tokens_per_step", "ramp"),
    "warmup": ("warm-up", "warmup", "schedule", "curriculum"),
    "change": ("settings", "change"),
    "skip": ("skip",),
    "resume": ("state", "resume"),
    "elastic": ("world size", "world_size", "elastic"),
    "elastic_balance": ("world size", "world_size", "elastic", "balance"),
    "context_parallel": ("context_parallel", "context parallel", "context-parallel"),
    "groups": ("groups",),
    "collate": ("collate",),
    "token_dataset": ("TokenDataset", "token file"),
    "checked": ("checked", "CheckedDataset"),
    "hf": ("Trainer", "batch_sampler", "data_collator", "PaddingFreeCollator", "train_dataset"),
    "torchdata": ("StatefulDataLoader", "DataLoader", "torchdata", "num_workers"),
}


def names_of(value: str) -> tuple[str, ...]:
    """The words naming a factor value (a strategy's from its row)."""
    if value in STRATEGIES:
        return STRATEGIES[value].names
    return NAMES.get(value, ())


# ------------------------------------------------------------------------------ cells
@dataclass(frozen=True, order=True)
class Cell:
    strategy: str
    form: str
    layer: str
    consumer: str
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def id(self) -> str:
        return f"{self.strategy}-{self.form}-{self.layer}-{self.consumer}"

    @classmethod
    def parse(cls, text: str) -> Cell:
        strategy, form, layer, consumer = text.split("-")
        return cls(strategy, form, layer, consumer)

    def values(self) -> tuple[str, str, str, str]:
        return (self.strategy, self.form, self.layer, self.consumer)


def not_a_cell(strategy: str, form: str, layer: str, consumer: str) -> str | None:
    """Why a combination has no spelling at all (None: it is a cell). Kept to the few where
    nothing could be written: the LM stream has one form, a static shape set has no size to
    warm up, and a stream has no dataset apart from itself to check."""
    if strategy == "lm" and form != "whole":
        return "LMStream is a token stream in constant memory: no windows, histogram or batcher"
    if layer in ("warmup", "mixture_warmup") and STRATEGIES[strategy].warmup is None:
        return f"{strategy} has no size to warm up"
    if consumer == "checked" and (strategy == "lm" or form == "stream"):
        return (
            "a stream reads and measures its items itself (an LMStream its token file, a "
            "StreamDataset its source): there is no dataset to check against planned lengths"
        )
    return None


def all_cells() -> list[Cell]:
    """Every cell, in factor order."""
    return [
        Cell(s, f, la, c)
        for s in FACTORS["strategy"]
        for f in FORMS
        for la in LAYERS
        for c in CONSUMERS
        if not_a_cell(s, f, la, c) is None
    ]


def registered() -> list[str]:
    """The registry's strategy names, sorted."""
    return sorted(strategies())
