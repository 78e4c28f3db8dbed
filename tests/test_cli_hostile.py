"""The padless command against hostile input: every refusal is one line naming the option, with
exit status 2 and no traceback; outputs on standard output are not mixed with the summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import padless
from padless.cli import BROKEN_PIPE_STATUS, main
from padless.cli._text import fit

PADLESS = str(Path(sys.executable).with_name("padless"))
DEEP = "[" * 20000 + "]" * 20000


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A folder of small inputs: lengths, parallel text, an indexed pair, a Dataset folder."""
    root = tmp_path_factory.mktemp("hostile")
    rng = np.random.default_rng(0)
    np.save(root / "lengths.npy", rng.integers(1, 200, 500))
    np.save(root / "long.npy", rng.integers(256, 2000, 300))  # decomposition's min_length
    for name in ("train.en", "train.es"):
        lines = (" ".join(["w"] * int(n)) for n in rng.integers(1, 30, 100))
        (root / name).write_text("\n".join(lines) + "\n")
    padless.write_indexed(
        [rng.integers(0, 1000, int(n)) for n in rng.integers(1, 50, 50)],
        root / "corp",
        dtype=np.uint16,
    )
    (root / "data").mkdir()  # a saved Dataset (not a DatasetDict) as the options see it
    (root / "data" / "state.json").write_text("{}")
    (root / "nums.txt").write_text("".join(f"{i}\n" for i in range(300_000)))
    (root / "adir").mkdir()
    (root / "bad.json").write_text("{}")
    return root


def cli(capsys, *args):
    """``padless ARGS`` in this process: (status, stdout, stderr)."""
    status = main([str(a) for a in args])
    out = capsys.readouterr()
    return status, out.out, out.err


def refused(capsys, *args) -> str:
    """The one-line error of ``padless ARGS``, which must exit 2."""
    status, _out, err = cli(capsys, *args)
    assert status == 2, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


def proc(*args, cwd=None, env=None, **kw):
    return subprocess.run(
        [PADLESS, *map(str, args)], capture_output=True, cwd=cwd, env=env, timeout=60, **kw
    )


# 1. deeply nested JSON


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("report", "--cost", DEEP), "--cost"),
        (("plan", "{f}/lengths.npy", "--max-tokens", DEEP, "-o", "{f}/x.npz"), "--max-tokens"),
        (("report", "--set", f"buckets.boundaries={DEEP}"), "--set buckets.boundaries"),
    ],
)
def test_deeply_nested_json_is_refused_naming_the_option(capsys, files, args, option):
    err = refused(capsys, *(a.replace("{f}", str(files)) for a in args))
    assert option in err and "nested too deeply" in err


def test_a_recursion_error_never_prints_a_traceback(capsys, monkeypatch):
    import padless.cli.report as report

    def deep(args):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(report, "run", deep)
    err = refused(capsys, "report")
    assert "nested too deeply" in err


# 2. and 3. the report's rows for decomposition and for settings that replace shared ones


def test_report_runs_decomposition_without_balance(capsys, files):
    status, out, err = cli(
        capsys,
        "report",
        files / "long.npy",
        "--json",
        "--set",
        "decomposition.tokens_per_batch=8192",
    )
    assert status == 0, err
    data = json.loads(out)
    rows = {r["strategy"]: r for r in data["strategies"]}
    assert "decomposition" not in {x["strategy"] for x in data["not_run"]}
    row = rows["decomposition"]
    assert row["batches"] > 0 and row["imbalance"] is not None
    assert row["imbalance_balanced"] is None and "balance not applied" in row["note"]
    assert rows["packing"]["imbalance_balanced"] is not None  # the others still balance


def test_report_set_replaces_the_shared_settings_it_conflicts_with(capsys, files):
    status, out, err = cli(
        capsys,
        "report",
        files / "lengths.npy",
        "--json",
        "--set",
        "buckets.boundaries=12,40,100",
        "--set",
        "exact_length.batch_size=16",
    )
    assert status == 0, err
    rows = {r["strategy"]: r for r in json.loads(out)["strategies"]}
    assert rows["buckets"]["spec"]["boundaries"] == [12, 40, 100]
    assert rows["buckets"]["spec"].get("num_buckets") is None
    assert rows["exact_length"]["spec"]["batch_size"] == 16
    assert rows["exact_length"]["spec"].get("max_tokens") is None
    assert rows["token_budget"]["spec"]["max_tokens"] == json.loads(out)["max_tokens"]


