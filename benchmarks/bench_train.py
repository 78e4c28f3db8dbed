"""Training speed-up, measured: the same small transformer trained with torch on the same data for the
same number of optimizer steps, with four ways of making batches:

(a) random batches of 16 sequences, padded to the longest (where users start);
(b) HF ``group_by_length``: transformers' ``LengthGroupedSampler``, batches of 16;
(c) padless ``TokenBudgetSampler``: a token budget tuned to give the same number of steps;
(d) padless ``PackingSampler``: one packed row per step, no padding at all, and an exact
    block-diagonal attention (each sequence attends only to itself): nested jagged tensors
    with ``scaled_dot_product_attention`` by default, a loop over sequences, or flash-attn's
    varlen kernel on a GPU where it is installed.

The model is a pre-LN transformer encoder trained with masked-language modelling (15% of
positions, fixed per token, so every strategy sees the same targets) on a synthetic corpus with
learnable structure (a sparse Markov chain), with lognormal lengths (median 100, sigma 0.6)
clipped to [4, 512]: long-tailed, random batches of 16 are about 60% padding. Each strategy
takes the same number of steps S (one epoch of random batches of 16); (c) and (d) are tuned to
plan S batches for the same epoch. All four models start from the same weights and train
round-robin, one step each in turn, so load on a shared machine falls on all of them alike.

Reported per strategy: real (non-pad) tokens per second over the timed steps (all but the first
``--warmup``), the ratio to (a), the padding share of its batches, and the held-out MLM loss after
S steps (same data, same steps: the losses should agree within noise). The bound: if the cost of a
step followed its padded tokens, nothing could beat 1 / (1 - p), p the padding share of (a);
"of bound" is each ratio divided by it.

Run: .venv/bin/python benchmarks/bench_train.py [--n 1920] [--device cpu|cuda] [--attn grouped]
     [--threads 1] [--out results.md]
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import padless
from padless import PackingSampler, TokenBudgetSampler

# --------------------------------------------------------------------------- data


def corpus_lengths(n: int, seed: int) -> np.ndarray:
    """Lognormal lengths, median 100, sigma 0.6, clipped to [4, 512]."""
    rs = np.random.default_rng(seed)
    return np.clip(np.round(rs.lognormal(np.log(100.0), 0.6, n)), 4, 512).astype(np.int64)


def markov_tokens(lengths: np.ndarray, vocab: int, seed: int) -> list[np.ndarray]:
    """Token sequences from a sparse Markov chain: each token has 4 successors (p .7/.15/.1/.05)."""
    rs = np.random.default_rng(seed)
    table = np.random.default_rng(12345).integers(0, vocab, (vocab, 4))  # the same language
    longest = int(lengths.max())
    out = np.empty((lengths.size, longest), dtype=np.int64)
    out[:, 0] = rs.integers(0, vocab, lengths.size)
    for t in range(1, longest):
        pick = rs.choice(4, size=lengths.size, p=[0.7, 0.15, 0.1, 0.05])
        out[:, t] = table[out[:, t - 1], pick]
    return [out[i, :k] for i, k in enumerate(lengths.tolist())]


def masked(seqs: list[np.ndarray], mask_id: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """MLM inputs and labels: 15% of positions (at least one) masked, fixed per token."""
    rs = np.random.default_rng(seed)
    out = []
    for s in seqs:
        hit = rs.random(s.size) < 0.15
        if not hit.any():
            hit[rs.integers(s.size)] = True
        ids = s.copy()
        ids[hit] = mask_id
        out.append((ids, np.where(hit, s, -100)))
    return out


@dataclass
class Batch:
    """One step's tensors; ``packed`` batches are flat, padded ones are (B, L)."""

    packed: bool
    ids: torch.Tensor
    aux: torch.Tensor  # key mask (B, L) bool, or offsets (n + 1,) for packed
    positions: torch.Tensor
    target_at: torch.Tensor  # flat indices of the labelled positions
    targets: torch.Tensor
    real: int  # real tokens
    padded: int  # tokens computed (real + padding)
    max_len: int
    gather: torch.Tensor | None = None  # packed: padded slots of all length groups
    slots: torch.Tensor | None = None  # packed: the real slots among them, in token order
    keys: tuple[torch.Tensor, ...] = ()  # packed: each group's key mask (g, width)
    real_slots: torch.Tensor | None = None  # packed: 1.0 at real slots, 0.0 at pad slots (P, 1)

    def to(self, device: torch.device) -> Batch:
        move = {k: v.to(device) for k, v in vars(self).items() if isinstance(v, torch.Tensor)}
        keys = tuple(t.to(device) for t in self.keys)
        return Batch(**{**vars(self), **move, "keys": keys})  # type: ignore[arg-type]


