"""Benchmark shuffle_file: throughput and peak memory next to cp, dd and shuf; uniformity figures.

Builds, in a temporary directory (``--dir``, default the system's; keep it on the disk you mean to
measure), a file of 16-byte GloVe-like records (int32 i sorted, int32 j, float64 value; 2 GiB, or
64 MiB with ``--quick``) and a text file of lines whose lengths are lognormal around 100 bytes
(1 GiB, or 32 MiB), then, ``--runs`` times each (default 3) with ``sync`` before every run:

- ``padless.shuffle_file(..., memory=512M)`` (``--quick``: 16M) in a fresh subprocess: wall time
  of the call and of the whole process (interpreter start and imports included), peak resident
  memory above the process's size right after ``import padless`` (VmHWM), engine, buckets;
- ``cp`` (after ``sync``), ``dd bs=4M conv=fdatasync`` (the disk's write floor), and for lines
  GNU ``shuf -o`` (holds the whole file in memory); peak RSS from ``wait4``.

Throughput is input bytes ÷ wall time (medians). Then the uniformity figures: 1e7 16-byte records
holding their input position (``--quick``: 1e6), budget 1e6 records (16 MB; ``--quick``: 1e5),
Spearman ρ between input and output positions and the χ² test of the (input decile × output
decile) table, for the engine the budget selects (numpy) and with the numba engine forced.

Run: ``python benchmarks/bench_shuffle.py [--quick] [--dir DIR] [--runs N] [--only records|lines]``.
Prints a markdown report (machine, commands, tables).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

MiB = 1 << 20
GiB = 1 << 30

_CHILD = """
import json, sys, time
def hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) * 1024
import padless
base = hwm()
from padless.shuffle import shuffle_file
kind, src, dst, memory = sys.argv[1:5]
kw = {"lines": True} if kind == "lines" else {"record_size": int(kind)}
t0 = time.perf_counter()
res = shuffle_file(src, dst, memory=memory, seed=1, **kw)
t1 = time.perf_counter()
print(json.dumps({"seconds": t1 - t0, "peak": hwm() - base, "base": base, "engine": res.engine,
                  "buckets": res.buckets, "depth": res.depth}))
"""


def sh(cmd: str) -> str:
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()


def sync() -> None:
    subprocess.run(["sync"], check=True)


def timed(argv: list[str]) -> tuple[float, int, str]:
    """Run a command under GNU time; return (wall seconds, peak RSS bytes, stdout).

    GNU time forks a small process before exec, so its maximum RSS is the command's own (the
    ``wait4`` figure of a child forked straight from this big Python process would include it).
    """
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "%M", *argv], capture_output=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {proc.stderr.decode(errors='replace')}")
    peak_kb = int(proc.stderr.decode().strip().splitlines()[-1])
    return wall, peak_kb * 1024, proc.stdout.decode()


# --------------------------------------------------------------------------- data


def write_records(path: str, nbytes: int) -> None:
    """16-byte records (int32 i, int32 j, float64 v), sorted by i like GloVe's cooccur output."""
    n = nbytes // 16
    rng = np.random.default_rng(0)
    rec = np.dtype([("i", "<i4"), ("j", "<i4"), ("v", "<f8")])
    with open(path, "wb") as f:
        step = 1 << 22
        for a in range(0, n, step):
            m = min(step, n - a)
            block = np.empty(m, rec)
            block["i"] = np.arange(a, a + m) // 1000
            block["j"] = rng.integers(0, 400_000, m)
            block["v"] = rng.random(m)
            block.tofile(f)


def write_lines(path: str, nbytes: int) -> tuple[int, float]:
    """Lowercase words and spaces, line lengths lognormal around 100 bytes; returns (lines, mean)."""
    rng = np.random.default_rng(1)
    total = 0
    count = 0
    with open(path, "wb") as f:
        while total < nbytes:
            lengths = np.clip(rng.lognormal(np.log(95), 0.55, 1 << 18), 2, 20_000).astype(np.int64)
            lengths = lengths[: max(1, int(np.searchsorted(np.cumsum(lengths), nbytes - total)))]
            size = int(lengths.sum())
            body = rng.integers(97, 123, size, dtype=np.uint8)
            body[rng.random(size) < 0.16] = 32
            body[np.cumsum(lengths) - 1] = 10
            body.tofile(f)
            total += size
            count += len(lengths)
    return count, total / count


