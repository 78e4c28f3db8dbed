"""Move padless's flat modules into folders that show the layers, and rewrite every reference.

Run from the repository root: ``python tools/relayout.py``. It is idempotent (a second run finds
nothing to do) and may be run again on a newer main, where it moves what is still in an old home
and rewrites what still names one.

1. ``git mv`` each module of :data:`MOVES` (old dotted name -> new), creating the new packages'
   ``__init__.py`` (:data:`PACKAGES`); ``padless/io.py`` becomes the package ``padless/io/``.
2. Rewrites references: Python imports in src/, tests/, benchmarks/, tools/, examples/
   (relative imports recomputed from the new locations; ``from padless import <module>`` and
   ``from . import <module>`` split by the module's new package), dotted module names anywhere
   in those files and in pyproject.toml, Makefile, .ci/, README.md, BENCHMARKS.md, docs/
   (``padless.lm`` -> ``padless.streams.lm``, also regex-escaped ``padless\\.lm`` and
   paths ``padless/lm.py``), the bare names of ``padless.__init__._SUBMODULES``, and the table
   of old homes a saved plan is loaded through (``padless/core/_moved.py``).
3. Formats the rewritten Python files with ruff (import order), when ruff is installed.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

# old dotted name -> new dotted name (a leaf name never changes)
MOVES: dict[str, str] = {
    # core: values and the small helpers every layer uses (no file I/O)
    "padless.lengths": "padless.core.lengths",
    "padless.fields": "padless.core.fields",
    "padless.plan": "padless.core.plan",
    "padless.schedules": "padless.core.schedules",
    "padless.cost": "padless.core.cost",
    "padless.memory": "padless.core.memory",
    "padless.filters": "padless.core.filters",
    "padless._check": "padless.core._check",
    "padless._rng": "padless.core._rng",
    "padless._state": "padless.core._state",
    "padless._schedule": "padless.core._schedule",
    "padless._output": "padless.core._output",
    "padless._progress": "padless.core._progress",
    "padless._moved": "padless.core._moved",
    # io: lengths and tokens from files (padless.io itself: the dispatcher for paths)
    "padless.io": "padless.io",
    "padless.readers": "padless.io.readers",
    "padless.tokens": "padless.io.tokens",
    "padless.indexed": "padless.io.indexed",
    "padless.checked": "padless.io.checked",
    "padless._files": "padless.io._files",
    "padless._text_kernels": "padless.io._text_kernels",
    # planners of a strategy's windowed and histogram forms
    "padless.windows": "padless.planners.windows",
    "padless.histogram": "padless.planners.histogram",
    # sampling: the sampler, mixtures, the keyword shortcuts, the strategy report
    "padless.sampler": "padless.sampling.sampler",
    "padless.mixing": "padless.sampling.mixing",
    "padless.shortcuts": "padless.sampling.shortcuts",
    "padless.report": "padless.sampling.report",
    # streams: LMStream is a stream
    "padless.lm": "padless.streams.lm",
}

# new packages: docstring of the __init__.py created for each (padless.io comes from io.py)
PACKAGES: dict[str, str] = {
    "padless.core": (
        "Pure values: lengths, fields, plans, schedules, costs, memory, filters, and the small\n"
        "helpers every layer uses (checks, random streams, state). No file I/O; the compiled\n"
        "kernels are imported inside the functions that call them."
    ),
    "padless.sampling": (
        "Samplers: :class:`padless.PlanSampler` (ranks, tail, balance, steps, resume), mixtures\n"
        "of corpora, the keyword shortcuts (``plan_*`` and ``*Sampler``) and the strategy report."
    ),
}

ROOTS = ("src", "tests", "benchmarks", "tools", "examples")
TEXT_FILES = ("pyproject.toml", "Makefile", "README.md", "BENCHMARKS.md")
TEXT_DIRS = ("docs", ".ci")
SELF = Path("tools/relayout.py")
MOVED_TABLE = "padless.core._moved"  # written from MOVES, never rewritten


def module_path(name: str, package: bool = False) -> Path:
    parts = name.split(".")
    if package:
        return Path("src", *parts, "__init__.py")
    return Path("src", *parts[:-1], parts[-1] + ".py")


def existing_path(name: str) -> Path | None:
    for package in (False, True):
        p = module_path(name, package)
        if p.exists():
            return p
    return None


def git(*args: str) -> None:
    subprocess.run(["git", *args], check=True)


# --------------------------------------------------------------------------------- 1. moves
def move_modules(log: list[str]) -> dict[Path, str]:
    """``git mv`` what is still in an old home; returns new path -> old dotted name."""
    moved: dict[Path, str] = {}
    new_packages = {n.rpartition(".")[0] for n in MOVES.values()} | set(PACKAGES)
    for old, new in MOVES.items():
        src = module_path(old)
        is_package = new in new_packages
        dst = module_path(new, package=is_package)
        if not src.exists() or src == dst:
            continue
        if dst.exists():
            raise SystemExit(f"relayout: both {src} and {dst} exist: merge them by hand")
        dst.parent.mkdir(parents=True, exist_ok=True)
        git("mv", str(src), str(dst))
        moved[dst] = old
        log.append(f"moved   {src} -> {dst}")
    for name, doc in PACKAGES.items():
        init = module_path(name, package=True)
        if not init.exists():
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text(f'"""{doc}\n"""\n', encoding="utf-8")
            git("add", str(init))
            log.append(f"created {init}")
    return moved


def write_moved_table(log: list[str]) -> None:
    path = module_path(MOVED_TABLE)
    if not path.exists():
        return
    text = path.read_text(encoding="utf-8")
    rows = "".join(f'    "{o}": "{n}",\n' for o, n in MOVES.items() if o != n)
    table = "MOVED: dict[str, str] = {\n" + rows + "}\n"
    new = re.sub(r"MOVED: dict\[str, str\] = \{.*?\}\n", lambda _: table, text, flags=re.S)
    if new != text:
        path.write_text(new, encoding="utf-8")
        log.append(f"wrote   {path} (the old homes of saved plans)")


# ------------------------------------------------------------------------ 2. Python imports
_KNOWN: set[str] = set()


def known_modules() -> set[str]:
    if _KNOWN:
        return _KNOWN
    names = {"padless._core"} | set(MOVES)
    for p in Path("src/padless").rglob("*.py"):
        parts = list(p.relative_to("src").with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.add(".".join(parts))
    _KNOWN.update(names)
    return names


def new_name(name: str) -> str:
    return MOVES.get(name, name)


def render(importer: str | None, is_package: bool, target: str) -> str:
    """The ``from`` part naming ``target``: relative from a padless module, else absolute."""
    if importer is None:
        return target
    package = importer if is_package else importer.rpartition(".")[0]
    a, b = package.split("."), target.split(".")
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    return "." * (len(a) - common + 1) + ".".join(b[common:])


def rewrite_imports(text: str, here: str | None, here_old: str | None, is_package: bool) -> str:
    """Rewrite each ``from X import ...`` whose target moved. ``here``: the file's module name
    now (None outside src/); ``here_old``: its name before this run's move (resolves relative
    imports written for the old home)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    known = known_modules()
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            if here is None:
                continue
            # a moved file was a plain module in its old home
            base_is_package = is_package if here_old is None else False
            base_name = here_old or here
            package = base_name if base_is_package else base_name.rpartition(".")[0]
            parts = package.split(".")
            stem = ".".join(
                parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else [])
            )
        elif node.module == "padless" or (node.module or "").startswith("padless."):
            stem = node.module or ""
        else:
            continue
        groups: dict[str, list[ast.alias]] = {}
        for alias in node.names:
            sub = f"{stem}.{alias.name}"
            if sub in known:
                parent = new_name(sub).rpartition(".")[0]
            else:
                parent = new_name(stem)
            groups.setdefault(parent, []).append(alias)
        relative = node.level > 0
        rendered = {g: render(here if relative else None, is_package, g) for g in groups}
        old_from = "." * node.level + (node.module or "")
        if len(groups) == 1 and next(iter(rendered.values())) == old_from:
            continue
        segment_lines = lines[node.lineno - 1 : node.end_lineno]
        indent = re.match(r"\s*", segment_lines[0]).group(0)  # type: ignore[union-attr]
        if len(groups) == 1:
            first = segment_lines[0]
            new_first = re.sub(
                r"from\s+" + re.escape(old_from) + r"\s+import",
                f"from {next(iter(rendered.values()))} import",
                first,
                count=1,
            )
            replacement = new_first + "".join(segment_lines[1:])
        else:
            out = []
            for g, aliases in groups.items():
                names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in aliases)
                out.append(f"{indent}from {rendered[g]} import {names}\n")
            tail = segment_lines[-1][node.end_col_offset :]
            replacement = "".join(out)
            if tail.strip():
                replacement = replacement.rstrip("\n") + tail
        edits.append((node.lineno, node.end_lineno or node.lineno, 0, 0, replacement))
    for start, end, _, _, replacement in sorted(edits, reverse=True):
        lines[start - 1 : end] = [replacement]
    return "".join(lines)


