"""Benchmark lengths from text: padless.lengths_of(Path) next to awk '{print NF}' and wc, timed in one run.

Builds, in a temporary directory (``--dir``), a text file of ``--size`` MB (default 300; ``--quick``:
32) of lines of words drawn from a Zipf vocabulary (about 270 bytes and 37 words a line), plus
.gz (gzip -1) and .zst (zstd -3) copies. Then, best of ``--runs`` (default 5), interleaved:

- start-up, in a fresh process: ``import padless``, then the first ``lengths_of(Path)`` on a small
  file (the compiled counter loaded with the package's extension; nothing compiles at run time);
- warm, in this process: ``lengths_of(Path)`` (whitespace), ``lengths_from_text`` with
  ``chars`` and ``bytes``; ``awk '{print NF}'``, ``wc -w`` and ``wc -l`` (GNU, memchr: near the
  memory-speed floor) on the same file; and the .gz/.zst copies next to ``gzip -dc``/``zstd -dc``
  into /dev/null (the decompression floor);
- tokenizers: a BPE (``tokenizers``) and a sentencepiece model trained on a 4 MB sample of the
  text (vocabulary 8000) in the temporary directory; ``lengths_from_text(tokenizer="hf:..."|
  "spm:...")`` on a ``--tok-size`` MB (default 32; ``--quick``: 4) file next to the tokenizer's bare
  batch encode of the same lines already in memory (one call on all lines, and calls of 4096
  lines as padless makes them; the faster of the two is the reference).

Counts are checked: the whitespace counts sum to ``wc -w`` and match awk line by line (on a
prefix); the tokenizer counts match the bare encode's.

Run: ``python benchmarks/bench_lengths.py [--quick] [--size MB] [--runs N] [--dir DIR]``.
Prints a markdown report.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

MB = 1_000_000

_STARTUP = """
import sys, time
t0 = time.perf_counter()
import padless
from pathlib import Path
t1 = time.perf_counter()
padless.lengths_of(Path(sys.argv[1]))
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def make_text(path: Path, size: int, seed: int = 0) -> None:
    """Lines of words from a Zipf vocabulary of 20,000 lowercase words (1-11 letters)."""
    rs = np.random.default_rng(seed)
    vocab = 20_000
    lens = rs.integers(1, 12, vocab)
    letters = rs.integers(97, 123, int(lens.sum())).astype(np.uint8)
    first = np.concatenate([[0], np.cumsum(lens)[:-1]])
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    with open(path, "wb") as fh:
        written = 0
        while written < size:
            ids = rs.choice(vocab, 1_000_000, p=p)
            # each word is preceded by a space, or by a newline where a line starts (1 in 37)
            sep = np.where(rs.random(ids.size) < 1 / 37, 10, 32).astype(np.uint8)
            width = lens[ids] + 1
            ends = np.cumsum(width)
            starts = ends - width
            out = np.empty(int(ends[-1]), np.uint8)
            out[starts] = sep
            body = np.ones(out.size, bool)
            body[starts] = False
            src = np.repeat(first[ids] - (starts + 1), width) + np.arange(out.size)
            out[body] = letters[src[body]]
            piece = out.tobytes()[1:] if written == 0 else out.tobytes()
            piece = piece[: size - written]
            fh.write(piece)
            written += len(piece)
        fh.write(b"\n")


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def shell(cmd: str) -> Callable[[], object]:
    return lambda: subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL)


