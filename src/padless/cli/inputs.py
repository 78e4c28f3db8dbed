"""Options and reading shared by the subcommands that read lengths (``report``, ``plan``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

INPUT_HELP = (
    "lengths .npy/.npz, a Megatron/fairseq indexed dataset (.idx), a raw token file with "
    "--dtype and --eos, a token .npy with --offsets, text files (one sequence per line; "
    ".gz/.zst), Arrow/Parquet files or a saved datasets folder; several files side by side give "
    "(N, F) lengths (e.g. train.en train.es); a lhotse or NeMo manifest (.jsonl/.jsonl.gz with "
    "durations): [10 ms ticks, supervision tokens by --tokenizer]. None: the built-in corpus"
)

_ZIP_MAGIC = b"PK\x03\x04"


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the input files and the options that say how to read them."""
    parser.add_argument("inputs", nargs="*", metavar="INPUT", help=INPUT_HELP)
    parser.add_argument("--fields", help="npz arrays to use, comma-separated (e.g. en,es)")
    parser.add_argument(
        "--tokenizer",
        default=None,  # whitespace where it applies; None tells an option given from none
        help="for text: whitespace (default), chars, bytes, spm:MODEL or hf:tokenizer.json",
    )
    parser.add_argument("--column", help="Arrow/Parquet/datasets column (e.g. input_ids)")
    parser.add_argument("--split", help="split of a saved DatasetDict (default train)")
    parser.add_argument("--offsets", help="document offsets .npy for a token-id .npy corpus")
    parser.add_argument("--dtype", help="token dtype of a raw token file (e.g. uint16; with --eos)")
    parser.add_argument(
        "--eos",
        type=int,
        metavar="ID",
        help="read INPUT as raw tokens whose documents end at token ID (it counts)",
    )
    parser.add_argument(
        "--documents",
        action="store_true",
        help="an indexed dataset's documents instead of its sequences (Megatron)",
    )


# the kinds of input, in words
KIND_WORDS = {
    "builtin": "the built-in corpus (no INPUT given)",
    "manifest": "a lhotse/NeMo manifest",
    "raw": "a raw token file read with --eos",
    "indexed": "an indexed dataset",
    "dataset": "a saved datasets Dataset folder, not a DatasetDict",
    "datasetdict": "a saved datasets DatasetDict folder",
    "folder": "a folder",
    "arrow": "an Arrow/Parquet file",
    "npy": "a .npy array",
    "npz": "a .npz archive",
    "text": "a text file",
}

# option -> (the kinds of input it says how to read, what it is for in words)
READ_OPTIONS: dict[str, tuple[frozenset[str], str]] = {
    "tokenizer": (
        frozenset({"text", "manifest", "arrow", "dataset", "datasetdict"}),
        "text files, manifests and text columns",
    ),
    "column": (
        frozenset({"arrow", "dataset", "datasetdict"}),
        "Arrow/Parquet files and datasets folders",
    ),
    "split": (frozenset({"datasetdict"}), "a saved DatasetDict folder"),
    "offsets": (frozenset({"npy"}), "a token-id .npy"),
    "fields": (frozenset({"npz", "builtin"}), "a .npz archive or the built-in corpus"),
    "dtype": (frozenset({"raw"}), "a raw token file, with --eos"),
    "eos": (frozenset({"raw"}), "token files (any file but a folder)"),
    "documents": (frozenset({"indexed"}), "an indexed dataset (.idx + .bin)"),
}


def input_kind(path: str, eos: int | None) -> str:
    """The kind of input ``path`` is, as :func:`padless.io.lengths_from_file` tells it
    (a key of :data:`KIND_WORDS`); manifests are told apart by :func:`manifest_input`."""
    from ..io.readers import is_indexed_path, sniff

    src = Path(path)
    if src.is_dir():
        if (src / "dataset_dict.json").is_file():
            return "datasetdict"
        return "dataset" if (src / "state.json").is_file() else "folder"
    if eos is not None:
        return "raw"
    if is_indexed_path(path):
        return "indexed"
    kind = sniff(src)
    suffix = src.suffix.lower()
    if kind in ("arrow", "parquet") or (
        kind is None and suffix in (".arrow", ".feather", ".parquet")
    ):
        return "arrow"
    if kind in ("npy", "npz"):
        return kind
    if kind is None and suffix in (".npy", ".npz"):
        return suffix[1:]
    return "text"