# ------------------------------------------------------------------------ 2. dotted names
def name_patterns() -> list[tuple[re.Pattern[str], str]]:
    out = []
    for old, new in sorted(MOVES.items(), key=lambda kv: -len(kv[0])):
        if old == new:
            continue
        out.append((re.compile(r"(?<![\w.])" + re.escape(old) + r"(?!\w)"), new))
        out.append(
            (
                re.compile(r"(?<![\w.])" + re.escape(old.replace(".", r"\.")) + r"(?!\w)"),
                new.replace(".", "\\\\."),
            )
        )
        old_path = old.replace(".", "/") + ".py"
        new_path = new.replace(".", "/") + ".py"
        out.append((re.compile(r"(?<!\w)" + re.escape(old_path) + r"(?!\w)"), new_path))
    # padless/io.py became the package padless/io/
    out.append((re.compile(r"(?<!\w)padless/io\.py(?!\w)"), "padless/io/__init__.py"))
    return out


def rewrite_names(text: str) -> str:
    for pattern, new in name_patterns():
        text = pattern.sub(new, text)
    return text


def rewrite_submodules(text: str) -> str:
    """``_SUBMODULES`` of ``padless/__init__.py``: a bare name whose module moved into a
    package becomes that package's name (``readers`` -> ``io``)."""
    match = re.search(r"_SUBMODULES = frozenset\(\s*\{(.*?)\}\s*\)", text, flags=re.S)
    if not match:
        return text
    names = re.findall(r'"(\w+)"', match.group(1))
    mapped: list[str] = []
    for n in names:
        top = new_name(f"padless.{n}").split(".")[1]
        if top not in mapped:
            mapped.append(top)
    if mapped == names:
        return text
    body = "".join(f'        "{n}",\n' for n in mapped)
    block = "_SUBMODULES = frozenset(\n    {\n" + body + "    }\n)"
    return text[: match.start()] + block + text[match.end() :]


