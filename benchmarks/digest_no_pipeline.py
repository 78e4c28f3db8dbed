"""The plan digest of bench_placement.py (``--digest``) without what the pipeline search changes.

``plan_digest`` hashes every placement the benchmark makes; the 18 pipeline cases (``pp=4``) are
reordered and evened out by ``place``'s pipeline step, which issue 43 changes on purpose. This
script hashes the same placements with each pipeline case placed by ``place(..., search=False)``
(the first spread only: no pipeline replay, no reordering), so equal digests before and after a
change of the pipeline step say that no other placement moved.

    .venv/bin/python benchmarks/digest_no_pipeline.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import bench_placement as B  # noqa: E402

_place = B.place


def _no_pipeline_search(lengths, mesh, cost, **kw):
    if mesh.pp > 1:
        kw["search"] = False
    return _place(lengths, mesh, cost, **kw)


if __name__ == "__main__":
    B.place = _no_pipeline_search
    print(B.plan_digest())