def padded_batch(items: list[tuple[np.ndarray, np.ndarray]], pad_id: int) -> Batch:
    lens = [ids.size for ids, _ in items]
    width = max(lens)
    ids = np.full((len(items), width), pad_id, dtype=np.int64)
    labels = np.full((len(items), width), -100, dtype=np.int64)
    for r, (x, y) in enumerate(items):
        ids[r, : x.size], labels[r, : y.size] = x, y
    flat = labels.reshape(-1)
    at = np.flatnonzero(flat != -100)
    key = np.arange(width)[None, :] < np.array(lens)[:, None]
    pos = np.broadcast_to(np.arange(width), ids.shape).copy()
    return Batch(
        False,
        torch.from_numpy(ids),
        torch.from_numpy(key),
        torch.from_numpy(pos),
        torch.from_numpy(at),
        torch.from_numpy(flat[at]),
        sum(lens),
        len(items) * width,
        width,
    )


def packed_batch(items: list[tuple[np.ndarray, np.ndarray]]) -> Batch:
    """A flat packed batch, its sequences shortest first (order within a pack is free)."""
    items = sorted(items, key=lambda item: item[0].size)
    ids = np.concatenate([x for x, _ in items])
    labels = np.concatenate([y for _, y in items])
    lens = np.array([x.size for x, _ in items])
    offsets = np.concatenate([[0], np.cumsum(lens)])
    pos = np.arange(ids.size) - np.repeat(offsets[:-1], lens)
    at = np.flatnonzero(labels != -100)
    gather, slots, keys = length_groups(lens, offsets)
    real_slots = torch.cat([key.reshape(-1) for key in keys]).to(torch.float32)[:, None]
    return Batch(
        True,
        torch.from_numpy(ids),
        torch.from_numpy(offsets),
        torch.from_numpy(pos),
        torch.from_numpy(at),
        torch.from_numpy(labels[at]),
        int(ids.size),
        int(ids.size),
        int(lens.max()),
        gather,
        slots,
        keys,
        real_slots,
    )


class _ToGroups(torch.autograd.Function):
    """Rows of a packed batch in its groups' padded layout (``x[gather]``), with a gather for a
    backward too: a pad slot's gradient is zero (its query's output is dropped and its key is
    masked out), so each token's gradient is the one at its own slot, and no scatter-add into
    a zeroed tensor is needed."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, gather: torch.Tensor, slots: torch.Tensor) -> Any:
        ctx.save_for_backward(slots)
        return x.index_select(0, gather)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        (slots,) = ctx.saved_tensors
        return grad.index_select(0, slots), None, None


class _FromGroups(torch.autograd.Function):
    """The real slots of the groups' output, in token order (``y[slots]``); the backward puts
    each token's gradient back at its slot and zero at pad slots with a gather and a mask."""

    @staticmethod
    def forward(
        ctx: Any, y: torch.Tensor, slots: torch.Tensor, gather: torch.Tensor, real: torch.Tensor
    ) -> Any:
        ctx.save_for_backward(gather, real)
        return y.index_select(0, slots)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        gather, real = ctx.saved_tensors
        return grad.index_select(0, gather) * real.to(grad.dtype), None, None, None


