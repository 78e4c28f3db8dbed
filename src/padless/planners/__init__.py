"""Planners: pure functions of (lengths, spec, seed, epoch) that return a BatchPlan.

One module per strategy, each exporting its spec (a frozen dataclass) and a ``plan_*`` function.
:func:`strategies` is the registry the CLI, the report and the tests loop over (kept in
:mod:`padless.planners.spec`, which reads it to load a spec from its record).
"""

from __future__ import annotations

from .spec import get_strategy, strategies

__all__ = ["get_strategy", "strategies"]
