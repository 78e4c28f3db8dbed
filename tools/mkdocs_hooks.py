"""mkdocs hooks of padless's docs site (``make docs``; mkdocs.yml names this file).

What the site has beyond docs/*.md, all made at build time so nothing is kept twice in git:

- the navigation: Home, the guides (docs/guides/*.md), the topics (docs/*.md) and the API
  reference, each section listing its folder (a page added there appears without an edit here);
- ``index.md``, the README with its links made relative to docs/, and ``benchmarks.md``, the
  repository's BENCHMARKS.md (links to either from docs/ pages are rewritten to them);
- ``reference/*.md``: the API reference, rendered by mkdocstrings from the docstrings of
  ``padless``'s public names (``padless._EXPORTS``), ``padless.torch`` and ``padless.hf``;
- ``plots.md`` and its PNGs: figures computed from the built-in corpus with matplotlib (Agg).
"""

from __future__ import annotations

import io
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# repository files outside docs/ that the site carries, and the page each becomes
OUTSIDE = {"README.md": "index.md", "BENCHMARKS.md": "benchmarks.md"}
LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")


# --------------------------------------------------------------------------- navigation


def _title(path: Path) -> str:
    for line in path.read_text().splitlines():
        if line.startswith("# "):
            return line[2:].strip().rstrip(".")
    return path.stem.replace("_", " ")


def on_config(config: Any) -> Any:
    guides = sorted((DOCS / "guides").glob("*.md"))
    topics = sorted(p for p in DOCS.glob("*.md") if p.name != "index.md")
    config["nav"] = [
        {"Home": "index.md"},
        {"Guides": [{_title(p): f"guides/{p.name}"} for p in guides]},
        {"Topics": [{_title(p): p.name} for p in topics]},
        {
            "Figures": [
                {"Plots of the built-in corpus": "plots.md"},
                {"Benchmarks": "benchmarks.md"},
            ]
        },
        {"API reference": [{title: f"reference/{name}.md"} for name, title, _ in _reference()]},
    ]
    return config


# --------------------------------------------------------------------------- pages


def _rewrite_links(markdown: str, source: str) -> str:
    """Links of a page whose repository path is ``source``, made relative to its site page:
    a target in docs/ keeps its docs/ path, README/BENCHMARKS become their generated pages."""
    page = OUTSIDE.get(source, source.removeprefix("docs/"))
    here = posixpath.dirname(page)

    def fix(m: re.Match[str]) -> str:
        target = m.group(2)
        if "://" in target or target.startswith(("mailto:", "/")):
            return m.group(0)
        repo = posixpath.normpath(posixpath.join(posixpath.dirname(source), target))
        if repo in OUTSIDE:
            site = OUTSIDE[repo]
        elif repo.startswith("docs/"):
            site = repo.removeprefix("docs/")
        else:
            return m.group(0)  # left for mkdocs to judge (strict: a warning)
        rel = posixpath.relpath(site, here or ".")
        return f"{m.group(1)}{rel}{m.group(3) or ''}{m.group(4)}"

    return LINK.sub(fix, markdown)


def on_files(files: Files, config: Any) -> Files:
    for name, page in OUTSIDE.items():
        text = _rewrite_links((ROOT / name).read_text(), name)
        files.append(File.generated(config, page, content=text))
    for name, title, body in _reference():
        files.append(File.generated(config, f"reference/{name}.md", content=f"# {title}\n\n{body}"))
    images, page = _plots()
    for path, png in images.items():
        files.append(File.generated(config, path, content=png))
    files.append(File.generated(config, "plots.md", content=page))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    src = page.file.src_uri
    if src in OUTSIDE.values():
        return markdown  # rewritten when generated
    return _rewrite_links(markdown, f"docs/{src}")


# --------------------------------------------------------------------------- API reference


def _public() -> str:
    import padless

    blocks = []
    for name in sorted(padless._EXPORTS, key=str.lower):
        blocks.append(
            f"::: {padless._EXPORTS[name]}.{name}\n"
            "    options:\n"
            f"      heading: padless.{name}\n"
            "      show_root_heading: true\n"
            "      show_root_full_path: false\n"
        )
    return (
        "Every public name of `import padless` (each loads on first use), with its docstring.\n\n"
        + "\n".join(blocks)
    )


def _module(module: str) -> str:
    return (
        f"::: {module}\n"
        "    options:\n"
        "      show_root_heading: false\n"
        "      show_submodules: false\n"
        "      members_order: alphabetical\n"
    )


def _reference() -> list[tuple[str, str, str]]:
    """(page name, title, markdown) of each reference page."""
    return [
        ("padless", "padless", _public()),
        ("torch", "padless.torch", _module("padless.torch")),
        ("hf", "padless.hf", _module("padless.hf")),
    ]


# --------------------------------------------------------------------------- plots


def _png(fig: Any) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=110, bbox_inches="tight")
    return out.getvalue()


