"""JAX glue: attention masks from Grain-style segment ids, and a compile counter.

The batches :mod:`padless.grain` yields are numpy arrays of static shapes (``FixedShapes``:
one of the shape set; ``Packing``: ``rows_per_batch × capacity``), ready for
``jax.device_put``; a ``jax.jit`` function then compiles once per shape. Packed rows carry
``<feature>_segment_ids`` (1, 2, … per document, 0 on padding): :func:`attention_mask` turns
them into the mask that keeps each document's tokens to themselves.

``import padless`` never imports JAX; this module does.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .core._check import check_bool

__all__ = ["attention_mask", "compiled_shapes"]


def attention_mask(segment_ids: Any, *, causal: bool = True) -> jax.Array:
    """``(batch, length, length)`` bool mask from ``(batch, length)`` segment ids: query ``i``
    may attend key ``j`` when both are in the same segment, neither is padding (id 0) and,
    with ``causal``, ``j <= i``. Traceable (use it inside ``jax.jit``).

    >>> import numpy as np
    >>> m = attention_mask(np.array([[1, 1, 2, 0]]))
    >>> np.asarray(m[0]).astype(int).tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]]
    """
    causal = check_bool("causal", causal)
    if not isinstance(segment_ids, jax.Array):  # a traced value inside jit is a jax.Array
        try:
            segment_ids = np.asarray(segment_ids)
        except ValueError as err:  # ragged rows
            raise ValueError(f"segment_ids must be a (batch, length) array: {err}") from err
    if segment_ids.ndim != 2:
        raise ValueError(
            f"segment_ids must be (batch, length), got shape {tuple(segment_ids.shape)}"
        )
    if segment_ids.dtype == bool or not jnp.issubdtype(segment_ids.dtype, jnp.integer):
        raise TypeError(f"segment_ids must be integers, got dtype {segment_ids.dtype}")
    seg = jnp.asarray(segment_ids)
    real = seg != 0
    mask = (seg[:, :, None] == seg[:, None, :]) & real[:, :, None] & real[:, None, :]
    if causal:
        n = seg.shape[1]
        mask = mask & jnp.tril(jnp.ones((n, n), dtype=bool))[None]
    return mask


def compiled_shapes(fn: Any) -> int:
    """How many times the ``jax.jit`` function ``fn`` has compiled (its cache's entries: one
    per distinct input shape and dtype signature it was called with).

    >>> f = jax.jit(lambda x: x * 2)
    >>> _ = f(jnp.ones(3)); _ = f(jnp.ones(3)); _ = f(jnp.ones(4))
    >>> compiled_shapes(f)
    2
    """
    size = getattr(fn, "_cache_size", None)
    if not callable(size):
        raise TypeError(f"fn must be a jax.jit function, got {type(fn).__name__}")
    return int(size())
