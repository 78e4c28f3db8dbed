"""Planners: pure functions of (lengths, spec, seed, epoch) that return a BatchPlan.

One module per strategy, each exporting its spec (a frozen dataclass) and a ``plan_*`` function.
:func:`strategies` is the registry the CLI, the report and the tests loop over.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .spec import Spec

# name -> (module, spec class); adding a strategy is one line here
_REGISTRY = {
    "token_budget": ("padless.planners.budget", "TokenBudget"),
    "exact_length": ("padless.planners.exact", "ExactLength"),
    "buckets": ("padless.planners.buckets", "Buckets"),
    "packing": ("padless.planners.packing", "Packing"),
    "fixed_shapes": ("padless.planners.shapes", "FixedShapes"),
    "decomposition": ("padless.planners.decomposition", "Decomposition"),
}


def strategies() -> dict[str, type[Spec]]:
    """The registry of batching strategies: name → spec class.

    >>> sorted(strategies())[:2]
    ['buckets', 'decomposition']
    """
    return {name: getattr(import_module(mod), cls) for name, (mod, cls) in _REGISTRY.items()}


def get_strategy(name: str) -> type[Spec]:
    """The spec class registered as ``name``.

    >>> get_strategy("token_budget").__name__
    'TokenBudget'
    """
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"strategy must be one of {sorted(_REGISTRY)}, got {name!r}")
    mod, cls = _REGISTRY[name]
    spec: type[Spec] = getattr(import_module(mod), cls)
    return spec