def _plots() -> tuple[dict[str, bytes], str]:
    """The figures (PNG bytes by site path) and the page that shows them."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    import padless

    lengths = padless.builtin_corpus()
    images: dict[str, bytes] = {}

    # 1. padding by strategy: one comparable setting of each, on the same lengths
    specs = {
        "token budget": padless.TokenBudget(max_tokens=4096),
        "buckets": padless.Buckets(num_buckets=8, max_tokens=4096),
        "exact length": padless.ExactLength(max_tokens=4096),
        "fixed shapes": padless.FixedShapes(shapes=padless.shape_set(lengths, 8, max_tokens=4096)),
        "packing": padless.Packing(capacity=4096),
    }
    padding = {}
    for name, spec in specs.items():
        padding[name] = 100 * spec.plan(lengths, seed=0).stats(lengths).padding_fraction
    fig, ax = plt.subplots(figsize=(6.4, 2.8))
    ax.barh(list(padding), list(padding.values()), color="#3f6fb5")
    for y, v in enumerate(padding.values()):
        ax.text(v, y, f" {v:.2f} %", va="center", fontsize=9)
    ax.set_xlabel("padded slots, % of the batch tensors")
    ax.invert_yaxis()
    ax.set_xlim(0, max(padding.values()) * 1.25 + 0.1)
    images["img/padding_by_strategy.png"] = _png(fig)
    plt.close(fig)

    # 2. batch shapes: (rows, padded width) of every batch, under a token budget
    plan = specs["token budget"].plan(lengths, seed=0)
    rows = np.array([len(b) for b in plan])
    width = np.array([int(lengths[np.asarray(b)].max()) for b in plan])
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    ax.scatter(width, rows, s=6, alpha=0.5, color="#3f6fb5", label="a batch")
    w = np.linspace(max(1, width.min()), width.max(), 200)
    ax.plot(w, 4096 / w, color="#c0392b", lw=1, label="rows × width = 4096")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("padded width (tokens)")
    ax.set_ylabel("rows")
    ax.legend(frameon=False, fontsize=8)
    images["img/batch_shapes.png"] = _png(fig)
    plt.close(fig)

    # 3. imbalance across 8 ranks, step by step, before and after balance=True: buckets with a
    #    fixed batch size (lhotse / NeMo style), whose batches' costs differ most
    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    means = {}
    for balance, color in ((False, "#c0392b"), (True, "#3f6fb5")):
        per_step = _step_imbalance(lengths, 8, balance)
        means[balance] = float(per_step.mean())
        label = f"balance={balance}: mean {means[balance]:.3f}"
        ax.plot(np.arange(per_step.size), per_step, lw=0.8, color=color, label=label)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("slowest rank ÷ mean rank")
    ax.set_ylim(bottom=1.0)
    ax.legend(frameon=False, fontsize=8)
    images["img/imbalance.png"] = _png(fig)
    plt.close(fig)

    page = f"""# Plots of the built-in corpus

Made by the docs build itself (`make docs`, tools/mkdocs_hooks.py) from the built-in corpus
(`padless.builtin_corpus()`: the token lengths of 29,814 English Bible verses), so they show
this version's planners.

## Padding by strategy

Each strategy at a budget of 4,096 tokens per batch (buckets: 8, their boundaries chosen for
least padding; fixed shapes: 8 shapes, `shape_set`; packing: rows of 4,096), the share of the
batch tensors that is padding:

![padding by strategy](img/padding_by_strategy.png)

## Batch shapes under a token budget

`TokenBudget(max_tokens=4096)`: every batch as (padded width, rows). Short sentences come in
batches of many rows, long ones in few; every batch stays under the curve rows × width = 4096.

![batch shapes](img/batch_shapes.png)

## Imbalance before and after `balance=True`

8 ranks, `PlanSampler(lengths, Buckets(num_buckets=8, batch_size=64), world_size=8)`: each
step's slowest rank's cost (padded tokens, 64 × the batch's longest) over the mean rank's. A
fixed batch size makes batches of long sequences cost many times those of short ones, and
the step waits for its slowest rank; `balance=True` deals batches of similar cost to the same
step (mean {means[False]:.3f} → {means[True]:.3f}; 1.0 is perfect).

![imbalance before and after balance](img/imbalance.png)
"""
    return images, page


def _step_imbalance(lengths: Any, world: int, balance: bool) -> Any:
    """Max ÷ mean of the ranks' padded tokens (rows × longest) at each step of epoch 0, for
    buckets of 64 sequences dealt over ``world`` ranks."""
    import numpy as np

    import padless

    spec = padless.Buckets(num_buckets=8, batch_size=64)
    costs = []
    for rank in range(world):
        sampler = padless.PlanSampler(
            lengths, spec, world_size=world, rank=rank, balance=balance, seed=0
        )
        costs.append([len(b) * int(lengths[np.asarray(b)].max()) for b in sampler])
    grid = np.array(costs, dtype=np.float64)  # (ranks, steps)
    return grid.max(axis=0) / grid.mean(axis=0)
