"""Benchmark shuffle_file next to GNU shuf, cp and dd in the same run; peak memory; uniformity.

Builds, in a temporary directory (``--dir``, default the system's; keep it on the disk you mean to
measure), a text file of lines whose lengths are lognormal around 110 bytes (550 MiB, or 32 MiB
with ``--quick``) and a file of 16-byte GloVe-like records (int32 i sorted, int32 j, float64
value; 512 MiB, or 64 MiB), then times, ``--runs`` times each (default 3; the tools take turns
within a round, and ``sync`` runs before every run):

- lines that fit: ``padless.shuffle_file(..., lines=True, memory=2G)`` (the one-pass in-memory
  path) against GNU ``shuf -o`` (which holds the file in memory);
- records that fit: ``shuffle_file(..., record_size=16, memory=2G)`` against ``cp`` of the same
  file (a shuffle can only be slower than a copy);
- out of core, both files with ``memory=384M`` (bucket files; the compiled engine): lines against
  ``shuf`` and records against ``dd bs=4M conv=fdatasync`` (the disk's write floor; a bucket
  shuffle writes everything twice and flushes the output with fsync).

padless runs in a fresh subprocess per run: the table gives the wall time of the call (which
loads the compiled kernels, ``padless._core``: about a millisecond and 0.3 MiB) and of the
``padless shuffle`` command as a whole process (interpreter start, imports, the call), the figure
to hold against a command such as shuf. Peak memory: the whole process's peak
resident size (GNU time, like the other tools), and the call's own peak above the resident size
at the call (``VmHWM`` after ``/proc/self/clear_refs``). Throughput is input bytes ÷ wall time;
best and median of the runs.

Then the uniformity figures: 1e7 16-byte records holding their input position (``--quick``:
1e6): Spearman ρ between input and output positions and the χ² test of the (input decile ×
output decile) table, through buckets (budget 1e6 records: the compiled engine, and the numpy
engine forced) and in memory (budget 1G: the compiled engine's one-pass path).

Run: ``python benchmarks/bench_shuffle.py [--quick] [--dir DIR] [--runs N]
[--only fit|fit-lines|ooc|uniformity]`` (``fit-lines``: only the lines that fit, against shuf).
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
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
import padless
from padless.shuffle import shuffle_file
kind, src, dst, memory = sys.argv[1:5]
kw = {"lines": True} if kind == "lines" else {"record_size": int(kind)}
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) starts afresh at the resident size now
except OSError:
    pass
entry = status("VmRSS")
t0 = time.perf_counter()
res = shuffle_file(src, dst, memory=memory, seed=1, **kw)
t1 = time.perf_counter()
print(json.dumps({"seconds": t1 - t0, "peak": status("VmHWM") - entry, "entry": entry,
                  "engine": res.engine, "buckets": res.buckets, "depth": res.depth}))
"""


def sh(cmd: str) -> str:
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()


def sync() -> None:
    subprocess.run(["sync"], check=True)


# A small process that starts the command and reports its peak resident size (wait4). Not
# straight from this process: until it execs, a child forked from here counts this process's
# pages as its own in ru_maxrss.
_SPAWN = """
import os, sys, time
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ)
anon = 0
while True:
    done, status, usage = os.wait4(pid, os.WNOHANG)
    if done:
        break
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = max(anon, int(line.split()[1]))
    except OSError:
        pass
    time.sleep(0.005)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss, anon, file=sys.stderr)
"""


def run_measured(argv: list[str]) -> tuple[float, int, int, str]:
    """Run a command; return (wall seconds, its own peak RSS in bytes, its peak anonymous memory
    in bytes, polled every 5 ms: RSS less the pages of files such as shared libraries, which are
    shared between processes; its stdout)."""
    exe = shutil.which(argv[0]) or argv[0]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _SPAWN, exe, *argv[1:]], capture_output=True)
    wall = time.perf_counter() - t0
    code, peak_kib, anon_kib = proc.stderr.decode().split()[-3:]
    if int(code) != 0:
        raise RuntimeError(f"{argv[0]} failed: {proc.stderr.decode(errors='replace')}")
    return wall, int(peak_kib) * 1024, int(anon_kib) * 1024, proc.stdout.decode()


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


