"""Out-of-core shuffle: exactly uniform, within a memory budget, and safe for the files it touches.

:func:`shuffle_file` is the entry point; the ``padless shuffle`` command wraps it.
"""

from __future__ import annotations

from ._api import ShuffleResult, parse_memory, shard_paths, shuffle_file

__all__ = ["ShuffleResult", "parse_memory", "shard_paths", "shuffle_file"]
