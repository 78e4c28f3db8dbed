"""Fresh-process start-up (issue 26): what a user meets before anything is warm.

Each measure runs in a new interpreter with nothing cached at run time: for a numba build, an
empty ``NUMBA_CACHE_DIR`` each run; Python's bytecode as an install leaves it (pip compiles it
when it installs a wheel: here one untimed run per build writes it under ``PYTHONPYCACHEPREFIX``).
``--warm`` keeps numba's cache between runs too. Measures, best of ``--repeat`` runs in turns:

* ``padless report`` on the built-in corpus (``python -m padless.cli report``), whole process;
* ``import padless`` + the first ``plan_token_budget`` of 1e6 lengths (``max_tokens=8192``), timed
  inside the process after numpy and the lengths are loaded, against fairseq's
  ``batch_by_size_vec`` (its Cython source compiled here from ``--fairseq-pyx``) with its import and
  a stable argsort, timed the same way and side by side;
* the first packed batch through a ``DataLoader`` with two workers (``PackingSampler``, its
  collate) minus the same loader with a plain list-of-lists collate.

``--tree LABEL=SRC`` runs a padless source tree (e.g. a checkout still on numba) instead of the
installed package, with ``python -S`` and that tree first on ``PYTHONPATH`` (``LABEL=`` alone: the
installed package); give it several times to compare builds side by side.

    .venv/bin/python benchmarks/bench_start.py --fairseq-pyx path/to/data_utils_fast.pyx
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import lognormal_lengths

PLAN = """
import sys, time, numpy as np
x = np.load(sys.argv[1])
t0 = time.perf_counter()
import padless
plan = padless.plan_token_budget(x, max_tokens=8192)
print(time.perf_counter() - t0, len(plan))
"""

FAIRSEQ = """
import sys, time, numpy as np
x = np.load(sys.argv[1])
t0 = time.perf_counter()
from data_utils_fast import batch_by_size_vec
order = np.argsort(x, kind="mergesort")
batches = batch_by_size_vec(order, x, 8192, -1, 1)
print(time.perf_counter() - t0, len(batches))
"""

LOADER = """
import sys, time
import numpy as np
import torch
from torch.utils.data import DataLoader

lengths = np.load(sys.argv[1])
rows = [list(range(1, int(n) + 1)) for n in lengths]
plain = sys.argv[2] == "plain"


def as_lists(batch):
    return batch


t0 = time.perf_counter()
import padless
import padless.torch

sampler = padless.PackingSampler(lengths, capacity=4096, rows_per_batch=8, seed=0)
collate = as_lists if plain else padless.torch.collate_for(sampler, flatten=True)
loader = DataLoader(rows, batch_sampler=sampler, collate_fn=collate, num_workers=2)
batch = next(iter(loader))
print(time.perf_counter() - t0, 0)
"""


def build_fairseq(pyx: Path, folder: Path) -> Path:
    """Compile fairseq's ``data_utils_fast.pyx`` (Cython, C++) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data_utils_fast.pyx").write_text(pyx.read_text())
    setup = (
        "from setuptools import setup, Extension\nfrom Cython.Build import cythonize\n"
        "import numpy\nsetup(ext_modules=cythonize([Extension('data_utils_fast', "
        "['data_utils_fast.pyx'], language='c++', include_dirs=[numpy.get_include()], "
        "extra_compile_args=['-O3'])], quiet=True))\n"
    )
    (folder / "setup.py").write_text(setup)
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=folder,
        check=True,
        capture_output=True,
    )
    return folder


def run(code: str | None, args: list[str], env: dict[str, str], tree: str | None) -> tuple:
    """Wall time of a fresh interpreter running ``code`` (or ``-m padless.cli`` when None), and
    the seconds it reports itself (None for the command)."""
    python = [sys.executable, "-S"] if tree else [sys.executable]
    cmd = [*python, "-c", code, *args] if code else [*python, "-m", "padless.cli", *args]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{cmd[:4]}... failed:\n{out.stderr[-2000:]}")
    inner = float(out.stdout.split()[0]) if code else None
    return wall, inner


