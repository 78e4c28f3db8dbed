"""Planner specs: one frozen, validated, JSON-safe config object per batching strategy.

A spec says *how* to batch (``TokenBudget(max_tokens=4096)``); it is checked once, when it is
made, and then used by every consumer: ``spec.plan(lengths)`` for one plan,
:class:`padless.PlanSampler` for epochs, ranks and resume, windowed plans, streams, the CLI and
the report. ``spec.bind(lengths)`` checks what depends on the lengths (a sequence over the
budget, boundaries fitted to them) once and returns a :class:`Planner` that plans any
``(seed, epoch)`` from then on.

Adding a strategy: one module with a spec subclass (each setting a :func:`setting` field with
its check; rules across settings in ``_settle``; its answers to generic code where the defaults
do not fit: ``packs_rows``, ``collate_form``, ``for_windows``, ``window_kernel``,
``stream_engine``, ``step_form``) and its planner, one line in ``_REGISTRY`` (:func:`padless.planners.strategies`), and its
factory in the contract tests. Windows, streams, samplers and collates ask these answers; none
of them tests a spec's type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from typing import Any, ClassVar, TypeVar, cast

import numpy as np

from ..core._check import check_int, check_seed
from ..core._keywords import check_keywords, keyword_names
from ..core._schedule import padded_costs
from ..core.cost import Cost, as_cost
from ..core.fields import to_ticks
from ..core.lengths import MAX_LENGTH, sizes_of
from ..core.plan import BatchPlan, not_a_spec, spec_record
from ..core.schedules import Schedule
from ..io import lengths_of


def plannable_lengths(lengths: Any) -> np.ndarray:
    """:func:`padless.lengths_of`, except that a C-contiguous integer array of at most 32 bits
    within the lengths' range is used as it is: planning int32 lengths makes no int64 copy."""
    if (
        isinstance(lengths, np.ndarray)
        and lengths.dtype.kind in "iu"
        and lengths.dtype.itemsize <= 4
        and lengths.dtype.isnative
        and lengths.flags.c_contiguous
        and lengths.ndim in (1, 2)
        and lengths.size > 0
        and int(lengths.min()) >= 0
        and int(lengths.max()) < MAX_LENGTH
    ):
        return lengths
    return lengths_of(lengths)


def _json_safe(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (Cost, Schedule)):
        return value.as_dict()
    return value


S = TypeVar("S", bound="Spec")
T = TypeVar("T")


def setting(check: Callable[[str, Any], T], *, default: Any = dataclasses.MISSING) -> T:
    """A spec field checked by ``check(name, value)``, which returns the value normalised
    (:meth:`Spec.__post_init__` runs it and stores the result); no ``default``: required.

    >>> from padless import TokenBudget
    >>> dataclasses.fields(TokenBudget)[0].metadata["check"]("max_tokens", 0)
    Traceback (most recent call last):
    ...
    ValueError: max_tokens must be a positive int, got 0
    """
    return cast(T, dataclasses.field(default=default, metadata={"check": check}))


def check_cost(name: str, value: Any) -> Cost | None:
    """:func:`padless.core.cost.as_cost` as a setting's check (``None``, a Cost or its dict)."""
    return as_cost(value, name)


def check_field_costs(name: str, value: Any) -> Cost | tuple[Cost | None, ...] | None:
    """A cost model, or one per field (a tuple or list of Costs, their dicts or None: a field
    that costs nothing), summed over the fields of each batch."""
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError(f"{name} must name one cost per field, got an empty {value!r}")
        out = tuple(as_cost(v, f"{name}[{i}]") for i, v in enumerate(value))
        if all(c is None for c in out):
            raise ValueError(f"{name} must give a cost for some field, got {list(value)!r}")
        return out
    return as_cost(value, name)