def length_groups(
    lens: np.ndarray, offsets: np.ndarray, slack: float = 1.1
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """Index tensors for the "grouped" exact attention of a packed batch (sequences by length).

    Consecutive sequences are cut into groups whose padded size stays within ``slack`` of their
    tokens; a group's attention is one SDPA call on (g, longest) with the padded keys masked
    out, so it is exact. Returned: one gather index for all groups' padded slots (a pad slot
    repeats its group's first token, masked), the real slots among them (in token order, since
    the groups follow each other), and each group's key mask.
    """
    cuts = [0]
    count = real = 0
    for j, n in enumerate(lens.tolist()):
        if count and (count + 1) * n > slack * (real + n):
            cuts.append(j)
            count = real = 0
        count, real = count + 1, real + n
    cuts.append(lens.size)
    gathers, keys = [], []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        width = int(lens[a:b].max())
        gather = np.full((b - a, width), offsets[a], dtype=np.int64)
        for r, i in enumerate(range(a, b)):
            gather[r, : lens[i]] = np.arange(offsets[i], offsets[i + 1])
        gathers.append(gather.reshape(-1))
        keys.append(torch.from_numpy(np.arange(width)[None, :] < lens[a:b, None]))
    slots = np.flatnonzero(np.concatenate([k.numpy().reshape(-1) for k in keys]))
    return torch.from_numpy(np.concatenate(gathers)), torch.from_numpy(slots), tuple(keys)


# --------------------------------------------------------------------------- model


class Block(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, attn: str) -> None:
        super().__init__()
        self.heads, self.attn = heads, attn
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))

    def attention_padded(self, x: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        b, length, d = x.shape
        q, k, v = self.qkv(x).view(b, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=key[:, None, None, :])
        return self.proj(o.transpose(1, 2).reshape(b, length, d))

    def attention_packed(self, x: torch.Tensor, batch: Batch) -> torch.Tensor:
        offsets, longest = batch.aux, batch.max_len
        total, d = x.shape
        qkv = self.qkv(x)
        if self.attn == "grouped":  # one gather of q, k and v together into the padded groups
            gather, slots, real = batch.gather, batch.slots, batch.real_slots
            assert gather is not None and slots is not None and real is not None
            sizes = [key.numel() for key in batch.keys]
            outs = []
            grouped = _ToGroups.apply(qkv, gather, slots).split(sizes)
            for key, group in zip(batch.keys, grouped, strict=True):
                g, width = key.shape
                qg, kg, vg = group.view(g, width, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
                og = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=key[:, None, None, :])
                outs.append(og.transpose(1, 2).reshape(g * width, d))
            return self.proj(_FromGroups.apply(torch.cat(outs), slots, gather, real))
        q, k, v = qkv.view(total, 3, self.heads, -1).unbind(1)  # (T, H, Dh) each
        if self.attn == "flash":
            from flash_attn import flash_attn_varlen_func

            cu = offsets.to(torch.int32)
            o = flash_attn_varlen_func(q, k, v, cu, cu, longest, longest)
        elif self.attn == "njt":

            def jag(t: torch.Tensor) -> torch.Tensor:
                t = t.contiguous()  # jagged SDPA wants dense, contiguous values
                return torch.nested.nested_tensor_from_jagged(t, offsets).transpose(1, 2)

            o = F.scaled_dot_product_attention(jag(q), jag(k), jag(v)).transpose(1, 2).values()
        else:  # loop: one attention call per sequence (split: its backward is one concatenation)
            lens = (offsets[1:] - offsets[:-1]).tolist()
            parts = [
                F.scaled_dot_product_attention(
                    qs.transpose(0, 1), ks.transpose(0, 1), vs.transpose(0, 1)
                ).transpose(0, 1)
                for qs, ks, vs in zip(q.split(lens), k.split(lens), v.split(lens), strict=True)
            ]
            o = torch.cat(parts)
        return self.proj(o.reshape(total, d))

    def forward(self, x: torch.Tensor, batch: Batch) -> torch.Tensor:
        h = self.norm1(x)
        if batch.packed:
            x = x + self.attention_packed(h, batch)
        else:
            x = x + self.attention_padded(h, batch.aux)
        return x + self.ff(self.norm2(x))


class Encoder(nn.Module):
    def __init__(
        self, vocab: int, d: int, heads: int, ff: int, layers: int, attn: str, max_len: int
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab + 2, d)  # + mask and pad ids
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, heads, ff, attn) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, vocab)

    def loss(self, batch: Batch) -> torch.Tensor:
        x = self.tok(batch.ids) + self.pos(batch.positions)
        for block in self.blocks:
            x = block(x, batch)
        h = self.norm(x.reshape(-1, x.shape[-1])[batch.target_at])  # labelled positions only
        return F.cross_entropy(self.out(h), batch.targets)


# --------------------------------------------------------------------------- strategies


def random_batches(n: int, size: int, seed: int) -> list[list[int]]:
    order = np.random.default_rng(seed).permutation(n)
    return [order[i : i + size].tolist() for i in range(0, n, size)]


