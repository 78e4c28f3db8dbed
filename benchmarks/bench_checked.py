"""Cost of the dataset check (``sampler.checked``) next to a padded collate of the same batches.

A ``TokenBudgetSampler`` (``max_tokens=16384``) plans 20,000 tokenized rows of lognormal length
(median ``--median`` 240 tokens, mean about 300, up to 2,048); for each of its first ``--batches`` batches the script
times loading the items from the bare dataset, loading them through ``sampler.checked(dataset)``
(``__getitems__``, as torch's DataLoader fetches a batch) and collating them with
``padless.torch.collate_padded``, taking turns in rounds (best of ``--rounds``). The figure is
the check's extra time ÷ the time of a bare load + collate (which is nearly all collate): the
goal is at most 2%. Two figures: the check alone (timed apart from the collate, over all batches
in a row), and load + collate, bare against checked batch by batch in turn (best of the rounds
per batch): what a DataLoader worker spends. Two item formats: token
lists (``field=None``) and dict rows (``field="input_ids"``, collated with
``fields=("input_ids",)``); and a ``datasets.Dataset``, whose check runs once, vectorised, when
it is built (the time printed), after which its items cost nothing extra.

The check costs the same per item whatever its length, the collate per token: longer rows
(``--median 800``) make the share about three times smaller.

Run: ``python benchmarks/bench_checked.py [--batches 40] [--rounds 15] [--median 240]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import best_in_rounds  # noqa: E402

from padless import TokenBudgetSampler  # noqa: E402
from padless.torch import collate_padded  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--median", type=float, default=240.0, help="median row length")
    opts = parser.parse_args()

    rs = np.random.default_rng(0)
    lengths = np.clip(rs.lognormal(np.log(opts.median), 0.7, opts.n), 8, 2048).astype(np.int64)
    tokens = [rs.integers(1, 32_000, int(k)).tolist() for k in lengths]
    rows = [{"input_ids": t} for t in tokens]
    sampler = TokenBudgetSampler(lengths, max_tokens=16_384, seed=0)
    batches = [list(b) for b in sampler][: opts.batches]
    mean = np.mean([len(b) for b in batches])
    print(
        f"{len(batches)} batches of {mean:.0f} items (max_tokens=16384), {opts.n} rows of mean "
        f"length {lengths.mean():.0f}"
    )

    for name, data, field, collate in (
        ("token lists", tokens, None, collate_padded(0)),
        ("dict rows", rows, "input_ids", collate_padded(0, fields=("input_ids",))),
    ):
        checked = sampler.checked(data, field=field)
        loaded = [[data[i] for i in b] for b in batches]

        def load(data=data):
            for b in batches:
                [data[i] for i in b]

        def load_checked(checked=checked):
            for b in batches:
                checked.__getitems__(b)

        def collate_all(collate=collate, loaded=loaded):
            for items in loaded:
                collate(items)

        best = best_in_rounds(
            {"load": load, "checked": load_checked, "collate": collate_all}, opts.rounds
        )
        alone = best["checked"] - best["load"]
        # the pipeline: batch by batch, bare and checked in turn, best of the rounds per batch
        pipe = {"bare": np.full(len(batches), np.inf), "checked": np.full(len(batches), np.inf)}
        for r in range(opts.rounds):
            for k, b in enumerate(batches):
                for way in ("bare", "checked") if (r + k) % 2 else ("checked", "bare"):
                    t0 = time.perf_counter()
                    collate(checked.__getitems__(b) if way == "checked" else [data[i] for i in b])
                    pipe[way][k] = min(pipe[way][k], time.perf_counter() - t0)
        bare_t, checked_t = float(pipe["bare"].sum()), float(pipe["checked"].sum())
        print(
            f"{name:12s} per batch: load {best['load'] / len(batches) * 1e6:6.1f} us, checked "
            f"load {best['checked'] / len(batches) * 1e6:6.1f} us, collate_padded "
            f"{best['collate'] / len(batches) * 1e6:6.1f} us; the check alone (items not in "
            f"cache) = {100 * alone / bare_t:.2f}% of a bare load + collate; load + collate "
            f"{bare_t / len(batches) * 1e6:6.1f} us bare, {checked_t / len(batches) * 1e6:6.1f} "
            f"us checked: {100 * (checked_t - bare_t) / bare_t:+.2f}%"
        )

    try:
        from datasets import Dataset
    except ImportError:  # pragma: no cover
        return
    arrow = Dataset.from_dict({"input_ids": tokens})
    t0 = time.perf_counter()
    done = sampler.checked(arrow, field="input_ids")
    whole = time.perf_counter() - t0
    print(
        f"datasets.Dataset: whole check {whole * 1e3:.2f} ms for {opts.n} rows "
        f"(verified={done.verified}: no per-item cost)"
    )


if __name__ == "__main__":
    main()
