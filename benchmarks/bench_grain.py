"""padless plans through Grain against Grain's own packers, resume, and JAX compilations.

Side by side in one process (grain 0.2.18 from PyPI):

1. Packing the same documents: rows and padding of ``padless.plan_packing`` against Grain's
   ``FirstFitPackIterDataset`` / ``BestFitPackIterDataset`` with 64 and 512 bins (their rows
   counted by iterating them), and the time to plan and iterate one epoch of ``(8, capacity)``
   batches through a Grain pipeline: ``padless.grain.PlanBatches`` (plan + collate) against
   ``MapDataset.source(docs).to_iter_dataset()`` → Grain packer → ``.batch(8)``.
2. Resume: a Grain checkpoint (``get_state()``, JSON) at a random step of each pipeline,
   restored into a fresh iterator: the batches after it identical to an uninterrupted run, and
   the restore time (``set_state`` + the first batch) of each.
3. JAX (CPU): a jitted training step over ``FixedShapes`` batches (``shape_set``, k shapes):
   compilations counted over an epoch (the jitted function's cache size) and real tokens per
   second against padding every batch to the longest document (one shape).

Documents: the built-in corpus (``builtin_corpus(["en", "es"])``: 59,628 token counts, the
English and Spanish sides one after the other) or ``--docs lognormal`` (LM-like: lognormal,
median 256, sigma 1.0, clipped to the capacity), ``--n`` of them.

Run: .venv/bin/python benchmarks/bench_grain.py [--docs builtin|lognormal] [--n 60000]
     [--capacities 2048 8192] [--bins 64 512] [--skip-jax]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import grain
import numpy as np

import padless
from padless.grain import PlanBatches, sampler

ROWS = 8  # rows per batch in both pipelines


def documents(kind: str, n: int, capacity: int, seed: int = 0) -> np.ndarray:
    if kind == "builtin":
        lengths = padless.builtin_corpus(["en", "es"]).T.reshape(-1)
        lengths = np.maximum(lengths, 1)
        if n > lengths.size:
            raise SystemExit(f"the built-in corpus holds {lengths.size} documents, asked {n}")
        return lengths[:n].astype(np.int64)
    rs = np.random.default_rng(seed)
    raw = rs.lognormal(mean=np.log(256.0), sigma=1.0, size=n)
    return np.clip(np.round(raw), 1, capacity).astype(np.int64)


def records_of(lengths: np.ndarray) -> list[np.ndarray]:
    rs = np.random.default_rng(1)
    return [rs.integers(1, 32000, n).astype(np.int32) for n in lengths]


def grain_pipeline(records, capacity: int, kind: str, bins: int):
    source = grain.MapDataset.source(records).map(lambda x: {"inputs": x}).to_iter_dataset()
    packer = {
        "FirstFit": grain.experimental.FirstFitPackIterDataset,
        "BestFit": grain.experimental.BestFitPackIterDataset,
    }[kind]
    packed = packer(
        source, length_struct={"inputs": capacity}, num_packing_bins=bins, shuffle_bins=True
    )
    return packed.batch(ROWS)


def padless_pipeline(lengths, records, capacity: int):
    spec = padless.Packing(capacity=capacity, rows_per_batch=ROWS)
    return PlanBatches(sampler(lengths, spec, seed=0), records)


def epoch_rows(ds) -> tuple[int, float]:
    """Rows with a document, and the seconds one epoch of ``ds`` takes."""
    t0 = time.perf_counter()
    rows = 0
    for batch in ds:
        rows += int((batch["inputs_segment_ids"].max(axis=1) > 0).sum())
    return rows, time.perf_counter() - t0


def packing_table(kind: str, n: int, capacities: list[int], bins: list[int]) -> dict:
    out = {}
    for capacity in capacities:
        lengths = documents(kind, n, capacity)
        records = records_of(lengths)
        total = int(lengths.sum())
        bound = -(-total // capacity)
        t0 = time.perf_counter()
        plan = padless.plan_packing(lengths, capacity=capacity)
        plan_s = time.perf_counter() - t0
        rows, iterate_s = epoch_rows(padless_pipeline(lengths, records, capacity))
        assert rows == plan.num_rows, (rows, plan.num_rows)
        found = {
            "padless": {
                "rows": rows,
                "plan_s": plan_s,
                "epoch_s": iterate_s,
            }
        }
        for packer in ("FirstFit", "BestFit"):
            for b in bins:
                r, s = epoch_rows(grain_pipeline(records, capacity, packer, b))
                found[f"Grain {packer} {b}"] = {"rows": r, "epoch_s": s}
                print(f"  {capacity} {packer} {b}: {r} rows in {s:.1f} s", flush=True)
        for v in found.values():
            v["padding"] = 1 - total / (v["rows"] * capacity)
        out[capacity] = {"docs": n, "tokens": total, "lower_bound": bound, "runs": found}
        print(f"capacity {capacity}: bound {bound}", json.dumps(found, indent=1), flush=True)
    return out


def resume_check(make, step: int) -> tuple[bool, float, float]:
    """Run ``make()`` uninterrupted; then stop at ``step``, checkpoint (JSON), restore into a
    fresh iterator. Returns (identical, restore seconds, uninterrupted epoch seconds)."""
    t0 = time.perf_counter()
    full = [b["inputs"].copy() for b in make()]
    epoch_s = time.perf_counter() - t0
    it = iter(make())
    for _ in range(step):
        next(it)
    state = json.dumps(it.get_state())
    t0 = time.perf_counter()
    fresh = iter(make())
    fresh.set_state(json.loads(state))
    first = next(fresh)
    restore_s = time.perf_counter() - t0
    rest = [first["inputs"]] + [b["inputs"] for b in fresh]
    same = len(rest) == len(full) - step and all(
        np.array_equal(a, b) for a, b in zip(rest, full[step:], strict=True)
    )
    return same, restore_s, epoch_s


def resume_table(kind: str, n: int, capacity: int, bins: int) -> dict:
    lengths = documents(kind, n, capacity)
    records = records_of(lengths)
    batches = len(sampler(lengths, padless.Packing(capacity=capacity, rows_per_batch=ROWS)))
    step = int(np.random.default_rng(7).integers(1, batches))
    out = {"step": step, "batches": batches}
    for name, make in (
        ("padless", lambda: padless_pipeline(lengths, records, capacity)),
        (f"Grain BestFit {bins}", lambda: grain_pipeline(records, capacity, "BestFit", bins)),
    ):
        same, restore_s, epoch_s = resume_check(make, step)
        out[name] = {"identical": same, "restore_s": restore_s, "epoch_s": epoch_s}
        print(f"resume {name} at step {step}: identical={same}, restore {restore_s:.4f} s")
    return out


def jax_table(kind: str, n: int, k: int, max_tokens: int) -> dict:
    import jax
    import jax.numpy as jnp

    from padless.jax import compiled_shapes

    lengths = documents(kind, n, 2048)
    vocab, dim = 512, 64
    rs = np.random.default_rng(2)
    records = [rs.integers(1, vocab, m).astype(np.int32) for m in lengths]

    def loss_fn(params, batch):
        x = params["embed"][batch["inputs"]]
        h = jax.nn.relu(x @ params["w1"])
        logits = h @ params["w2"]
        seg = batch["inputs_segment_ids"]
        keep = (seg[:, 1:] > 0) & (seg[:, 1:] == seg[:, :-1])
        logp = jax.nn.log_softmax(logits[:, :-1])
        picked = jnp.take_along_axis(logp, batch["inputs"][:, 1:, None], axis=-1)[..., 0]
        return -(picked * keep).sum() / jnp.maximum(keep.sum(), 1)

    def run(spec) -> dict:
        @jax.jit
        def step(params, batch):
            loss, grads = jax.value_and_grad(loss_fn)(params, batch)
            return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), loss

        key = jax.random.split(jax.random.PRNGKey(0), 3)
        params = {
            "embed": jax.random.normal(key[0], (vocab, dim)) * 0.05,
            "w1": jax.random.normal(key[1], (dim, 4 * dim)) * 0.05,
            "w2": jax.random.normal(key[2], (4 * dim, vocab)) * 0.05,
        }
        s = sampler(lengths, spec, seed=0)
        slots = steps = 0
        compiling = 0.0  # seconds of the steps that compiled (a new shape)
        t0 = time.perf_counter()
        for batch in PlanBatches(s, records):
            before = compiled_shapes(step)
            t1 = time.perf_counter()
            params, loss = step(params, jax.device_put(batch))
            if compiled_shapes(step) != before:
                loss.block_until_ready()
                compiling += time.perf_counter() - t1
            slots += batch["inputs"].size
            steps += 1
        loss.block_until_ready()
        seconds = time.perf_counter() - t0
        real = int(lengths.sum())
        return {
            "compiles": compiled_shapes(step),
            "shapes": len(spec.shapes),
            "steps": steps,
            "padding": 1 - real / slots,
            "seconds": seconds,
            "compile_s": compiling,
            "tokens_per_s": real / seconds,
            "tokens_per_s_after_compiles": real / (seconds - compiling),
        }

    shapes = padless.shape_set(lengths, k, max_tokens=max_tokens)
    longest = int(lengths.max())
    out = {
        f"FixedShapes (shape_set k={k})": run(padless.FixedShapes(shapes=shapes)),
        "padded to the longest (one shape)": run(
            padless.FixedShapes(shapes=[(max(max_tokens // longest, 1), longest)])
        ),
    }
    for name, v in out.items():
        print(f"jax {name}: {json.dumps(v)}", flush=True)
    a, b = out.values()
    print(
        f"jax tokens/s ratio: {a['tokens_per_s'] / b['tokens_per_s']:.2f}x over the epoch, "
        f"{a['tokens_per_s_after_compiles'] / b['tokens_per_s_after_compiles']:.2f}x after "
        "the compilations"
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", choices=("builtin", "lognormal"), default="builtin")
    ap.add_argument("--n", type=int, default=59628)
    ap.add_argument("--capacities", type=int, nargs="+", default=[2048, 8192])
    ap.add_argument("--bins", type=int, nargs="+", default=[64, 512])
    ap.add_argument("--jax-k", type=int, default=4)
    ap.add_argument("--jax-max-tokens", type=int, default=4096)
    ap.add_argument("--skip-packing", action="store_true")
    ap.add_argument("--skip-jax", action="store_true")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    print(
        f"grain {grain.__version__}, padless {padless.__version__}, {platform.processor()}, "
        f"{os.cpu_count()} cpus, load {os.getloadavg()}",
        flush=True,
    )
    figures: dict = {"docs": args.docs, "n": args.n}
    if not args.skip_packing:
        figures["packing"] = packing_table(args.docs, args.n, args.capacities, args.bins)
        figures["resume"] = resume_table(args.docs, args.n, args.capacities[0], max(args.bins))
    if not args.skip_jax:
        figures["jax"] = jax_table(args.docs, args.n, args.jax_k, args.jax_max_tokens)
    print(f"load after: {os.getloadavg()}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=1, default=str)


if __name__ == "__main__":
    main()
