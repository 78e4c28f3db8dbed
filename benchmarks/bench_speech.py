"""Speech batching side by side: padless against lhotse's DynamicBucketingSampler and NeMo-style
2-D buckets, on a speech-like manifest, padding per field and batches over the budget.

The manifest (nothing downloaded): the built-in corpus' aligned verses (29,814 English/Spanish
pairs of BPE token counts) as English speech with Spanish targets, a speech-translation set.
A cut's duration is its English token count × 0.25 s × a speaking-rate factor drawn per cut
(lognormal, σ 0.25) plus 0.1-0.8 s of silence, rounded to a 16 kHz sample; its target is its
Spanish token count. Past 29,814 cuts the verses are drawn with replacement and both token
counts jittered per cut (× lognormal σ 0.1, at least 1), all from one seed.

Each sampler plans one epoch with the same budget, ``--max-seconds`` of padded audio and
``--max-tokens`` padded target tokens per batch (a batch is over when count × its longest
duration or count × its most tokens passes its budget), and the same buffer:

- lhotse ``DynamicBucketingSampler(max_duration, num_buckets=30, buffer_size, shuffle=True)``:
  duration buckets estimated from the first 10,000 cuts; it knows no token budget, and its
  batch closes after a cut joins, so a cut longer than the rest can take it past
  ``max_duration``.
- NeMo-style 2-D buckets (as NeMo's ``estimate_duration_bins_2d`` and lhotse's
  ``FixedBucketBatchSizeConstraint2D`` do, computed here in numpy): 30 duration bins of equal
  total duration × 2 token sub-bins of equal total tokens within each, each bucket a fixed batch
  size ``min(floor(max_seconds / its longest duration), floor(max_tokens / its most tokens))``;
  cuts stream in shuffled through the buffer, a bucket yields a batch when it holds that many.
- padless ``TokenBudget(max_tokens=(max_seconds, max_tokens), resolution=(0.01, None))`` on
  ``[10 ms ticks, tokens]``, walking the cuts by their largest share of a budget (its own
  order), and the same budget walking a 2-D order (:func:`two_field_walk`: duration bins of
  about 8 batches each, tokens within; ``TokenBudget.plan(order=...)``): both budgets hold for
  every batch. ``Buckets(num_buckets=30)`` (boundaries by the exact dynamic programme) takes
  one budget today: the seconds' alone, on the ticks (its token column shows the cost).

Padding per field: ``Σ count × longest - Σ real`` (seconds of padded audio, padded tokens), as a
share of the padded total, and the ratio of padless' padding per real second (token) to the
better of lhotse and NeMo.
Time: one epoch's batches (lhotse: its Python sampler over ``MonoCut`` objects; NeMo-style:
this file's numpy, not NeMo's own cost; padless: the plan). At sizes where lhotse would take
longer than ``--lhotse-limit`` seconds (estimated from the smaller run) its sampler runs on a
seeded subset of ``--lhotse-subset`` cuts, and the table says so.

Run: .venv/bin/python benchmarks/bench_speech.py [--sizes 20000 1000000] [--max-tokens 1000]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import time
import warnings

import numpy as np

import padless

SECONDS_PER_TOKEN = 0.25
SAMPLE_RATE = 16_000


def speech_manifest(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` cuts' durations (float seconds) and target token counts, as the module doc says."""
    rng = np.random.default_rng(seed)
    corpus = padless.builtin_corpus(["en", "es"])
    if n <= len(corpus):
        rows = rng.permutation(len(corpus))[:n]
        source, target = corpus[rows, 0].astype(np.float64), corpus[rows, 1]
    else:
        rows = rng.integers(0, len(corpus), n)
        source = corpus[rows, 0] * rng.lognormal(0.0, 0.1, n)
        target = np.maximum(np.round(corpus[rows, 1] * rng.lognormal(0.0, 0.1, n)), 1)
    rate = rng.lognormal(0.0, 0.25, n)
    silence = rng.uniform(0.1, 0.8, n)
    seconds = np.round((source * SECONDS_PER_TOKEN * rate + silence) * SAMPLE_RATE) / SAMPLE_RATE
    return seconds, target.astype(np.int64)


