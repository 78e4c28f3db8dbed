"""This process's place in ``torch.distributed``, as padless samplers take it."""

from __future__ import annotations

import torch

__all__ = ["dist_kwargs"]


def dist_kwargs() -> dict[str, int]:
    """Keyword arguments ``rank=…, world_size=…`` for a padless sampler, from torch.distributed.

    Rank 0 of 1 when no process group is initialized. Cost: a few calls into torch.distributed.

    >>> dist_kwargs()
    {'rank': 0, 'world_size': 1}
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return {
            "rank": torch.distributed.get_rank(),
            "world_size": torch.distributed.get_world_size(),
        }
    return {"rank": 0, "world_size": 1}
