"""The public surface: one spelling per idea. padless keeps no deprecated names (it is 0.1.0):
a former name is gone, and a former keyword gets the unexpected-keyword ``TypeError`` that
points to its new name (``tests/test_keyword_errors.py``)."""

from __future__ import annotations

import importlib
import warnings

import pytest

pytest.importorskip("torch")

import padless  # noqa: E402
import padless.hf  # noqa: E402
import padless.torch  # noqa: E402


@pytest.mark.parametrize("module", [padless, padless.torch, padless.hf])
def test_every_listed_name_loads_without_a_warning_and_unknown_names_raise(module):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for name in module.__all__:
            getattr(module, name)
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("padless.torch", "dist_rank_world"),
        ("padless.torch", "StopTogether"),
        ("padless.hf", "check_packed"),
        ("padless.planners.budget", "plan_token_budget"),
        ("padless.planners.budget", "TokenBudgetSampler"),
        ("padless.planners.exact", "plan_exact_length"),
        ("padless.planners.exact", "ExactLengthSampler"),
        ("padless.planners.buckets", "plan_buckets"),
        ("padless.planners.buckets", "BucketSampler"),
        ("padless.planners.packing", "plan_packing"),
        ("padless.planners.packing", "PackingSampler"),
        ("padless.streams", "WINDOW"),
    ],
)
def test_former_names_are_gone(module, name):
    with pytest.raises(AttributeError, match=name):
        getattr(importlib.import_module(module), name)
