"""padless: batch planning for variable-length sequences with as little padding as possible.

Names load on first use, so ``import padless`` (and ``padless --help``) stays fast and compiles
nothing.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "BatchPlan": "padless.plan",
    "PlanStats": "padless.plan",
    "lengths_of": "padless.lengths",
    "builtin_corpus": "padless.lengths",
    "plan_token_budget": "padless.planners.budget",
    "TokenBudgetSampler": "padless.planners.budget",
    "PlanSampler": "padless.sampler",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from .lengths import builtin_corpus as builtin_corpus
    from .lengths import lengths_of as lengths_of
    from .plan import BatchPlan as BatchPlan
    from .plan import PlanStats as PlanStats
    from .planners.budget import TokenBudgetSampler as TokenBudgetSampler
    from .planners.budget import plan_token_budget as plan_token_budget
    from .sampler import PlanSampler as PlanSampler


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'padless' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