def settle_field_budgets(
    budgets: Any, res: Any, cost: Any, max_cost: Any, named: Mapping[str, int] | None = None
) -> tuple[int | None, tuple[int | None, ...] | None]:
    """The rules of budgets per field shared by the specs that take them (``max_tokens`` one
    number or one per field, ``resolution`` and ``cost`` likewise); ``(limit, ticks)``: one
    budget in whole ticks (None: none), or the budgets per field in ticks (limit None).
    ``named``: other settings that fix the number of fields (e.g. ``{"2-D buckets": 2}``)."""
    counts = dict(named or {})
    for name, value in (("max_tokens", budgets), ("resolution", res), ("cost", cost)):
        if isinstance(value, tuple):
            counts[name] = len(value)
    if len(set(counts.values())) > 1:
        raise ValueError(
            "max_tokens, resolution and cost must name the same number of fields, got "
            + ", ".join(f"{k}: {v}" for k, v in counts.items())
        )
    if not isinstance(budgets, tuple):
        if isinstance(res, tuple):
            raise ValueError(
                f"resolution={list(res)!r} names fields but max_tokens={budgets!r} is one "
                "budget: give max_tokens per field too"
            )
        return (None if budgets is None else to_ticks("max_tokens", budgets, res)), None
    per = res if isinstance(res, tuple) else (res,) * len(budgets)
    ticks = tuple(
        None if b is None else to_ticks(f"max_tokens[{f}]", b, per[f])
        for f, b in enumerate(budgets)
    )
    if isinstance(cost, Cost) or (cost is None and max_cost is not None):
        raise ValueError(
            f"per-field max_tokens={list(budgets)!r} need a cost model per field for "
            f"{'max_cost' if cost is None else 'cost'} (cost=(Cost(...), Cost(...))), got "
            f"cost={cost!r}"
        )
    return None, ticks


def check_field_count(spec: Any, fields: int, shape: tuple[int, ...]) -> None:
    """Refuse (N, F) lengths whose F is not the number of fields the spec's per-field settings
    (``max_tokens``, ``cost``, ``resolution`` given as tuples) name."""
    for name in ("max_tokens", "cost", "resolution"):
        value = getattr(spec, name, None)
        if isinstance(value, tuple) and len(value) != fields:
            raise ValueError(
                f"{name} names {len(value)} fields, but the lengths have {fields} (shape "
                f"{shape}): give (N, {len(value)}) lengths, one column per field"
            )


_SETTING_NAMES: dict[type, frozenset[str]] = {}


def _setting_names(cls: type) -> frozenset[str]:
    """The names of a spec class's settings (its init fields), once per class."""
    names = _SETTING_NAMES.get(cls)
    if names is None:
        names = _SETTING_NAMES[cls] = frozenset(keyword_names(cls))
    return names


def _settings(spec: Any) -> list[dataclasses.Field[Any]]:
    """The user-given fields of a spec (not those it derives in ``__post_init__``)."""
    return [f for f in dataclasses.fields(spec) if f.init]


# settings added after records existed: left out of ``as_dict`` while at these values, so every
# state fingerprint, saved plan and stream state made before them stays the same (a spec class
# adds its own in ``Spec.quiet``)
QUIET_DEFAULTS: dict[str, Any] = {"pad_to_multiple_of": 1}


def check_pad_multiple(name: str, value: Any) -> int:
    """Check ``pad_to_multiple_of``: an int in [1, 2**31] (a padded width stays below 2**32)."""
    m = cast(int, check_int(name, value, minimum=1))
    if m > MAX_LENGTH:
        raise ValueError(f"{name} must be <= 2**31 (a padded width stays below 2**32), got {m}")
    return m


def check_collate_multiple(planned: int, multiple: int, what: str = "multiple_of") -> None:
    """Refuse a collate that rounds widths to another multiple than the plan budgeted.

    ``what`` names the collate's setting (``"multiple_of"``, or e.g.
    ``"DataCollatorWithPadding.pad_to_multiple_of"``; give its None as 1).

    >>> check_collate_multiple(8, 8)
    >>> check_collate_multiple(1, 8)
    Traceback (most recent call last):
    ...
    ValueError: multiple_of=8 is not the plan's pad_to_multiple_of=1: ...
    """
    if multiple == planned:
        return
    widths = "unrounded" if planned == 1 else f"rounded to a multiple of {planned}"
    raise ValueError(
        f"{what}={multiple} is not the plan's pad_to_multiple_of={planned}: the plan budgeted "
        f"batches at widths {widths}, so a collate rounding to {multiple} can pass its budget; "
        f"put the multiple in the plan (e.g. TokenBudget(max_tokens=..., "
        f"pad_to_multiple_of={multiple})) and take the collate from it"
    )


