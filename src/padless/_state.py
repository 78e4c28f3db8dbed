"""Tiny JSON-safe resume state shared by samplers and streams."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, cast

import numpy as np

STATE_VERSION = 1
STATE_KEYS = ("version", "seed", "epoch", "position", "world_size", "fingerprint")


def fingerprint(config: Mapping[str, Any], *arrays: np.ndarray) -> str:
    """Hash of a config (JSON-safe values) and arrays (dtype, shape and bytes), 16 hex digits.

    Cost: one pass over the arrays' bytes (blake2b, about 1 GB/s).
    """
    h = hashlib.blake2b(digest_size=8)
    h.update(json.dumps(dict(config), sort_keys=True, default=str).encode())
    for arr in arrays:
        a = np.ascontiguousarray(arr)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(cast(Any, a).data)
    return h.hexdigest()


def config_digest(config: Mapping[str, Any]) -> dict[str, str]:
    """Per-key short digests, so a mismatch can say which setting differs."""
    return {
        k: hashlib.blake2b(json.dumps(v, default=str).encode(), digest_size=4).hexdigest()
        for k, v in sorted(config.items())
    }


def check_state(state: Any, *, expected_fingerprint: str, what: str = "state") -> dict[str, Any]:
    """Validate a state dict (without mutating it) and return a checked copy."""
    if not isinstance(state, Mapping):
        raise TypeError(f"{what} must be a dict from state_dict(), got {type(state).__name__}")
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        raise ValueError(f"{what} is missing keys {missing}")
    if state["version"] != STATE_VERSION:
        raise ValueError(
            f"{what} has version {state['version']!r}; this padless reads {STATE_VERSION}"
        )
    for k in ("seed", "epoch", "position", "world_size"):
        v = state[k]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{what}[{k!r}] must be a non-negative int, got {v!r}")
    if state["world_size"] < 1:
        raise ValueError(f"{what}['world_size'] must be a positive int, got {state['world_size']}")
    if state["fingerprint"] != expected_fingerprint:
        raise ValueError(
            f"{what} was saved for other lengths or settings: fingerprint "
            f"{state['fingerprint']!r} != {expected_fingerprint!r}"
        )
    return {
        k: (v if isinstance(v, str) else int(v)) for k, v in state.items() if k in STATE_KEYS
    } | {k: v for k, v in state.items() if k not in STATE_KEYS}
