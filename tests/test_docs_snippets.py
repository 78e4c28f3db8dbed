"""Every code block of README.md and docs/**/*.md runs as written.

Per page, its ```python blocks run in order as ONE script in a fresh process, with an empty
temporary directory as the working directory (a page's first block may be a visible setup that
writes the small data the others read). A block right after a ``<!-- example: NAME -->`` line is
left out here: a named test runs it (and this test checks that some test file names it).

Shell blocks (```bash / ```sh / ```console / ```shell) that call the ``padless`` command run
after the page's Python, in the same directory, with this environment's ``padless`` script first
on the PATH; a shell block that calls no ``padless`` (installing: pip, make, git clone) is not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```([A-Za-z]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
NAMED = re.compile(r"<!-- example: ([A-Za-z0-9_.-]+) -->\s*$")
SHELL = {"bash", "sh", "console", "shell"}
PADLESS_CALL = re.compile(r"(^|\|\s*|&&\s*|\$\s+)padless\s", re.M)


def blocks(page: Path) -> list[tuple[str, str, str | None, int]]:
    """(language, code, example name or None, line) for every fenced block of ``page``."""
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        named = NAMED.search(before)
        line = text.count("\n", 0, m.start()) + 1
        found.append((m.group(1).lower(), m.group(2), named.group(1) if named else None, line))
    return found


def script(page: Path) -> str:
    """The page's unnamed Python blocks, in order, each announced by its line (for tracebacks)."""
    parts = []
    for lang, code, name, line in blocks(page):
        if lang == "python" and name is None:
            parts.append(f"# --- {page.relative_to(ROOT)}:{line}\n{code}")
    return "\n".join(parts)


def shell_blocks(page: Path) -> list[tuple[str, int]]:
    return [
        (code, line)
        for lang, code, _, line in blocks(page)
        if lang in SHELL and PADLESS_CALL.search(code)
    ]


def _id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_block_of_the_page_runs(page, tmp_path):
    code = script(page)
    shells = shell_blocks(page)
    if not code and not shells:
        pytest.skip("no block to run")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "80"
    env["PYTHONWARNINGS"] = "ignore::DeprecationWarning"
    env.pop("PYTHONPATH", None)
    if code:
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{_id(page)}: its Python blocks failed\n{done.stderr[-6000:]}"
    for sh, line in shells:
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", sh],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (
            f"{_id(page)}:{line}: shell block failed\n{done.stderr[-4000:]}"
        )


def test_every_named_example_is_run_by_a_test():
    sources = "\n".join(
        p.read_text() for p in (ROOT / "tests").rglob("*.py") if p.name != Path(__file__).name
    )
    names = {name for page in PAGES for _, _, name, _ in blocks(page) if name is not None}
    assert names, "no named examples found: the marker changed?"
    unused = sorted(
        n
        for n in names
        if f"example: {n}" not in sources and f'"{n}"' not in sources and f"'{n}'" not in sources
    )
    assert not unused, f"examples that no test runs (the snippet test skips them): {unused}"


ELLIPSIS = re.compile(r"^\s*\.\.\.\s*$|[({\[,]\s*\.\.\.\s*[)}\],]", re.M)


def _without_comments(code: str) -> str:
    """The code with each line's ``# comment`` cut (a ``#`` inside a string is rare in docs)."""
    return "\n".join(line.split("#", 1)[0] for line in code.splitlines())


def test_no_python_block_elides_with_an_ellipsis():
    elided = [
        f"{_id(page)}:{line}"
        for page in PAGES
        for lang, code, _, line in blocks(page)
        if lang == "python" and ELLIPSIS.search(_without_comments(code))
    ]
    assert not elided, f"blocks with `...` standing for code: {elided}"
