"""Golden digests: every sampler's batches for fixed seeds, two epochs, two ranks.

They were computed before the planner-interface redesign and still hold after it: a change here
means users' runs would see other batches for the same seed. ``windowed``, ``fixed_shapes`` and
``token_budget_cost`` were pinned later, from the code of commit d0213d3; ``decomposition``,
``mixture_schedule``, ``token_budget_ramp`` and ``lm_warmup`` when they were added (issue 28;
``token_budget_ramp``'s equals ``token_budget``'s: a ramp cuts the plan into steps, never
changes it), ``token_budget_histogram`` and ``packing_histogram`` when they were added (issue
30); ``packing_cp`` when context parallelism came (issue 30; ``packing`` kept its digest:
``context_parallel=1`` plans as before); ``token_budget_fields`` when budgets per field came
(issue 29), ``lhotse_cuts`` when the lhotse sampler came, ``buckets_2d`` when 2-D buckets
came (issue 29; ``buckets`` kept its digest) and ``packing_pairs`` when packing got a capacity
per field (issue 29; ``packing`` kept its digest: an int capacity plans as before),
``packing_warmup`` when packing's capacity became a schedule (issue 28; its batches carry their
step's tag, so the digest pins the warm-up's delivery too), ``token_budget_groups`` and
``packing_groups`` when the samplers took ``groups=`` (issue 42; every digest above kept: a
sampler without groups plans as before). A factory
added to the contract list needs its digest here (pasted once from today's output, never
computed by a test).
"""

import pytest

from tests.contract.factories import FACTORIES
from tests.contract.test_contract import _digest

GOLDEN = {
    "token_budget": "97ef92747f42c529",
    "token_budget_pairs": "5339e9643bfbf009",
    "token_budget_fields": "d0e5650a65799025",
    "lhotse_cuts": "765cff7af04937a5",
    "exact_length": "16b26ea9f6a59c3a",
    "exact_length_merge": "863c2320626c44e8",
    "buckets": "4326d1611a1b2d99",
    "buckets_2d": "92f7017e20dbe60d",
    "packing": "b3ec4baf86b0eb47",
    "packing_split": "74fbd0c4c34e79cb",
    "packing_warmup": "8197f003135a0159",
    "packing_cp": "44a29f6554dda892",
    "packing_pairs": "d78774ef536624d3",
    "plan_sampler_spec": "2cd3111f58d24eb4",
    "windowed": "0eab906b5c79ba49",
    "token_budget_histogram": "0de7afc11dd3739e",
    "packing_histogram": "22b3eb1471e15e06",
    "fixed_shapes": "6ac7804470707ee3",
    "token_budget_cost": "9e077588eabec02d",
    "decomposition": "411a528f7c8f21c7",
    "mixture": "c86076763ae39e3b",
    "mixture_schedule": "c671fa10e850b9d3",
    "token_budget_ramp": "97ef92747f42c529",
    "lm_random": "95fdf832c1019214",
    "lm_sequential": "65e36509dbc48e58",
    "lm_warmup": "12992f585e1391fc",
    "token_budget_groups": "e2a707544b4d6cb2",
    "packing_groups": "d4a366ffbb50dc44",
}


def test_every_factory_has_a_golden_digest():
    names = [f.name for f in FACTORIES]
    assert len(set(names)) == len(names), f"factory names repeat: {names}"
    missing = sorted(set(names) - set(GOLDEN))
    stale = sorted(set(GOLDEN) - set(names))
    assert not missing, f"factories without a golden digest: {missing}"
    assert not stale, f"golden digests of factories that no longer exist: {stale}"


@pytest.mark.parametrize("f", [pytest.param(f, id=f.name) for f in FACTORIES])
def test_sampler_batches_are_pinned(f):
    assert f.name in GOLDEN, f"no golden digest for factory {f.name!r}"
    assert _digest(f) == GOLDEN[f.name]
