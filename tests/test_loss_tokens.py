"""Exact loss-token counts per optimizer step (issue 16): sampler.loss_tokens and scale_loss."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import padless
from padless import PlanSampler

LENS = np.random.default_rng(2).lognormal(3.0, 0.8, 400).astype(np.int64).clip(1, 120)
PAIRS = np.stack([LENS, (LENS * 0.7).astype(np.int64) + 1], axis=1)

SPECS = {
    "token_budget": lambda: padless.TokenBudget(max_tokens=300),
    "pairs": lambda: padless.TokenBudget(max_tokens=300, multiple_of=2),
    "exact_merge": lambda: padless.ExactLength(max_tokens=250, leftovers="merge"),
    "buckets": lambda: padless.Buckets(num_buckets=3, batch_size=6),
    "packing_split": lambda: padless.Packing(capacity=64, rows_per_batch=2, oversize="split"),
    "packing_truncate": lambda: padless.Packing(capacity=64, oversize="truncate"),
    "cost": lambda: padless.TokenBudget(max_cost=900.0, cost=padless.Cost(quadratic=0.05)),
}


def entry_targets(sampler, batch, rule):
    """Targets of one yielded batch, from the items themselves (pieces through PieceDataset)."""
    lengths = sampler.lengths
    if sampler.spec.name == "packing":
        pieces = padless.PieceDataset(
            [range(int(n)) for n in sampler.sizes], capacity=sampler.spec.capacity
        )
        sizes = np.array([len(pieces[c]) for c in batch], dtype=np.int64)
    else:
        sizes = lengths[batch] if lengths.ndim == 1 else lengths[batch, -1]
    return int(sum(rule(int(n)) for n in sizes))


RULES = {"shifted": lambda n: max(n - 1, 0), "all": lambda n: n}


def brute_force(make, world, accumulation, targets, state=None):
    """Per rank, its batches (after an optional load), cut into optimizer steps and counted."""
    per_rank = []
    for r in range(world):
        s = make(rank=r, world_size=world)
        if state is not None:
            s.load_state_dict(state)
        per_rank.append([entry_targets(s, b, RULES[targets]) for b in s])
    steps = -(-len(per_rank[0]) // accumulation)
    out = []
    for k in range(steps):
        micro = [counts[k * accumulation : (k + 1) * accumulation] for counts in per_rank]
        out.append((sum(map(sum, micro)), micro))
    return out


@settings(max_examples=25)
@given(
    st.sampled_from(sorted(SPECS)),
    st.integers(1, 4),
    st.integers(1, 3),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["shifted", "all"]),
)
def test_loss_tokens_equal_the_counts_of_the_batches_delivered(
    name, world, accumulation, drop_last, balance, targets
):
    lengths = PAIRS if name == "pairs" else LENS

    def make(**ranks):
        return PlanSampler(
            lengths, SPECS[name](), seed=4, drop_last=drop_last, balance=balance, **ranks
        )

    want = brute_force(make, world, accumulation, targets)
    for r in range(world):
        s = make(rank=r, world_size=world)
        got = [
            s.loss_tokens(k, accumulation=accumulation, targets=targets) for k in range(len(want))
        ]
        assert got == [(total, micro[r]) for total, micro in want]
        with pytest.raises(ValueError, match=f"step must be < {len(want)}"):
            s.loss_tokens(len(want), accumulation=accumulation)


@pytest.mark.parametrize("name", ["token_budget", "packing_split"])
def test_loss_tokens_after_a_resume_and_an_elastic_resume(name):
    def make(**ranks):
        return PlanSampler(LENS, SPECS[name](), seed=1, balance=True, **ranks)

    first = make(rank=0, world_size=2)
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    for world in (2, 3):  # same world size, then elastic
        want = brute_force(make, world, 2, "shifted", state)
        s = make(rank=world - 1, world_size=world)
        s.load_state_dict(state)
        before = [s.loss_tokens(k, accumulation=2) for k in range(len(want))]
        delivered = list(s)  # during and after iterating, steps still count from the load
        assert len(delivered) == sum(len(m[world - 1]) for _, m in want)
        after = [s.loss_tokens(k, accumulation=2) for k in range(len(want))]
        assert before == after == [(t, m[world - 1]) for t, m in want]


def test_loss_tokens_of_windowed_samplers():
    for spec in (
        padless.TokenBudget(max_tokens=300),
        padless.Packing(capacity=64, oversize="split"),
    ):

        def make(spec=spec, **ranks):
            return PlanSampler(LENS, spec, window=100, seed=2, **ranks)

        want = brute_force(make, 3, 2, "shifted")
        s = make(rank=1, world_size=3)
        assert [s.loss_tokens(k, accumulation=2) for k in range(len(want))] == [
            (t, m[1]) for t, m in want
        ]


def test_loss_tokens_with_a_function_and_errors():
    s = padless.TokenBudgetSampler(LENS, max_tokens=300, world_size=2)
    plain = s.loss_tokens(1, accumulation=3, targets="all")
    assert s.loss_tokens(1, accumulation=3, targets=lambda n: n) == plain
    doubled = s.loss_tokens(1, accumulation=3, targets=lambda n: 2 * n)
    assert doubled == (2 * plain[0], [2 * c for c in plain[1]])
    with pytest.raises(
        ValueError, match="targets must be 'shifted', 'all' or a function, got 'next'"
    ):
        s.loss_tokens(0, targets="next")
    with pytest.raises(TypeError, match="targets must be 'shifted', 'all' or a function, got int"):
        s.loss_tokens(0, targets=3)
    with pytest.raises(ValueError, match="one count per length"):
        s.loss_tokens(0, targets=lambda n: n.sum())
    with pytest.raises(ValueError, match="non-negative int counts"):
        s.loss_tokens(0, targets=lambda n: n - 1000)
    with pytest.raises(ValueError, match="accumulation must be a positive int, got 0"):
        s.loss_tokens(0, accumulation=0)
    with pytest.raises(TypeError, match="step must be an int"):
        s.loss_tokens(1.0)
    with pytest.raises(ValueError, match="step must be a non-negative int, got -1"):
        s.loss_tokens(-1)


def test_scale_loss():
    torch = pytest.importorskip("torch")
    from padless.torch import scale_loss

    loss = torch.tensor(12.0, requires_grad=True)
    out = scale_loss(loss, 48, world_size=2)
    out.backward()
    assert out.item() == 0.5 and loss.grad.item() == pytest.approx(2 / 48)
    assert scale_loss(loss, 48).item() == 12.0 / 48  # not distributed: world size 1
    zero = scale_loss(loss, 0, world_size=4)
    assert zero.item() == 0.0 and zero.requires_grad
    with pytest.raises(TypeError, match="loss_sum must be a torch.Tensor, got float"):
        scale_loss(1.0, 3)
    with pytest.raises(ValueError, match="step_total must be a non-negative int, got -1"):
        scale_loss(loss, -1)
    with pytest.raises(ValueError, match="world_size must be a positive int, got 0"):
        scale_loss(loss, 3, world_size=0)


def test_two_process_gradient_equals_the_global_mean(tmp_path):
    """gloo, 2 processes, accumulation 2, float64, padded and packed batches: the gradient of
    scale_loss'd summed losses equals the gradient of the mean loss over every real target of
    the step as one big batch; the per-micro-batch mean is measurably different."""
    pytest.importorskip("torch")
    script = Path(__file__).with_name("_loss_tokens_ddp.py")
    src = str(Path(__file__).parents[1] / "src")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=src)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for kind in ("padded", "packed"):
        a, b = ranks[0][kind], ranks[1][kind]
        assert a["steps"] >= 3 and a["totals"] == b["totals"]
        assert a["worst"] < 1e-12 and b["worst"] < 1e-12
        assert a["naive_gap"] > 1e-4
