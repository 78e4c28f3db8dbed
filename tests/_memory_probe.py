"""Probe a small attention model's step memory on the CPU; print the fit and held-out figures.

Run by tests/test_memory.py in a fresh process with ``GLIBC_TUNABLES=glibc.malloc.mmap_threshold
=65536`` (steady resident figures, see ``padless.torch._probe``): ``python _memory_probe.py
LIMIT_BYTES`` prints one JSON object: the fitted model's dict, the probe's largest batch sizes,
and for each held-out length the model's batch size at the limit with its measured peak.
"""

from __future__ import annotations

import json
import sys

import torch
from torch import nn

from padless.torch import measure_peak, probe_memory

GRID = [48, 128, 320]
HELD_OUT = [80, 200, 400]
D, HEADS = 32, 2


def main(limit: int) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    embed, qkv = nn.Linear(8, D), nn.Linear(D, 3 * D)
    mlp = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))
    head = nn.Linear(D, 8)
    weights = [p for m in (embed, qkv, mlp, head) for p in m.parameters()]

    def step(x: torch.Tensor) -> None:
        for w in weights:
            w.grad = None
        h = embed(x)
        b, t, _ = h.shape
        q, k, v = qkv(h).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        mixed = (q @ k.transpose(-1, -2) * 0.25).softmax(-1) @ v  # dense scores: B·H·T² floats
        h = h + mixed.transpose(1, 2).reshape(b, t, D)
        head(h + mlp(h)).logsumexp(-1).mean().backward()

    def make_batch(size: int, length: int) -> torch.Tensor:
        return torch.randn(size, length, 8)

    probe = probe_memory(step, make_batch, GRID, device="cpu", limit=limit, tolerance=0.25)
    held = []
    for length in HELD_OUT:
        size = probe.model.batch_size(length, limit)
        held.append([size, length, measure_peak(step, make_batch(size, length), device="cpu")])
    out = {"model": probe.model.as_dict(), "largest": probe.largest, "held_out": held}
    print(json.dumps(out))


if __name__ == "__main__":
    main(int(sys.argv[1]))