# --------------------------------------------------------------------------- throughput


def bench_file(kind: str, src: str, work: str, memory: str, runs: int) -> list[dict]:
    size = os.path.getsize(src)
    dst = os.path.join(work, "out")
    rows = []
    tools: list[tuple[str, list[str]]] = [
        (
            f"padless shuffle_file(memory={memory})",
            [sys.executable, "-c", _CHILD, "lines" if kind == "lines" else "16", src, dst, memory],
        ),
        ("cp", ["cp", src, dst]),
        ("dd bs=4M conv=fdatasync", ["dd", f"if={src}", f"of={dst}", "bs=4M", "conv=fdatasync"]),
    ]
    if kind == "lines" and shutil.which("shuf"):
        tools.append(("GNU shuf -o (in memory)", ["shuf", src, "-o", dst]))
    for name, argv in tools:
        walls, peaks, inner, above, info = [], [], [], [], {}
        for _ in range(runs):
            if os.path.exists(dst):
                os.unlink(dst)
            sync()
            wall, peak, out = timed(argv)
            walls.append(wall)
            peaks.append(peak)
            if name.startswith("padless"):
                info = json.loads(out)
                inner.append(info["seconds"])
                above.append(info["peak"])
        row = {
            "tool": name,
            "wall": statistics.median(walls),
            "walls": inner or walls,  # padless: the call itself; the process is in the note
            "peak": statistics.median(peaks),
            "size": size,
        }
        if inner:
            row["inner"] = statistics.median(inner)
            row["above"] = max(above)
            row["info"] = info
        rows.append(row)
        if os.path.exists(dst):
            os.unlink(dst)
    return rows


