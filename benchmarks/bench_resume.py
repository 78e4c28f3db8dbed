"""Restore cost of a sampler over 1e7 items: load_state_dict + first batch vs computing one plan.

Run: .venv/bin/python benchmarks/bench_resume.py [--n 10000000] [--world-size 8]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from _common import best_of, lognormal_lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--world-size", type=int, default=8)
    args = parser.parse_args()

    import padless

    lengths = lognormal_lengths(args.n)
    kw = {"max_tokens": 4096, "multiple_of": 8, "world_size": args.world_size, "rank": 3}
    padless.TokenBudgetSampler(lengths[:1000], **kw)  # load kernels

    def best(fn: Callable[[], object]) -> float:
        return best_of(fn, 3)

    t_plan = best(lambda: padless.plan_token_budget(lengths, max_tokens=4096, multiple_of=8))

    def fresh_start() -> None:
        next(iter(padless.TokenBudgetSampler(lengths, **kw)))

    t_fresh = best(fresh_start)
    fresh = padless.TokenBudgetSampler(lengths, **kw)
    steps = len(fresh)
    print(f"N = {args.n:,}, world size {args.world_size}, {steps:,} steps per rank")
    print(f"  one plan (plan_token_budget)          {t_plan * 1e3:8.1f} ms")
    print(f"  fresh sampler, first batch            {t_fresh * 1e3:8.1f} ms")

    for frac in (0.0, 0.5, 1.0):
        k = int(steps * frac)
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

        t_restore = best(restore)
        t_replay = best(replay)
        print(
            f"  restore at step {k:>6,} ({frac:4.0%}): {t_restore * 1e3:8.1f} ms "
            f"= {t_restore / t_plan:.2f} x one plan; replaying {k:,} batches instead: "
            f"{t_replay * 1e3:8.1f} ms"
        )


if __name__ == "__main__":
    main()