def round_up(lengths: np.ndarray, multiple: int) -> np.ndarray:
    """``lengths`` rounded up to a multiple of ``multiple`` (each field of (N, F) lengths): the
    width a collate padding to that multiple gives. The lengths themselves when ``multiple`` is 1.

    >>> round_up(np.array([0, 1, 8, 9]), 8).tolist()
    [0, 8, 8, 16]
    """
    if multiple == 1:
        return lengths
    wide = np.asarray(lengths, dtype=np.int64)
    out = (wide + (multiple - 1)) // multiple * multiple
    if lengths.dtype.itemsize <= 4 and (out.size == 0 or int(out.max()) < 1 << 31):
        return out.astype(np.int32)
    return out


@dataclasses.dataclass(frozen=True)
class CollateForm:
    """How a strategy's batches become tensors: what ``padless.torch`` needs to collate them.

    ``packed``: the batches are rows of concatenated pieces of at most ``capacity`` tokens
    (``collate_packed(capacity, max_per_row=...)``); else padded sequences, to a width
    multiple of ``multiple_of`` or to one of the static ``shapes`` (``collate_padded``).
    ``equal_lengths``: every batch's samples share one length (dense ``(B, L)`` blocks), and
    the collate refuses a batch that does not (a dataset not serving the planned pieces).
    ``context_parallel``: packed rows whose documents were planned padded to a multiple of
    ``2·context_parallel``, for that many context-parallel ranks (1: none).
    ``capacities``: packed rows with one capacity per field (source, target: every pair's
    fields go to its row's field rows, ``collate_packed_pairs``); ``capacity`` is 0 then.
    """

    packed: bool = False
    multiple_of: int = 1
    shapes: tuple[tuple[int, int], ...] | None = None
    pad_batches: bool = True
    capacity: int = 0
    max_per_row: int | None = None
    equal_lengths: bool = False
    context_parallel: int = 1
    capacities: tuple[int, ...] | None = None


