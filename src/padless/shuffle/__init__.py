"""Out-of-core shuffle: exactly uniform, within a memory budget, and safe for the files it touches.

:func:`shuffle_file` is the entry point; the ``padless shuffle`` command wraps it. The documents
of an indexed dataset are shuffled by :func:`padless.shuffle._indexed.shuffle_indexed`
(``padless.shuffle_indexed``), a module of its own: it loads the compiled kernels, which this
package loads only when a shuffle runs.
"""

from __future__ import annotations

from ._api import ShuffleResult, parse_memory, shard_paths, shuffle_file

__all__ = ["ShuffleResult", "parse_memory", "shard_paths", "shuffle_file"]