def compare(kind: str, src: str, work: str, memory: str, refs: list[str], runs: int) -> list[dict]:
    """Time padless and the reference tools on ``src``, taking turns; one row per tool."""
    size = os.path.getsize(src)
    dst = os.path.join(work, "out")
    arg = "lines" if kind == "lines" else "16"
    tools: list[tuple[str, list[str]]] = [
        (f"padless shuffle_file(memory={memory}), call", [sys.executable, "-c", _CHILD, arg, src,
                                                           dst, memory]),
    ]  # fmt: skip
    commands = {
        "shuf": ("GNU shuf -o (in memory)", ["shuf", src, "-o", dst]),
        "cp": ("cp", ["cp", src, dst]),
        "dd": ("dd bs=4M conv=fdatasync", ["dd", f"if={src}", f"of={dst}", "bs=4M",
                                            "conv=fdatasync", "status=none"]),
    }  # fmt: skip
    padless_cmd = shutil.which("padless", path=os.path.dirname(sys.executable)) or "padless"
    kind_args = ["--lines"] if kind == "lines" else ["--record-size", "16"]
    # The command's --memory covers the whole process and gives the shuffle 48 MiB less: add
    # them, so that the command's shuffle has the call's budget (and the same engine).
    from padless.cli.shuffle import COMMAND_RESERVE
    from padless.shuffle import parse_memory

    cmd_memory = f"{(parse_memory(memory) + COMMAND_RESERVE) // MiB}M"
    tools.append((
        f"`padless shuffle --memory {cmd_memory}`, the command",
        [padless_cmd, "shuffle", *kind_args, "--memory", cmd_memory, "--seed", "1", "-q", src,
         dst],
    ))  # fmt: skip
    tools += [commands[r] for r in refs if shutil.which(commands[r][1][0])]
    rows = [{"tool": name, "walls": [], "peaks": [], "anon": [], "inner": [], "above": [],
             "info": {}}
            for name, _ in tools]  # fmt: skip
    for _ in range(runs):
        for row, (_, argv) in zip(rows, tools, strict=True):
            if os.path.exists(dst):
                os.unlink(dst)
            sync()
            wall, peak, anon, out = run_measured(argv)
            row["walls"].append(wall)
            row["peaks"].append(peak)
            row["anon"].append(anon)
            if argv[0] == sys.executable:
                info = json.loads(out)
                row["inner"].append(info["seconds"])
                row["above"].append(info["peak"])
                row["info"] = info
    if os.path.exists(dst):
        os.unlink(dst)
    for row in rows:
        row["size"] = size
        row["times"] = row["inner"] or row["walls"]
    return rows


def rates(row: dict) -> tuple[float, float]:
    """(best, median) MB/s of a row."""
    size = row["size"]
    return size / min(row["times"]) / 1e6, size / statistics.median(row["times"]) / 1e6


