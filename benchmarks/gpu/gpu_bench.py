"""What padless is for, measured on one GPU in one run: six guarded sections, one table, one JSON.

1. training throughput: a Llama-style decoder (bf16 autocast, SDPA), the same optimizer steps
   on long-tailed lengths with four batchings: random padded, HF group_by_length, padless token
   budget, padless packing with documents kept apart (flex_attention or SDPA with a block mask);
2. packed attention kept apart: ``padless.torch.check_packed`` on that model, in bf16;
3. batches to the GPU: ``TokenDataset(pin_memory=True)`` feeding ``.to("cuda", non_blocking=True)``
   against a plain pinned host-to-device copy of the same bytes, 0/2/4 DataLoader workers;
4. memory: ``padless.torch.probe_memory`` on 4 shapes, then predicted vs measured peaks of 4
   held-out shapes;
5. static shapes: ``torch.compile`` over an epoch of ``FixedShapes`` batches (compiles counted)
   against token-budget batches of changing shapes;
6. the placement cost model (issue 43) fitted on the device: ``padless.torch.calibrate_cost``
   on the section-1 model, predicted vs measured step time on held-out lengths.

Each section has a time budget and its own try: a failure is recorded as "failed: <reason>" and
the next section runs. ``--dry-run``: CPU, a tiny model, a few steps; the CUDA-only parts say
they were skipped. Run: ``bash benchmarks/gpu/run.sh [--dry-run]`` (it builds padless first,
except in a dry run). The JSON goes to ``$OUT/gpu_bench.json`` when OUT is set, else
``benchmarks/results/gpu_bench.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from bench_train import first_steps, group_by_length, markov_tokens, random_batches, tuned  # noqa: E402
from model import Config, Decoder, causal_lm_loss, parameters_m  # noqa: E402

import padless  # noqa: E402
import padless.torch as pt  # noqa: E402

WIDTH = 80
SKIP_CUDA = "skipped: needs CUDA"


@dataclass
class Setup:
    """Sizes of one run (the GPU's, or the dry run's)."""

    model: Config
    steps: int  # optimizer steps per strategy in section 1
    batch_size: int
    median: float  # corpus lengths: lognormal(ln median, sigma) clipped to [lo, hi]
    sigma: float
    lo: int
    hi: int
    warmup: int
    held_out: int
    lr: float
    check_lengths: tuple[int, ...]
    io_docs: int
    io_capacity: int
    probe_grid: tuple[int, ...]
    probe_limit: str
    compile_layers: int
    compile_shapes: int
    compile_tokens: int
    calibrate_lengths: tuple[int, ...]  # section 6: fitted lengths
    calibrate_holdout: tuple[int, ...]  # section 6: held-out lengths
    budget: dict[str, float]  # seconds per section
    total: float  # seconds for all sections: a section that would start later is skipped


GPU = Setup(
    model=Config(vocab_size=32000, hidden=768, layers=12, heads=12, ff=2048),
    steps=100,
    batch_size=16,
    median=256,
    sigma=0.9,
    lo=16,
    hi=4096,
    warmup=5,
    held_out=64,
    lr=3e-4,
    check_lengths=(300, 200, 100),
    io_docs=8000,
    io_capacity=8192,
    probe_grid=(512, 1024, 2048, 4096),
    probe_limit="16GiB",
    compile_layers=4,
    compile_shapes=4,
    compile_tokens=32768,
    calibrate_lengths=(512, 1024, 2048, 4096, 8192),
    calibrate_holdout=(1536, 3072, 6144),
    budget={
        "train": 160,
        "packed": 40,
        "to_gpu": 50,
        "memory": 60,
        "shapes": 120,
        "calibrate": 40,
    },
    total=420,
)

DRY = Setup(
    model=Config(vocab_size=256, hidden=64, layers=2, heads=4, ff=128),
    steps=6,
    batch_size=8,
    median=32,
    sigma=0.8,
    lo=4,
    hi=160,
    warmup=1,
    held_out=16,
    lr=2e-3,
    check_lengths=(7, 5, 4),
    io_docs=400,
    io_capacity=256,
    probe_grid=(16, 32, 64, 128),
    probe_limit="64MiB",
    compile_layers=2,
    compile_shapes=3,
    compile_tokens=512,
    calibrate_lengths=(16, 32, 64, 128),
    calibrate_holdout=(48, 96),
    budget={"train": 20, "packed": 5, "to_gpu": 5, "memory": 10, "shapes": 15, "calibrate": 8},
    total=60,
)


# --------------------------------------------------------------------------- helpers


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def corpus(setup: Setup, n: int, seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    rs = np.random.default_rng(seed)
    raw = rs.lognormal(np.log(setup.median), setup.sigma, n)
    lengths = np.clip(np.round(raw), setup.lo, setup.hi).astype(np.int64)
    return lengths, markov_tokens(lengths, setup.model.vocab_size, seed)


def padded(seqs: list[np.ndarray], width: int | None = None) -> dict[str, torch.Tensor]:
    """Right-padded ids and labels (-100 at padding); pad id 0."""
    width = width or max(s.size for s in seqs)
    ids = np.zeros((len(seqs), width), dtype=np.int64)
    labels = np.full((len(seqs), width), -100, dtype=np.int64)
    for r, s in enumerate(seqs):
        ids[r, : s.size] = labels[r, : s.size] = s
    return {"input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(labels)}


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    return {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
        for k, v in batch.items()
    }


def autocast(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    return torch.autocast(device.type, dtype=torch.bfloat16)


def step_loss(model: Decoder, batch: dict[str, Any]) -> torch.Tensor:
    logits = model(batch["input_ids"], batch.get("position_ids"), batch.get("seq_idx"))
    return causal_lm_loss(logits, batch["labels"])


def peak_reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**30


def gib(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} GiB"


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.perf_counter() + seconds

    def over(self) -> bool:
        return time.perf_counter() > self.end

    def left(self) -> float:
        return self.end - time.perf_counter()


# --------------------------------------------------------------------------- 1. training


def packed_kernel(device: torch.device) -> tuple[str, str]:
    """flex_attention with a document mask where it runs here (CUDA), else SDPA with the mask."""
    if device.type != "cuda":
        return "sdpa-mask", "flex_attention not tried on the CPU (compiles slowly there)"
    try:
        from model import flex_attention_compiled, flex_block_mask

        q = torch.randn(1, 2, 256, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
        docs = torch.arange(256, device=device)[None] // 100
        flex_attention_compiled()(q, q, q, block_mask=flex_block_mask(docs)).sum().backward()
        sync(device)
        return "flex", "flex_attention (compiled) with a document block mask"
    except Exception as exc:  # noqa: BLE001 - any failure means: use the other kernel
        return "sdpa-mask", f"flex_attention failed ({type(exc).__name__}: {exc}"[:200] + ")"


def section_train(setup: Setup, device: torch.device, dl: Deadline, ctx: dict[str, Any]) -> dict:
    bs, steps = setup.batch_size, setup.steps
    n = bs * steps
    lengths, seqs = corpus(setup, n, seed=0)
    held_lengths, held = corpus(setup, setup.held_out, seed=1)
    order = np.argsort(held_lengths, kind="stable")
    evals = [
        to_device(padded([held[i] for i in order[j : j + bs]]), device)
        for j in range(0, len(held), bs)
    ]
    kernel, kernel_note = packed_kernel(device)
    ctx["kernel"] = kernel

    plans: dict[str, list[list[int]]] = {}
    settings: dict[str, str] = {}
    plans["a"] = random_batches(n, bs, 0)
    settings["a"] = f"{bs} per batch"
    plans["b"] = group_by_length(lengths, bs, 0)[:steps]
    settings["b"] = f"{bs} per batch"
    budget = tuned(
        lambda m: padless.TokenBudgetSampler(lengths, max_tokens=m, seed=0), 64, 1 << 22, steps
    )
    plans["c"] = first_steps(padless.TokenBudgetSampler(lengths, max_tokens=budget, seed=0), steps)
    settings["c"] = f"max_tokens={budget}"
    capacity = tuned(
        lambda c: padless.PackingSampler(lengths, capacity=c, seed=0), setup.hi, 1 << 22, steps
    )
    packing = padless.PackingSampler(lengths, capacity=capacity, seed=0)
    plans["d"] = first_steps(packing, steps)
    settings["d"] = f"capacity={capacity}"
    collate = pt.collate_for(packing)
    names = {
        "a": "(a) random, padded",
        "b": "(b) HF group_by_length",
        "c": "(c) padless token budget",
        "d": f"(d) padless packing, {kernel}",
    }

    def batches_of(key: str) -> list[dict[str, Any]]:
        if key == "d":
            return [collate([{"input_ids": seqs[i]} for i in plan]) for plan in plans[key]]
        return [padded([seqs[i] for i in plan]) for plan in plans[key]]

    torch.manual_seed(0)
    base = Decoder(setup.model, kernel=kernel)
    ctx["base"] = base
    base_state = {k: v.clone() for k, v in base.state_dict().items()}
    results: dict[str, dict[str, Any]] = {}
    done = steps
    for key in "abcd":  # (a) first: the slowest; if it runs out of time, the others match its steps
        host = batches_of(key)[:done]
        real = [int(sum(seqs[i].size for i in plan)) for plan in plans[key][:done]]
        computed = [int(b["input_ids"].numel()) for b in host]
        on_dev = [to_device(b, device) for b in host]
        model = Decoder(setup.model, kernel=kernel)
        model.load_state_dict(base_state)
        model.to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=setup.lr, fused=device.type == "cuda")
        peak_reset(device)
        times: list[float] = []
        last = float("nan")
        with autocast(device):
            for s, batch in enumerate(on_dev):
                sync(device)
                t0 = time.perf_counter()
                loss = step_loss(model, batch)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                sync(device)
                times.append(time.perf_counter() - t0)
                last = float(loss.detach())
                if key == "a" and dl.over() and s + 1 >= setup.warmup + 2:
                    done = s + 1  # the others train as many steps
                    break
            model.eval()
            with torch.no_grad():
                held_loss = sum(float(step_loss(model, b)) for b in evals) / len(evals)
        peak = peak_gib(device)
        w = setup.warmup
        timed = times[w:done]
        results[key] = {
            "name": names[key],
            "setting": settings[key],
            "steps": len(times),
            "real_tokens": sum(real[:done]),
            "computed_tokens": sum(computed[:done]),
            "padding": 1 - sum(real[:done]) / sum(computed[:done]),
            "tokens_per_s": sum(real[w:done]) / sum(timed),
            "peak_gib": peak,
            "final_train_loss": last,
            "held_out_loss": held_loss,
        }
        del model, opt, on_dev
    ref = results["a"]["tokens_per_s"]
    bound = 1 / (1 - results["a"]["padding"])
    for r in results.values():
        r["vs_a"] = r["tokens_per_s"] / ref
        r["of_bound"] = r["vs_a"] / bound
    ctx["lengths"], ctx["seqs"] = lengths, seqs
    return {
        "status": "ok",
        "model": {**asdict(setup.model), "parameters_m": round(parameters_m(base), 1)},
        "dtype": "bf16 autocast, fp32 weights, AdamW",
        "steps": done,
        "sequences": n,
        "lengths": {
            "mean": float(lengths.mean()),
            "max": int(lengths.max()),
            "dist": f"lognormal(ln {setup.median}, {setup.sigma}) in [{setup.lo}, {setup.hi}]",
        },
        "padded_kernel": "SDPA is_causal=True (right padding needs no key mask)",
        "packed_kernel": kernel,
        "packed_kernel_note": kernel_note,
        "bound": bound,
        "strategies": results,
        "skipped": [] if device.type == "cuda" else ["flex_attention, bf16 speed, peak memory"],
    }


def table_train(r: dict) -> list[str]:
    m = r["model"]
    lines = [
        f"{m['parameters_m']}M params ({m['layers']} layers, d={m['hidden']}), {r['dtype']}",
        f"{r['steps']} steps each; lengths mean {r['lengths']['mean']:.0f}, max "
        f"{r['lengths']['max']}; bound 1/(1-p) = {r['bound']:.2f}x",
        f"packed attention: {r['packed_kernel_note']}",
        f"{'strategy':<31}{'tok/s':>10}{'vs (a)':>8}{'bound':>7}{'pad':>6}{'peak':>9}{'loss':>7}",
    ]
    for s in r["strategies"].values():
        peak = "-" if s["peak_gib"] is None else f"{s['peak_gib']:.1f}G"
        lines.append(
            f"{s['name'][:30]:<31}{s['tokens_per_s']:>10,.0f}{s['vs_a']:>7.2f}x"
            f"{s['of_bound']:>7.0%}{s['padding']:>6.0%}{peak:>9}{s['held_out_loss']:>7.3f}"
        )
    lines.append("  loss: held-out next-token loss after the steps; peak: max_memory_allocated")
    return lines


# --------------------------------------------------------------------------- 2. check_packed


def section_packed(setup: Setup, device: torch.device, dl: Deadline, ctx: dict[str, Any]) -> dict:
    base = ctx.get("base")
    if base is None:
        torch.manual_seed(0)
        base = Decoder(setup.model)
    model = Decoder(setup.model)
    model.load_state_dict(base.state_dict())
    model.to(device=device, dtype=torch.bfloat16)
    lens = np.array(setup.check_lengths)
    collate = pt.collate_for(padless.PackingSampler(lens, capacity=int(lens.sum()) + 8))
    kernels = ["sdpa-mask"] + (["flex"] if ctx.get("kernel") == "flex" else [])
    checks = []
    for kernel in kernels:
        model.set_kernel(kernel)
        for name, col in (("collate_for(PackingSampler)", collate), ("flat, position_ids", None)):
            diff = pt.check_packed(model, collate=col, lengths=setup.check_lengths)
            checks.append({"kernel": kernel, "collate": name, "max_logit_diff": diff})
    return {
        "status": "ok",
        "dtype": "bf16 weights",
        "tolerance": "check_packed's 16-bit default: 3e-2 * max(1, largest |logit| alone)",
        "lengths": list(setup.check_lengths),
        "checks": checks,
        "skipped": [] if device.type == "cuda" else ["flex_attention, bf16 kernels on the GPU"],
    }


def table_packed(r: dict) -> list[str]:
    lines = [f"documents {r['lengths']}, {r['dtype']}; tolerance {r['tolerance']}"]
    for c in r["checks"]:
        lines.append(f"  {c['kernel']:<10} {c['collate']:<30} max diff {c['max_logit_diff']:.3g}")
    return lines


# --------------------------------------------------------------------------- 3. to the GPU


def section_to_gpu(setup: Setup, device: torch.device, dl: Deadline, ctx: dict[str, Any]) -> dict:
    lengths, seqs = corpus(setup, setup.io_docs, seed=2)
    tmp = tempfile.mkdtemp(prefix="padless_gpu_")
    prefix = os.path.join(tmp, "corpus")
    padless.write_indexed(seqs, prefix, dtype=np.uint16)
    sampler = padless.PackingSampler(lengths, capacity=setup.io_capacity, rows_per_batch=4, seed=0)
    cuda = device.type == "cuda"
    rows = []
    per = max(dl.left() / 4, 0.5)
    for workers in (0, 2, 4) if cuda else (0,):
        # a forked worker cannot pin memory once CUDA is up: with workers, the DataLoader's pin
        # thread pins the dataset's batches instead
        in_dataset = cuda and workers == 0
        ds = pt.TokenDataset(prefix, plan=sampler, pin_memory=in_dataset)
        loader = ds.loader(sampler, num_workers=workers, pin_memory=cuda and workers > 0)
        nbytes = batches = 0
        t0 = time.perf_counter()
        epoch = 0
        while time.perf_counter() - t0 < per and epoch < 50:
            sampler.set_epoch(epoch)
            for batch in loader:
                for v in batch.values():
                    if isinstance(v, torch.Tensor):
                        nbytes += v.numel() * v.element_size()
                        if cuda:
                            v.to(device, non_blocking=True)
                batches += 1
                if time.perf_counter() - t0 > per:
                    break
            epoch += 1
        sync(device)
        seconds = time.perf_counter() - t0
        rows.append(
            {
                "workers": workers,
                "pinned_by": "TokenDataset" if in_dataset else ("DataLoader" if cuda else "none"),
                "batches": batches,
                "bytes_per_batch": nbytes / max(batches, 1),
                "gb_per_s": nbytes / seconds / 1e9,
            }
        )
    out: dict[str, Any] = {
        "status": "ok",
        "corpus": {"docs": setup.io_docs, "tokens": int(lengths.sum()), "dtype": "uint16"},
        "batch": f"PackingSampler capacity {setup.io_capacity}, 4 rows; int64 tensors",
        "loaders": rows,
    }
    if not cuda:
        out["copy"] = f"{SKIP_CUDA}: pinned host-to-device copy (the loader ran on the host only)"
        out["skipped"] = ["pinned host-to-device copy, 2 and 4 workers"]
        return out
    size = int(rows[0]["bytes_per_batch"])
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True).random_()
    dev = torch.empty(size, dtype=torch.uint8, device=device)
    for _ in range(5):
        dev.copy_(host, non_blocking=True)
    sync(device)
    reps = 200
    t0 = time.perf_counter()
    for _ in range(reps):
        dev.copy_(host, non_blocking=True)
    sync(device)
    bound = size * reps / (time.perf_counter() - t0) / 1e9
    out["copy_bound_gb_per_s"] = bound
    for r in rows:
        r["of_bound"] = r["gb_per_s"] / bound
    return out


def table_to_gpu(r: dict) -> list[str]:
    lines = [f"{r['corpus']['tokens']:,} tokens; {r['batch']}"]
    bound = r.get("copy_bound_gb_per_s")
    for row in r["loaders"]:
        share = f" ({row['of_bound']:.0%} of bound)" if "of_bound" in row else ""
        lines.append(
            f"  {row['workers']} workers, pinned by {row['pinned_by']:<11}"
            f"{row['gb_per_s']:>7.2f} GB/s{share}"
        )
    if bound is not None:
        lines.append(f"  bound: pinned host-to-device copy of one batch  {bound:.2f} GB/s")
    return lines


# --------------------------------------------------------------------------- 4. memory


def section_memory(setup: Setup, device: torch.device, dl: Deadline, ctx: dict[str, Any]) -> dict:
    torch.manual_seed(0)
    model = Decoder(setup.model).to(device)
    vocab = setup.model.vocab_size

    def make(size: int, length: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(1, vocab, (size, length), device=device)
        return {"input_ids": ids, "labels": ids}

    def step(batch: dict[str, torch.Tensor]) -> None:
        model.zero_grad(set_to_none=True)
        with autocast(device):
            step_loss(model, batch).backward()

    cap = 256 if device.type == "cuda" else 32
    probe = pt.probe_memory(
        step,
        make,
        list(setup.probe_grid),
        device=device,
        limit=setup.probe_limit,
        max_batch_size=cap,
        tolerance=0.1,
    )
    largest = dict((lens, size) for size, lens in probe.largest)
    checks = []
    grid = list(setup.probe_grid)
    held = [(a + b) // 2 for a, b in zip(grid[:-1], grid[1:], strict=True)] + [grid[-1] * 5 // 4]
    for i, length in enumerate(held):
        size = max(1, largest[grid[min(i + 1, len(grid) - 1)]] // 2)
        predicted = probe.model.predict(size, length)
        measured = pt.measure_peak(step, make(size, length), device=device)
        checks.append(
            {
                "batch_size": size,
                "length": length,
                "predicted_bytes": predicted,
                "measured_bytes": measured,
                "error": None if not measured else predicted / measured - 1,
            }
        )
    return {
        "status": "ok",
        "path": "CUDA (max_memory_allocated)" if device.type == "cuda" else "CPU (dry run)",
        "grid": grid,
        "limit": setup.probe_limit,
        "probes": len(probe.points),
        "largest": [{"length": lens, "batch_size": size} for size, lens in probe.largest],
        "held_out": checks,
        "skipped": [] if device.type == "cuda" else ["the CUDA path (ran the CPU path)"],
    }


def table_memory(r: dict) -> list[str]:
    found = ", ".join(f"{x['batch_size']}x{x['length']}" for x in r["largest"])
    lines = [
        f"{r['path']}: {r['probes']} probes, limit {r['limit']}; largest fitting: {found}",
        f"  {'held-out shape':<16}{'predicted':>14}{'measured':>14}{'error':>9}",
    ]
    for c in r["held_out"]:
        shape = f"{c['batch_size']}x{c['length']}"
        meas = "-" if c["measured_bytes"] is None else f"{c['measured_bytes'] / 2**20:,.1f} MiB"
        err = "-" if c["error"] is None else f"{c['error']:+.1%}"
        lines.append(f"  {shape:<16}{c['predicted_bytes'] / 2**20:>10,.1f} MiB{meas:>14}{err:>9}")
    return lines


# --------------------------------------------------------------------------- 5. static shapes


class CountingBackend:
    """A torch.compile backend that counts the graphs it is given (one per compile)."""

    def __init__(self, inner: str) -> None:
        self.inner, self.count = inner, 0

    def __call__(self, gm: torch.fx.GraphModule, inputs: list[Any]) -> Callable[..., Any]:
        self.count += 1
        if self.inner == "eager":
            return gm.forward
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, inputs)


def run_compiled(
    setup: Setup,
    device: torch.device,
    batches: Iterator[dict[str, Any]],
    dynamic: bool | None,
    backend_name: str,
    seconds: float,
) -> dict[str, Any]:
    import torch._dynamo

    torch._dynamo.reset()
    torch.manual_seed(0)
    config = Config(**{**asdict(setup.model), "layers": setup.compile_layers})
    model = Decoder(config).to(device)
    backend = CountingBackend(backend_name)
    for block in model.blocks:  # regional compilation: the blocks share one compiled code
        block.compile(backend=backend, dynamic=dynamic)
    opt = torch.optim.AdamW(model.parameters(), lr=setup.lr)
    shapes = set()
    steady_tokens = 0
    steady_time = total = 0.0
    steps = 0
    t_end = time.perf_counter() + seconds
    with autocast(device):
        for host in batches:
            batch = to_device(host, device)
            before = backend.count
            sync(device)
            t0 = time.perf_counter()
            step_loss(model, batch).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync(device)
            dt = time.perf_counter() - t0
            total += dt
            steps += 1
            shapes.add(tuple(batch["input_ids"].shape))
            if backend.count == before:
                steady_time += dt
                steady_tokens += int((host["labels"] != -100).sum())
            if time.perf_counter() > t_end:
                break
    return {
        "steps": steps,
        "distinct_shapes": len(shapes),
        "compiles": backend.count,
        "seconds": total,
        "steady_tokens_per_s": steady_tokens / steady_time if steady_time else None,
    }


def section_shapes(setup: Setup, device: torch.device, dl: Deadline, ctx: dict[str, Any]) -> dict:
    lengths, seqs = ctx.get("lengths"), ctx.get("seqs")
    if lengths is None:
        lengths, seqs = corpus(setup, setup.batch_size * setup.steps, seed=0)
    cuda = device.type == "cuda"
    backend = "inductor" if cuda else "eager"
    shapes = padless.shape_set(lengths, setup.compile_shapes, max_tokens=setup.compile_tokens)
    fixed = padless.PlanSampler(lengths, padless.FixedShapes(shapes=shapes), seed=0)
    collate = pt.collate_for(fixed, pad_id=0)

    def fixed_batches() -> Iterator[dict[str, Any]]:
        for plan in fixed:
            b = collate([seqs[i] for i in plan])
            ids = b["input_ids"]
            labels = ids.masked_fill(b["attention_mask"] == 0, -100)
            yield {"input_ids": ids, "labels": labels}

    budget = padless.TokenBudgetSampler(lengths, max_tokens=setup.compile_tokens, seed=0)

    def budget_batches() -> Iterator[dict[str, Any]]:
        for plan in budget:
            yield padded([seqs[i] for i in plan])

    half = max(dl.left() / 2, 1.0)
    static = run_compiled(setup, device, fixed_batches(), False, backend, half)
    dynamic = run_compiled(setup, device, budget_batches(), None, backend, max(dl.left(), 1.0))
    return {
        "status": "ok",
        "backend": backend + ("" if cuda else " (dry run: dynamo traces, nothing is compiled)"),
        "compiled": f"each of {setup.compile_layers} decoder blocks (regional), fwd + bwd",
        "shapes": [list(s) for s in shapes],
        "epoch_batches": len(fixed),
        "expected_compiles": len(shapes),
        "fixed_shapes": static,
        "token_budget_dynamic": dynamic,
        "skipped": [] if cuda else ["inductor compiles (dynamo traced, eager backend)"],
    }


def table_shapes(r: dict) -> list[str]:
    lines = [
        f"backend {r['backend']}; {r['compiled']}",
        f"FixedShapes {r['shapes']} (expected compiles {r['expected_compiles']})",
        f"  {'batches':<26}{'steps':>6}{'shapes':>7}{'compiles':>9}{'tok/s':>12}{'secs':>8}",
    ]
    for name, key in (
        ("FixedShapes, static", "fixed_shapes"),
        ("token budget, dynamic", "token_budget_dynamic"),
    ):
        x = r[key]
        rate = "-" if x["steady_tokens_per_s"] is None else f"{x['steady_tokens_per_s']:,.0f}"
        lines.append(
            f"  {name:<26}{x['steps']:>6}{x['distinct_shapes']:>7}{x['compiles']:>9}"
            f"{rate:>12}{x['seconds']:>8.1f}"
        )
    lines.append("  tok/s: real tokens over the steps that compiled nothing")
    return lines


# --------------------------------------------------------------------------- main

# --------------------------------------------------------------------------- 6. calibration


def section_calibrate(
    setup: Setup, device: torch.device, dl: Deadline, ctx: dict[str, Any]
) -> dict:
    """Issue 43's cost model fitted on this device: forward and backward of the section-1 model
    (bf16) timed on one row of each length, ``a·L + b·L² + c`` per pass fitted
    (``padless.torch.calibrate_cost``), its error on held-out lengths."""
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32  # bf16 matmuls crawl on a CPU
    model = Decoder(setup.model).to(device=device, dtype=dtype)
    vocab = setup.model.vocab_size

    def make_batch(n: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(1, vocab, (1, n), device=device)
        return {"input_ids": ids, "labels": ids.clone()}

    def forward(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        return step_loss(model, batch)

    cal = pt.calibrate_cost(
        forward,
        make_batch,
        list(setup.calibrate_lengths),
        holdout=list(setup.calibrate_holdout),
        repeats=5 if cuda else 2,
        warmup=2 if cuda else 1,
        agree=0.03 if cuda else None,
        device=device,
    )
    fwd, bwd = cal.cost.forward, cal.cost.backward
    return {
        "status": "ok",
        "model": f"{parameters_m(model):.1f}M parameters, {str(dtype)[6:]}, one row per length",
        "forward": {
            "linear": fwd.linear,
            "quadratic": fwd.quadratic,
            "per_sequence": fwd.per_sequence,
        },
        "backward": {
            "linear": bwd.linear,
            "quadratic": bwd.quadratic,
            "per_sequence": bwd.per_sequence,
        },
        "points": [list(p) for p in cal.points],
        "heldout": [list(h) for h in cal.heldout],
        "max_error": cal.error,
        "skipped": [] if cuda else ["the device's timings (CPU seconds in a dry run)"],
    }


def table_calibrate(r: dict) -> list[str]:
    lines = [f"{r['model']}; fitted a·L + b·L² + c per pass (padless.torch.calibrate_cost)"]
    lines.append(f"  {'held-out length':>16} {'measured ms':>12} {'predicted ms':>13} {'error':>7}")
    for length, measured, predicted in r["heldout"]:
        err = abs(predicted - measured) / measured
        lines.append(
            f"  {length:>16,} {measured * 1e3:>12.2f} {predicted * 1e3:>13.2f} {err:>7.1%}"
        )
    lines.append(f"  largest held-out error {r['max_error']:.1%}")
    return lines


SECTIONS: dict[str, tuple[str, Callable[..., dict], Callable[[dict], list[str]]]] = {
    "train": ("1. Training throughput", section_train, table_train),
    "packed": ("2. Packed attention kept apart (check_packed)", section_packed, table_packed),
    "to_gpu": ("3. Batches to the GPU (TokenDataset, pinned)", section_to_gpu, table_to_gpu),
    "memory": ("4. Memory (probe_memory)", section_memory, table_memory),
    "shapes": ("5. Static shapes (torch.compile)", section_shapes, table_shapes),
    "calibrate": (
        "6. Cost model fitted on the device (placement)",
        section_calibrate,
        table_calibrate,
    ),
}


def fit(line: str) -> list[str]:
    return textwrap.wrap(line, WIDTH, subsequent_indent="    ") or [""]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny model, few steps")
    p.add_argument("--only", nargs="*", choices=list(SECTIONS), help="run these sections only")
    p.add_argument("--out", help="JSON path (default $OUT/gpu_bench.json or benchmarks/results)")
    args = p.parse_args()

    started = time.perf_counter()
    cuda = torch.cuda.is_available() and not args.dry_run
    device = torch.device("cuda" if cuda else "cpu")
    setup = GPU if cuda else DRY
    if not cuda:
        torch.set_num_threads(min(2, os.cpu_count() or 1))
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
    card = torch.cuda.get_device_name(device) if cuda else f"CPU ({platform.machine()})"
    header = {
        "device": card,
        "date": time.strftime("%Y-%m-%d"),
        "dry_run": not cuda,
        "torch": torch.__version__,
        "padless": padless.__version__,
        "python": platform.python_version(),
    }
    if not cuda and not args.dry_run:
        header["note"] = "no CUDA device: ran the dry-run sizes on the CPU"
    report: dict[str, Any] = {**header, "sections": {}}
    lines = [
        "padless on a GPU: benchmarks/gpu/run.sh" + (" --dry-run" if args.dry_run else ""),
        f"device {card}; torch {torch.__version__}; padless {padless.__version__}; "
        f"{header['date']}",
    ]
    ctx: dict[str, Any] = {}
    for key, (title, run, table) in SECTIONS.items():
        lines += ["", "=" * WIDTH, title, "-" * WIDTH]
        if args.only and key not in args.only:
            report["sections"][key] = {"status": "skipped: not in --only"}
            lines.append("skipped (not in --only)")
            continue
        t0 = time.perf_counter()
        print(f"[{t0 - started:6.1f}s] {title} ...", file=sys.stderr, flush=True)
        left = setup.total - (t0 - started)
        if left < 15:
            report["sections"][key] = {"status": "skipped: out of time"}
            lines.append(f"skipped: out of time ({setup.total:.0f} s for all sections)")
            continue
        try:
            result = run(setup, device, Deadline(min(setup.budget[key], left)), ctx)
            body = table(result)
        except Exception as exc:  # noqa: BLE001 - one section's failure must not stop the rest
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            result = {"status": f"failed: {reason}", "traceback": traceback.format_exc()}
            body = [f"failed: {reason}"]
            traceback.print_exc(file=sys.stderr)
        result["seconds"] = round(time.perf_counter() - t0, 2)
        report["sections"][key] = result
        for line in body:
            lines += fit(line)
        lines.append(f"({result['seconds']:.1f} s)")
        for part in result.get("skipped", []):
            lines += fit(f"section {title[0]}: skipped (needs CUDA): {part}")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    total = time.perf_counter() - started
    report["seconds"] = round(total, 2)
    lines += ["", f"total {total:.1f} s"]
    out_dir = os.environ.get("OUT")
    path = (
        Path(args.out)
        if args.out
        else (
            Path(out_dir) / "gpu_bench.json"
            if out_dir
            else HERE.parent / "results" / "gpu_bench.json"
        )
    )
    report["table"] = [ln for line in lines for ln in fit(line)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print("\n".join(report["table"]))
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
