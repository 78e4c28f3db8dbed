"""This process's place in ``torch.distributed``, as padless samplers take it."""

from __future__ import annotations

import torch

__all__ = ["dist_kwargs", "dist_rank_world"]


def dist_rank_world() -> tuple[int, int]:
    """Return ``(rank, world_size)`` from ``torch.distributed``, or ``(0, 1)`` when not initialized.

    >>> dist_rank_world()
    (0, 1)
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def dist_kwargs() -> dict[str, int]:
    """Keyword arguments ``rank=…, world_size=…`` for a padless sampler, from torch.distributed.

    >>> dist_kwargs()
    {'rank': 0, 'world_size': 1}
    """
    rank, world = dist_rank_world()
    return {"rank": rank, "world_size": world}