def table(title: str, rows: list[dict]) -> str:
    """Rows: padless's call, padless's command, then the reference tools."""
    pad, command = rows[0], rows[1]
    size = pad["size"]
    best, median = rates(pad)
    cbest, cmedian = rates(command)
    out = [
        f"| {title} ({size / MiB:,.0f} MiB) | MB/s best | MB/s median | runs (s) "
        "| peak RSS, whole process | peak anonymous memory | call ÷ tool (best, median) "
        "| command ÷ tool (best, median) |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        b, m = rates(row)
        runs = ", ".join(f"{w:.2f}" for w in row["times"])
        ratio = "" if row is pad else f"{best / b:.2f}, {median / m:.2f}"
        cratio = "" if row is pad or row is command else f"{cbest / b:.2f}, {cmedian / m:.2f}"
        peak, anon = max(row["peaks"]), max(row["anon"])
        out.append(
            f"| {row['tool']} | {b:,.0f} | {m:,.0f} | {runs} | {peak / MiB:,.0f} MiB "
            f"({peak / size:.2f}× input) | {anon / MiB:,.0f} MiB ({anon / size:.2f}× input) "
            f"| {ratio} | {cratio} |"
        )
    info = pad["info"]
    out.append("")
    out.append(
        "The call: `shuffle_file` in a fresh process (it loads the compiled kernels). The "
        "command: the whole process, from the interpreter's start (imports, the call) to its "
        "exit, as the other tools are timed. "
        f"Engine {info['engine']}, {info['buckets']} bucket files, depth {info['depth']}. "
        f"Peak of the call above the resident size at the call: {max(pad['above']) / MiB:,.0f} "
        f"MiB ({max(pad['above']) / size:.2f}× input); resident size at the call "
        f"{info['entry'] / MiB:.0f} MiB (interpreter, numpy, padless)."
    )
    return "\n".join(out)


# --------------------------------------------------------------------------- uniformity


def uniformity(n: int, budget: int, work: str, engine: str | None) -> str:
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
        res = shuffle_file(src, dst, record_size=16, memory=budget, seed=2024)
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
    where = "in memory" if res.buckets == 0 else f"{res.buckets} buckets, depth {res.depth}"
    lines = [
        f"{n:.0e} records, budget {budget / MiB:,.0f} MiB, engine {res.engine}, {where}, seed 2024:",
        f"Spearman ρ(input position, output position) = {rho:+.5f} (|ρ| < 0.005 required); "
        f"χ²(81 dof) = {chi2.statistic:.1f}, p = {chi2.pvalue:.3f} (pass at 1%: "
        f"{'yes' if chi2.pvalue > 0.01 else 'NO'})",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small files (a smoke test)")
    parser.add_argument("--dir", default=None, help="where to put the files (default: system tmp)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["fit", "fit-lines", "ooc", "uniformity"], default=None)
    args = parser.parse_args()
    line_bytes, rec_bytes = (32 * MiB, 64 * MiB) if args.quick else (550 * MiB, 512 * MiB)
    fit, ooc = ("256M", "16M") if args.quick else ("2G", "384M")
    uni_n, uni_budget = (10**6, 10**5 * 16) if args.quick else (10**7, 10**6 * 16)
    work = tempfile.mkdtemp(prefix="padless-bench-", dir=args.dir)
    print("# shuffle_file benchmark\n")
    print(f"Command: `{' '.join([os.path.basename(sys.executable)] + sys.argv)}`\n")
    print("Machine: " + sh("nproc") + " CPUs (`nproc`), " + sh("uname -srm"))
    print("```\n" + sh("free -g") + "\n" + sh(f"df -h {work}") + "\n```")
    print(f"Load average at start: {os.getloadavg()[0]:.2f} (other jobs share this machine)\n")
    started = time.perf_counter()
    try:
        lines_src = os.path.join(work, "lines.txt")
        rec_src = os.path.join(work, "records.bin")
        if args.only in (None, "fit", "fit-lines", "ooc"):
            count, mean = write_lines(lines_src, line_bytes)
            if args.only != "fit-lines":
                write_records(rec_src, rec_bytes)
            print(f"Lines: {count:,} lines, mean {mean:.1f} bytes (lognormal lengths); records: "
                  f"{rec_bytes // 16:,} 16-byte records sorted by i.\n")  # fmt: skip
        if args.only in (None, "fit", "fit-lines"):
            print(f"## Inputs that fit in the budget (memory={fit}): one pass in memory\n")
            print(table("lines", compare("lines", lines_src, work, fit, ["shuf"], args.runs)))
            print()
        if args.only in (None, "fit"):
            print(table("records", compare("16", rec_src, work, fit, ["cp"], args.runs)))
            print()
        if args.only in (None, "ooc"):
            print(f"## Out of core (memory={ooc}): two passes through bucket files\n")
            print(table("lines", compare("lines", lines_src, work, ooc, ["shuf"], args.runs)))
            print()
            print(table("records", compare("16", rec_src, work, ooc, ["dd"], args.runs)))
            print()
        for path in (lines_src, rec_src):
            if os.path.exists(path):
                os.unlink(path)
        if args.only in (None, "uniformity"):
            print("## Uniformity\n")
            print(uniformity(uni_n, uni_budget, work, None))
            print()
            print(uniformity(uni_n, uni_budget, work, "numpy"))
            print()
            print(uniformity(uni_n, 1 << 30, work, None))
        print(f"\nLoad average at end: {os.getloadavg()[0]:.2f}; "
              f"{time.perf_counter() - started:.0f} s in all")  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