class StepForm:
    """How the batches a sampler delivers follow the global optimizer step: a strategy's answer
    (:meth:`Spec.step_form`) for a setting that is a :class:`padless.Schedule` of the step
    (``Packing``'s capacity), where the plan stays one plan and each batch is delivered in its
    step's form. The sampler passes each batch's yielded values, and the lengths of what they
    name, with the batch's global optimizer step."""

    def keys_at(self, steps: np.ndarray) -> list[Any]:
        """The form of each of ``steps`` as a key for :meth:`list_at`: None where a batch is
        delivered as planned (the sampler then yields it untouched). Vectorised: the sampler
        asks once per iteration for all its steps."""
        return [None] * int(np.asarray(steps).size)

    def list_at(self, values: np.ndarray, lo: int, hi: int, key: Any) -> list[int]:
        """The list a sampler yields for the batch ``values[lo:hi]`` in the form ``key`` (from
        :meth:`keys_at`; not None), e.g. codes tagged with their step's capacity."""
        out: list[int] = values[lo:hi].tolist()
        return out

    def entry_lengths_at(self, lengths: np.ndarray, key: Any) -> np.ndarray:
        """The lengths of the sequences the model receives for a batch in the form ``key``
        whose planned entries have ``lengths`` (e.g. pieces of a smaller row), for target
        counts."""
        return lengths

    def settles_at(self) -> int:
        """A step from which every step's key is that step's (the form changes no more): a
        sampler need not count the exact steps past it."""
        return 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Spec:
    """Base of the planner specs: frozen, keyword-only dataclasses whose fields are made by
    :func:`setting` (each with its own check); rules across settings go in :meth:`_settle`.

    Subclasses set ``name`` (the registry key) and ``state_tag`` (the tag a sampler's state
    fingerprint carries: the keyword sampler's class name, which states were saved under before
    specs existed, so ``PlanSampler(L, TokenBudget(...))`` and ``TokenBudgetSampler(L, ...)``
    save interchangeable states), and implement :meth:`bind`.
    """

    name: ClassVar[str] = ""
    state_tag: ClassVar[str] = ""
    # the strategy's answers to generic code (which never tests a spec's type):
    # batches are rows of packed pieces (the plan is a PackedPlan, ``capacity`` a row's length)
    packs_rows: ClassVar[bool] = False
    # the plan lists its batches in training order (a curriculum): samplers keep that order
    # (no shuffle, no balanced steps) and slice ranks from it
    orders_batches: ClassVar[bool] = False
    # settings left out of as_dict() at these values (added after records of the spec existed)
    quiet: ClassVar[dict[str, Any]] = QUIET_DEFAULTS
    # a few words on each setting, for the message of a wrong keyword given to another
    # component ("context_parallel is a setting of Packing (...)"); a strategy adds its own
    about: ClassVar[dict[str, str]] = {
        "max_tokens": "tokens per batch, padding included",
        "batch_size": "sequences per batch",
        "multiple_of": "batch sizes rounded down to a multiple",
        "pad_to_multiple_of": "widths padded up to a multiple, and planned at that width",
        "oversize": "what becomes of a sequence the budget cannot hold",
        "cost": "a padless.Cost model the budget counts in",
        "max_cost": "cost per batch, in a Cost model's units",
        "resolution": "seconds per tick of lengths made by padless.durations",
        "leftovers": "what becomes of incomplete batches",
    }
    # what a spec says of a keyword it does not take (before the generic hints)
    keyword_notes: ClassVar[dict[str, str]] = {
        k: f"a spec holds no randomness: give {k} to spec.plan(lengths, seed=..., epoch=...) "
        "or to the sampler"
        for k in ("seed", "epoch")
    }

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # a keyword that is no setting: the TypeError that says what to do (padless._keywords),
        # raised before the dataclass's __init__ gives Python's bare one
        if kwargs:
            takes = _setting_names(cls)
            if not takes.issuperset(kwargs):
                check_keywords(
                    cls.__name__, kwargs, keyword_names(cls), cls.keyword_notes, cls.about
                )
        return super().__new__(cls)

    def __post_init__(self) -> None:
        """Check each setting (in field order) and store it normalised; then :meth:`_settle`."""
        checks = [
            (f.name, f.metadata["check"]) for f in dataclasses.fields(self) if "check" in f.metadata
        ]
        self._set(**{name: self._checked(name, check) for name, check in checks})
        self._settle()

    def _checked(self, name: str, check: Callable[[str, Any], Any]) -> Any:
        """Setting ``name`` checked; a :class:`Schedule` a setting does not take is refused
        saying what does follow the optimizer step."""
        value = getattr(self, name)
        try:
            return check(name, value)
        except TypeError as err:
            if not isinstance(value, Schedule):
                raise
            raise TypeError(
                f"{err}: {type(self).__name__} plans each epoch once, so its {name} does not "
                "follow the optimizer step; what does: a batch-size ramp "
                "(PlanSampler(..., batches_per_step=Schedule) or tokens_per_step=), a "
                "sequence-length warm-up of packed rows (Packing(capacity=Schedule)) or of an "
                "LM stream (LMStream(num_steps=Schedule))"
            ) from None

    def _settle(self) -> None:
        """Check the rules across settings (each setting is checked by then); store what they
        normalise or derive with :meth:`_set`. None by default."""

    def _set(self, **values: Any) -> None:
        """Store settings on this frozen spec (while it is made: ``__post_init__``, ``_settle``)."""
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def step_form(self, planner: Planner) -> StepForm | None:
        """How this spec's batches follow the global optimizer step (a setting that is a
        schedule), for a whole-corpus sampler over ``planner``; None (the default): every batch
        is delivered as planned, whatever its step."""
        return None

    def needs_pieces(self, sizes: np.ndarray) -> str | None:
        """Why a sampler of this spec over sequences of ``sizes`` yields values that only
        ``spec.pieces(dataset)`` serves (piece codes, truncated sequences, a warm-up's tagged
        codes), or None: its values are plain dataset indices, served by any dataset of the
        sequences. Empty ``sizes`` ask what holds whatever the lengths (a consumer that serves
        split pieces itself asks that). A consumer that can only index the sequences refuses
        the first kind when it is built."""
        return None

    def collate_form(self) -> CollateForm:
        """How this strategy's batches are collated (padded to ``pad_to_multiple_of``)."""
        return CollateForm(multiple_of=int(getattr(self, "pad_to_multiple_of", 1)))

    def for_windows(self, src: Any) -> Spec:
        """This spec as windowed plans use it over all of ``src``'s lengths (a
        :class:`padless.planners.windows.WindowedPlanner` being built: ``n``, ``size_min``, ``size_max``,
        ``size_chunks()``): settings fitted to them once, so that every window agrees, and the
        rules only windows have checked. By default the spec itself."""
        return self

    def stream_engine(self) -> Any:
        """A fresh :class:`padless.planners._rounds.StreamEngine` that plans this strategy over a
        stream's buffer, or None: the strategy has no stream form (StreamBatcher refuses it).
        Raises ValueError for a setting the stream form does not follow."""
        return None

    def window_kernel(self, src: Any) -> WindowKernel | None:
        """A fused planner for the windows of ``src`` (1-D lengths), or None: each window's
        items are then gathered and planned by this spec's planner."""
        return None

    def units(self, fields: int) -> tuple[float | None, ...]:
        """Seconds (or another unit) per tick of each of ``fields`` length fields: the spec's
        ``resolution`` where it has one (None: a field of whole tokens)."""
        res = getattr(self, "resolution", None)
        return tuple(res) if isinstance(res, tuple) else (res,) * fields

    def histogram_form(self) -> tuple[str, tuple[int, int, int]] | None:
        """How this strategy plans from the lengths' histogram (:mod:`padless.planners.histogram`):
        ``("budget", (max_tokens, max_sentences, multiple_of))`` (0 for none) for batches cut
        by a token budget, ``("rows", (capacity, max_per_row, rows_per_batch))`` for best-fit
        rows; None: the strategy has no histogram form."""
        return None

    def bind(self, lengths: np.ndarray) -> Planner:
        """Check the (N,) or (N, F) int64 lengths against this spec; return their planner."""
        raise NotImplementedError

    def bind_groups(self, lengths: np.ndarray, groups: np.ndarray) -> Planner:
        """:meth:`bind` with ``groups`` (one int64 id per sequence, checked by
        :func:`item_ids`) kept whole: every batch the planner makes holds whole groups, a
        group's items next to each other. A strategy that can plan so answers with its grouped
        planner; by default a ``ValueError`` (a sampler refuses ``groups=`` when it is built)."""
        raise ValueError(
            f"groups= cannot be honoured by {self.describe()}: it cuts its batches by the "
            "sequences' lengths alone, which would split a group; keep groups together with "
            "TokenBudget(max_tokens=...) (padded batches) or Packing(capacity=...) (packed rows)"
        )

    def plan(self, lengths: Any, *, seed: int = 0, epoch: int = 0) -> BatchPlan:
        """Plan ``lengths`` for one ``(seed, epoch)``.

        Cost: see the strategy's ``plan_*`` function.
        """
        lens = plannable_lengths(lengths)
        check_seed("seed", seed)
        check_seed("epoch", epoch)
        return self.bind(lens).plan(seed, epoch)

    def as_dict(self) -> dict[str, Any]:
        """The settings as a JSON-safe dict: ``type(spec)(**spec.as_dict()) == spec``.

        >>> from padless import TokenBudget
        >>> TokenBudget(max_tokens=4096).as_dict()["max_tokens"]
        4096
        """
        out = {}
        for f in _settings(self):
            value = getattr(self, f.name)
            if f.name in self.quiet and value == self.quiet[f.name]:
                continue
            out[f.name] = _json_safe(value)
        return out

    def describe(self) -> str:
        """One line: the strategy name and its settings that differ from the defaults."""
        parts = []
        for f in _settings(self):
            value = getattr(self, f.name)
            if value != f.default:
                parts.append(f"{f.name}={_json_safe(value)}")
        return f"{self.name}({', '.join(parts)})"