def figures(
    flat: np.ndarray,
    offsets: np.ndarray,
    seconds: np.ndarray,
    tokens: np.ndarray,
    max_seconds: float,
    max_tokens: int,
) -> dict[str, float]:
    """Padding per field and batches over each budget of one epoch's batches (CSR form)."""
    counts = np.diff(offsets)
    starts = offsets[:-1]
    out: dict[str, float] = {"batches": float(counts.size), "cuts": float(flat.size)}
    for name, values, budget in (("dur", seconds, max_seconds), ("tok", tokens, max_tokens)):
        v = values[flat].astype(np.float64)
        longest = np.maximum.reduceat(v, starts)
        padded = counts * longest
        real = np.add.reduceat(v, starts)
        out[f"pad_{name}"] = float(padded.sum() - real.sum())
        out[f"per_real_{name}"] = out[f"pad_{name}"] / float(real.sum())
        out[f"share_{name}"] = out[f"pad_{name}"] / float(padded.sum())
        out[f"over_{name}"] = float(np.count_nonzero(padded > budget * (1 + 1e-12)))
    return out


def csr(batches: list[list[int]] | list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.fromiter((len(b) for b in batches), np.int64, len(batches))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    flat = np.concatenate([np.asarray(b, dtype=np.int64) for b in batches])
    return flat, offsets


def run_lhotse(
    seconds: np.ndarray, max_seconds: float, buckets: int, buffer: int, seed: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """lhotse's DynamicBucketingSampler over ``MonoCut``s (ids are the row numbers)."""
    from lhotse import CutSet, MonoCut
    from lhotse.dataset import DynamicBucketingSampler

    cuts = CutSet(
        [MonoCut(id=str(i), start=0.0, duration=float(d), channel=0) for i, d in enumerate(seconds)]
    )
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "an eagerly read CutSet": the cuts are in memory
        sampler = DynamicBucketingSampler(
            cuts,
            max_duration=max_seconds,
            num_buckets=buckets,
            shuffle=True,
            buffer_size=buffer,
            seed=seed,
        )
        batches = [[int(c.id) for c in batch] for batch in sampler]
    elapsed = time.perf_counter() - t0
    flat, offsets = csr(batches)
    return flat, offsets, elapsed


def equal_total_edges(values: np.ndarray, bins: int) -> np.ndarray:
    """Upper edges of ``bins`` bins over ``values`` holding about equal totals (the last edge is
    the maximum), as NeMo's bin estimate does."""
    v = np.sort(values.astype(np.float64))
    cum = np.cumsum(v)
    targets = cum[-1] * np.arange(1, bins) / bins
    cuts = np.searchsorted(cum, targets)
    edges = np.unique(np.concatenate([v[np.minimum(cuts, v.size - 1)], [v[-1]]]))
    return edges


def run_nemo_2d(
    seconds: np.ndarray,
    tokens: np.ndarray,
    max_seconds: float,
    max_tokens: int,
    buckets: int,
    sub: int,
    buffer: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, float, int]:
    """NeMo-style 2-D bucketing (see the module doc); returns the batches, the time and the
    number of buckets."""
    t0 = time.perf_counter()
    dur_edges = equal_total_edges(seconds, buckets)
    dur_bin = np.minimum(np.searchsorted(dur_edges, seconds), dur_edges.size - 1)
    bucket = np.empty(seconds.size, dtype=np.int64)
    sizes: list[int] = []
    for b in range(dur_edges.size):
        members = np.flatnonzero(dur_bin == b)
        tok_edges = equal_total_edges(tokens[members], sub)
        sub_bin = np.minimum(np.searchsorted(tok_edges, tokens[members]), tok_edges.size - 1)
        for s in range(tok_edges.size):
            by_dur = int(max_seconds // dur_edges[b])
            by_tok = int(max_tokens // tok_edges[s])
            bucket[members[sub_bin == s]] = len(sizes)
            sizes.append(max(1, min(by_dur, by_tok)))
    # stream: cuts arrive in a shuffled order; a bucket yields a batch as soon as it is full;
    # what the buckets hold at the end leaves as partial batches (drop_last=False). The buffer
    # bounds how many cuts wait, which changes the order of batches, not their members.
    order = np.random.default_rng(seed).permutation(seconds.size)
    held: list[list[int]] = [[] for _ in sizes]
    batches: list[list[int]] = []
    for i, b in zip(order.tolist(), bucket[order].tolist(), strict=True):
        held[b].append(i)
        if len(held[b]) == sizes[b]:
            batches.append(held[b])
            held[b] = []
    batches.extend(h for h in held if h)
    del buffer  # see above: the same buffer, no effect on the batches' members
    elapsed = time.perf_counter() - t0
    flat, offsets = csr(batches)
    return flat, offsets, elapsed, len(sizes)


def two_field_walk(lengths: np.ndarray, bins: int) -> np.ndarray:
    """An order of the cuts near in both fields from one to the next: ``bins`` duration bins of
    equal counts, within a bin by tokens (up in even bins, down in odd ones: no jump between
    bins), then by duration."""
    ticks, tokens = lengths[:, 0], lengths[:, 1]
    edges = np.quantile(ticks, np.linspace(0.0, 1.0, bins + 1)[1:-1])
    which = np.searchsorted(edges, ticks, side="right")
    snake = np.where(which % 2 == 0, tokens, -tokens)
    return np.lexsort((ticks, snake, which))


def run_padless(
    spec: padless.TokenBudget | padless.Buckets,
    lengths: np.ndarray,
    seed: int,
    walk_bins: int | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """One epoch's plan; with ``walk_bins`` the token budget walks :func:`two_field_walk`'s order
    (``TokenBudget.plan(order=...)``) instead of its own."""
    t0 = time.perf_counter()
    if walk_bins is None:
        plan = spec.plan(lengths, seed=seed)
    else:
        assert isinstance(spec, padless.TokenBudget)
        plan = spec.plan(lengths, seed=seed, order=two_field_walk(lengths, walk_bins))
    elapsed = time.perf_counter() - t0
    return np.asarray(plan.indices), np.asarray(plan.offsets), elapsed


def buckets_spec(
    buckets: int, max_seconds: float, max_tokens: int, lengths: np.ndarray
) -> tuple[padless.Spec, np.ndarray]:
    """``Buckets`` with both budgets where it takes budgets per field, else with the seconds'
    budget alone on the duration ticks (then its token column shows what that costs)."""
    if "resolution" in {f.name for f in dataclasses.fields(padless.Buckets)}:
        spec = padless.Buckets(
            num_buckets=buckets, max_tokens=(max_seconds, max_tokens), resolution=(0.01, None)
        )
        return spec, lengths
    ticks = int(round(max_seconds / 0.01))
    return padless.Buckets(num_buckets=buckets, max_tokens=ticks), lengths[:, 0].copy()


def row(name: str, f: dict[str, float], elapsed: float) -> str:
    return (
        f"{name:<24}{int(f['batches']):>8,} {100 * f['share_dur']:>7.2f}% "
        f"{100 * f['share_tok']:>7.2f}% {int(f['over_dur']):>7,} {int(f['over_tok']):>7,} "
        f"{elapsed:>8.2f}s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[20_000, 1_000_000])
    ap.add_argument("--max-seconds", type=float, default=200.0)
    ap.add_argument("--max-tokens", type=int, default=1000)
    ap.add_argument("--buckets", type=int, default=30)
    ap.add_argument("--buffer", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lhotse-limit", type=float, default=180.0)
    ap.add_argument("--lhotse-subset", type=int, default=200_000)
    args = ap.parse_args()
    import lhotse

    print(
        f"bench_speech: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"padless {padless.__version__}, lhotse {lhotse.__version__}"
    )
    print(
        "manifest: the built-in en/es verses as English speech (0.25 s per token x rate,\n"
        "  lognormal 0.25, + 0.1-0.8 s silence) with Spanish targets; see the module doc"
    )
    T, S = args.max_tokens, args.max_seconds
    per_cut = None  # lhotse's seconds per cut, from the first run
    summary = []
    for n in args.sizes:
        seconds, tokens = speech_manifest(n, seed=args.seed)
        lengths = np.stack([padless.durations(seconds, resolution=0.01), tokens], axis=1)
        print(
            f"\n{n:,} cuts, {seconds.sum() / 3600:,.0f} h: duration median {np.median(seconds):.1f}"
            f" s, max {seconds.max():.1f} s;\ntarget tokens median {np.median(tokens):.0f}, max "
            f"{tokens.max()}; budget {S:g} s and {T:,} tokens; buffer {args.buffer:,}"
        )
        print(
            f"{'sampler':<24}{'batches':>8} {'pad dur':>8} {'pad tok':>8} {'over s':>7} "
            f"{'over tok':>7} {'time':>9}"
        )
        results: dict[str, dict[str, float]] = {}
        note = ""
        lhotse_rows = np.arange(n)
        if per_cut is not None and per_cut * n > args.lhotse_limit:
            lhotse_rows = np.sort(
                np.random.default_rng(args.seed).permutation(n)[: args.lhotse_subset]
            )
            note = f" (on a {lhotse_rows.size:,}-cut subset: {per_cut * n:.0f} s estimated)"
        flat, off, t = run_lhotse(seconds[lhotse_rows], S, args.buckets, args.buffer, args.seed)
        if lhotse_rows.size == n:
            per_cut = t / n
        results["lhotse"] = figures(
            lhotse_rows[flat], off, seconds, tokens, S, T
        )  # subset rows map back to the manifest
        print(row(f"lhotse dynamic ({args.buckets})", results["lhotse"], t) + note)
        flat, off, t, count = run_nemo_2d(
            seconds, tokens, S, T, args.buckets, 2, args.buffer, args.seed
        )
        results["nemo"] = figures(flat, off, seconds, tokens, S, T)
        print(row(f"nemo-style 2-D ({count})", results["nemo"], t))
        budget = padless.TokenBudget(max_tokens=(S, T), resolution=(0.01, None))
        bins = max(1, len(budget.plan(lengths)) // 8)  # about 8 batches per duration bin
        specs = {
            "padless token budget": (budget, lengths, None),
            "padless budget, 2-D walk": (budget, lengths, bins),
            f"padless buckets ({args.buckets})": (*buckets_spec(args.buckets, S, T, lengths), None),
        }
        for name, (spec, planned, walk) in specs.items():
            flat, off, t = run_padless(spec, planned, args.seed, walk)
            results[name] = f = figures(flat, off, seconds, tokens, S, T)
            assert f["cuts"] == n, (name, f["cuts"])
            print(row(name, f, t))
        for name in specs:
            f = results[name]
            ratios = []
            for field in ("dur", "tok"):
                key = f"per_real_{field}"  # padding per real second / token (a subset too)
                best = min(results["lhotse"][key], results["nemo"][key])
                ratios.append(f[key] / best)
            over = int(f["over_dur"] + f["over_tok"])
            summary.append((n, name, ratios, over))
            print(f"  {name + ':':<26} padding {ratios[0]:.2f}x / {ratios[1]:.2f}x, {over} over")
    print(
        "\npad dur / pad tok: padded share of count x longest (audio s, target tokens);\n"
        "over s / over tok: batches past the seconds / the token budget; padding Ax / Bx:\n"
        "padless' padding per real second / token over the better of lhotse, NeMo-style.\n"
        "2-D walk: the token budget over duration bins (about 8 batches each) walked by\n"
        "tokens (TokenBudget.plan(order=...)). Buckets take one budget: the seconds'."
    )
    print("goal: padding <= 0.5x the better baseline on each field, never over budget")
    for name in specs:
        rows = [(ratios, over) for _, who, ratios, over in summary if who == name]
        met = all(max(r) <= 0.5 and over == 0 for r, over in rows)
        print(f"  {name}: {'met at every size' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
