"""Dataset decomposition: padding, pieces per document, tokens dropped, attention FLOPs.

Run from the repository root::

    python benchmarks/bench_decomposition.py [--docs 1000000]

Corpora: the built-in corpus (29,814 verses, about 30 tokens each) and ``--docs`` lognormal
documents (median 600 tokens, sigma 1.0, in [1, 32768]). For each, ``Decomposition`` at
``max_length=8192`` and a few ``min_length`` settings, against concat-and-chunk at 8192 (every
document's tokens back to back, cut into 8192-token sequences whose attention spans the whole
sequence). Attention FLOPs per token come from ``padless.Cost.transformer`` (an OLMo-1B-like
model: d_model 2048, 16 layers, SwiGLU hidden 8192, vocab 50304): ``quadratic · Σ l² / Σ l`` over
the sequences trained; the ratio to concat-and-chunk does not depend on the model, the share of
all FLOPs does. Plan time is timed against ``Packing(capacity=8192, oversize="split")`` on the
same lengths, in the same process.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import best_in_rounds  # noqa: E402

import padless  # noqa: E402

MAX = 8192
MODEL = padless.Cost.transformer(2048, 16, d_ff=int(1.5 * 8192), vocab=50304)


def lognormal_docs(n: int, seed: int = 0) -> np.ndarray:
    raw = np.random.default_rng(seed).lognormal(np.log(600.0), 1.0, n)
    return np.clip(np.round(raw), 1, 32768).astype(np.int64)


def chunked_attention(lengths: np.ndarray) -> tuple[float, float]:
    """(attention FLOPs per token, all FLOPs per token) of concat-and-chunk at MAX."""
    total = int(lengths.sum())
    full, rest = divmod(total, MAX)
    squares = full * MAX * MAX + rest * rest
    attention = MODEL.quadratic * squares / total
    return attention, MODEL.linear + attention


def row(name: str, lengths: np.ndarray, spec: padless.Decomposition) -> dict[str, float]:
    plan = spec.plan(lengths)
    pieces = plan.piece_lengths.astype(np.float64)
    kept = float(pieces.sum())
    attention = MODEL.quadratic * float((pieces * pieces).sum()) / kept if kept else float("nan")
    ref_attention, ref_all = chunked_attention(lengths)
    total = float(lengths.sum())
    lost = plan.info["dropped_tokens"] + plan.info["leftover_tokens"]
    docs = int(lengths.size)
    return {
        "corpus": name,
        "min_length": spec.min_length,
        "keep_short": spec.keep_short,
        "padding": plan.stats(lengths).padding_fraction,
        "pieces_per_doc": plan.info["pieces"] / docs,
        "kept_per_doc": plan.indices.size / docs,
        "dropped_share": lost / total,
        "attn_per_token": attention,
        "attn_ratio": attention / ref_attention,
        "flops_ratio": (MODEL.linear + attention) / ref_all,
        "batches": len(plan),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    corpora = {
        "builtin": padless.builtin_corpus(),
        f"lognormal_{args.docs}": lognormal_docs(args.docs),
    }
    settings = [
        {"min_length": 256},
        {"min_length": 16},
        {"min_length": 256, "keep_short": True},
    ]
    print(
        f"{'corpus':>18} {'min':>4} {'short':>5} {'padding':>7} {'pieces/doc':>10} "
        f"{'kept/doc':>8} {'dropped':>8} {'attn/token':>10} {'attn ratio':>10} "
        f"{'FLOPs ratio':>11} {'batches':>8}"
    )
    for name, lengths in corpora.items():
        for kw in settings:
            spec = padless.Decomposition(max_length=MAX, tokens_per_batch=64 * MAX, **kw)
            r = row(name, lengths, spec)
            print(
                f"{r['corpus']:>18} {r['min_length']:>4} {r['keep_short']!s:>5} "
                f"{r['padding']:>7.4f} {r['pieces_per_doc']:>10.3f} {r['kept_per_doc']:>8.3f} "
                f"{r['dropped_share']:>8.2%} {r['attn_per_token']:>10.3g} "
                f"{r['attn_ratio']:>10.4f} {r['flops_ratio']:>11.4f} {r['batches']:>8}"
            )
    # plan time of one epoch (bind + plan) against packing the same lengths at 8192
    lengths = corpora[f"lognormal_{args.docs}"]
    spec = padless.Decomposition(max_length=MAX, tokens_per_batch=64 * MAX)
    pack = padless.Packing(capacity=MAX, oversize="split", rows_per_batch=64)
    bound = spec.bind(lengths)  # what a sampler holds: the pieces, cut once
    times = best_in_rounds(
        {
            "cut+plan": lambda: spec.plan(lengths),
            "plan": lambda: bound.plan(0, 1),
            "packing": lambda: pack.plan(lengths),
        },
        args.rounds,
    )
    ref = times["packing"]
    print(
        f"plan time, {args.docs} docs: decomposition cut+plan {times['cut+plan']:.3f} s "
        f"({times['cut+plan'] / ref:.2f}x packing), an epoch's plan once cut {times['plan']:.3f} s "
        f"({times['plan'] / ref:.2f}x), packing {ref:.3f} s"
    )


if __name__ == "__main__":
    main()
