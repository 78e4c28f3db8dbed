"""A griffe extension for padless's docs site (mkdocs.yml loads it): doctest examples, written
bare in the docstrings (``>>>`` lines and their output, as ``pytest --doctest-modules`` runs
them), are fenced as ``pycon`` code, so Markdown shows them as code instead of reading their
brackets as links."""

from __future__ import annotations

from typing import Any

import griffe


def fence(text: str) -> str:
    """``text`` with every run of doctest lines (a ``>>>`` line up to the next blank line, or
    the next line less indented) inside a fenced ``pycon`` block, at the run's indentation."""
    out: list[str] = []
    lines = text.splitlines()
    i, in_fence = 0, False
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if stripped.startswith("```"):
            in_fence = not in_fence
        if in_fence or not stripped.startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(stripped)]
        run = []
        while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
            run.append(lines[i])
            i += 1
        out += [f"{indent}```pycon", *run, f"{indent}```"]
    return "\n".join(out)


class FenceDoctests(griffe.Extension):
    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence(obj.docstring.value)
