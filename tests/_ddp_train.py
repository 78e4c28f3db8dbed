"""Train a tiny model for one epoch under DistributedDataParallel (gloo, CPU) with padless.

Run by tests/test_torch.py in a subprocess: python _ddp_train.py WORLD DROP_LAST INIT_FILE
Each rank writes INIT_FILE.rank<r>.json: {"rank": r, "steps": n, "len": len(sampler), "sum": …}.
"""

import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from padless import TokenBudgetSampler
from padless.torch import collate_padded, dist_kwargs


class Tokens(torch.utils.data.Dataset):
    def __init__(self, lengths):
        rs = np.random.default_rng(0)
        self.rows = [rs.integers(1, 100, n) for n in lengths]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(100, 8)
        self.out = torch.nn.Linear(8, 1)

    def forward(self, ids, mask):
        h = (self.emb(ids) * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        return self.out(h).squeeze(-1)


def worker(rank, world, drop_last, init_file):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    # skewed lengths: many short, a few very long
    lengths = np.concatenate([np.full(150, 3), np.full(20, 60), [200, 250, 256]])
    sampler = TokenBudgetSampler(lengths, max_tokens=256, drop_last=drop_last, **dist_kwargs())
    loader = torch.utils.data.DataLoader(
        Tokens(lengths), batch_sampler=sampler, collate_fn=collate_padded(0)
    )
    model = DDP(Tiny())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 0
    for batch in loader:
        loss = model(batch["input_ids"], batch["attention_mask"]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
    total = torch.tensor([steps])
    dist.all_reduce(total)
    result = {"rank": rank, "steps": steps, "len": len(sampler), "sum": int(total)}
    with open(f"{init_file}.rank{rank}.json", "w") as fh:
        json.dump(result, fh)
    dist.barrier()  # nobody tears the group down while a peer still talks to it
    dist.destroy_process_group()
    # leave without the interpreter's teardown: a reader's or numba's thread torn down at exit
    # can abort the process after its results are written ("terminate called without an active
    # exception", seen once under a loaded CI); the test checks the results, not the teardown
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    world, drop_last, init_file = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3]
    mp.spawn(worker, args=(world, drop_last, init_file), nprocs=world, join=True)