# 4. a closed standard output


def test_shuffle_into_a_closed_pipe_stops_quietly(files):
    reader = subprocess.Popen(
        [PADLESS, "shuffle", files / "nums.txt", "-", "--lines", "--seed", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None and reader.stderr is not None
    reader.stdout.readline()
    reader.stdout.close()  # as `| head -1` does
    err = reader.stderr.read()
    assert reader.wait(timeout=60) == BROKEN_PIPE_STATUS
    assert b"error" not in err and b"Broken pipe" not in err, err


# 5. outputs on standard output


def test_plan_to_stdout_prints_its_summary_on_stderr(files, tmp_path):
    with open(tmp_path / "v.npz", "wb") as out:
        done = subprocess.run(
            [PADLESS, "plan", files / "lengths.npy", "--max-tokens", "4096", "-o", "/dev/stdout"],
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    data = (tmp_path / "v.npz").read_bytes()
    assert b"padless plan:" not in data and b"padless plan:" in done.stderr
    assert data[-22:-18] == b"PK\x05\x06"  # the archive's end record ends the file
    assert len(padless.BatchPlan.load(tmp_path / "v.npz")) > 0
    # the same file by its name under >>: the JSON record goes to standard error too
    log = tmp_path / "log"
    log.touch()
    with open(log, "ab") as out:
        done = subprocess.run(
            [PADLESS, "plan", files / "lengths.npy", "--max-tokens", "4096", "-o", log, "--json"],
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stderr)["path"] == str(log)
    assert len(padless.BatchPlan.load(log)) > 0


def test_report_plot_to_stdout_prints_the_json_on_stderr(files, tmp_path):
    pytest.importorskip("matplotlib")
    done = proc("report", files / "lengths.npy", "--plot", "/dev/stdout", "--json")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"\x89PNG") and b'"strategies"' not in done.stdout
    assert json.loads(done.stderr)["input"].endswith("lengths.npy")


# 6. options that would be ignored


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("report", "--plot", ""), ["--plot"]),
        (("simulate", "{f}/lengths.npy", "--mesh", "dp=8", "--plot", ""), ["--plot"]),
        (("shuffle", "{f}/corp.idx", "{f}/out", "--memory", "bogus"), ["--memory", "--indexed"]),
        (("shuffle", "{f}/corp.idx", "{f}/out", "--memory", "1"), ["--memory", "--indexed"]),
        (
            ("report", "{f}/lengths.npy", "--tokenizer", "spm:bpe.model"),
            ["--tokenizer 'spm:bpe.model'", "a .npy array"],
        ),
        (("report", "{f}/train.en", "--column", "x"), ["--column 'x'", "a text file"]),
        (
            ("report", "{f}/train.en", "--offsets", "{f}/lengths.npy"),
            ["--offsets", "a text file"],
        ),
        (("report", "{f}/train.en", "--fields", "en"), ["--fields 'en'", "a text file"]),
        (("report", "{f}/data", "--split", "bogus"), ["--split 'bogus'", "not a DatasetDict"]),
        (("report", "{f}/corp.idx", "--column", "zz"), ["--column 'zz'", "an indexed dataset"]),
        (
            ("plan", "{f}/lengths.npy", "--dtype", "uint16", "--max-tokens", "64", "-o", "{f}/x"),
            ["--dtype 'uint16'", "a .npy array"],
        ),
        (("simulate", "{f}/train.en", "--mesh", "dp=8", "--documents"), ["--documents"]),
        (("report", "--column", "x"), ["--column", "built-in corpus"]),
        (("report", "{f}/train.en", "{f}/train.es", "--fields", "en,en"), ["--fields", "twice"]),
    ],
)
def test_options_that_do_not_apply_are_refused(capsys, files, args, fragments):
    err = refused(capsys, *(a.replace("{f}", str(files)) for a in args))
    for fragment in fragments:
        assert fragment in err, err
    assert not (files / "out.idx").exists()


def test_an_option_that_applies_to_one_of_several_inputs_is_taken(capsys, files):
    status, out, err = cli(capsys, "report", files / "train.en", "--tokenizer", "chars", "--json")
    assert status == 0, err
    assert json.loads(out)["lengths"]["count"] == 100


# 7. sizes bounded


