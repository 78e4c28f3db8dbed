"""The docs site's build hooks (tools/mkdocs_hooks.py, tools/griffe_doctests.py): doctests fenced
as code, links rewritten from repository paths to site pages, every page in the navigation.
``make docs`` builds the site itself (mkdocs --strict); these check the rules it relies on."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs")
pytest.importorskip("griffe")

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import griffe_doctests  # noqa: E402
import mkdocs_hooks  # noqa: E402


def test_doctest_runs_are_fenced_and_fences_left_alone():
    text = "Intro.\n\n>>> f([1, 2])\n[[4, 5], [2]]\n\nArgs:\n    x: a value\n\n        >>> x\n        1\n"
    out = griffe_doctests.fence(text)
    assert "```pycon\n>>> f([1, 2])\n[[4, 5], [2]]\n```" in out
    assert "        ```pycon\n        >>> x\n        1\n        ```" in out  # its indentation
    fenced = "```python\n>>> inside a fence\n```\n"
    assert griffe_doctests.fence(fenced) == fenced.rstrip("\n")


def test_links_become_site_pages():
    rewrite = mkdocs_hooks._rewrite_links
    readme = (
        "[u](docs/usage.md#x) [g](docs/guides/speech.md) [b](BENCHMARKS.md) [w](https://a.b/c.md)"
    )
    assert rewrite(readme, "README.md") == (
        "[u](usage.md#x) [g](guides/speech.md) [b](benchmarks.md) [w](https://a.b/c.md)"
    )
    assert rewrite("[b](../BENCHMARKS.md#w)", "docs/large_corpora.md") == "[b](benchmarks.md#w)"
    guide = "[t](../training.md#r) [b](../../BENCHMARKS.md) [r](../../README.md)"
    assert rewrite(guide, "docs/guides/x.md") == (
        "[t](../training.md#r) [b](../benchmarks.md) [r](../index.md)"
    )
    # a link to a repository file the site does not carry is left for mkdocs --strict to refuse
    assert rewrite("[s](../src/padless/hf.py)", "docs/usage.md") == "[s](../src/padless/hf.py)"


def test_every_page_of_docs_is_in_the_navigation():
    nav = mkdocs_hooks.on_config({})["nav"]

    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for v in node.values():
                yield from pages(v)
        else:
            for v in node:
                yield from pages(v)

    listed = set(pages(nav))
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk <= listed
    assert {"index.md", "plots.md", "benchmarks.md", "reference/padless.md"} <= listed
