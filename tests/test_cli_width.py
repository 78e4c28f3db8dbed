"""``padless plan`` and ``padless shuffle`` print in 80 columns (wider only where the terminal
is, as ``COLUMNS`` says here); ``padless plan --json`` keeps one JSON record per epoch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import padless

SCRIPT = str(Path(sys.executable).parent / "padless")


def run(*args, columns=None, cwd=None):
    env = dict(os.environ)
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [SCRIPT, *map(str, args)], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def widest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def test_plan_prints_a_table_in_80_columns_even_for_long_paths(tmp_path):
    long = tmp_path / ("a-rather-long-folder-name-" * 3) / "plan.npz"
    long.parent.mkdir()
    done = run("plan", "--strategy", "packing", "--capacity", 4096, "-o", long, "--epochs", 2)
    assert done.returncode == 0, done.stderr
    assert widest(done.stdout) <= 80, done.stdout  # a pipe: 80 columns
    rows = [line.split() for line in done.stdout.splitlines() if line.split()[0].isdigit()]
    assert [r[0] for r in rows] == ["0", "1"]
    assert rows[1][-1].startswith("...") and rows[1][-1].endswith("plan-epoch1.npz")
    plan = padless.BatchPlan.load(long.parent / "plan-epoch1.npz")
    assert rows[1][1] == f"{len(plan):,}"  # the table's batches are the saved plan's
    wide = run("plan", "--strategy", "packing", "--capacity", 4096, "-o", long, columns=200)
    assert str(long) in wide.stdout  # a wider terminal shows the whole path
    narrow = run("plan", "--strategy", "packing", "--capacity", 4096, "-o", long, columns=60)
    assert widest(narrow.stdout) <= 60, narrow.stdout


def test_plan_json_prints_one_record_per_epoch(tmp_path):
    out = tmp_path / "p.npz"
    done = run("plan", "--max-tokens", 4096, "--epochs", 3, "-o", out, "--json")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["epoch"] for r in records] == [0, 1, 2]
    assert records[2]["path"] == str(tmp_path / "p-epoch2.npz")
    assert records[0]["spec"]["max_tokens"] == 4096


def test_shuffle_messages_fit_80_columns(tmp_path):
    (tmp_path / "a.txt").write_text("".join(f"line {i}\n" for i in range(5000)))
    done = run("shuffle", "--lines", "a.txt", "b.txt", cwd=tmp_path)  # no seed: a long message
    assert done.returncode == 0, done.stderr
    assert "reproduce with --seed" in done.stderr and widest(done.stderr) <= 80, done.stderr
    shards = run("shuffle", "--lines", "--shards", 3, "--seed", 1, tmp_path / "a.txt",
                 tmp_path / ("out-" + "x" * 30 + ".txt"))  # fmt: skip
    assert shards.returncode == 0, shards.stderr
    assert "3 shards" in shards.stderr and widest(shards.stderr) <= 80, shards.stderr
    lines = sorted(
        line for p in sorted(tmp_path.glob("out-*")) for line in p.read_text().splitlines()
    )
    assert lines == sorted(f"line {i}" for i in range(5000))
    assert np.unique(lines).size == 5000


def test_a_long_input_path_is_cut_across_the_table_and_the_messages(tmp_path):
    """The table's header kept a path longer than a line whole (88 columns), and so did a
    message (125 columns): both now cut it across lines, a message on lines of its own."""
    folder = tmp_path / ("a_very_long_directory_name_for_the_width_of_the_tables_" * 2)
    folder.mkdir()
    np.save(folder / "lengths.npy", np.arange(1, 200))
    done = run("plan", folder / "lengths.npy", "--max-tokens", 4096, "-o", tmp_path / "p.npz")
    assert done.returncode == 0, done.stderr
    assert widest(done.stdout) <= 80 and "lengths.npy" in done.stdout.replace("\n  ", ""), (
        done.stdout
    )
    (folder / "no_newline.txt").write_bytes(b"a\nb\nc")
    done = run("shuffle", "--lines", "--seed", 1, folder / "no_newline.txt", tmp_path / "o.txt")
    assert done.returncode == 0 and "had no newline" in done.stderr, done.stderr
    # no line passes 80 columns; the path starts a line and is cut across lines of its own
    assert widest(done.stderr) <= 80, done.stderr
    lines = done.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(f"'{tmp_path}"))
    assert lines[start].strip() == f"'{folder}"[: len(lines[start].strip())]
    joined = "".join(line.strip() for line in lines[start:])
    assert f"'{folder / 'no_newline.txt'}'" in joined, done.stderr
