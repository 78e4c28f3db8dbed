"""Random streams derived from (seed, epoch, stream) with ``np.random.SeedSequence``.

Every random choice in padless comes from one of these streams. Seeds are never added to epochs:
``(seed=1, epoch=0)`` and ``(seed=0, epoch=1)`` give unrelated streams.
"""

from __future__ import annotations

import numpy as np

from ._check import check_seed

# One fixed id per role. Never renumber: golden tests pin outputs.
TIE_BREAK = 0
BATCH_ORDER = 1
GROUP_SHUFFLE = 2
ROW_ORDER = 3
MIXTURE = 4
LM_OFFSET = 5
LM_ORDER = 6
FILE_SHUFFLE = 7
BALANCE = 8
REBALANCE = 9  # elastic resume: re-balancing the batches left at a new world size
STREAM_ORDER = 10  # StreamBatcher: order of each round's batches (child per shard, round)
WINDOWS = 11  # windowed plans: block bijection and rotation (children: one per window)
RAY_PACK = 12  # padless.ray.pack: a child per window (and per carry-over block), keyed by lengths
MIXTURE_STEPS = 13  # MixtureSampler with weight schedules: one child per world-size part's start
CHANGES = 14  # resume across a change of settings: the seed of the rest of the epoch, per change
STEP_PLAN = 15  # plan_step: which rank runs which micro-batch of each slot
PLACEMENT = 16  # padless.planners.placement: the order of an epoch before it is cut into steps


def seed_sequence(seed: int, epoch: int, stream: int) -> np.random.SeedSequence:
    """Return the SeedSequence of one stream, after checking seed and epoch."""
    seed = check_seed("seed", seed)
    epoch = check_seed("epoch", epoch)
    return np.random.SeedSequence([seed, epoch, stream])


def child_seed(seed: int, epoch: int, stream: int, child: int) -> int:
    """A 63-bit seed for child ``child`` of one stream (a plan made for a part of an epoch).

    >>> child_seed(0, 0, CHANGES, 1) != child_seed(0, 0, CHANGES, 2)
    True
    """
    words = np.random.SeedSequence(
        [check_seed("seed", seed), check_seed("epoch", epoch), stream, child]
    )
    state = words.generate_state(1, dtype=np.uint64)
    return int(state[0]) >> 1


def rng(seed: int, epoch: int, stream: int) -> np.random.Generator:
    """Return a numpy Generator for one (seed, epoch, stream).

    >>> a = rng(1, 0, TIE_BREAK).integers(1 << 30)
    >>> b = rng(0, 1, TIE_BREAK).integers(1 << 30)
    >>> bool(a != b)
    True
    """
    return np.random.default_rng(seed_sequence(seed, epoch, stream))


def key(seed: int, epoch: int, stream: int) -> np.uint64:
    """Return a 64-bit key for the compiled generators in ``_kernels``."""
    seed = check_seed("seed", seed)
    epoch = check_seed("epoch", epoch)
    if max(seed, epoch, stream) < 1 << 64:
        # the compiled twin of SeedSequence's first word (the same key, without numpy.random)
        from .._kernels.rng import stream_key

        return np.uint64(stream_key(seed, epoch, stream))
    state = seed_sequence(seed, epoch, stream).generate_state(1, dtype=np.uint64)
    return np.uint64(state[0])
