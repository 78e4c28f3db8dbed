"""Where padless's modules moved (old dotted name -> new), written by ``tools/relayout.py``.

A plan saved by :meth:`padless.BatchPlan.save` records its class's module; a plan saved before a
module moved records the old name and loads from the new one. Nothing else reads this table: the
old module paths are not importable.
"""

from __future__ import annotations

MOVED: dict[str, str] = {}