def environment(tree: str | None, pyc: Path, numba: Path, extra: str = "") -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pyc)
    env["NUMBA_CACHE_DIR"] = str(numba)
    paths = [p for p in (extra,) if p]
    if tree:  # that tree's padless first; -S keeps the installed (editable) one out
        paths = [tree, *paths, sysconfig.get_paths()["purelib"]]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fairseq-pyx", type=Path, help="fairseq/data/data_utils_fast.pyx")
    parser.add_argument("--tree", action="append", default=[], help="LABEL=SRC (a src/ folder)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warm", action="store_true", help="keep the caches between runs")
    args = parser.parse_args()
    trees: list[tuple[str, str | None]] = [
        (t.partition("=")[0], t.partition("=")[2] or None) for t in args.tree
    ] or [("installed", None)]
    work = Path(tempfile.mkdtemp(prefix="padless-start-"))
    lengths_file = work / "lengths.npy"
    np.save(lengths_file, lognormal_lengths(1_000_000))
    corpus = work / "corpus.npy"
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    import padless

    np.save(corpus, padless.builtin_corpus())
    fairseq = build_fairseq(args.fairseq_pyx, work / "fairseq") if args.fairseq_pyx else None

    best: dict[tuple[str, str], tuple[float, float | None]] = {}

    def note(key: tuple[str, str], value: tuple[float, float | None]) -> None:
        old = best.get(key)
        best[key] = value if old is None or value[0] < old[0] else old

    def measure(label: str, tree: str | None, numba: Path) -> dict[str, tuple]:
        env = environment(tree, work / "pyc" / label, numba)
        return {
            "report": run(None, ["report"], env, tree),
            "plan": run(PLAN, [str(lengths_file)], env, tree),
            "loader": run(LOADER, [str(corpus), "packed"], env, tree),
            "loader plain": run(LOADER, [str(corpus), "plain"], env, tree),
        }

    for label, tree in trees:  # the bytecode an install writes (numba's cache thrown away)
        measure(label, tree, work / "numba-warm-up" / label)
    for r in range(args.repeat):
        for label, tree in trees:
            numba = work / "numba" / label / ("warm" if args.warm else str(r))
            for what, value in measure(label, tree, numba).items():
                note((label, what), value)
        if fairseq:
            env = environment(None, work / "pyc" / "fairseq", work, extra=str(fairseq))
            note(("fairseq", "plan"), run(FAIRSEQ, [str(lengths_file)], env, None))

    state = "numba's cache kept" if args.warm else "nothing cached (numba's cache empty)"
    print(f"fresh processes, {state}, best of {args.repeat}; load {os.getloadavg()[0]:.1f}")
    print("| build | `padless report` (wall) | import + first plan, 1e6 | first packed batch,"
          " 2 workers, above a plain collate |")  # fmt: skip
    print("|---|---:|---:|---:|")
    for label, _ in trees:
        plan = best[(label, "plan")][1] or 0.0
        ratio = f" ({plan / best[('fairseq', 'plan')][1]:.2f}× fairseq)" if fairseq else ""
        extra = (best[(label, "loader")][1] or 0.0) - (best[(label, "loader plain")][1] or 0.0)
        print(
            f"| {label} | {best[(label, 'report')][0]:.2f} s | {plan:.3f} s{ratio} |"
            f" +{extra:.2f} s ({best[(label, 'loader')][1]:.2f} vs"
            f" {best[(label, 'loader plain')][1]:.2f} s) |"
        )
    if fairseq:
        print(
            f"| fairseq `batch_by_size_vec` + argsort | | {best[('fairseq', 'plan')][1]:.3f} s | |"
        )
    print(json.dumps({f"{a}/{b}": v for (a, b), v in best.items()}))


if __name__ == "__main__":
    main()