def table(kind: str, rows: list[dict], budget: int) -> str:
    size = rows[0]["size"]
    pad = rows[0]
    lines = [
        f"| {kind} ({size / GiB:.2f} GiB) | MB/s (median) | runs (s) | peak RSS (GNU time) "
        "| padless ÷ tool |",
        "|---|---:|---|---:|---:|",
    ]
    pad_rate = size / pad["inner"] / 1e6
    # padless: wall time of the call (the interpreter's start and imports are in the note below).
    for row in rows:
        rate = size / (row["inner"] if "inner" in row else row["wall"]) / 1e6
        runs = ", ".join(f"{w:.2f}" for w in row["walls"])
        ratio = "" if row is pad else f"{pad_rate / rate:.2f}"
        peak = f"{row['peak'] / MiB:,.0f} MiB"
        lines.append(f"| {row['tool']} | {rate:,.0f} | {runs} | {peak} | {ratio} |")
    info = pad["info"]
    allowed = 1.1 * budget + 64 * MiB
    lines.append("")
    lines.append(
        f"padless: {size / pad['wall'] / 1e6:,.0f} MB/s counting the whole process (interpreter,"
        f" imports, numba kernels loaded from cache: {pad['wall']:.2f} s median); "
        f"engine {info['engine']}, "
        f"{info['buckets']} buckets, depth {info['depth']}; peak (worst run) {pad['above'] / MiB:,.0f}"
        f" MiB above `import padless` ({info['base'] / MiB:.0f} MiB) against the allowed 1.1 × {budget / MiB:,.0f} MiB + 64 MiB = "
        f"{allowed / MiB:,.0f} MiB."
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------- uniformity


def uniformity(n: int, budget_records: int, work: str, engine: str | None) -> str:
    from scipy import stats

    from padless.shuffle import _engines, shuffle_file

    src = os.path.join(work, "uniform.bin")
    rec = np.zeros((n, 2), np.int64)
    rec[:, 0] = np.arange(n)
    rec.tofile(src)
    dst = os.path.join(work, "uniform.out")
    saved = _engines.choose_engine
    if engine is not None:
        _engines.choose_engine = lambda budget, size: engine  # type: ignore[assignment]
    try:
        res = shuffle_file(src, dst, record_size=16, memory=budget_records * 16, seed=2024)
    finally:
        _engines.choose_engine = saved  # type: ignore[assignment]
    out = np.fromfile(dst, np.int64).reshape(-1, 2)[:, 0]
    os.unlink(src)
    os.unlink(dst)
    position = np.arange(n)
    rho = stats.spearmanr(out, position).statistic
    tab = np.zeros((10, 10), np.int64)
    np.add.at(tab, (out * 10 // n, position * 10 // n), 1)
    chi2 = stats.chi2_contingency(tab)
    lines = [
        f"{n:.0e} records, budget {budget_records:.0e} records ({budget_records * 16 / 1e6:.0f} MB)"
        f", engine {res.engine}, {res.buckets} buckets, depth {res.depth}, seed 2024:",
        f"Spearman ρ(input position, output position) = {rho:+.5f} (|ρ| < 0.005 required); "
        f"χ²(81 dof) = {chi2.statistic:.1f}, p = {chi2.pvalue:.3f} (pass at 1%: "
        f"{'yes' if chi2.pvalue > 0.01 else 'NO'})",
        "",
        "| input decile ↓ / output decile → | " + " | ".join(str(i) for i in range(10)) + " |",
        "|---|" + "---:|" * 10,
    ]
    expected = n / 100
    for i in range(10):
        cells = " | ".join(f"{(tab[i, j] - expected) / np.sqrt(expected):+.1f}" for j in range(10))
        lines.append(f"| {i} | {cells} |")
    lines.append("")
    lines.append(f"(cells: standardised residual (count − {expected:,.0f}) / √{expected:,.0f})")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small files (a smoke test)")
    parser.add_argument("--dir", default=None, help="where to put the files (default: system tmp)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["records", "lines", "uniformity"], default=None)
    args = parser.parse_args()
    rec_bytes, line_bytes = (64 * MiB, 32 * MiB) if args.quick else (2 * GiB, 1 * GiB)
    memory, budget = ("16M", 16 * MiB) if args.quick else ("512M", 512 * MiB)
    uni_n, uni_budget = (10**6, 10**5) if args.quick else (10**7, 10**6)
    work = tempfile.mkdtemp(prefix="padless-bench-", dir=args.dir)
    print("# shuffle_file benchmark\n")
    print(f"Command: `{' '.join([os.path.basename(sys.executable)] + sys.argv)}`\n")
    print("Machine: " + sh("nproc") + " CPUs (`nproc`), " + sh("uname -srm"))
    print("```\n" + sh("free -g") + "\n" + sh(f"df -h {work}") + "\n```")
    print(f"Load average at start: {os.getloadavg()[0]:.2f} (other jobs share this machine)\n")
    try:
        if args.only in (None, "records"):
            src = os.path.join(work, "records.bin")
            write_records(src, rec_bytes)
            print("## Records: 16-byte GloVe-like records, sorted by i\n")
            print(table("records", bench_file("16", src, work, memory, args.runs), budget))
            os.unlink(src)
            print()
        if args.only in (None, "lines"):
            src = os.path.join(work, "lines.txt")
            count, mean = write_lines(src, line_bytes)
            print(f"## Lines: {count:,} lines, mean {mean:.1f} bytes (lognormal lengths)\n")
            print(table("lines", bench_file("lines", src, work, memory, args.runs), budget))
            os.unlink(src)
            print()
        if args.only in (None, "uniformity"):
            print("## Uniformity\n")
            print(uniformity(uni_n, uni_budget, work, None))
            print()
            print(uniformity(uni_n, uni_budget, work, "numba"))
        print(f"\nLoad average at end: {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
