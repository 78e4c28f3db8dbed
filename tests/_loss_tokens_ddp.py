"""2 processes (gloo, CPU, float64), accumulation 2: the DDP gradient of summed losses scaled by
``padless.torch.scale_loss(loss_sum, step_total)`` equals the gradient of the mean loss over every
real target of the global step, computed as one big batch in one process.

Run by tests/test_loss_tokens.py: ``python _loss_tokens_ddp.py OUT`` (forks 2 workers).
Each rank writes OUT/rank<r>.json with, per batch kind (padded, packed), the optimizer steps
checked, the largest gradient difference and the token counts it saw.
"""

import contextlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import padless
from padless.torch import collate_padded, scale_loss

VOCAB = 23
ACCUMULATION = 2


class Causal(nn.Module):
    """Position t sees the running mean of the embeddings up to t (causal, no attention)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 6)
        self.mix = nn.Linear(6, 6)
        self.out = nn.Linear(6, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids)
        steps = torch.arange(1, ids.shape[1] + 1, dtype=h.dtype)[None, :, None]
        return self.out(torch.tanh(self.mix(h.cumsum(1) / steps)))


def padded_collate(items):
    """collate_padded, then labels: the tokens, ignored on padding and at sequence starts."""
    out = collate_padded(0)(items)
    labels = out["input_ids"].clone()
    labels[out["attention_mask"] == 0] = -100
    labels[:, 0] = -100
    return {"input_ids": out["input_ids"], "labels": labels}


def summed_loss(model, batch):
    """Next-token cross-entropy summed over real targets, and their count."""
    logits = model(batch["input_ids"])[:, :-1]
    labels = batch["labels"][:, 1:]
    loss = F.cross_entropy(
        logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100, reduction="sum"
    )
    return loss, int((labels != -100).sum())


def pad_to(t: torch.Tensor, width: int, value: int) -> torch.Tensor:
    return F.pad(t, (0, width - t.shape[1]), value=value)


def run(kind: str, rank: int, world: int) -> dict:
    rs = np.random.default_rng(5)
    lengths = rs.integers(2, 30, 52)
    data = [rs.integers(0, VOCAB, n) for n in lengths]

    def sampler_of(r: int):
        if kind == "padded":
            return padless.TokenBudgetSampler(
                lengths, max_tokens=90, seed=1, rank=r, world_size=world
            )
        return padless.PackingSampler(
            lengths, capacity=40, rows_per_batch=2, seed=1, rank=r, world_size=world
        )

    def batches_of(r: int) -> list[dict]:
        from padless.torch import collate_for

        s = sampler_of(r)
        collate = padded_collate if kind == "padded" else collate_for(s)
        return [collate([data[i] for i in b]) for b in s]

    sampler = sampler_of(rank)
    mine = batches_of(rank)
    everyone = [batches_of(r) for r in range(world)]  # for the one-process reference
    torch.manual_seed(0)
    model = Causal().double()
    reference = Causal().double()
    reference.load_state_dict(model.state_dict())
    ddp = DDP(model)
    steps = -(-len(mine) // ACCUMULATION)
    worst, naive_gap, seen_totals = 0.0, 0.0, []
    for step in range(steps):
        total, counts = sampler.loss_tokens(step, accumulation=ACCUMULATION)
        micro = mine[step * ACCUMULATION : (step + 1) * ACCUMULATION]
        assert len(micro) == len(counts), (len(micro), counts)
        ddp.zero_grad()
        local = 0
        for k, batch in enumerate(micro):
            sync = k == len(micro) - 1
            with contextlib.nullcontext() if sync else ddp.no_sync():
                loss, count = summed_loss(ddp, batch)
                assert count == counts[k], (kind, step, k, count, counts)
                local += count
                scale_loss(loss, total).backward()
        counted = torch.tensor([local])
        dist.all_reduce(counted)
        assert int(counted) == total, (kind, step, int(counted), total)
        seen_totals.append(total)
        got = [p.grad.detach().clone() for p in ddp.module.parameters()]

        # the global step as one big batch: every rank's micro-batches, rows side by side
        parts = [
            b
            for r in range(world)
            for b in everyone[r][step * ACCUMULATION : (step + 1) * ACCUMULATION]
        ]
        width = max(b["input_ids"].shape[1] for b in parts)
        ids = torch.cat([pad_to(b["input_ids"], width, 0) for b in parts])
        labels = torch.cat([pad_to(b["labels"], width, -100) for b in parts])
        reference.zero_grad()
        loss, count = summed_loss(reference, {"input_ids": ids, "labels": labels})
        assert count == total
        (loss / count).backward()
        exact = [p.grad.detach().clone() for p in reference.parameters()]
        for g, e in zip(got, exact, strict=True):
            worst = max(worst, float((g - e).abs().max()))
        # the usual normalisation, each micro-batch divided by its own count, is biased
        reference.zero_grad()
        naive = sum(summed_loss(reference, b)[0] / summed_loss(reference, b)[1] for b in parts)
        (naive / len(parts)).backward()
        for p, e in zip(reference.parameters(), exact, strict=True):
            naive_gap = max(naive_gap, float((p.grad - e).abs().max()))
    return {"steps": steps, "worst": worst, "naive_gap": naive_gap, "totals": seen_totals}


def worker(rank: int, world: int, out: Path) -> None:
    dist.init_process_group(
        "gloo", init_method=f"file://{out / 'init'}", rank=rank, world_size=world
    )
    torch.set_num_threads(1)
    result = {"rank": rank, "world": world}
    for kind in ("padded", "packed"):
        result[kind] = run(kind, rank, world)
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()
    # leave without the interpreter's teardown: a reader's or numba's thread torn down at exit
    # can abort the process after its results are written ("terminate called without an active
    # exception", seen once under a loaded CI); the test checks the results, not the teardown
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    target = Path(sys.argv[1])
    # fork: the workers share this process's imports (torch, padless, compiled kernels)
    torch.multiprocessing.start_processes(
        worker, args=(2, target), nprocs=2, join=True, start_method="fork"
    )
