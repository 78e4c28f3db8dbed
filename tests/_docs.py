"""Run the examples of docs/trainers.md (each follows a ``<!-- example: NAME -->`` line)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).parent.parent / "docs" / "trainers.md"


def example(name: str) -> str:
    """The Python code block right after ``<!-- example: name -->``."""
    text = DOC.read_text()
    found = re.search(rf"<!-- example: {name} -->\n```python\n(.*?)```", text, re.S)
    if found is None:
        raise LookupError(f"no example {name!r} in {DOC}")
    return found.group(1)


def run_example(name: str, where: Path) -> dict:
    """Execute an example in directory ``where`` on one torch thread; return its globals."""
    import os

    import torch

    here, threads = os.getcwd(), torch.get_num_threads()
    os.chdir(where)
    torch.set_num_threads(1)  # tiny models: more threads on a busy machine only wait
    try:
        scope: dict = {"__name__": f"docs_example_{name}"}
        exec(compile(example(name), f"docs/trainers.md:{name}", "exec"), scope)
        return scope
    finally:
        torch.set_num_threads(threads)
        os.chdir(here)
