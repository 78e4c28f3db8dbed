"""The padless command through its real entry point (subprocess)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import padless

PADLESS = str(Path(sys.executable).with_name("padless"))


def run(*args, env=None, check=True):
    proc = subprocess.run(
        [PADLESS, *map(str, args)], capture_output=True, text=True, env=env, timeout=300
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_help_is_fast_and_clear():
    t0 = time.perf_counter()
    out = run("--help").stdout
    assert time.perf_counter() - t0 < 2.0  # measured ~0.05 s; the bound leaves room for CI noise
    for sub in ("report", "plan", "shuffle"):
        assert sub in out
        assert "usage: padless " + sub in run(sub, "--help").stdout


def test_help_imports_nothing_heavy():
    code = "import sys, padless.cli; print(int(any(m in sys.modules for m in ('padless._core', 'torch'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


def test_report_json_agrees_with_library():
    data = json.loads(run("report", "--json", "--max-tokens", "2048").stdout)
    lengths = padless.builtin_corpus()
    assert data["lengths"]["count"] == lengths.size
    assert data["lengths"]["max"] == int(lengths.max())
    rows = {r["strategy"]: r for r in data["strategies"]}
    assert set(rows) == {
        "random",
        "group_by_length",
        "token_budget",
        "exact_length",
        "buckets",
        "packing",
        "fixed_shapes",  # static shapes at the buckets' k, chosen by shape_set
    }
    shapes = padless.FixedShapes(shapes=padless.shape_set(lengths, 8, max_tokens=2048))
    assert rows["fixed_shapes"]["batches"] == len(shapes.plan(lengths))
    plan = padless.plan_token_budget(lengths, max_tokens=2048)
    st = plan.stats(lengths)
    assert rows["token_budget"]["batches"] == st.batches
    assert rows["token_budget"]["padding_pct"] == pytest.approx(100 * st.padding_fraction)
    assert rows["exact_length"]["padding_pct"] == 0.0
    assert rows["token_budget"]["imbalance_balanced"] < 1.05
    assert data["buckets_2d"] is None  # one field: no 2-D bucket table


def test_report_table_and_plot(tmp_path):
    png = tmp_path / "r.png"
    out = run("report", "--plot", png).stdout
    assert "token_budget" in out and "least padding" in out
    assert png.stat().st_size > 10_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_on_every_input_kind(tmp_path):
    np.save(tmp_path / "l.npy", np.array([3, 5, 8, 13] * 10))
    np.savez(tmp_path / "p.npz", en=np.arange(1, 41), es=np.arange(2, 42))
    np.save(tmp_path / "tok.npy", np.arange(100, dtype=np.uint16))
    np.save(tmp_path / "off.npy", np.array([0, 10, 30, 60, 100]))
    (tmp_path / "a.en").write_text("a b c\nd e\nf\n" * 5)
    (tmp_path / "a.es").write_text("x\ny z\nw v u t\n" * 5)
    cases = [
        (["l.npy"], [], 40),
        (["p.npz"], ["--fields", "en,es"], 40),
        (["tok.npy"], ["--offsets", tmp_path / "off.npy"], 4),
        (["a.en"], [], 15),
        (["a.en", "a.es"], [], 15),
        (["a.en"], ["--tokenizer", "chars"], 15),
    ]
    for files, extra, count in cases:
        paths = [tmp_path / f for f in files]
        data = json.loads(run("report", *paths, *extra, "--json").stdout)
        assert data["lengths"]["count"] == count
    data = json.loads(
        run("report", tmp_path / "a.en", "a.es", "--json", check=False).stdout or "{}"
    )
    assert data == {}  # a.es relative to the wrong folder: an error, not a report


def test_report_of_two_fields_has_the_2d_bucket_table(tmp_path):
    from padless.planners.buckets import boundary_costs

    pairs = padless.builtin_corpus(["en", "es"])[::10]
    np.savez(tmp_path / "p.npz", en=pairs[:, 0], es=pairs[:, 1])
    args = ("report", tmp_path / "p.npz", "--fields", "en,es", "--num-buckets", "4")
    data = json.loads(run(*args, "--json").stdout)
    rows = {(tuple(r["grid"]), r["method"]): r for r in data["buckets_2d"]}
    assert set(rows) == {(g, m) for g in ((4, 2), (30, 2)) for m in ("joint", "equal", "1d_max")}
    for grid in ((4, 2), (30, 2)):
        cuts = padless.bucket_boundaries_2d(pairs, grid, method="equal")
        assert rows[grid, "equal"]["padded_slots"] == list(boundary_costs(pairs, cuts))
        ours, theirs = rows[grid, "joint"]["padding_pct"], rows[grid, "equal"]["padding_pct"]
        assert ours[0] <= theirs[0] and ours[1] <= theirs[1]
    table = run(*args).stdout.splitlines()
    start = table.index("  2-D buckets (field 0, then field 1 within each): padding per field")
    block = table[start : start + 10]
    assert all(len(line) <= 80 for line in block), block
    joint = next(line for line in block if line.startswith("  30x2") and "joint" in line)
    assert f"{rows[(30, 2), 'joint']['padding_pct'][1]:.2f}%" in joint


def test_report_on_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = pa.array([[1] * k for k in (3, 7, 2, 9)], type=pa.list_(pa.int32()))
    pq.write_table(
        pa.table({"input_ids": ids, "text": ["a", "b", "c", "d"]}), tmp_path / "t.parquet"
    )
    data = json.loads(
        run("report", tmp_path / "t.parquet", "--column", "input_ids", "--json").stdout
    )
    assert data["lengths"]["max"] == 9 and data["lengths"]["tokens"] == 21


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["report", "/nonexistent.txt"], "no such file"),
        (["report", "--max-tokens", "0"], "--max-tokens must be a positive int, got 0"),
        (["plan", "-o", "/tmp/x.npz"], "needs --max-tokens"),
        (["plan", "--strategy", "packing", "-o", "/tmp/x.npz"], "needs --capacity"),
    ],
)
def test_errors_are_clear(args, message):
    proc = run(*args, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unreadable_and_empty_inputs(tmp_path):
    (tmp_path / "bad.npy").write_bytes(b"not an array")
    proc = run("report", tmp_path / "bad.npy", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (tmp_path / "empty.txt").write_bytes(b"")
    proc = run("report", tmp_path / "empty.txt", check=False)
    assert proc.returncode == 2 and "no sequences" in proc.stderr


def test_missing_optional_dependency_names_the_extra(tmp_path):
    blocker = tmp_path / "block" / "pyarrow"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('blocked for the test')\n")
    (tmp_path / "t.parquet").write_bytes(b"PAR1")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "block")}
    proc = run("report", tmp_path / "t.parquet", env=env, check=False)
    assert proc.returncode == 2
    assert "padless[arrow]" in proc.stderr


def test_plan_saves_what_batchplan_loads(tmp_path):
    out = tmp_path / "plan.npz"
    line = run("plan", "--max-tokens", "4096", "--seed", "3", "-o", out, "--json").stdout
    info = json.loads(line)
    plan = padless.BatchPlan.load(out)
    expected = padless.plan_token_budget(padless.builtin_corpus(), max_tokens=4096, seed=3)
    assert plan == expected and info["batches"] == len(expected)
    run("plan", "--strategy", "exact_length", "--batch-size", "32", "--epochs", "2", "-o", out)
    e0 = padless.BatchPlan.load(tmp_path / "plan-epoch0.npz")
    e1 = padless.BatchPlan.load(tmp_path / "plan-epoch1.npz")
    assert e0 != e1 and sorted(e0.indices.tolist()) == sorted(e1.indices.tolist())


def test_report_on_compressed_text_and_saved_dataset(tmp_path):
    import gzip

    import pyarrow as pa

    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(b"a b c\nd e\n" * 20))
    data = json.loads(run("report", tmp_path / "a.txt.gz", "--json").stdout)
    assert data["lengths"]["count"] == 40 and data["lengths"]["tokens"] == 100
    folder = tmp_path / "ds"
    folder.mkdir()
    table = pa.table({"input_ids": pa.array([[1] * k for k in range(1, 31)])})
    with pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    (folder / "state.json").write_text(
        json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]})
    )
    data = json.loads(run("report", folder, "--column", "input_ids", "--json").stdout)
    assert data["lengths"]["count"] == 30 and data["lengths"]["max"] == 30


def test_program_ends_normally_with_its_status(tmp_path):
    """The program's output is complete, its status kept, and its exit handlers run (nothing
    compiled needs a quick exit past the interpreter's teardown)."""
    code = (
        "import atexit, sys; atexit.register(lambda: print('teardown', file=sys.stderr)); "
        "from padless.cli import command; sys.argv = ['padless', *sys.argv[1:]]; command()"
    )
    report = subprocess.run(
        [sys.executable, "-c", code, "report", "--json"], capture_output=True, text=True
    )
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["lengths"]["count"] == padless.builtin_corpus().size
    assert "teardown" in report.stderr
    (tmp_path / "in.txt").write_text("a\nb\n")
    small = [sys.executable, "-c", code, "shuffle", "--lines", "in.txt", "out.txt"]
    plain = subprocess.run(small, capture_output=True, text=True, cwd=tmp_path)
    assert plain.returncode == 0 and "teardown" in plain.stderr
    assert sorted((tmp_path / "out.txt").read_text().split()) == ["a", "b"]
    failed = subprocess.run(
        [sys.executable, "-c", code, "report", "--max-tokens", "-5"], capture_output=True, text=True
    )
    assert failed.returncode == 2 and "max-tokens" in failed.stderr


