"""Epochs as values: the batches of one epoch, whatever form the plan takes.

:class:`Epoch` (:mod:`padless.epochs.base`) is the protocol a sampler asks: how many batches,
the batch at a global slot, the ids of the batches at positions, the figures, the global plan.
:class:`Epochs` makes them from an explicit context (epoch, elastic history, world size, changes
of settings). One form per module: the whole-corpus plan (:mod:`padless.epochs.whole`), the
windowed plan (:mod:`padless.epochs.windows`), the histogram plan
(:mod:`padless.epochs.histogram`); :func:`epochs_for` picks one from a sampler's ``window=``.
"""

from __future__ import annotations

from typing import Any

from ..io import lengths_of
from ..planners.spec import Spec, item_ids
from .base import Epoch, Epochs, Figures, History, batch_order
from .whole import WholeEpoch, WholeEpochs

__all__ = [
    "Epoch",
    "Epochs",
    "Figures",
    "History",
    "WholeEpoch",
    "WholeEpochs",
    "batch_order",
    "epochs_for",
]


def epochs_for(
    spec: Spec,
    lengths: Any,
    window: Any,
    *,
    shuffle: bool,
    seed: int,
    balance: bool,
    groups: Any = None,
) -> Epochs:
    """The epochs of ``lengths`` under ``spec``, in the form ``window`` names: None the
    whole-corpus plan, a window size (a positive int) the windowed plan, ``"histogram"`` the
    histogram plan (see :class:`padless.PlanSampler`'s ``window``).

    ``groups`` (one int id per sequence, or None): every batch holds whole groups, planned by
    the spec's grouped planner (:meth:`padless.planners.spec.Spec.bind_groups`) over the whole
    corpus; a spec or a form (``window=``) that cannot keep groups whole refuses them.

    Cost: the form's planner (the whole corpus checked and bound; one checking pass over the
    lengths for windows; the histogram and its index for ``"histogram"``).

    >>> from padless import TokenBudget
    >>> epochs = epochs_for(TokenBudget(max_tokens=8), [5, 3, 3, 8], None, shuffle=False,
    ...                     seed=0, balance=False)
    >>> epoch = epochs.at(0, (), 1, ())  # epoch 0, no elastic parts, world size 1, no changes
    >>> values, lo, hi = epoch.batch_at(0)
    >>> epoch.total, values[lo:hi].tolist()
    (3, [2, 1])
    """
    settings: dict[str, Any] = {"shuffle": shuffle, "seed": seed, "balance": balance}
    if groups is not None:
        if window is not None:
            form = "the histogram plan" if window == "histogram" else "a windowed plan"
            raise ValueError(
                f"groups= cannot be honoured with window={window!r}: {form} cuts batches from "
                "the lengths alone (a group's items may fall in different windows or cells); "
                "plan the whole corpus (window=None)"
            )
        lens = lengths_of(lengths)
        ids = item_ids("groups", groups, int(lens.shape[0]))
        return WholeEpochs(spec, spec.bind_groups(lens, ids), **settings)
    if window is None:
        return WholeEpochs(spec, spec.bind(lengths_of(lengths)), **settings)
    if isinstance(window, str):
        if window != "histogram":
            raise ValueError(
                f"window must be None, a window size (a positive int) or 'histogram', "
                f"got {window!r}"
            )
        from ..planners.histogram import HistogramPlanner  # the kernels, loaded when a plan is made
        from .histogram import HistogramEpochs

        return HistogramEpochs(HistogramPlanner(spec, lengths), **settings)
    from ..planners.windows import WindowedPlanner
    from .windows import WindowedEpochs

    return WindowedEpochs(WindowedPlanner(spec, lengths, window), **settings)
