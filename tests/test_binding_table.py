"""Every compiled entry point has a test that attacks it (issue 39): the table of bindings.

Each ``tests/test_binding_attacks_*.py`` holds ``ATTACKED``, binding name → the test in that
file that calls the binding with hostile arguments (sizes against capacities and budgets, keys
outside their span, offsets out of order or past the array, outputs too small) and asserts a
clear ``ValueError``/``TypeError``/``IndexError``. A binding added to ``padless._core`` without
an entry fails here; ``tests/test_fuzz_bindings.py`` then drives every binding at random.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import padless._core as core

HERE = Path(__file__).parent


def _tables() -> dict[str, str]:
    out: dict[str, str] = {}
    for path in sorted(HERE.glob("test_binding_attacks_*.py")):
        module = importlib.import_module(path.stem)
        for binding, test in module.ATTACKED.items():
            if not callable(getattr(module, test, None)):
                raise AssertionError(f"{path.name}: ATTACKED[{binding!r}] names no test {test!r}")
            if binding in out:
                raise AssertionError(f"{binding} is attacked in {out[binding]} and {path.name}")
            out[binding] = f"{path.name}::{test}"
    return out


def test_every_binding_has_a_test_that_attacks_it():
    bindings = {name for name in dir(core) if not name.startswith("_")}
    table = _tables()
    assert len(table) >= 2 * 30  # both halves of the table were found
    missing = sorted(bindings - set(table))
    assert not missing, f"bindings no test attacks (add them to an ATTACKED table): {missing}"
    stale = sorted(set(table) - bindings)
    assert not stale, f"ATTACKED names bindings padless._core does not have: {stale}"
