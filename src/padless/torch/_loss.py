"""Loss normalisation over the global optimizer step (exported by :mod:`padless.torch`)."""

from __future__ import annotations

import torch

from ..core._check import check_int, positive
from ._dist import dist_kwargs


def scale_loss(
    loss_sum: torch.Tensor, step_total: int, *, world_size: int | None = None
) -> torch.Tensor:
    """Scale a micro-batch's *summed* token loss so the step's gradient is the global mean's.

    Each rank sums its micro-batch's per-token losses (``reduction="sum"``) and calls
    ``backward`` on ``scale_loss(loss_sum, step_total)``, with ``step_total`` from
    ``sampler.loss_tokens(step, accumulation=...)``: the targets of the whole optimizer step, all
    ranks and all micro-batches. Accumulation sums the micro-batches' gradients and the
    gradient all-reduce averages over ranks (DDP, FSDP), so the loss is multiplied by
    ``world_size / step_total``: the gradient after the all-reduce equals that of the mean loss
    over every real target of the step, whatever each rank and micro-batch held (the usual
    per-rank mean weighs a rank's few long sequences like another's many short ones).

    Args:
        loss_sum: the summed loss of one micro-batch (a scalar tensor).
        step_total: the step's target count (``loss_tokens(...)[0]``); 0 gives a zero loss
            (and zero gradient) instead of a division by zero.
        world_size: ranks averaged by the gradient reduction; default from
            ``torch.distributed`` (1 when it is not initialised). Pass 1 for a reduction that
            sums.

    Cost: one multiplication.

    >>> import torch
    >>> scale_loss(torch.tensor(12.0), 48, world_size=2)
    tensor(0.5000)
    """
    if not isinstance(loss_sum, torch.Tensor):
        raise TypeError(f"loss_sum must be a torch.Tensor, got {type(loss_sum).__name__}")
    total = check_int("step_total", step_total, minimum=0)
    if world_size is None:
        world_size = dist_kwargs()["world_size"]
    world = positive("world_size", world_size)
    if not total:
        return loss_sum * 0.0
    return loss_sum * (world / total)
