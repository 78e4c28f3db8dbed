"""Memory models (issue 29): predicted against measured peak memory of a conformer-like model.

Run: .venv/bin/python benchmarks/bench_memory.py [--device auto|cpu|cuda] [--limit 256MiB]
     [--tolerance 0.1] [--malloc steady|default] [--threads 1] [--save memory.json] [--quick]

A conformer-like ASR model (conv subsampling ×4, ``--blocks`` conformer blocks of d=144 with
dense self-attention — scores as a tensor, as relative-position attention computes them — and
a depthwise conv module, a linear CTC head over 128 tokens; one Adam step) on batches of
``(B, frames, text tokens)``: 80-dim features of ``frames`` 10 ms frames, CTC targets of
``text tokens``.

1. ``padless.torch.probe_memory`` probes 6 shapes (frames 200..1200, text 20..120, each field
   varied apart from the other) up to ``--limit`` and fits a ``MemoryModel``
   (``fixed + B·(per_sequence + linear·l + quadratic·l²)`` per field).
2. On 6 held-out shapes (one beyond the grid: 1600 frames) at the batch size the model gives
   for the limit and at half of it, one measured step each: predicted against measured peak,
   and the largest relative error (goal <= 10%). Also whether each table entry's measured
   peak is within the limit.

On the CPU the figure is what a step adds to the process's resident memory (see
``padless.torch._probe``); ``--malloc steady`` (the default) re-runs the script with
``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=65536``, which keeps glibc from holding memory
freed within a step; ``--malloc default`` measures glibc as it comes (the same step measures
up to a third apart from run to run). On CUDA the figure is ``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from padless.core.memory import as_bytes
from padless.torch import measure_peak, probe_memory

GRID = [(200, 20), (400, 60), (600, 100), (800, 40), (1000, 30), (1200, 120)]
HELD_OUT = [(300, 40), (500, 25), (700, 90), (900, 60), (1100, 100), (1600, 140)]
STEADY = "glibc.malloc.mmap_threshold=65536"
MELS, VOCAB = 80, 128


class FeedForward(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.5 * self.net(x)


class SelfAttention(nn.Module):
    """Dense attention: the scores are a (B, heads, T, T) tensor, saved for backward."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads, self.norm = heads, nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        mixed = scores.softmax(-1) @ v
        return x + self.out(mixed.transpose(1, 2).reshape(b, t, d))