def check_input_options(args: argparse.Namespace) -> None:
    """Refuse a reading option that applies to none of the inputs (``--column`` for a text
    file, ``--split`` for a Dataset that has no splits), and ``--fields`` naming a field twice.

    An option applies to every input alike, so with inputs of several kinds it is refused
    only where no input takes it.
    """
    if args.fields is not None:
        names = args.fields.split(",")
        empty = [n for n in names if not n.strip()]
        twice = sorted({n for n in names if names.count(n) > 1})
        if empty or twice:
            why = "an empty name" if empty else f"{twice[0]!r} twice"
            raise ValueError(
                f"--fields must name distinct fields, comma-separated, got {args.fields!r} ({why})"
            )
    if not args.inputs:
        kinds = ["builtin"]
    elif manifest_input(args):
        kinds = ["manifest"]
    else:
        kinds = [input_kind(p, args.eos) for p in args.inputs]
    for option, (applies, meant) in READ_OPTIONS.items():
        value = getattr(args, option, None)
        if value is None or value is False or any(k in applies for k in kinds):
            continue
        shown = "" if value is True else f" {value!r}"
        where = ", ".join(
            f"{p} ({KIND_WORDS[k]})" for p, k in zip(args.inputs, kinds, strict=False)
        )
        raise ValueError(
            f"--{option}{shown} does not apply to {where or KIND_WORDS[kinds[0]]}: it is for "
            f"{meant}"
        )


def input_paths(args: argparse.Namespace) -> list[str]:
    """Every file the command reads: the inputs (an indexed dataset's ``.idx`` and ``.bin``
    both), ``--offsets``, a tokenizer file (``spm:``/``hf:``), ``--cost`` and ``--memory``."""
    from ..io.indexed import _paths as indexed_pair
    from ..io.readers import is_indexed_path

    paths = []
    for name in args.inputs:
        paths.append(name)
        if is_indexed_path(name):
            paths += indexed_pair(name)
    for option in ("offsets", "cost", "memory"):
        if getattr(args, option, None):
            paths.append(getattr(args, option))
    tokenizer = getattr(args, "tokenizer", None) or ""
    if tokenizer.startswith(("spm:", "hf:")):
        paths.append(tokenizer.split(":", 1)[1])
    return paths


def _inside(out: str, folder: str) -> bool:
    """Whether ``out`` is an existing file under the input folder ``folder`` (a file the
    command may read: a shard of a datasets folder, a Parquet part)."""
    if not (os.path.isdir(folder) and os.path.lexists(out)):
        return False
    real, root = os.path.realpath(out), os.path.realpath(folder)
    return os.path.commonpath([real, root]) == root


def check_output_paths(args: argparse.Namespace, outputs: list[str], option: str) -> None:
    """Refuse outputs that are folders, lie in missing folders, or are one of the files read.

    An output is a file read when it is the same file as one of :func:`input_paths` (same
    device and inode, so hard links and symbolic links count), the same path, or a file that
    already exists inside an input folder.
    """
    from ..core._output import check_output

    for out in outputs:
        check_output(out, option)
        for src in input_paths(args):
            same = os.path.realpath(out) == os.path.realpath(src)
            if not same and os.path.exists(out) and os.path.exists(src):
                try:
                    same = os.path.samefile(out, src)
                except OSError:  # pragma: no cover - vanished between the checks
                    same = False
            if same:
                raise ValueError(
                    f"{option} {out!r} is the input {src!r}: writing it would destroy the input; "
                    "choose another output path"
                )
            if _inside(out, src):
                raise ValueError(
                    f"{option} {out!r} is a file of the input folder {src!r}: writing it would "
                    "destroy the input; choose a path outside the folder"
                )


def shares_stdout(paths: list[str]) -> bool:
    """Whether one of the output ``paths`` is standard output's file: the inherited descriptor 1
    (``/dev/stdout``), or a path whose file is the one descriptor 1 is open on (``-o log``
    under ``>> log``). Asked before writing: a regular file is replaced by a rename. The null
    device is left out (nothing there can be mixed)."""
    from ..core._output import inherited_fd

    try:
        out = os.fstat(1)
        null = os.stat(os.devnull)
    except OSError:  # no standard output
        return False
    if (out.st_dev, out.st_ino) == (null.st_dev, null.st_ino):
        return False
    for path in paths:
        fd = inherited_fd(path)
        if fd == 1:
            return True
        try:
            st = os.fstat(fd) if fd is not None else os.stat(path)
        except (OSError, ValueError):
            continue
        if (st.st_dev, st.st_ino) == (out.st_dev, out.st_ino):
            return True
    return False


def refuse_saved_plans(paths: list[str]) -> None:
    """Refuse to read an ``.npz`` that is a saved padless plan as lengths.

    A plan's ``offsets`` would otherwise pass for a token corpus (and its batches for sequences).
    """
    import zipfile

    import numpy as np

    from ..core.plan import is_saved_plan

    for name in paths:
        path = Path(name)
        if not path.is_file():
            continue
        try:
            with open(path, "rb") as f:
                if f.read(4) != _ZIP_MAGIC:
                    continue
            with np.load(path, allow_pickle=False) as data:
                members = list(data.files)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile):
            continue  # not readable as an archive: the reader gives its own error
        if is_saved_plan(members):
            raise ValueError(
                f"{path} is a padless plan (written by `padless plan` or BatchPlan.save), not "
                "lengths: read it with padless.BatchPlan.load, and give the lengths it was made "
                "from as input"
            )


