"""Pinned placements (issue 43): the sequences, micro-batches, degrees and ranks of every step of
an epoch for fixed seeds, on meshes of each kind (dynamic CP, aligned groups, fixed CP, 1F1B and
interleaved stages) and through a Placer over a sampler. A change here changes which rank runs
what in every user's run. The predicted seconds are left out (floats: the integers they decide
are pinned). Pasted once from the output of the code they pin, never computed by a test."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import padless
from padless import Mesh, Placer, PlanSampler, TokenBudget
from tests.test_placement import COST

LENGTHS = np.minimum(
    (256 * (1 + np.random.default_rng(11).pareto(1.1, 400))).astype(np.int64), 8_000
)
MESHES = {
    "dynamic": Mesh(dp=4, cp=4, dynamic=True, max_tokens=2048),
    "aligned": Mesh(dp=2, cp=8, dynamic=True, max_tokens=2048, aligned_groups=True),
    "fixed": Mesh(dp=4, cp=4, max_tokens=2048),
    "1f1b": Mesh(dp=2, cp=4, pp=4, dynamic=True, max_tokens=2048),
    "interleaved": Mesh(
        dp=2, cp=4, pp=2, dynamic=True, max_tokens=2048, schedule="interleaved", vpp=2
    ),
}


def _digest(steps: list[padless.Placement]) -> str:
    h = hashlib.sha256()
    for p in steps:
        for x in (p.indices, p.slots, p.degrees, p.ranks):
            h.update(np.ascontiguousarray(x, dtype=np.int64).tobytes())
        h.update(str(p.micro_batches).encode())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(MESHES))
def test_plan_placement_is_pinned(name: str) -> None:
    plan = padless.plan_placement(LENGTHS, MESHES[name], COST, global_batch=160, seed=4, epoch=1)
    assert _digest([plan.step(s) for s in range(len(plan))]) == GOLDEN[name]


def test_a_placer_over_a_sampler_is_pinned() -> None:
    sampler = PlanSampler(LENGTHS, TokenBudget(max_tokens=120_000), seed=9)
    assert _digest(list(Placer(sampler, MESHES["dynamic"], COST))) == GOLDEN["placer"]


GOLDEN = {
    "dynamic": "7799f2f045b02514",
    "aligned": "6751fd1ae8a69300",
    "fixed": "b06620b60438cd1e",
    "1f1b": "3220149fc31f6d8a",
    "interleaved": "26ddbe2a17f26444",
    "placer": "c884235f3ae4ade4",
}
