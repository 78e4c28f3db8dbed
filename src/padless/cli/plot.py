"""The PNG of ``padless report --plot``: length histogram, padding and imbalance per strategy."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.lengths import sizes_of
from ..io import lengths_of
from ..sampling.report import StrategyRow

FORMATS = ("png", "svg", "pdf")


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (files, no screen), or an ImportError saying
    which extra installs it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(
            "--plot needs the optional package 'matplotlib': pip install 'padless[cli]'"
        ) from exc
    return plt


def plot_report(
    lengths: Any,
    rows: Sequence[StrategyRow],
    path: str | os.PathLike[str],
    *,
    title: str = "",
    world_size: int = 8,
    max_tokens: int | None = None,
) -> None:
    """Write a figure: length histogram, padding % and imbalance per strategy, and (with
    ``max_tokens``) the padding of static shapes against their number k (the compile count).

    Needs matplotlib (``pip install 'padless[cli]'``). The format follows the suffix (``.svg``,
    ``.pdf``; PNG otherwise). Written at exactly ``path``: a regular file under a temporary name,
    then renamed; a device or pipe in place, never replaced. A missing folder is named up front.

    Cost: one matplotlib figure (about a second).
    """
    from ..core._output import check_output, write_exactly

    target = check_output(path, "plot")
    plt = pyplot()
    sizes = sizes_of(lengths_of(lengths))
    panels = 3 if max_tokens is None else 4
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4.6))
    ax = axes[0]
    lo, hi = int(sizes.min()), int(sizes.max())
    bins: Any = np.arange(lo, hi + 2) - 0.5 if hi - lo <= 160 else 80
    ax.hist(sizes, bins=bins, color="#4c72b0")
    ax.set_title(f"sequence lengths (N={sizes.size:,})")
    ax.set_xlabel("tokens per sequence")
    ax.set_ylabel("sequences")
    for q, style in ((50, "--"), (99, ":")):
        v = float(np.percentile(sizes, q))
        ax.axvline(v, color="k", linestyle=style, linewidth=1, label=f"p{q} = {v:g}")
    ax.legend()
    names = [r.strategy for r in rows]
    ypos = np.arange(len(rows))
    ax = axes[1]
    pads = [r.padding_pct for r in rows]
    bars = ax.barh(ypos, pads, color="#dd8452")
    ax.set_yticks(ypos, names)
    ax.invert_yaxis()
    ax.set_xlabel("padding (% of token slots)")
    ax.set_title("padding per strategy (lower is better)")
    ax.bar_label(bars, labels=[f"{p:.2f}%" for p in pads], padding=3)
    ax.set_xlim(0, max(pads + [1.0]) * 1.25)
    ax = axes[2]
    plain = [r.imbalance or 1.0 for r in rows]
    bal = [r.imbalance_balanced if r.imbalance_balanced is not None else np.nan for r in rows]
    ax.barh(ypos - 0.2, plain, height=0.4, color="#55a868", label="shuffled order")
    ax.barh(ypos + 0.2, bal, height=0.4, color="#8172b3", label="balance=True")
    ax.set_yticks(ypos, names)
    ax.invert_yaxis()
    ax.axvline(1.0, color="k", linewidth=1)
    ax.set_xlim(0.95, max(plain + [1.1]) * 1.05)
    ax.set_xlabel(f"straggler imbalance at world size {world_size} (1 = perfect)")
    ax.set_title("slowest rank / mean rank per step")
    ax.legend(loc="lower right")
    if max_tokens is not None:
        from ..planners.shapes import shape_curve

        ks = [1, 2, 4, 8, 16, 32]
        curve = shape_curve(lengths, ks, max_tokens=max_tokens)
        ax = axes[3]
        ax.plot(ks, [100 * c["padding_fraction"] for c in curve], marker="o", color="#c44e52")
        budget = [r.padding_pct for r in rows if r.strategy == "token_budget"]
        if budget:
            ax.axhline(budget[0], color="k", linestyle="--", linewidth=1, label="token budget")
            ax.legend()
        ax.set_xscale("log", base=2)
        ax.set_xlabel("static shapes k (compiles)")
        ax.set_ylabel("padding (% of token slots, dummy rows included)")
        ax.set_title("static shapes: padding against k")
    fig.suptitle(f"padless report: {title}" if title else "padless report")
    fig.tight_layout()
    suffix = os.path.splitext(target)[1].lower().lstrip(".")
    kind = suffix if suffix in FORMATS else "png"
    try:
        write_exactly(target, lambda f: fig.savefig(f, format=kind, dpi=110), what="plot")
    finally:
        plt.close(fig)
