"""Issue 43: ``place`` with 4 pipeline stages (1F1B), 32 ranks per stage at 16k tokens.

Per case (SFT mix and tail128k filling 60% of 8, 12, 16 micro-batches, 3 seeds; the cases of
``bench_placement.pipeline_cases``): the kept placement's step over its own bound
max(Σt + 3·min t, 4·max t), the step, and the time of ``place``. Then 48 micro-batches (both
pools, 3 seeds): the same, ``place`` best of 3.

    .venv/bin/python benchmarks/bench_pipeline_order.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import bench_placement as B  # noqa: E402

from padless import Mesh  # noqa: E402
from padless.planners.placement import place, simulate  # noqa: E402


def batch(kind: str, micro: int, seed: int) -> tuple[np.ndarray, Mesh]:
    pool = np.minimum(B.lengths_of(kind, 8192, 100 + seed), 32 * 16384 - 64)
    lens = pool[np.cumsum(pool) <= 0.6 * micro * 32 * 16384]
    return lens, Mesh(dp=1, cp=32, pp=4, dynamic=True, max_tokens=16384, micro_batches=micro)


def timed(lens: np.ndarray, mesh: Mesh, repeat: int = 3):
    best, p = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = place(lens, mesh, B.COST)
        best = min(best, time.perf_counter() - t0)
    return best, p


def main() -> None:
    ratios = []
    for kind in ("sft", "tail128k"):
        for micro in (8, 12, 16):
            for seed in range(3):
                dt, p = timed(*batch(kind, micro, seed), repeat=1)
                sim = simulate(p)
                ratios.append(sim.makespan / sim.bound)
                print(
                    f"{kind:9} {micro:3} s{seed}  step/bound {ratios[-1]:.4f}  "
                    f"step {sim.makespan:8.3f} s  place {dt * 1e3:6.1f} ms"
                )
    print(f"median {np.median(ratios):.4f}  worst {max(ratios):.4f}")
    for kind in ("sft", "tail128k"):
        for seed in range(3):
            dt, p = timed(*batch(kind, 48, seed))
            sim = simulate(p)
            print(
                f"{kind:9}  48 s{seed}  step/bound {sim.makespan / sim.bound:.4f}  "
                f"step {sim.makespan:8.3f} s  place {dt * 1e3:6.1f} ms"
            )


if __name__ == "__main__":
    main()
