"""Where padless's modules moved (old dotted name -> new), written by ``tools/relayout.py``.

A plan saved by :meth:`padless.BatchPlan.save` records its class's module; a plan saved before a
module moved records the old name and loads from the new one. Nothing else reads this table: the
old module paths are not importable.
"""

from __future__ import annotations

MOVED: dict[str, str] = {
    "padless.lengths": "padless.core.lengths",
    "padless.fields": "padless.core.fields",
    "padless.plan": "padless.core.plan",
    "padless.schedules": "padless.core.schedules",
    "padless.cost": "padless.core.cost",
    "padless.memory": "padless.core.memory",
    "padless.filters": "padless.core.filters",
    "padless._check": "padless.core._check",
    "padless._rng": "padless.core._rng",
    "padless._state": "padless.core._state",
    "padless._schedule": "padless.core._schedule",
    "padless._output": "padless.core._output",
    "padless._progress": "padless.core._progress",
    "padless._moved": "padless.core._moved",
    "padless.readers": "padless.io.readers",
    "padless.tokens": "padless.io.tokens",
    "padless.indexed": "padless.io.indexed",
    "padless.checked": "padless.io.checked",
    "padless._files": "padless.io._files",
    "padless._text_kernels": "padless.io._text_kernels",
    "padless.windows": "padless.planners.windows",
    "padless.histogram": "padless.planners.histogram",
    "padless.sampler": "padless.sampling.sampler",
    "padless.mixing": "padless.sampling.mixing",
    "padless.shortcuts": "padless.sampling.shortcuts",
    "padless.report": "padless.sampling.report",
    "padless.lm": "padless.streams.lm",
}
