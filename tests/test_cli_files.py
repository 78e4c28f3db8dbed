"""The user's files (issue 13, items 8-10 and the clear errors): the CLI writes exactly the path
given, never renames over a device or a pipe, never overwrites its input, never reads a plan as
lengths, and stays quiet when its reader closes the pipe."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import padless
from padless.cli import main

LENGTHS = np.random.default_rng(0).integers(1, 60, 300)


def cli(*args):
    """Run the command in this process; return (status, stdout, stderr)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main([str(a) for a in args])
    return status, out.getvalue(), err.getvalue()


def command(*args, **kwargs):
    """The real entry point in a fresh process (``python -m padless.cli``)."""
    return subprocess.run(
        [sys.executable, "-m", "padless.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )


@pytest.fixture
def lengths_file(tmp_path):
    path = tmp_path / "lengths.npy"
    np.save(path, LENGTHS)
    return path


def device_node(path, minor):
    """A character device like /dev/null (minor 3) or /dev/full (minor 7) at ``path``, so a
    test that goes wrong replaces a copy, never the machine's own node (needs root)."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except (PermissionError, AttributeError, OSError) as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    return path


# ------------------------------------------------------------------ item 10: exactly the path


def test_plan_writes_exactly_the_path_given(tmp_path, lengths_file):
    out = tmp_path / "plan"  # no suffix: nothing may be appended
    status, stdout, _ = cli("plan", lengths_file, "--max-tokens", "256", "-o", out, "--json")
    assert status == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lengths.npy", "plan"]
    assert json.loads(stdout)["path"] == str(out)
    assert padless.BatchPlan.load(out) == padless.plan_token_budget(LENGTHS, max_tokens=256)
    status, _, _ = cli("plan", lengths_file, "--max-tokens", "256", "--epochs", "2", "-o", out)
    assert status == 0
    assert {"plan-epoch0", "plan-epoch1"} <= {p.name for p in tmp_path.iterdir()}


def test_plan_into_a_folder_is_refused_naming_it(tmp_path, lengths_file):
    folder = tmp_path / "plans"
    folder.mkdir()
    status, _, err = cli("plan", lengths_file, "--max-tokens", "256", "-o", folder)
    assert status == 2
    assert str(folder) in err and "is a folder" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lengths.npy", "plans"]
    assert list(folder.iterdir()) == []


def test_plan_into_a_missing_folder_names_the_folder(tmp_path, lengths_file):
    status, _, err = cli("plan", lengths_file, "--max-tokens", "256", "-o", tmp_path / "no" / "p")
    assert status == 2 and f"does not exist: {tmp_path / 'no'}" in err


def test_plan_to_a_full_device_fails_clearly_and_keeps_the_device(tmp_path, lengths_file):
    full = device_node(tmp_path / "full", 7)
    status, _, err = cli("plan", lengths_file, "--max-tokens", "256", "-o", full)
    assert status == 2
    assert str(full) in err and "No space left on device" in err and "full" in err
    assert stat.S_ISCHR(os.stat(full).st_mode)  # still the device, not a file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "lengths.npy"]


def test_plan_to_a_null_device_is_written_in_place(tmp_path, lengths_file):
    null = device_node(tmp_path / "null", 3)
    status, _, _ = cli("plan", lengths_file, "--max-tokens", "256", "-o", null)
    assert status == 0 and stat.S_ISCHR(os.stat(null).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lengths.npy", "null"]


def test_plan_to_dev_stdout_of_a_pipe_is_written_in_place(tmp_path, lengths_file):
    """/dev/stdout of a pipe links to "pipe:[N]", which names no path: it was taken for a new
    file and the write failed ("No such file or directory")."""
    proc = subprocess.run(
        [sys.executable, "-m", "padless.cli", "plan", str(lengths_file), "--max-tokens", "256",
         "-o", "/dev/stdout", "--json"],
        capture_output=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    saved = tmp_path / "received"
    saved.write_bytes(proc.stdout[: proc.stdout.rindex(b"PK\x05\x06") + 22])  # the zip's end
    assert padless.BatchPlan.load(saved) == padless.plan_token_budget(LENGTHS, max_tokens=256)
    records = tmp_path / "records.bin"
    records.write_bytes(np.arange(500, dtype=np.int32).tobytes())
    proc = subprocess.run(
        [sys.executable, "-m", "padless.cli", "shuffle", str(records), "/dev/stdout",
         "--record-size", "4", "--seed", "1"],
        capture_output=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = np.frombuffer(proc.stdout, dtype=np.int32)
    assert sorted(got.tolist()) == list(range(500)) and got.tolist() != list(range(500))


def test_dev_stdout_of_a_file_is_written_through_the_shells_descriptor(tmp_path, lengths_file):
    """/dev/stdout of a regular file (the shell's ``>`` or ``>>``) was replaced by a rename:
    what the shell wrote before and after the command (its group's header, a log's earlier
    lines) was lost. It is written through the descriptor now, where the shell put it."""
    lines = tmp_path / "in.txt"
    lines.write_text("a\nb\nc\nd\n")
    grouped, log, plans = (tmp_path / n for n in ("grouped.txt", "log.txt", "plans.bin"))
    py = f"{sys.executable} -m padless.cli"
    script = (
        f"{{ echo header; {py} shuffle {lines} /dev/stdout --lines --seed 1 -q; echo footer; }}"
        f" > {grouped}; echo earlier > {log}; {py} shuffle {lines} /dev/fd/1 --lines -q >> {log};"
        f" echo earlier > {plans}; {py} plan {lengths_file} --max-tokens 256 -o /dev/stdout"
        f" >> {plans}"
    )
    subprocess.run(["bash", "-c", script], check=True, timeout=300)
    out = grouped.read_text().splitlines()
    assert out[0] == "header" and out[-1] == "footer" and sorted(out[1:-1]) == list("abcd")
    out = log.read_text().splitlines()
    assert out[0] == "earlier" and sorted(out[1:]) == list("abcd")
    data = plans.read_bytes()
    assert data.startswith(b"earlier\nPK")
    saved = tmp_path / "plan.npz"
    saved.write_bytes(data[len(b"earlier\n") :])
    assert padless.BatchPlan.load(saved) == padless.plan_token_budget(LENGTHS, max_tokens=256)


def test_one_file_per_epoch_or_shard_into_a_device_is_refused(tmp_path, lengths_file):
    """--epochs 2 into /dev/null made /dev/null-epoch0 and -epoch1 beside the device."""
    null = device_node(tmp_path / "null", 3)
    status, _, err = cli("plan", lengths_file, "--max-tokens", "256", "-o", null, "--epochs", 2)
    assert status == 2 and "is a device or pipe, and --epochs 2 writes one file per epoch" in err
    records = tmp_path / "records.bin"
    records.write_bytes(bytes(range(64)))
    status, _, err = cli("shuffle", records, null, "--record-size", 4, "--shards", 2)
    assert status == 2 and "is a device or pipe, and shards=2 writes one file per shard" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lengths.npy", "null", "records.bin"]


# ------------------------------------------------------------------ item 8: --plot in place


def test_plot_into_a_pipe_is_written_in_place(tmp_path, lengths_file):
    fifo = tmp_path / "plot.fifo"
    os.mkfifo(fifo)
    sink = tmp_path / "received.png"
    with open(sink, "wb") as out:
        reader = subprocess.Popen(["cat", str(fifo)], stdout=out)
        try:
            proc = command("report", lengths_file, "--max-tokens", "256", "--plot", fifo)
            reader.wait(timeout=60 if proc.returncode == 0 else 1)
        except subprocess.TimeoutExpired:
            pass
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait()
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # the pipe is still there, not replaced
    assert sink.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_to_a_full_device_keeps_the_device(tmp_path, lengths_file):
    full = device_node(tmp_path / "full", 7)
    status, _, err = cli("report", lengths_file, "--max-tokens", "256", "--plot", full)
    assert status == 2 and "No space left on device" in err and str(full) in err
    assert stat.S_ISCHR(os.stat(full).st_mode)


def test_plot_into_a_missing_folder_names_the_folder(tmp_path, lengths_file):
    target = tmp_path / "figs" / "r.png"
    status, _, err = cli("report", lengths_file, "--max-tokens", "256", "--plot", target)
    assert status == 2
    assert f"does not exist: {tmp_path / 'figs'}" in err
    assert ".tmp" not in err and "padless-out" not in err  # no temporary name in the message


def test_plot_replaces_a_regular_file_keeping_its_mode(tmp_path, lengths_file):
    target = tmp_path / "r.svg"
    target.write_text("old")
    target.chmod(0o640)
    status, _, _ = cli("report", lengths_file, "--max-tokens", "256", "--plot", target)
    assert status == 0
    assert target.read_bytes().lstrip().startswith(b"<?xml")  # the suffix picks SVG
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lengths.npy", "r.svg"]


# ------------------------------------------------------------------ item 9: inputs are safe


def test_plan_refuses_to_overwrite_its_input(tmp_path):
    src = tmp_path / "inp.npz"
    np.savez(src, lengths=LENGTHS)
    before = src.read_bytes()
    os.link(src, tmp_path / "hard.npz")
    os.symlink(src, tmp_path / "soft.npz")
    for out in (src, tmp_path / "hard.npz", tmp_path / "soft.npz", tmp_path / "." / "inp.npz"):
        status, _, err = cli("plan", src, "--max-tokens", "256", "-o", out)
        assert status == 2 and "is the input" in err, err
    assert src.read_bytes() == before


def test_report_refuses_to_plot_over_its_input(tmp_path, lengths_file):
    before = lengths_file.read_bytes()
    status, _, err = cli("report", lengths_file, "--plot", lengths_file)
    assert status == 2 and "is the input" in err
    assert lengths_file.read_bytes() == before


def test_offsets_file_is_an_input_too(tmp_path):
    np.save(tmp_path / "tok.npy", np.arange(100, dtype=np.uint16))
    np.save(tmp_path / "off.npy", np.array([0, 10, 30, 60, 100]))
    args = ("plan", tmp_path / "tok.npy", "--offsets", tmp_path / "off.npy", "--max-tokens", 64)
    status, _, err = cli(*args, "-o", tmp_path / "off.npy")
    assert status == 2 and "is the input" in err


def test_every_file_read_is_an_input(tmp_path, lengths_file):
    """A shard of an input folder, an indexed dataset's .bin beside its .idx, a tokenizer file,
    --cost and --memory: none is written over by -o or --plot (each was replaced, rc 0)."""
    from padless.io.indexed import write_indexed

    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "saved"
    datasets.Dataset.from_dict({"ids": [[1, 2, 3], [4, 5]]}).save_to_disk(str(folder))
    part = next(folder.glob("*.arrow"))
    write_indexed([np.arange(5), np.arange(7)], str(tmp_path / "corpus"), dtype=np.uint16)
    (tmp_path / "tok.model").write_bytes(b"not read: refused before")
    cost = padless.MeshCost(forward=padless.Cost(linear=1e-6), backward=padless.Cost(linear=2e-6))
    cost.save(tmp_path / "cost.json")
    kept = {p: p.read_bytes() for p in (part, tmp_path / "corpus.bin", tmp_path / "cost.json")}
    kept[tmp_path / "tok.model"] = (tmp_path / "tok.model").read_bytes()
    for args in (
        ("plan", folder, "--column", "ids", "--max-tokens", 64, "-o", part),
        ("plan", tmp_path / "corpus.idx", "--max-tokens", 64, "-o", tmp_path / "corpus.bin"),
        ("report", lengths_file, "--tokenizer", f"spm:{tmp_path / 'tok.model'}",
         "--plot", tmp_path / "tok.model"),
        ("simulate", lengths_file, "--mesh", "dp=2", "--cost", tmp_path / "cost.json",
         "--plot", tmp_path / "cost.json"),
    ):  # fmt: skip
        status, _, err = cli(*args)
        assert status == 2 and "would destroy the input" in err, (args, err)
    assert all(p.read_bytes() == data for p, data in kept.items())
    # a new file inside an input folder destroys nothing: written
    status, _, err = cli("plan", folder, "--column", "ids", "--max-tokens", 64, "-o", folder / "p")
    assert status == 0, err
    assert (folder / "p").is_file() and part.read_bytes() == kept[part]


def test_a_saved_plan_is_not_read_as_lengths(tmp_path, lengths_file):
    plan_path = tmp_path / "plan.npz"
    assert cli("plan", lengths_file, "--max-tokens", "256", "-o", plan_path)[0] == 0
    packed = tmp_path / "packed.npz"
    assert (
        cli("plan", lengths_file, "--strategy", "packing", "--capacity", 64, "-o", packed)[0] == 0
    )
    old_style = tmp_path / "old.npz"  # a plan saved before plans carried their record
    np.savez(old_style, indices=np.arange(3), offsets=np.array([0, 3]), skipped=np.zeros(0))
    for path in (plan_path, packed, old_style):
        for sub in (["report"], ["plan", "--max-tokens", "256", "-o", tmp_path / "again.npz"]):
            status, _, err = cli(*sub, path)
            assert status == 2, err
            assert "is a padless plan" in err and "BatchPlan.load" in err
    assert not (tmp_path / "again.npz").exists()


def test_token_corpus_npz_is_still_read(tmp_path):
    corpus = tmp_path / "corpus.npz"
    np.savez(corpus, tokens=np.arange(60), offsets=np.array([0, 10, 25, 60]))
    status, out, err = cli("report", corpus, "--json", "--max-tokens", "64")
    assert status == 0, err
    assert json.loads(out)["lengths"]["count"] == 3


# ------------------------------------------------------------------ clear errors: closed pipe


def test_report_json_into_a_closed_pipe_is_quiet(lengths_file):
    proc = subprocess.Popen(
        [sys.executable, "-m", "padless.cli", "report", str(lengths_file), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # the reader is gone before anything is written, as `| head` can be
    _, err = proc.communicate(timeout=300)
    err = err.decode()
    assert proc.returncode == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err
    assert err == ""


def test_entry_point_module_runs():
    proc = command("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("padless ")
    script = Path(sys.executable).with_name("padless")
    assert subprocess.run([script, "--version"], capture_output=True).returncode == 0
