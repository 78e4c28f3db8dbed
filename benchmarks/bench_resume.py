"""Restore cost of a sampler over 1e7 items: load_state_dict + first batch vs computing one plan.

Run: .venv/bin/python benchmarks/bench_resume.py [--n 10000000] [--world-size 8] [--rounds 7]

The measures take turns within each round; each figure is its best round.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from _common import best_in_rounds, lognormal_lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7, help="rounds of every measure in turn")
    args = parser.parse_args()

    import padless

    lengths = lognormal_lengths(args.n)
    kw = {"max_tokens": 4096, "multiple_of": 8, "world_size": args.world_size, "rank": 3}
    padless.TokenBudgetSampler(lengths[:1000], **kw)  # load kernels

    def fresh_start() -> None:
        next(iter(padless.TokenBudgetSampler(lengths, **kw)))

    steps = len(padless.TokenBudgetSampler(lengths, **kw))
    measures: dict[str, Callable[[], object]] = {
        "plan": lambda: padless.plan_token_budget(lengths, max_tokens=4096, multiple_of=8),
        "fresh": fresh_start,
    }
    positions = [int(steps * frac) for frac in (0.0, 0.5, 1.0)]
    for k in positions:
        src = padless.TokenBudgetSampler(lengths, **kw)
        it = iter(src)
        for _ in range(k):
            next(it)
        state = src.state_dict()

        def restore(state: dict = state) -> None:
            restored = padless.TokenBudgetSampler(lengths, **kw)
            restored.load_state_dict(state)
            next(iter(restored), None)

        def replay(k: int = k) -> None:
            it = iter(padless.TokenBudgetSampler(lengths, **kw))
            for _ in range(k + 1):
                next(it, None)

        measures[f"restore {k}"] = restore
        measures[f"replay {k}"] = replay
    t = best_in_rounds(measures, args.rounds)
    t_plan = t["plan"]
    print(f"N = {args.n:,}, world size {args.world_size}, {steps:,} steps per rank")
    print(f"  one plan (plan_token_budget)          {t_plan * 1e3:8.1f} ms")
    print(f"  fresh sampler, first batch            {t['fresh'] * 1e3:8.1f} ms")
    for k in positions:
        t_restore = t[f"restore {k}"]
        print(
            f"  restore at step {k:>6,} ({k / steps:4.0%}): {t_restore * 1e3:8.1f} ms "
            f"= {t_restore / t_plan:.2f} x one plan; replaying {k:,} batches instead: "
            f"{t[f'replay {k}'] * 1e3:8.1f} ms"
        )


if __name__ == "__main__":
    main()
