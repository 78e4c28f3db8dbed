"""docs/combinations.md: the composition matrix as a reader looks it up, rendered from known.py.

    .venv/bin/python -m tests.matrix.table            # rewrite docs/combinations.md

``test_matrix.py`` checks that the page is this rendering of the table of known outcomes, so
the docs say what the matrix holds after every census.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

from .factors import CONSUMERS, FORMS, LAYERS, STRATEGIES, all_cells, not_a_cell
from .known import KNOWN_BROKEN, REFUSED

PAGE = Path(__file__).resolve().parents[2] / "docs" / "combinations.md"

CONSUMER_LETTER = {
    "collate": "c",
    "token_dataset": "t",
    "checked": "k",
    "hf": "h",
    "torchdata": "d",
}

HEADER = """# Which capabilities compose

padless's composition matrix (`tests/matrix/`) builds every strategy × form × layer × consumer
and runs it: each cell either **works** (every item exactly once per epoch across ranks, never
over budget after the collate, the layer's effect visible in what the consumer delivers, a
resume equal to the uninterrupted run) or is **refused when it is built** with an error that
names both parts and what to do. `make test` runs a pairwise sample of the cells (every pair of
factor values meets at least once); `make fuzz` draws cells and positions at random. This page
is generated from the matrix's table of known outcomes
(`python -m tests.matrix.table`); a test keeps the two equal.

Forms: `whole` (a plan of the whole corpus), `window` (`window=`), `histogram`
(`window="histogram"`), `stream` (`StreamBatcher` / `padless.torch.StreamDataset`). Layers:
`mixture` (a corpus of a `MixtureSampler`), `mixture_schedule` (its weights change),
`mixture_warmup` (its corpora warm up), `ramp` (`batches_per_step=Schedule`), `warmup` (a
capacity or budget schedule), `change` (resume across a change of settings), `skip`, `resume`,
`elastic` (2 ranks resumed as 3), `elastic_balance` (the same with `balance=True`),
`context_parallel`, `groups` (`groups=`: pairs of items kept in one batch). Consumers: **c** `collate_for`, **t** `TokenDataset`, **k**
`CheckedDataset`, **h** the HF Trainer with `PadlessTrainerMixin`, **d** torchdata's
`StatefulDataLoader` with 2 workers. `lm` is `LMStream`. Placement over a mesh
(`padless.Placer`, a sampler at `world_size=1`) is one more consumer, run over these strategies,
forms and layers by `tests/test_placement_compose.py`; its table is in docs/placement.md.

In each table a cell lists the consumers with which the combination works; `—` means it is
refused with every consumer, `·` that it has no spelling at all (below the tables: why).
"""


def outcome(cell_id: str) -> str:
    if cell_id in KNOWN_BROKEN:
        return "broken"
    if cell_id in REFUSED:
        return "refused"
    return "works"


def render() -> str:
    cells = {c.id: c for c in all_cells()}
    lines = [HEADER]
    counts: dict[str, int] = defaultdict(int)
    for cid in cells:
        counts[outcome(cid)] += 1
    lines.append(
        f"Today: {len(cells)} cells, {counts['works']} work, {counts['refused']} are refused "
        f"when built, {counts['broken']} are known broken (listed at the end).\n"
    )
    for form in FORMS:
        lines.append(f"## Form `{form}`\n")
        lines.append("| strategy | " + " | ".join(LAYERS) + " |")
        lines.append("|---" * (len(LAYERS) + 1) + "|")
        for strategy in STRATEGIES:
            row = [strategy]
            for layer in LAYERS:
                ids = [f"{strategy}-{form}-{layer}-{c}" for c in CONSUMERS]
                if all(i not in cells for i in ids):
                    row.append("·")
                    continue
                ok = "".join(
                    CONSUMER_LETTER[c]
                    for c, i in zip(CONSUMERS, ids, strict=True)
                    if i in cells and outcome(i) == "works"
                )
                bad = any(i in cells and outcome(i) == "broken" for i in ids)
                row.append((ok or "—") + (" !" if bad else ""))
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    lines.append("## Why some combinations have no spelling\n")
    reasons: dict[str, int] = defaultdict(int)
    for s in STRATEGIES:
        for f in FORMS:
            for la in LAYERS:
                for c in CONSUMERS:
                    why = not_a_cell(s, f, la, c)
                    if why is not None:
                        reasons[why] += 1
    for why, n in sorted(reasons.items()):
        lines.append(f"- {why} ({n} combinations).")
    lines.append("")
    lines.append("## Why combinations are refused\n")
    lines.append(
        "Each refusal's message, its numbers blanked, with how many cells meet it (the "
        "message itself says what to do instead):\n"
    )
    grouped: dict[str, int] = defaultdict(int)
    for message in REFUSED.values():
        grouped[re.sub(r"\d+", "#", message)] += 1
    for message, n in sorted(grouped.items(), key=lambda g: (-g[1], g[0])):
        lines.append(f"- {n}: `{message.replace('`', '')}…`")
    lines.append("")
    if KNOWN_BROKEN:
        lines.append("## Known broken (cells marked `!` above)\n")
        lines.append("Open defects, each an expected failure in the matrix test until fixed:\n")
        for cid, why in sorted(KNOWN_BROKEN.items()):
            lines.append(f"- `{cid}`: {why.replace('`', '')}")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    PAGE.write_text(render())
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