def best_interleaved(fns: dict[str, Callable[[], object]], runs: int) -> dict[str, float]:
    """Best time of each, the functions taking turns so that load on the machine hits all alike."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(runs):
        for name, fn in fns.items():
            best[name] = min(best[name], timed(fn))
    return best


def best_cpu_interleaved(
    fns: dict[str, Callable[[], object]], runs: int
) -> dict[str, tuple[float, float]]:
    """Best (wall, CPU of this process in all its threads) seconds of each, taking turns."""
    best = {name: (float("inf"), float("inf")) for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            c0 = os.times()
            wall = timed(fn)
            c1 = os.times()
            cpu = (c1.user - c0.user) + (c1.system - c0.system)
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    return best


def startup(small: Path) -> list[float]:
    """(import padless, first call) seconds in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _STARTUP, str(small)], check=True, capture_output=True, text=True
    ).stdout.split()
    return [float(x) for x in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--size", type=int, default=None, help="MB of text (default 300)")
    ap.add_argument("--tok-size", type=int, default=None, help="MB for tokenizers (default 32)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--only", choices=("text", "tokenizers"), default=None)
    args = ap.parse_args()
    size = (args.size or (32 if args.quick else 300)) * MB
    tok_size = (args.tok_size or (4 if args.quick else 32)) * MB

    print("# Lengths from text\n")
    print(f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`\n")
    print(
        f"Machine: {platform.machine()}, nproc = {os.cpu_count()}, Python "
        f"{platform.python_version()}, numpy {np.__version__}, "
        f"awk = {Path(shutil.which('awk') or 'awk').resolve().name}, load average before the run "
        f"{os.getloadavg()[0]:.1f}. Best of {args.runs}, the commands taking turns.\n"
    )
    work = Path(tempfile.mkdtemp(prefix="bench-lengths-", dir=args.dir))
    try:
        text = work / "text.txt"
        make_text(text, size if args.only != "tokenizers" else tok_size)
        if args.only != "tokenizers":
            text_figures(work, text, args.runs)
        if args.only != "text":
            tokenizer_figures(work, text, tok_size, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def text_figures(work: Path, text: Path, runs: int) -> None:
    """Whitespace/chars/bytes counts next to awk and wc; compressed copies; start-up."""
    import padless
    from padless.io.readers import lengths_from_text

    q = str(text)
    subprocess.run(f"gzip -1 -k -c {q} > {q}.gz", shell=True, check=True)
    subprocess.run(["zstd", "-q", "-3", q, "-o", f"{q}.zst"], check=True)
    small = work / "small.txt"
    small.write_bytes(text.read_bytes()[:100_000])
    nbytes = text.stat().st_size
    lines = sum(1 for _ in open(text, "rb"))

    warm = startup(small)
    got = padless.lengths_of(text)  # also loads the kernels in this process
    wc_w = int(subprocess.run(["wc", "-w", q], capture_output=True).stdout.split()[0])
    assert int(got.sum()) == wc_w and got.shape[0] == lines, "counts differ from wc"
    prefix = work / "prefix.txt"
    prefix.write_bytes(text.read_bytes()[: 10 * MB].rsplit(b"\n", 1)[0] + b"\n")
    awk = subprocess.run(["awk", "{print NF}", str(prefix)], capture_output=True).stdout
    assert np.array_equal(padless.lengths_of(prefix), np.array(awk.split(), dtype=np.int64))

    plain = best_interleaved(
        {
            "padless whitespace": lambda: padless.lengths_of(text),
            "padless chars": lambda: lengths_from_text(text, tokenizer="chars"),
            "padless bytes": lambda: lengths_from_text(text, tokenizer="bytes"),
            "awk '{print NF}'": shell(f"awk '{{print NF}}' {q} > /dev/null"),
            "wc -w": shell(f"wc -w {q} > /dev/null"),
            "wc -l": shell(f"wc -l {q} > /dev/null"),
        },
        runs,
    )
    padless.lengths_of(Path(q + ".gz"))  # the streamed kernel's signature, loaded once
    packed = best_interleaved(
        {
            "padless .gz": lambda: padless.lengths_of(Path(q + ".gz")),
            "gzip -dc": shell(f"gzip -dc {q}.gz > /dev/null"),
            "zcat \\| awk '{print NF}'": shell(f"zcat {q}.gz | awk '{{print NF}}' > /dev/null"),
            "padless .zst": lambda: padless.lengths_of(Path(q + ".zst")),
            "zstd -dc": shell(f"zstd -q -dc {q}.zst > /dev/null"),
        },
        max(2, runs // 2),
    )
    gz_size, zst_size = os.path.getsize(q + ".gz"), os.path.getsize(q + ".zst")
    print(
        f"Text: {nbytes / MB:.0f} MB, {lines:,} lines; gzip -1 {gz_size / MB:.0f} MB, zstd -3 "
        f"{zst_size / MB:.0f} MB. Counts checked: sum = wc -w, per line = awk on a prefix.\n"
    )
    print("| command | time | MB/s | padless whitespace is ... × faster |")
    print("|---|---:|---:|---:|")
    ref = plain["padless whitespace"]
    for name, sec in plain.items():
        print(f"| {name} | {sec * 1e3:.0f} ms | {nbytes / sec / MB:,.0f} | {sec / ref:.2f} |")
    print("\nCompressed copies (MB/s of decompressed text):\n")
    print("| command | time | MB/s |")
    print("|---|---:|---:|")
    for name, sec in packed.items():
        print(f"| {name} | {sec * 1e3:.0f} ms | {nbytes / sec / MB:,.0f} |")
    print(
        f"\nStart-up in a fresh process: import padless {warm[0] * 1e3:.0f} ms; then the first "
        f"lengths_of(Path) on a 100 kB file {warm[1] * 1e3:.0f} ms (nothing compiles at run time).\n"
    )


def tokenizer_figures(work: Path, text: Path, size: int, runs: int) -> None:
    rows = tokenizers(work, text, size, runs)
    print(
        f"Tokenizers on {size / MB:.0f} MB (bare: the tokenizer's batch encode of the same "
        "lines already in memory; CPU: seconds of all the process's threads, best run):\n"
    )
    print(
        "| tokenizer | bare, one call | bare, 4096-line calls | padless | padless ÷ best bare "
        "| CPU bare (one call) / padless |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        (one, one_cpu), (batched, _), (ours, ours_cpu) = row["one"], row["batched"], row["padless"]
        ratio = min(one, batched) / ours
        print(
            f"| {name} | {size / one / MB:.2f} MB/s | {size / batched / MB:.2f} MB/s | "
            f"{size / ours / MB:.2f} MB/s | **{ratio:.2f}** | {one_cpu:.2f} s / "
            f"{ours_cpu:.2f} s |"
        )


def tokenizers(
    work: Path, text: Path, size: int, runs: int
) -> dict[str, dict[str, tuple[float, float]]]:
    """Train a BPE and a sentencepiece model on a sample; time bare batch encodes vs padless."""
    import sentencepiece as spm
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from padless.io.readers import lengths_from_text

    with open(text, "rb") as fh:
        head = fh.read(size)
    head = head[: head.rfind(b"\n") + 1]
    part = work / "tok.txt"
    part.write_bytes(head)
    sample = work / "sample.txt"
    sample.write_bytes(head[: 4 * MB])
    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=8000, special_tokens=["[UNK]"], show_progress=False)
    bpe.train([str(sample)], trainer)
    bpe.save(str(work / "bpe.json"))
    spm.SentencePieceTrainer.train(
        input=str(sample),
        model_prefix=str(work / "sp"),
        vocab_size=8000,
        input_sentence_size=20000,
        shuffle_input_sentence=True,
        minloglevel=2,
    )
    lines = head.decode().split("\n")[:-1]
    batches = [lines[i : i + 4096] for i in range(0, len(lines), 4096)]
    hf = Tokenizer.from_file(str(work / "bpe.json"))
    sp = spm.SentencePieceProcessor(model_file=str(work / "sp.model"))
    rows = {}
    for name, spec, encode in [
        ("hf BPE (encode_batch_fast)", f"hf:{work / 'bpe.json'}", hf.encode_batch_fast),
        ("sentencepiece (encode, num_threads=-1)", f"spm:{work / 'sp.model'}", sp.encode),
    ]:
        want = np.fromiter(map(len, encode(lines)), np.int64, len(lines))
        assert np.array_equal(lengths_from_text(part, tokenizer=spec), want), name
        rows[name] = best_cpu_interleaved(
            {
                "one": lambda encode=encode: encode(lines),
                "batched": lambda encode=encode: [encode(b) for b in batches],
                "padless": lambda spec=spec: lengths_from_text(part, tokenizer=spec),
            },
            max(2, runs // 2),
        )
    return rows


if __name__ == "__main__":
    main()