MANIFEST_RESOLUTION = 0.01  # seconds per tick of a manifest's durations


def manifest_input(args: argparse.Namespace) -> bool:
    """Whether the input is one lhotse or NeMo manifest (``cuts.jsonl.gz``: JSON lines with a
    ``duration``); a manifest among other inputs is refused."""
    from ..lhotse import is_manifest

    found = [p for p in args.inputs if is_manifest(p)]
    if found and len(args.inputs) > 1:
        raise ValueError(
            f"a manifest ({found[0]}) holds every field of its cuts: give it alone, got "
            f"{len(args.inputs)} inputs"
        )
    return bool(found)


def _text_counter(tokenizer: str) -> Any:
    """Texts -> token counts for --tokenizer: as the text reader counts a line (whitespace tokens
    as ``bytes.split``, characters, UTF-8 bytes), or a spm:/hf: model's batch call."""
    import numpy as np

    from ..io.readers import check_tokenizer, tokenizer_counter

    simple = {
        "whitespace": lambda t: len(t.encode().split()),
        "chars": len,
        "bytes": lambda t: len(t.encode()),
    }
    one = simple.get(check_tokenizer(tokenizer))
    if one is None:
        return tokenizer_counter(tokenizer)
    return lambda texts: np.fromiter(map(one, texts), np.int64, len(texts))


def manifest_summary(lengths: Any) -> list[str]:
    """Lines saying a manifest's durations in seconds (and its tokens) for a report."""
    import numpy as np

    cols = lengths if lengths.ndim == 2 else lengths[:, None]
    sec = cols[:, 0] * MANIFEST_RESOLUTION
    q = np.percentile(sec, [50, 95, 99])
    lines = [
        f"  durations: {sec.sum() / 3600:,.2f} h; min {sec.min():.2f} s, median {q[0]:.2f} s, "
        f"p95 {q[1]:.2f} s, p99 {q[2]:.2f} s, max {sec.max():.2f} s "
        f"(planned in {MANIFEST_RESOLUTION * 1000:g} ms ticks: --max-tokens 20000 is 200 s)"
    ]
    if cols.shape[1] > 1:
        tok = cols[:, 1]
        lines.append(
            f"  supervision tokens: {int(tok.sum()):,}; median {np.median(tok):g}, max "
            f"{int(tok.max())}, {tok.sum() / max(sec.sum(), 1e-9):.2f} per second"
        )
    return lines


def load_lengths(args: argparse.Namespace) -> tuple[Any, str]:
    """Lengths from the command line's inputs (or the built-in corpus) and a display name."""
    from ..core.lengths import builtin_corpus

    check_input_options(args)
    tokenizer = args.tokenizer or "whitespace"
    if args.inputs and manifest_input(args):
        from ..lhotse import manifest_lengths

        lengths = manifest_lengths(
            args.inputs[0],
            resolution=MANIFEST_RESOLUTION,
            counter=_text_counter(tokenizer),
        )
        if lengths.shape[0] == 0:
            raise ValueError(f"no cuts in {args.inputs[0]}")
        kind = "[duration ticks, tokens]" if lengths.ndim == 2 else "duration ticks"
        return lengths, f"{args.inputs[0]} (manifest: {kind})"
    if not args.inputs:
        if args.fields:
            return builtin_corpus(args.fields.split(",")), f"built-in corpus ({args.fields})"
        return builtin_corpus(), "built-in corpus (bible en, 29,814 verses, BPE 8k)"
    from ..core._progress import Progress
    from ..io import lengths_from_files

    refuse_saved_plans(input_paths(args))
    total = 0
    for path in map(Path, args.inputs):
        if path.is_file():
            packed = path.suffix.lower() in (".gz", ".zst", ".zstd")
            total += path.stat().st_size * (4 if packed else 1)  # text size, roughly
    bar = Progress(total, label="reading", enabled=total > (4 << 20))
    lines = 0

    def progress(nbytes: int, nlines: int) -> None:
        nonlocal lines
        lines += nlines
        bar.label = f"reading {lines:,} lines"
        bar.update(nbytes)

    try:
        lengths = lengths_from_files(
            args.inputs,
            tokenizer=tokenizer,
            fields=args.fields.split(",") if args.fields else None,
            column=args.column,
            offsets=args.offsets,
            split=args.split,
            progress=progress,
            dtype=args.dtype,
            eos=args.eos,
            documents=args.documents,
        )
    finally:
        bar.close()
    if lengths.shape[0] == 0:
        raise ValueError(f"no sequences in {', '.join(args.inputs)}")
    return lengths, ", ".join(args.inputs)
