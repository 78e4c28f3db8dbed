"""Golden digests: every sampler's batches for fixed seeds, two epochs, two ranks.

They were computed before the planner-interface redesign and still hold after it: a change here
means users' runs would see other batches for the same seed.
"""

import pytest

from tests.contract.factories import FACTORIES
from tests.contract.test_contract import _digest

GOLDEN = {
    "token_budget": "97ef92747f42c529",
    "token_budget_pairs": "5339e9643bfbf009",
    "exact_length": "16b26ea9f6a59c3a",
    "exact_length_merge": "863c2320626c44e8",
    "buckets": "4326d1611a1b2d99",
    "packing": "b3ec4baf86b0eb47",
    "packing_split": "74fbd0c4c34e79cb",
    "plan_sampler_spec": "2cd3111f58d24eb4",
    "mixture": "c86076763ae39e3b",
    "lm_random": "95fdf832c1019214",
    "lm_sequential": "65e36509dbc48e58",
}


@pytest.mark.parametrize("f", [pytest.param(f, id=f.name) for f in FACTORIES if f.name in GOLDEN])
def test_sampler_batches_are_pinned(f):
    assert _digest(f) == GOLDEN[f.name]