class WindowKernel:
    """A strategy's fused planner for windows: plans (and counts) the batches of one window
    straight from the lengths, as the spec's planner would plan the window's items.

    ``src`` is the :class:`padless.planners.windows.WindowedPlanner`; ``member`` its window membership
    of the epoch, ``blocks`` the window's blocks, ``sub`` the window's seed.
    """

    def __init__(self, spec: Spec, src: Any) -> None:
        self.spec = spec
        self.src = src

    def plan(self, member: Any, blocks: np.ndarray, sub: int) -> BatchPlan:
        raise NotImplementedError

    def count(self, member: Any, blocks: np.ndarray) -> int:
        raise NotImplementedError


def plain(spec: Spec, known: tuple[str, ...]) -> bool:
    """Whether every setting of ``spec`` but ``known`` is at its default (what a fused kernel
    implements: a setting added to the spec later sends the spec to its own planner)."""
    return all(
        f.name in known or getattr(spec, f.name) == f.default
        for f in dataclasses.fields(spec)
        if f.init
    )


class Planner:
    """A spec bound to checked lengths: plans any ``(seed, epoch)`` with no checks left to do.

    ``costs`` gives the balancing cost of each batch (padded tokens by default), ``values`` what
    a sampler yields for a plan (its indices by default), ``config`` the settings that go into
    a sampler's state fingerprint.

    ``lengths`` and ``sizes`` are the sequences' own (what the dataset holds); a spec with a
    ``pad_to_multiple_of`` plans ``widths``, the sizes rounded up to it (``padded_lengths``:
    each field rounded), because that is what the collate pads each batch to.
    """

    def __init__(self, spec: Spec, lengths: np.ndarray) -> None:
        self.spec = spec
        self.lengths = lengths
        self.sizes = sizes_of(lengths)
        self.pad_to_multiple_of: int = getattr(spec, "pad_to_multiple_of", 1)
        self.padded_lengths = round_up(lengths, self.pad_to_multiple_of)
        self.widths = self.sizes if self.pad_to_multiple_of == 1 else sizes_of(self.padded_lengths)

    def plan(self, seed: int, epoch: int) -> BatchPlan:
        raise NotImplementedError

    def costs(self, plan: BatchPlan) -> np.ndarray:
        """Padded cost of each batch: count × longest width (the size, rounded up to
        ``pad_to_multiple_of``)."""
        return padded_costs(plan, self.widths)

    def plan_named(self, seed: int, epoch: int, names: np.ndarray) -> BatchPlan | None:
        """:meth:`plan` with every index ``i`` written as ``names[i]`` (this planner's sequences
        named by their indices in a larger corpus: int64, one per sequence; skipped ones too),
        where the strategy does that for less than a plan and a gather, for a planner whose
        :meth:`values` are its indices; None where it does not (the caller plans and gathers).
        Equal, entry by entry, to ``names[plan(seed, epoch).indices]``."""
        return None

    def tagged(self, plan: BatchPlan) -> BatchPlan:
        """``plan`` with the width multiple in ``plan.info["pad_to_multiple_of"]`` (when it is not
        1), so :meth:`BatchPlan.stats` and the collate count the width the batches are padded to."""
        if self.pad_to_multiple_of != 1:
            plan.info["pad_to_multiple_of"] = self.pad_to_multiple_of
        return plan

    def values(self, plan: BatchPlan) -> np.ndarray:
        """What a sampler yields, parallel to ``plan.indices`` (the indices themselves)."""
        return plan.indices

    def config(self) -> dict[str, Any]:
        """JSON-safe settings for state fingerprints."""
        return self.spec.as_dict()

    def plan_rest(
        self, done: Any, before: Planner, seed: int, epoch: int
    ) -> tuple[BatchPlan, np.ndarray]:
        """The rest of an epoch whose settings changed: ``(plan, values)`` of what ``done`` left.

        ``done`` holds the values a sampler yielded so far in the epoch (as ``before.values``
        gave them: ``before`` is this strategy under the settings the epoch ran with until
        now): a :class:`Delivered` (``np.asarray(done)`` gathers them) or an array of them. The plan, over all N sequences, holds every sequence ``done`` does not name,
        planned with these settings for ``(seed, epoch)``; ``values`` is what a sampler yields
        for it. By default the values are sequence indices; a strategy that yields pieces
        answers for its pieces (a ``ValueError`` for a change it cannot honour).

        Cost: one plan of the sequences left, and an O(N) mask (one pass, no gather).
        """
        n = int(self.sizes.size)
        return plan_items(self, delivered_of(done).left(n), seed, epoch)

    def rebind(
        self, spec: Spec, items: np.ndarray | None = None, lengths: np.ndarray | None = None
    ) -> Planner:
        """The planner of ``spec`` (this strategy, maybe other settings) over these sequences,
        or over the sequences ``items`` of them (their ``lengths``, by default their rows of
        :attr:`lengths`), keeping what this planner holds per sequence besides its lengths (a
        grouped planner's group ids: :meth:`Spec.bind_groups`)."""
        return spec.bind(self._own_lengths(items, lengths))

    def _own_lengths(self, items: np.ndarray | None, lengths: np.ndarray | None) -> np.ndarray:
        if lengths is not None:
            return lengths
        return self.lengths if items is None else self.lengths[items]

    def yielded_lengths(self, values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Target-side tokens of what a sampler yielded (``values``, as :meth:`values` gives
        them) over the (N,) or (N, F) ``lengths``: the last field of each sequence."""
        rows = np.asarray(lengths[values], dtype=np.int64)
        return rows if rows.ndim == 1 else rows[:, -1]


class GroupedPlanner(Planner):
    """Base of a planner that keeps groups whole (:meth:`Spec.bind_groups`): ``groups``, one
    int64 id per sequence, go with it to every planner it rebinds (a resume across a change of
    settings, the rest of an epoch), so those keep the same groups whole."""

    groups: np.ndarray

    def rebind(
        self, spec: Spec, items: np.ndarray | None = None, lengths: np.ndarray | None = None
    ) -> Planner:
        groups = self.groups if items is None else self.groups[items]
        return spec.bind_groups(self._own_lengths(items, lengths), groups)

    def plan_named(self, seed: int, epoch: int, names: np.ndarray) -> BatchPlan | None:
        return None  # planned, then gathered


class Delivered:
    """What the earlier parts of an epoch delivered, for :meth:`Planner.plan_rest`: batches
    ``picked`` of each part's plan, as ``(values, offsets, picked)``. ``np.asarray(delivered)``
    (or :attr:`values`) is every value delivered, in no order, gathered when first asked;
    :meth:`left` the sequences none of them names, found without gathering them."""

    def __init__(self, parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        self.parts = list(parts)
        self._values: np.ndarray | None = None

    @property
    def values(self) -> np.ndarray:
        """Every value delivered (int64, in no order)."""
        if self._values is None:
            from .._kernels import take_segments  # the kernels load with the plans, not before

            chunks = [take_segments(v, o, p) for v, o, p in self.parts]
            if not chunks:
                self._values = np.zeros(0, dtype=np.int64)
            else:
                self._values = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
        return self._values

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.values if dtype is None else self.values.astype(dtype, copy=False)

    def left(self, n: int) -> np.ndarray:
        """The indices in ``[0, n)`` that no delivered value names (a value ``v`` names
        ``v % n``: a piece code its sequence), ascending int64."""
        from .._kernels import unnamed_segments

        if not n:
            return np.zeros(0, dtype=np.int64)
        if len(self.parts) != 1:  # several parts: their values as one
            return delivered_of(self.values).left(n)
        return unnamed_segments(*self.parts[0], n)


def delivered_of(done: Any) -> Delivered:
    """``done`` as :class:`Delivered`: itself, or an array of delivered values (one part)."""
    if isinstance(done, Delivered):
        return done
    values = np.ascontiguousarray(done, dtype=np.int64).reshape(-1)
    whole = np.array([0, values.size], dtype=np.int64)
    return Delivered([(values, whole, np.zeros(1, dtype=np.int64))])


def plan_items(
    planner: Planner,
    items: np.ndarray,
    seed: int,
    epoch: int,
    lengths: np.ndarray | None = None,
    starts: np.ndarray | None = None,
    unit: int = 1,
) -> tuple[BatchPlan, np.ndarray]:
    """``planner``'s spec planned over the sequences ``items`` only (their ``lengths``, by
    default theirs in ``planner.lengths``), as a plan of all N sequences and its values:
    each entry's index mapped back to ``items``, a piece code ``local + piece · M`` to
    ``items[local] + piece · N`` (M items of N sequences).

    ``starts``: the items are parts of their sequences from these token offsets (multiples of
    ``unit``, the length a piece code counts in; an item may repeat a sequence): the plan's
    pieces are shifted by them and the codes count ``starts // unit`` pieces more."""
    sub = planner.rebind(planner.spec, items, lengths)
    n, m = int(planner.sizes.size), int(items.size)
    if starts is None:  # whole sequences: the strategy may name them as it plans
        named = sub.plan_named(seed, epoch, np.asarray(items, dtype=np.int64))
        if named is not None:
            return named.with_indices(named.indices, n), named.indices
    plan = sub.plan(seed, epoch)
    local = sub.values(plan)
    indices = items[plan.indices]
    if starts is not None:
        j = local % m if m else local
        values = items[j] + (starts[j] // unit + local // max(m, 1)) * n
    elif local is plan.indices:
        values = indices
    elif not local.size or int(local.max()) < m:
        values = items[local]
    else:
        values = items[local % m] + (local // m) * n
    out = plan.with_indices(indices, n, skipped=np.unique(items[plan.skipped]))
    if starts is not None:  # pieces of a sequence from its item's offset on
        shift = starts[plan.indices]
        out.piece_start = plan.piece_start + shift  # type: ignore[attr-defined]
        out.piece_stop = plan.piece_stop + shift  # type: ignore[attr-defined]
    return out, values.astype(np.int64, copy=False)


def item_ids(name: str, value: Any, n: int) -> np.ndarray:
    """An (N,) int64 vector of per-item values (``groups``, ``prefix``), N = the lengths': a
    ``ValueError`` for another shape, a ``TypeError`` for values that are not ints.

    >>> item_ids("groups", [7, -1, 7], 3).tolist()
    [7, -1, 7]
    >>> item_ids("groups", [0.5, 1.0], 2)
    Traceback (most recent call last):
    ...
    TypeError: groups must hold ints, got dtype float64
    """
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(
            f"{name} must hold one value per item ({n}, as lengths), got shape {arr.shape}"
        )
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise TypeError(f"{name} must hold ints, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def group_members(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Items by group: ``(ids, members, starts)``; group ``g`` (id ``ids[g]``, ids increasing)
    holds items ``members[starts[g]:starts[g + 1]]``, in increasing index order.

    >>> ids, members, starts = group_members(np.array([7, 3, 7, 3, 5]))
    >>> ids.tolist(), members.tolist(), starts.tolist()
    ([3, 5, 7], [1, 3, 4, 0, 2], [0, 2, 3, 5])
    """
    members = np.argsort(groups, kind="stable").astype(np.int64)
    ordered = groups[members]
    firsts = np.flatnonzero(np.diff(ordered, prepend=ordered[:1] - 1)) if ordered.size else members
    starts = np.append(firsts, ordered.size).astype(np.int64)
    return ordered[firsts], members, starts


def spec_from_dict(data: Mapping[str, Any]) -> Spec:
    """Rebuild a spec from ``{"strategy": name, **settings}`` (what :func:`spec_to_dict` gives).

    >>> from padless import Packing
    >>> spec_from_dict(spec_to_dict(Packing(capacity=512))) == Packing(capacity=512)
    True
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"spec must be a dict, got {type(data).__name__}")
    settings = dict(data)
    name = settings.pop("strategy", None)
    registry = strategies()
    if name not in registry:
        raise ValueError(f"spec['strategy'] must be one of {sorted(registry)}, got {name!r}")
    cls = registry[name]
    known = {f.name for f in _settings(cls)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(
            f"unknown settings {unknown} for strategy {name!r}; known: {sorted(known)}"
        )
    return cls(**settings)


def spec_to_dict(spec: Spec) -> dict[str, Any]:
    """``{"strategy": spec.name, **spec.as_dict()}``: a JSON-safe record of a spec."""
    if not isinstance(spec, Spec):
        raise TypeError(not_a_spec(spec))
    return spec_record(spec)


# name -> (module, spec class); adding a strategy is one line here
_REGISTRY = {
    "token_budget": ("padless.planners.budget", "TokenBudget"),
    "exact_length": ("padless.planners.exact", "ExactLength"),
    "buckets": ("padless.planners.buckets", "Buckets"),
    "packing": ("padless.planners.packing", "Packing"),
    "fixed_shapes": ("padless.planners.shapes", "FixedShapes"),
    "decomposition": ("padless.planners.decomposition", "Decomposition"),
}


def strategies() -> dict[str, type[Spec]]:
    """The registry of batching strategies: name → spec class.

    >>> sorted(strategies())[:2]
    ['buckets', 'decomposition']
    """
    return {name: getattr(import_module(mod), cls) for name, (mod, cls) in _REGISTRY.items()}


def get_strategy(name: str) -> type[Spec]:
    """The spec class registered as ``name``.

    >>> get_strategy("token_budget").__name__
    'TokenBudget'
    """
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"strategy must be one of {sorted(_REGISTRY)}, got {name!r}")
    mod, cls = _REGISTRY[name]
    spec: type[Spec] = getattr(import_module(mod), cls)
    return spec
