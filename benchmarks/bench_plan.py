"""Token-budget planning speed, as ratios to numpy sorts of the same array (same process).

Run: .venv/bin/python benchmarks/bench_plan.py [--sizes 1000000 10000000] [--repeat 5]

The measures take turns within each of ``--repeat`` rounds; each figure is its best round.
A given order is checked and gathered on up to one thread per core (at most four); run under
``taskset -c 0`` for the one-core figures.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from _common import best_in_rounds, lognormal_lengths


def measure(n: int, repeat: int, greedy_pass: Callable) -> None:
    import padless

    lengths = lognormal_lengths(n)
    sorted_order = np.argsort(lengths, kind="stable")
    sorted_sizes = np.ascontiguousarray(lengths[sorted_order])
    random_order = np.random.default_rng(1).permutation(n)
    random_sizes = np.ascontiguousarray(lengths[random_order])

    def whole(order: np.ndarray) -> Callable[[], object]:
        kw = {"max_tokens": 4096, "multiple_of": 8, "order": order}
        return lambda: padless.plan_token_budget(lengths, **kw)

    t = best_in_rounds(
        {
            "argsort": lambda: np.argsort(lengths, kind="stable"),
            "sort": lambda: np.sort(lengths),
            "plan": lambda: padless.plan_token_budget(lengths, max_tokens=4096, multiple_of=8),
            "pass sorted": lambda: greedy_pass(sorted_order, sorted_sizes),
            "pass random": lambda: greedy_pass(random_order, random_sizes),
            "call sorted": whole(sorted_order),
            "call random": whole(random_order),
        },
        repeat,
    )
    t_argsort, t_sort, t_plan = t["argsort"], t["sort"], t["plan"]
    t_pass_sorted, t_pass_random = t["pass sorted"], t["pass random"]
    t_call_sorted, t_call_random = t["call sorted"], t["call random"]
    from padless._kernels.budget import _threads

    print(
        f"\nN = {n:,} lognormal lengths (mean {lengths.mean():.1f}), max_tokens 4096, multiple_of 8"
        f"; a given order is checked and gathered on {_threads(n)} thread(s)"
    )
    print(f"  np.argsort(kind='stable')   {t_argsort * 1e3:8.1f} ms")
    print(f"  np.sort                     {t_sort * 1e3:8.1f} ms")
    print(
        f"  plan_token_budget end-to-end {t_plan * 1e3:7.1f} ms  "
        f"= {t_plan / t_argsort:.3f} x stable argsort (target <= 0.3)"
    )
    print(
        f"  greedy pass, sorted order   {t_pass_sorted * 1e3:8.1f} ms  "
        f"= {t_pass_sorted / t_sort:.3f} x np.sort (target <= 1.0)"
    )
    print(
        f"  greedy pass, random order   {t_pass_random * 1e3:8.1f} ms  "
        f"= {t_pass_random / t_sort:.3f} x np.sort (target <= 2.0)"
    )
    print(
        f"  plan_token_budget(order=sorted), whole call {t_call_sorted * 1e3:7.1f} ms  "
        f"= {t_call_sorted / t_sort:.3f} x np.sort (target <= 2.0)"
    )
    print(
        f"  plan_token_budget(order=random), whole call {t_call_random * 1e3:7.1f} ms  "
        f"= {t_call_random / t_sort:.3f} x np.sort (target <= 3.0)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    t0 = time.perf_counter()
    import padless
    from padless import _kernels as K

    padless.plan_token_budget(np.array([3, 1, 2]), max_tokens=8, multiple_of=2)
    print(f"first call (compile or load cached kernels): {time.perf_counter() - t0:.2f} s")

    def greedy_pass(order: np.ndarray, walk_sizes: np.ndarray) -> padless.BatchPlan:
        ends = K.budget_ends(walk_sizes, 4096, 0, 8)
        return padless.BatchPlan(order, np.concatenate([[0], ends]))

    for n in args.sizes:
        measure(n, args.repeat, greedy_pass)


if __name__ == "__main__":
    main()
