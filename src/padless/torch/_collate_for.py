"""One builder for the collate of any padless batch source, chosen by its strategy's answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core._keywords import check_keywords, keyword_names
from ..planners.packing import refuse_grouped_rows
from ..planners.spec import Spec
from ..sampling.placed import refuse_placements
from ..streams import StreamBatcher
from ._collate import collate_packed, collate_padded
from ._pairs import collate_packed_pairs
from ._streams import StreamDataset, stream_collate

__all__ = ["collate_for"]


def _check_options(options: dict[str, Any], collate: Any, filled: tuple[str, ...]) -> None:
    """A keyword that ``collate`` does not take, or that collate_for fills in (``filled``): the
    TypeError naming collate_for, with the keywords it passes on."""
    takes = [k for k in keyword_names(collate) if k not in filled]
    check_keywords("collate_for", options, takes)


# what collate_for fills in from a packing source: passing one again is a TypeError
_PACKED_SETTINGS = ("capacity", "max_per_row", "context_parallel")


def collate_for(source: Any, **options: Any) -> Callable[[Any], Any]:
    """The collate function for ``source``'s batches, its strategy's settings filled in.

    The spec's :meth:`~padless.Spec.collate_form` picks it:

    - packed rows: ``collate_packed(capacity, max_per_row=..., context_parallel=...,
      **options)`` (so capacity is typed once; passing ``capacity``, ``max_per_row`` or
      ``context_parallel`` again is a TypeError; a context-parallel rank passes ``cp_rank=``);
      with one capacity per field, ``collate_packed_pairs(capacities, max_per_row=...,
      **options)``;
    - static shapes: ``collate_padded(shapes=spec, **options)`` (``shapes=`` is a ValueError);
    - otherwise ``collate_padded(plan=source, **options)``: padded to the plan's
      ``pad_to_multiple_of`` (another ``multiple_of=`` is a ValueError).

    A :class:`padless.StreamBatcher` or :class:`padless.torch.StreamDataset` yields rows of
    items for packing: it gets :func:`stream_collate` (the rows flattened, pieces sliced, then
    ``collate_packed(spec, **options)``), and ``collate_padded(**options)`` for other specs.

    Args:
        source: a padless sampler (windowed too), its spec, or a stream batcher or dataset.
        options: the collate's own settings: ``pad_id=``, ``fields=`` (padded), ``flatten=``,
            ``position_start=``, ``attention_mask=`` (packed)...

    Cost: building the collate only (O(1); O(shapes) checks for static shapes).

    >>> from padless import Packing, TokenBudget
    >>> collate_for(Packing(capacity=8, max_per_row=2))
    collate_packed(capacity=8, max_per_row=2, rows=None, flatten=False, position_start=0)
    >>> collate_for(TokenBudget(max_tokens=64, pad_to_multiple_of=8), pad_id=0).multiple_of
    8
    """
    if isinstance(source, (StreamBatcher, StreamDataset)):
        packed = source.spec.collate_form().packed
        _check_options(
            options, collate_packed if packed else collate_padded, ("capacity",) * packed
        )
        return stream_collate(source.spec, **options)
    refuse_placements(source, "collate_for()")
    corpora = getattr(source, "samplers", None)
    if isinstance(corpora, dict) and corpora:  # a MixtureSampler: its corpora's one collate
        return _mixture_collate(type(source).__name__, corpora, options)
    spec = source if isinstance(source, Spec) else getattr(source, "spec", None)
    if not isinstance(spec, Spec):
        raise TypeError(
            "source must be a padless sampler, spec (e.g. padless.TokenBudget(...)), "
            f"StreamBatcher or StreamDataset, got {type(source).__name__} {source!r:.60}"
        )
    form = spec.collate_form()
    refuse_grouped_rows(source, "collate_for()")
    if form.packed:
        for name in _PACKED_SETTINGS:
            if name in options:
                capacity = form.capacity if form.capacities is None else form.capacities
                raise TypeError(
                    f"{name} must not be passed to collate_for(): the source's spec gives it "
                    f"(capacity={capacity}, max_per_row={form.max_per_row}, "
                    f"context_parallel={form.context_parallel}), got {name}={options[name]!r:.60}"
                )
        if form.capacities is not None:  # a capacity per field: rows of each field
            _check_options(options, collate_packed_pairs, _PACKED_SETTINGS)
            return collate_packed_pairs(form.capacities, max_per_row=form.max_per_row, **options)
        _check_options(options, collate_packed, _PACKED_SETTINGS)
        return collate_packed(
            form.capacity,
            max_per_row=form.max_per_row,
            context_parallel=form.context_parallel,
            **options,
        )
    if form.shapes is not None:
        if "shapes" in options:
            raise ValueError(
                "shapes must not be passed to collate_for(sampler): the sampler's FixedShapes "
                f"spec gives them, got shapes={options['shapes']!r:.60}"
            )
        _check_options(options, collate_padded, ("shapes",))
        return collate_padded(shapes=spec, **options)
    if "plan" in options:
        raise TypeError(
            "plan must not be passed to collate_for(): the source is the plan, got "
            f"plan={options['plan']!r:.60}"
        )
    _check_options(options, collate_padded, ("plan",))
    return collate_padded(plan=source, **options)


def _mixture_collate(
    kind: str, corpora: dict[str, Any], options: dict[str, Any]
) -> Callable[[Any], Any]:
    """The collate of a mixture's batches: its corpora's, when they all collate alike (the same
    collate form: rows of one capacity, one padding multiple, one shape set...); a mixture of
    corpora that do not is refused, naming two that differ."""
    forms = {name: sub.spec.collate_form() for name, sub in corpora.items()}
    first, *rest = forms
    for name in rest:
        if forms[name] != forms[first]:
            raise ValueError(
                f"a {kind}'s batches must collate alike for collate_for(), but corpus "
                f"{first!r} ({corpora[first].spec.describe()}) and corpus {name!r} "
                f"({corpora[name].spec.describe()}) collate differently: give the corpora "
                "specs of one collate form (e.g. Packing of one capacity), or collate each "
                "batch with its corpus's collate_for(mixture.samplers[name]) (mixture.corpus_of "
                "tells the corpus)"
            )
    return collate_for(corpora[first], **options)