def python_files() -> list[Path]:
    out = []
    for root in ROOTS:
        if Path(root).is_dir():
            out += [p for p in sorted(Path(root).rglob("*.py")) if "/." not in str(p)]
    return [p for p in out if p != SELF and p != module_path(MOVED_TABLE)]


def text_files() -> list[Path]:
    out = [Path(f) for f in TEXT_FILES if Path(f).is_file()]
    for d in TEXT_DIRS:
        if Path(d).is_dir():
            out += [p for p in sorted(Path(d).rglob("*")) if p.is_file()]
    return out


def module_of(path: Path) -> tuple[str | None, bool]:
    if path.parts[:2] != ("src", "padless"):
        return None, False
    parts = list(path.relative_to("src").with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def rewrite_files(moved: dict[Path, str], log: list[str]) -> list[Path]:
    changed = []
    for path in python_files():
        text = path.read_text(encoding="utf-8")
        here, is_package = module_of(path)
        new = rewrite_imports(text, here, moved.get(path), is_package)
        new = rewrite_names(new)
        if path == Path("src/padless/__init__.py"):
            new = rewrite_submodules(new)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    for path in text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = rewrite_names(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    for p in changed:
        log.append(f"rewrote {p}")
    return changed


def format_python(paths: list[Path], log: list[str]) -> None:
    files = [str(p) for p in paths if p.suffix == ".py"]
    if not files:
        return
    for cmd in ([sys.executable, "-m", "ruff"], ["ruff"]):
        try:
            subprocess.run([*cmd, "check", "-q", "--select", "I", "--fix", *files], check=False)
            subprocess.run([*cmd, "format", "-q", *files], check=False)
        except FileNotFoundError:
            continue
        log.append(f"ruff    sorted imports and formatted {len(files)} files")
        return
    log.append("ruff not found: sort the imports of the rewritten files (ruff check --select I)")


def main() -> int:
    if not Path("src/padless/__init__.py").is_file():
        raise SystemExit("relayout: run from the repository root")
    log: list[str] = []
    moved = move_modules(log)
    write_moved_table(log)
    changed = rewrite_files(moved, log)
    format_python(changed, log)
    print("\n".join(log) if log else "relayout: nothing to do (the layout is already applied)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