def group_by_length(lengths: np.ndarray, size: int, seed: int) -> list[list[int]]:
    from transformers.trainer_pt_utils import LengthGroupedSampler

    gen = torch.Generator().manual_seed(seed)
    order = list(LengthGroupedSampler(size, lengths=lengths.tolist(), generator=gen))
    return [order[i : i + size] for i in range(0, len(order), size)]


def tuned(make: object, lo: int, hi: int, steps: int) -> int:
    """The largest setting in [lo, hi] whose plan still has at least ``steps`` batches."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(make(mid)) >= steps:  # type: ignore[operator]
            lo = mid
        else:
            hi = mid - 1
    return lo


def first_steps(sampler: object, steps: int) -> list[list[int]]:
    """The sampler's first ``steps`` batches, into the next epoch if needed."""
    out: list[list[int]] = []
    epoch = 0
    while len(out) < steps:
        sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        out.extend(list(b) for b in sampler)  # type: ignore[attr-defined]
        epoch += 1
    return out[:steps]


# --------------------------------------------------------------------------- run


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def evaluate(model: Encoder, batches: list[Batch]) -> float:
    model.eval()
    total = count = 0.0
    for b in batches:
        n = int(b.targets.numel())
        total += float(model.loss(b)) * n
        count += n
    model.train()
    return total / count


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1920, help="training sequences (steps = n / 16)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ff", type=int, default=512)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=3, help="untimed first steps")
    p.add_argument("--eval", type=int, default=256, help="held-out sequences")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1...")
    p.add_argument("--attn", choices=["auto", "grouped", "njt", "loop", "flash"], default="auto")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (0: torch's default); 1 by default, since on a small shared "
        "machine more threads mostly wait for each other",
    )
    p.add_argument("--out", help="also write the table (markdown) to this file")
    args = p.parse_args()

    device = torch.device(args.device)
    if args.threads and device.type == "cpu":
        torch.set_num_threads(args.threads)
    attn = args.attn
    if attn == "auto":  # on CPU jagged SDPA unbinds to a list internally: slower than both
        attn = "grouped" if device.type == "cpu" else "njt"
        if device.type == "cuda":
            try:
                import flash_attn  # noqa: F401

                attn = "flash"
            except ImportError:
                pass
    dtype = torch.bfloat16 if attn == "flash" else None  # flash-attn needs half precision

    bs, v = args.batch_size, args.vocab
    lengths = corpus_lengths(args.n, args.seed)
    data = masked(markov_tokens(lengths, v, args.seed), v, args.seed)
    held = corpus_lengths(args.eval, args.seed + 1)
    held_data = masked(markov_tokens(held, v, args.seed + 1), v, args.seed + 1)
    order = np.argsort(held, kind="stable")
    eval_batches = [
        padded_batch([held_data[i] for i in order[j : j + 32]], v + 1).to(device)
        for j in range(0, held.size, 32)
    ]

    plans: dict[str, list[list[int]]] = {}
    plans["(a) random, 16 per batch"] = random_batches(args.n, bs, args.seed)
    steps = len(plans["(a) random, 16 per batch"])
    plans["(b) HF group_by_length"] = group_by_length(lengths, bs, args.seed)[:steps]
    settings: dict[str, str] = {"(a) random, 16 per batch": "", "(b) HF group_by_length": ""}
    budget = tuned(
        lambda m: TokenBudgetSampler(lengths, max_tokens=m, seed=args.seed), 512, 1 << 20, steps
    )
    name = "(c) padless token budget"
    plans[name] = first_steps(TokenBudgetSampler(lengths, max_tokens=budget, seed=args.seed), steps)
    settings[name] = f"max_tokens={budget}"
    capacity = tuned(
        lambda c: PackingSampler(lengths, capacity=c, seed=args.seed), 512, 1 << 20, steps
    )
    name = f"(d) padless packing, {attn}"
    plans[name] = first_steps(PackingSampler(lengths, capacity=capacity, seed=args.seed), steps)
    settings[name] = f"capacity={capacity}"

    batches: dict[str, list[Batch]] = {}
    for name, plan in plans.items():
        items = [[data[i] for i in b] for b in plan]
        if name.startswith("(d)"):
            batches[name] = [packed_batch(x).to(device) for x in items]
        else:
            batches[name] = [padded_batch(x, v + 1).to(device) for x in items]

    torch.manual_seed(args.seed)
    base = Encoder(v, args.d_model, args.heads, args.ff, args.layers, attn, 512).to(device)
    start_loss = evaluate(base, eval_batches)
    # the packed path is exact: the first packed batch's loss equals that of its sequences padded
    pack_name = next(name for name in plans if name.startswith("(d)"))
    same = padded_batch([data[i] for i in plans[pack_name][0]], v + 1).to(device)
    with torch.no_grad():
        try:
            packed_loss = float(base.loss(batches[pack_name][0]))
        except RuntimeError as err:  # e.g. no jagged SDPA kernel for this device and dtype
            if args.attn != "auto":
                raise
            print(f"attention {attn!r} failed ({err}); using 'grouped'")
            attn = "grouped"
            for block in base.blocks:
                block.attn = attn  # type: ignore[union-attr]
            plans[f"(d) padless packing, {attn}"] = plans.pop(pack_name)
            batches[f"(d) padless packing, {attn}"] = batches.pop(pack_name)
            settings[f"(d) padless packing, {attn}"] = settings.pop(pack_name)
            pack_name = f"(d) padless packing, {attn}"
            packed_loss = float(base.loss(batches[pack_name][0]))
        exact_diff = abs(packed_loss - float(base.loss(same)))
    models = {name: copy.deepcopy(base) for name in plans}
    opts = {name: torch.optim.AdamW(m.parameters(), lr=args.lr) for name, m in models.items()}
    times = {name: [] for name in plans}  # type: dict[str, list[float]]
    autocast = torch.autocast(device.type, dtype=dtype) if dtype is not None else _null_context()
    turns = np.random.default_rng(args.seed)
    names = list(plans)
    with autocast:
        for step in range(steps):
            # round-robin, in a random order each step: load on the machine hits all alike
            for name in [names[i] for i in turns.permutation(len(names))]:
                model, opt, batch = models[name], opts[name], batches[name][step]
                sync(device)
                t0 = time.perf_counter()
                loss = model.loss(batch)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                sync(device)
                times[name].append(time.perf_counter() - t0)
        finals = {name: evaluate(models[name], eval_batches) for name in plans}

    rows = []
    ref_rate = None
    pad_a = None
    for name in plans:
        timed = batches[name][args.warmup :]
        real = sum(b.real for b in timed)
        rate = real / sum(times[name][args.warmup :])
        everything = batches[name]
        pad = 1 - sum(b.real for b in everything) / sum(b.padded for b in everything)
        if ref_rate is None:
            ref_rate, pad_a = rate, pad
        rows.append((name, settings[name], rate, rate / ref_rate, pad, finals[name]))
    assert pad_a is not None
    bound = 1 / (1 - pad_a)
    lines = [
        f"{steps} optimizer steps per strategy on {args.n} sequences (mean {lengths.mean():.1f} "
        f"tokens, max {lengths.max()}); model d={args.d_model}, {args.layers} layers, "
        f"{args.heads} heads, ff {args.ff}, vocab {v}; device {device}"
        + (f", {torch.get_num_threads()} threads" if device.type == "cpu" else "")
        + f"; attention for (d): {attn}",
        f"held-out MLM loss at the start: {start_loss:.3f}; bound 1/(1-p) with p = "
        f"{pad_a:.1%} (padding of (a)): {bound:.2f}x; (d) exact: its first batch's loss "
        f"differs from the padded computation by {exact_diff:.1e}",
        "",
        "| strategy | setting | real tokens/s | vs (a) | of bound | padding | final loss |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, setting, rate, ratio, pad, final in rows:
        lines.append(
            f"| {name} | {setting} | {rate:,.0f} | {ratio:.2f}x | "
            f"{'' if name.startswith('(a)') else f'{ratio / bound:.0%}'} | "
            f"{pad:.1%} | {final:.3f} |"
        )
    lines.append(
        f"\nmachine: {platform.machine()}, nproc {os.cpu_count()}, torch {torch.__version__}, "
        f"padless {padless.__version__}; timed steps: {steps - args.warmup} of {steps} "
        f"(first {args.warmup} untimed); spread of the final losses: "
        f"{max(r[5] for r in rows) - min(r[5] for r in rows):.3f}"
    )
    text = "\n".join(lines)
    print(text)
    if args.out:
        tmp = f"{args.out}.tmp"
        with open(tmp, "w") as fh:
            fh.write(text + "\n")
        os.replace(tmp, args.out)


class _null_context:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    main()
