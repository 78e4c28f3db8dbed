"""Two ranks (gloo, CPU) train a tiny model under DDP on a StreamDataset over unequal shards.

Run by tests/test_streams_torch.py in a subprocess: python _stream_ddp.py DATA_DIR EVERY OUT_PREFIX
DATA_DIR holds Parquet files (an even number, of unequal sizes, so split_dataset_by_node gives
each rank whole files). The ranks train one epoch with stop_together(every=1), then one with
stop_together(every=EVERY). Each rank writes OUT_PREFIX.rank<r>.json: the batches its loader has
alone ("raw"), and per run the steps it trained, the all_reduced sum of steps, the batches it
pulled but did not deliver, and (every=1) the ids it trained on.
"""

import glob
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from padless import TokenBudget
from padless.torch import StreamDataset, stop_together


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(100, 4)
        self.out = torch.nn.Linear(4, 1)

    def forward(self, ids, mask):
        h = (self.emb(ids) * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        return self.out(h).squeeze(-1)


def tokens(x):
    return len(x["input_ids"])


class Collate:
    """Ids and padded tensors (a class, so spawned DataLoader workers can unpickle it)."""

    def __init__(self, pad):
        self.pad = pad

    def __call__(self, batch):
        return [x["id"] for x in batch], self.pad(batch)


def worker(rank, world, data_dir, every_arg, prefix, init_file):
    import datasets

    from padless.torch import collate_for

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    files = sorted(glob.glob(os.path.join(data_dir, "*.parquet")))
    ds = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
    stream = StreamDataset(ds, TokenBudget(max_tokens=256), buffer=40, length=tokens)
    collate = Collate(collate_for(stream, pad_id=0, fields=["input_ids"]))
    loader = torch.utils.data.DataLoader(stream, batch_size=None, num_workers=0, collate_fn=collate)
    raw = sum(1 for _ in loader)  # this rank's batches on its own: differ between the ranks
    model = DDP(Tiny())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = {"rank": rank, "raw": raw, "steps": {}, "sum": {}, "left_over": {}, "ids": []}
    for every in (1, int(every_arg)):
        together = stop_together(loader, every=every)
        steps = 0
        for batch_ids, batch in together:
            loss = model(batch["input_ids"], batch["input_ids_mask"]).pow(2).mean()
            opt.zero_grad()
            loss.backward()  # DDP all-reduces gradients: a rank with a step more would hang
            opt.step()
            if every == 1:
                out["ids"] += batch_ids
            steps += 1
        total = torch.tensor([steps])
        dist.all_reduce(total)
        out["steps"][str(every)] = steps
        out["sum"][str(every)] = int(total)
        out["left_over"][str(every)] = together.left_over
    with open(f"{prefix}.rank{rank}.json", "w") as fh:
        json.dump(out, fh)
    dist.barrier()
    dist.destroy_process_group()
    # leave without the interpreter's teardown: a reader's or numba's thread torn down at exit
    # can abort the process after its results are written ("terminate called without an active
    # exception", seen once under a loaded CI); the test checks the results, not the teardown
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    data_dir, every, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    mp.spawn(worker, args=(2, data_dir, every, prefix, prefix + ".init"), nprocs=2, join=True)
