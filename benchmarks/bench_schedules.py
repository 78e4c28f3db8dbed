"""Schedules over the run: a schedule's overhead per batch, and restore time with a ramp.

Run: .venv/bin/python benchmarks/bench_schedules.py [--size 1000000] [--restore-size 10000000]
     [--tokens 20000000] [--rounds 3]

Part 1 (goal: ratio <= 1.05) times one epoch per batch, each against the same sampler without a
schedule, timed in turn in the same process (best of ``--rounds``; plans are cached, so the time
is the per-batch path):

- a TokenBudgetSampler over ``--size`` lognormal lengths (max_tokens 4096) with
  ``batches_per_step=Schedule.linear(8, 256, steps=...)`` grouped by ``sampler.steps(sampler)``,
  against plain iteration and against a constant ``batches_per_step=256`` (its final value)
  through ``steps()``;
- an LMStream over ``--tokens`` tokens (4096 tokens a batch), ``num_steps=512`` against a
  warm-up ``Schedule.piecewise`` 128, 256, 512 over the epoch's first two thirds;
- a PackingSampler (capacity 4096, ``oversize="split"``) against a capacity warm-up
  ``Schedule.piecewise`` 1024, 2048, 4096 over the epoch's first two thirds (the sampler's side:
  each warm-up batch's codes tagged with its step);
- a MixtureSampler of two corpora (halves of the lengths), constant weights against a piecewise
  and a cosine weight schedule that change within the epoch.

Part 1b (informational): ``collate_packed`` of a warm-up batch (rows of 1024 laid out from the
planned rows of 4096) against the same batch at the planned capacity, per batch.

Part 2 (goal: ratio <= 2): ``load_state_dict`` + the first batch of a state saved at 50% of an
epoch of ``--restore-size`` items, under a ``tokens_per_step`` ramp and with a recorded skip,
against one plan of that epoch (``epoch_plan`` on a fresh sampler), both on fresh samplers.

Part 3 (goal: ratio <= 2): resume across a change: a state saved at 50% of an epoch of
``--restore-size`` items under ``max_tokens=4096`` (packing: ``capacity=4096``) loaded into a
sampler with 8192 (``load_state_dict`` + the first batch: the old plan, what it delivered, and
the rest planned at the new budget), against one plan of the epoch at the new budget, both on
fresh samplers.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
from _common import best_in_rounds, lognormal_lengths

import padless
from padless import Schedule
from padless.sampling.mixing import MixtureSampler


def _epoch(sampler) -> int:
    n = 0
    for _ in sampler:
        n += 1
    return n


def _epoch_steps(sampler) -> int:
    n = 0
    for group in sampler.steps(sampler):
        n += len(group)
    return n


def overhead(size: int, tokens: int, rounds: int) -> list[tuple[str, float, float]]:
    lengths = lognormal_lengths(size)
    plain = padless.TokenBudgetSampler(lengths, max_tokens=4096, seed=1)
    batches = len(plain)
    ramp = padless.TokenBudgetSampler(
        lengths,
        max_tokens=4096,
        seed=1,
        batches_per_step=Schedule.linear(8, 256, steps=max(1, batches // 512)),
    )
    constant = padless.TokenBudgetSampler(lengths, max_tokens=4096, seed=1, batches_per_step=256)
    corpus = np.arange(tokens, dtype=np.int32)
    lm = padless.LMStream(corpus, num_steps=512, tokens_per_batch=4096, seed=1)
    third = max(1, len(lm) // 3)
    warm = padless.LMStream(
        corpus,
        num_steps=Schedule.piecewise([0, third, 2 * third], [128, 256, 512]),
        tokens_per_batch=4096,
        seed=1,
    )
    packed = padless.PackingSampler(lengths, capacity=4096, oversize="split", seed=1)
    rows = len(packed)
    grow = Schedule.piecewise([0, rows // 3, 2 * rows // 3], [1024, 2048, 4096])
    growing = padless.PackingSampler(lengths, capacity=grow, oversize="split", seed=1)
    half = size // 2

    def mixture(weights) -> MixtureSampler:
        subs = {
            "a": padless.TokenBudgetSampler(lengths[:half], max_tokens=4096, seed=2),
            "b": padless.TokenBudgetSampler(lengths[half:], max_tokens=4096, seed=3),
        }
        return MixtureSampler(subs, weights=weights, num_batches=batches, seed=1)

    steps = batches
    mix_const = mixture({"a": 0.7, "b": 0.3})
    mix_piece = mixture({"a": Schedule.piecewise([0, steps // 2], [0.7, 0.2]), "b": 0.3})
    mix_cos = mixture({"a": Schedule.cosine(0.7, 0.2, steps=steps), "b": 0.3})
    pairs = {
        "token budget: linear ramp via steps() / plain iteration": (
            plain,
            _epoch,
            ramp,
            _epoch_steps,
        ),
        "token budget: linear ramp / constant 256, both via steps()": (
            constant,
            _epoch_steps,
            ramp,
            _epoch_steps,
        ),
        "LMStream: num_steps warm-up 128/256/512 / constant 512": (lm, _epoch, warm, _epoch),
        "packing: capacity warm-up 1024/2048/4096 / constant 4096": (
            packed,
            _epoch,
            growing,
            _epoch,
        ),
        "mixture: piecewise weights / constant": (mix_const, _epoch, mix_piece, _epoch),
        "mixture: cosine weights / constant": (mix_const, _epoch, mix_cos, _epoch),
    }
    for ref, ref_run, sched, run in pairs.values():  # plan and cache once, outside the timing
        ref_run(ref)
        run(sched)
    fns = {}
    for name, (ref, ref_run, sched, run) in pairs.items():
        fns[name + "|ref"] = lambda ref=ref, ref_run=ref_run: ref_run(ref)
        fns[name + "|sched"] = lambda sched=sched, run=run: run(sched)
    best = best_in_rounds(fns, rounds)
    out = []
    for name, (ref, _, _, _) in pairs.items():
        n = len(ref)
        out.append((name, best[name + "|ref"] / n, best[name + "|sched"] / n))
    return out


def restore(size: int, rounds: int) -> tuple[float, float, int]:
    lengths = lognormal_lengths(size, seed=1)

    def make() -> padless.TokenBudgetSampler:
        return padless.TokenBudgetSampler(
            lengths,
            max_tokens=4096,
            seed=1,
            tokens_per_step=Schedule.linear(64 * 4096, 1024 * 4096, steps=200),
        )

    first = make()
    first.skip(steps=(100, 110))  # a loss spike's batches, recorded in the state
    return _timed_restore(first, make, rounds)


def _timed_restore(first: padless.PlanSampler, make: Any, rounds: int) -> tuple[float, float, int]:
    """``first`` run to half its epoch and its state saved; then, best of ``rounds``, one plan
    of the epoch on a fresh ``make()`` against ``load_state_dict`` + the first batch on another."""
    it = iter(first)
    for _ in range(len(first) // 2):
        next(it)
    state = json.loads(json.dumps(first.state_dict()))
    t_plan = t_restore = float("inf")
    for _ in range(rounds):
        fresh = make()
        t0 = time.perf_counter()
        fresh.epoch_plan(0)
        t_plan = min(t_plan, time.perf_counter() - t0)
        again = make()
        t0 = time.perf_counter()
        again.load_state_dict(state)
        next(iter(again))
        t_restore = min(t_restore, time.perf_counter() - t0)
    return t_plan, t_restore, int(state["position"])


def restore_change(size: int, rounds: int, kind: str = "token_budget") -> tuple[float, float, int]:
    lengths = lognormal_lengths(size, seed=1)

    def make(budget: int) -> padless.PlanSampler:
        if kind == "packing":
            spec: padless.Spec = padless.Packing(capacity=budget, oversize="drop")
        else:
            spec = padless.TokenBudget(max_tokens=budget)
        return padless.PlanSampler(lengths, spec, seed=1)

    return _timed_restore(make(4096), lambda: make(8192), rounds)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--restore-size", type=int, default=10_000_000)
    ap.add_argument("--tokens", type=int, default=20_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"schedule overhead per batch (size={args.size:,}, tokens={args.tokens:,}; goal <= 1.05)")
    for name, ref, sched in overhead(args.size, args.tokens, args.rounds):
        print(f"  {name:56s} {ref * 1e6:8.2f} us -> {sched * 1e6:8.2f} us  x{sched / ref:.3f}")
    t_plan, t_restore, position = restore(args.restore_size, args.rounds)
    print(
        f"restore at 50% with a tokens_per_step ramp and a skip (size={args.restore_size:,}, "
        f"position {position:,}; goal <= 2x one plan)"
    )
    print(
        f"  one plan {t_plan * 1e3:.1f} ms, load_state_dict + first batch "
        f"{t_restore * 1e3:.1f} ms  x{t_restore / t_plan:.2f}"
    )
    print(f"restore across a change at 50%, 4096 -> 8192 (size={args.restore_size:,}; goal <= 2x)")
    for kind in ("token_budget", "packing"):
        t_plan, t_restore, position = restore_change(args.restore_size, args.rounds, kind)
        print(
            f"  {kind:13s} position {position:>9,}: one plan {t_plan * 1e3:7.1f} ms, "
            f"load_state_dict + first batch {t_restore * 1e3:7.1f} ms  x{t_restore / t_plan:.2f}"
        )


if __name__ == "__main__":
    main()