@pytest.mark.parametrize("size", [10**9, 10**23])
def test_report_world_size_is_bounded(capsys, size):
    err = refused(capsys, "report", "--world-size", size)
    assert "--world-size must be at most 2**20" in err and f"{size:,}" in err


# 8. errors name the command line's options


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--record-size", "0"), "--record-size must be a positive int, got 0"),
        (("--lines", "--shards", "0"), "--shards must be a positive int, got 0"),
        (("--lines", "--seed", "-1"), "--seed must be a non-negative int, got -1"),
        (("--lines", "--tmp-dir", "nope"), "--tmp-dir must be an existing directory"),
        # past the open-files limit (it said shards=N)
        (("--lines", "--shards", str(10**12)), f"--shards={10**12} needs {10**12} output files"),
    ],
)
def test_shuffle_errors_name_the_option(capsys, files, args, fragment):
    err = refused(capsys, "shuffle", files / "nums.txt", files / "o.txt", *args)
    assert fragment in err


def test_shuffle_refuses_a_folder_as_dst_naming_it(capsys, files):
    err = refused(capsys, "shuffle", files / "nums.txt", files / "adir", "--lines")
    assert "DST" in err and "is a directory" in err and "Errno" not in err


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("--mesh", "dp=1000000000000000000"), ["--mesh", "2**20"]),
        (("--mesh", "dp=1,pp=5000"), ["--mesh", "pp must be at most 1024"]),
        (("--mesh", "dp=8", "--cost", "{f}/missing.json"), ["--cost", "cannot read it"]),
        (("--mesh", "dp=8", "--cost", "{f}/bad.json"), ["--cost", "bad.json"]),
        (("--mesh", "bogus"), ["--mesh 'bogus'"]),
    ],
)
def test_simulate_errors_name_the_option(capsys, files, args, fragments):
    err = refused(
        capsys, "simulate", files / "lengths.npy", *(a.replace("{f}", str(files)) for a in args)
    )
    for fragment in fragments:
        assert fragment in err, err
    assert "Errno" not in err and "place_items" not in err


def test_simulate_of_two_text_files_does_not_point_to_fields(capsys, files):
    err = refused(capsys, "simulate", files / "train.en", files / "train.es", "--mesh", "dp=8")
    assert "--fields" not in err and "give one INPUT" in err


def test_plan_of_too_long_sequences_names_the_oversize_option(capsys, files):
    err = refused(capsys, "plan", files / "lengths.npy", "--max-tokens", 64, "-o", files / "x.npz")
    assert "--oversize drop" in err and "--max-tokens 64" in err and 'oversize="drop"' not in err
    err = refused(
        capsys,
        "plan",
        files / "lengths.npy",
        "--strategy",
        "packing",
        "--capacity",
        64,
        "-o",
        files / "x.npz",
    )
    assert "--oversize drop" in err and "split or truncate" in err


# 9. widths


@pytest.mark.parametrize("columns", [40, 50])
def test_plan_table_fits_narrow_terminals(capsys, files, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    out = files / "some_long_name_plan.npz"
    args = ["plan", files / "lengths.npy", "--strategy", "packing", "--capacity", 4096]
    status, stdout, err = cli(capsys, *args, "-o", out, "--epochs", 2)
    assert status == 0, err
    assert max(len(line) for line in stdout.splitlines()) <= columns, stdout
    assert "name_plan-epoch1.npz" in stdout


def test_fit_cuts_a_word_longer_than_the_width():
    path = "/a/" + "very_long_folder/" * 8 + "file.txt"
    text = fit(["padless shuffle: warning:", f"the last line of {path!r} had no newline"], 40)
    assert max(len(line) for line in text.splitlines()) <= 40, text
    assert f"{path!r}" in "".join(line.strip() for line in text.splitlines())


# 10. and 11. simulate's plot format and count


def test_simulate_plot_follows_the_suffix(files, tmp_path):
    pytest.importorskip("matplotlib")
    done = proc("simulate", files / "lengths.npy", "--mesh", "dp=8", "--plot", tmp_path / "s.svg")
    assert done.returncode == 0, done.stderr
    assert b"<svg" in (tmp_path / "s.svg").read_bytes()[:2000]


def test_simulate_prints_the_sequences_placed(capsys, files):
    status, out, err = cli(
        capsys, "simulate", files / "lengths.npy", "--mesh", "dp=8", "--global-batch", 10**9
    )
    assert status == 0, err
    assert "500 sequences placed" in out and "1000000000" not in out