class ConvModule(nn.Module):
    def __init__(self, d: int, kernel: int = 15) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pointwise = nn.Conv1d(d, 2 * d, 1)
        self.depthwise = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.batch_norm = nn.BatchNorm1d(d)
        self.back = nn.Conv1d(d, d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.glu(self.pointwise(self.norm(x).transpose(1, 2)), dim=1)
        y = self.back(F.silu(self.batch_norm(self.depthwise(y))))
        return x + y.transpose(1, 2)


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.parts = nn.Sequential(
            FeedForward(d), SelfAttention(d, heads), ConvModule(d), FeedForward(d), nn.LayerNorm(d)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.parts(x)


class ConformerLike(nn.Module):
    def __init__(self, d: int = 144, heads: int = 4, blocks: int = 4) -> None:
        super().__init__()
        self.subsample = nn.Sequential(
            nn.Conv2d(1, d, 3, stride=2), nn.ReLU(), nn.Conv2d(d, d, 3, stride=2), nn.ReLU()
        )
        freq = ((MELS - 1) // 2 - 1) // 2
        self.project = nn.Linear(d * freq, d)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(blocks)))
        self.head = nn.Linear(d, VOCAB)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.subsample(features.unsqueeze(1))  # (B, d, T/4, F/4)
        b, c, t, f = x.shape
        x = self.project(x.transpose(1, 2).reshape(b, t, c * f))
        return self.head(self.blocks(x)).log_softmax(-1)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--limit", default=None, help="step budget (default: 256MiB CPU, 16GiB CUDA)")
    p.add_argument("--tolerance", type=float, default=0.1, help="probe bisection tolerance")
    p.add_argument("--malloc", default="steady", choices=["steady", "default"])
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--save", default=None, help="write the fitted MemoryModel (JSON) here")
    p.add_argument("--quick", action="store_true", help="a small limit, for a smoke run")
    return p.parse_args()


def main() -> None:
    args = parse()
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if cuda else "cpu")
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if not cuda and args.malloc == "steady" and STEADY not in tunables:
        env = {**os.environ, "GLIBC_TUNABLES": f"{tunables}:{STEADY}" if tunables else STEADY}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    limit = args.limit or ("16GiB" if cuda else ("64MiB" if args.quick else "256MiB"))
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = ConformerLike(blocks=args.blocks).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        features, targets = batch
        opt.zero_grad(set_to_none=True)
        log_probs = model(features)
        b, t = log_probs.shape[:2]
        loss = F.ctc_loss(
            log_probs.transpose(0, 1),
            targets,
            torch.full((b,), t, dtype=torch.long),
            torch.full((b,), targets.shape[1], dtype=torch.long),
            zero_infinity=True,
        )
        loss.backward()
        opt.step()

    def make_batch(size: int, lengths: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        frames, tokens = lengths
        features = torch.randn(size, frames, MELS, device=device)
        return features, torch.randint(1, VOCAB, (size, tokens), device=device)

    where = f"{device} {torch.cuda.get_device_name(device)}" if cuda else "cpu"
    malloc = "" if cuda else f", glibc malloc {args.malloc} (GLIBC_TUNABLES={tunables or '-'})"
    print(f"# device {where}, torch {torch.__version__}, {args.threads} thread(s){malloc}")
    print(
        f"# conformer-like: d=144, 4 heads, {args.blocks} blocks, {sum(p.numel() for p in model.parameters())} weights; limit {limit}"
    )
    t0 = time.perf_counter()
    probe = probe_memory(
        step, make_batch, GRID, device=device, limit=limit, tolerance=args.tolerance
    )
    seconds = time.perf_counter() - t0
    fit = probe.model
    mib = 2.0**20
    print(f"\n## probe: {len(probe.points)} steps on {len(GRID)} shapes in {seconds:.1f} s")
    print(
        "largest fitting batch per shape (measured): "
        + ", ".join(f"{b}@{lens}" for b, lens in probe.largest)
    )
    print(
        f"fit: fixed {fit.fixed / mib:.2f} MiB, per sequence {fit.per_sequence / 1024:.1f} KiB, "
        f"linear {[f'{v / 1024:.2f}' for v in fit.linear]} KiB/token, "
        f"quadratic {[f'{v:.2f}' for v in fit.quadratic]} B/token² (frames, text)"
    )
    residual = max(abs(fit.predict(b, lens) - y) / y for b, lens, y in probe.points if y)
    print(f"largest relative residual on the fitted points: {residual:.1%}")
    if args.save:
        fit.save(args.save)
        print(f"saved {args.save}")

    print("\n## held-out shapes: predicted vs measured peak")
    print(
        f"{'B':>4} {'frames':>6} {'text':>5} {'predicted MiB':>14} {'measured MiB':>13} {'error':>7}  within limit"
    )
    top = as_bytes(limit)
    worst, over = 0.0, 0
    table = fit.table(HELD_OUT, limit)
    for size, lens in table:
        for b in sorted({size, max(1, size // 2)}, reverse=True):
            measured = measure_peak(step, make_batch(b, lens), device=device)
            if measured is None:
                print(f"{b:>4} {lens[0]:>6} {lens[1]:>5}  out of memory")
                over += 1
                continue
            predicted = fit.predict(b, lens)
            error = (predicted - measured) / measured
            worst = max(worst, abs(error))
            fits = measured <= top
            over += b == size and not fits
            print(
                f"{b:>4} {lens[0]:>6} {lens[1]:>5} {predicted / mib:>14.2f} {measured / mib:>13.2f} "
                f"{error:>+7.1%}  {'yes' if fits else 'NO'}{'  (table)' if b == size else ''}"
            )
    goal = "met" if worst <= 0.10 else "NOT met"
    print(
        f"\nmax relative error on held-out shapes: {worst:.1%} (goal <= 10%: {goal}); table entries over the limit: {over}"
    )


if __name__ == "__main__":
    main()
