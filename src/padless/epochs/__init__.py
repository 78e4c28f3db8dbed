"""Epochs as values: the batches of one epoch, whatever form the plan takes.

:class:`Epoch` (:mod:`padless.epochs.base`) is the protocol a sampler asks: how many batches,
the batch at a global slot, the ids of the batches at positions, the figures, the global plan.
:class:`Epochs` makes them from an explicit context (epoch, elastic history, world size, changes
of settings). One form per module: the whole-corpus plan (:mod:`padless.epochs.whole`).
"""

from __future__ import annotations

from .base import Epoch, Epochs, Figures, History, batch_order
from .whole import WholeEpoch, WholeEpochs

__all__ = ["Epoch", "Epochs", "Figures", "History", "WholeEpoch", "WholeEpochs", "batch_order"]
