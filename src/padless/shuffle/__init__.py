"""Out-of-core shuffle: exactly uniform, within a memory budget, and safe for the files it touches.

:func:`shuffle_file` is the entry point (:func:`shuffle_indexed` for the documents of an indexed
dataset); the ``padless shuffle`` command wraps both.
"""

from __future__ import annotations

from ._api import ShuffleResult, parse_memory, shard_paths, shuffle_file
from ._indexed import IndexedShuffleResult, shuffle_indexed

__all__ = [
    "IndexedShuffleResult",
    "ShuffleResult",
    "parse_memory",
    "shard_paths",
    "shuffle_file",
    "shuffle_indexed",
]