def test_report_works_on_a_corpus_with_documents_longer_than_4096(tmp_path):
    """The budget is chosen from the data (it failed on any document over 4,096 tokens), and
    the sweep says how many sequences each budget leaves out."""
    lengths = np.random.default_rng(0).integers(1, 3000, 500)
    lengths[5] = 12_651
    np.save(tmp_path / "l.npy", lengths)
    out = run("report", tmp_path / "l.npy").stdout
    assert "max_tokens 16,384: chosen to hold the longest sequence (12,651" in out
    assert "    max_tokens=16384; " in out  # the token budget's setting
    sweep = out[out.index("left out\n") :].splitlines()
    assert sweep[3].split()[0] == "4,096" and sweep[3].endswith(" 1 seq.")
    data = json.loads(run("report", tmp_path / "l.npy", "--json").stdout)
    assert data["max_tokens"] == 16_384 and data["max_tokens_chosen"] is True
    proc = run("report", tmp_path / "l.npy", "--max-tokens", "4096", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        "--max-tokens must be at least the longest sequence (12,651 tokens) for the report to "
        "plan every sequence, got 4,096: pass --max-tokens 16384"
    ) in proc.stderr


def test_report_reads_in_80_columns(tmp_path):
    """Every line of the text report fits 80 columns: one corpus, and pairs (with the 2-D
    buckets' table), whatever COLUMNS says."""
    pairs = padless.builtin_corpus(["en", "es"])[:3000]
    np.save(tmp_path / "pairs.npy", pairs)
    for args in ([], [tmp_path / "pairs.npy", "--world-size", "64"]):
        out = run("report", *args, env={**os.environ, "COLUMNS": "200"}).stdout
        wide = [line for line in out.splitlines() if len(line) > 80]
        assert not wide, wide
        assert "padding and work" in out and "balance across" in out
    assert "2-D buckets" in out


def test_help_reads_in_80_columns_and_says_what_settings_mean():
    env = {**os.environ, "COLUMNS": "80"}
    for sub in ("report", "plan", "shuffle"):
        out = run(sub, "--help", env=env).stdout
        wide = [line for line in out.splitlines() if len(line) > 80]
        assert not wide, (sub, wide)
    out = " ".join(run("plan", "--help", env=env).stdout.split())
    assert "--capacity VALUE tokens per packed row: " in out  # a meaning, not only "an int"
    assert "--strategy NAME the planner: token_budget, exact_length" in out
