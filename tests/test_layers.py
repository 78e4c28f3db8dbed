"""padless's layers: every import points down (or sideways), heavy libraries stay at the edge.

The test reads the source (pure AST, nothing is imported) and finds every import of a padless
module: module level, inside functions, under ``TYPE_CHECKING``, relative (``from . import x``,
``from .x import y``) or absolute. A module may import its own layer or a lower one; an import of a
higher layer is a violation. Today's violations are listed in :data:`ALLOWED` with a reason each;
a new one fails, and so does a listed one that no longer exists, so the list only shrinks (the
later slices of issue 25 empty it). Imports made by ``import_module`` on a computed name (the lazy
``padless.__getattr__``, the strategy registry, loading a saved plan) are not seen.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import json
import pickle
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parent.parent / "src" / "padless"

# lowest first; a module belongs to the first layer with a pattern matching its dotted name
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("compiled", ("padless._core",)),  # the C++ kernels (csrc/): they import nothing of padless
    (
        "checks",
        (
            "padless.core._check",
            "padless._keywords",
            "padless._splitmix",
            "padless.core._output",
            "padless.io._files",
            "padless.core._progress",
            "padless.core._moved",
        ),
    ),
    (
        "kernels",
        ("padless._kernels", "padless._kernels.*", "padless.core._rng", "padless.io._text_kernels"),
    ),
    ("schedules", ("padless.core._schedule", "padless.core._state")),
    (
        "values",
        (
            "padless.core.lengths",
            "padless.core.fields",
            "padless.core.plan",
            "padless.core.schedules",
        ),
    ),
    ("costs", ("padless.core.cost", "padless.core.memory")),
    # lengths and tokens from files: the planners plan anything lengths_of reads, paths included
    (
        "io",
        (
            "padless.io",
            "padless.io.readers",
            "padless.io.tokens",
            "padless.io.indexed",
            "padless.io.checked",
        ),
    ),
    # the strategies, and the planners of any strategy's windows and histogram form
    (
        "planners",
        (
            "padless.planners",
            "padless.planners.*",
            "padless.planners.windows",
            "padless.planners.histogram",
        ),
    ),
    ("epochs", ("padless.epochs", "padless.epochs.*")),  # the batches of one epoch, as a value
    (
        "features",
        (
            "padless.sampling.sampler",
            "padless.streams",
            "padless.streams.*",
            "padless.streams.lm",
            "padless.sampling.mixing",
            "padless.sampling.report",
            "padless.shuffle",
            "padless.shuffle.*",
            "padless.core.filters",
        ),
    ),
    ("shortcuts", ("padless.sampling.shortcuts",)),  # the plan_* functions and keyword samplers
    ("torch", ("padless.torch", "padless.torch.*")),
    (
        "integrations",
        ("padless.hf", "padless.lightning", "padless.ray", "padless.ray.*", "padless.lhotse"),
    ),
    ("face", ("padless",)),  # the package's lazy __init__
    ("cli", ("padless.cli", "padless.cli.*")),
)
# the layers whose modules may import a heavy library at module level
EDGE = {"torch", "integrations"}
# the layers that are a heavy library's face: any module may import them inside a function (a
# method that hands out a torch object, e.g. ``collate_for(sampler)``), as it would torch itself
FACES = {"torch"}

# Today's upward imports (importer -> imported), each with why it is there. Remove a line when the
# import goes; never add one (fix the import instead).
ALLOWED: dict[tuple[str, str], str] = {}

# optional libraries too heavy (or too optional) for the core: at module level only in EDGE modules
HEAVY = frozenset(
    {
        "torch",
        "transformers",
        "trl",
        "lightning",
        "pytorch_lightning",
        "ray",
        "datasets",
        "pyarrow",
        "matplotlib",
        "torchdata",
        "lhotse",
    }
)


def module_name(path: Path) -> str:
    """``src/padless/planners/spec.py`` -> ``padless.planners.spec`` (a package is its ``__init__``)."""
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


# extension modules built from csrc/: importable names without a .py file
COMPILED = frozenset({"padless._core"})


@functools.cache
def modules() -> dict[str, Path]:
    """Every module of the padless source tree, by dotted name."""
    return {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def imports_of(
    source: str, name: str, is_package: bool, known: set[str]
) -> list[tuple[str, int, bool]]:
    """``(imported module, line, deferred)`` for every import in ``source`` (module ``name``).

    Relative imports are resolved against the module's package; ``from m import x`` names the
    module ``m.x`` when that is a module (``known``), else ``m``. ``deferred`` is true inside a
    function body (it runs on call, not at import).
    """
    tree = ast.parse(source)
    package = name if is_package else name.rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = deferred or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, deferred) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    stem = ".".join(base + ([child.module] if child.module else []))
                else:
                    stem = child.module or ""
                for a in child.names:
                    sub = f"{stem}.{a.name}"
                    found.append((sub if sub in known else stem, child.lineno, deferred))
            visit(child, inner)

    visit(tree, False)
    return found


@functools.cache
def graph() -> tuple[tuple[str, str, int, bool], ...]:
    """``(importer, imported, line, deferred)`` over the whole source tree."""
    known = set(modules()) | COMPILED
    out = []
    for name, path in modules().items():
        for target, line, deferred in imports_of(
            path.read_text(encoding="utf-8"), name, path.name == "__init__.py", known
        ):
            out.append((name, target, line, deferred))
    return tuple(out)


def layer_of(name: str) -> int:
    for i, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            return i
    raise LookupError(name)


def test_every_module_has_one_layer_and_every_pattern_a_module():
    unplaced = []
    for name in modules():
        try:
            layer_of(name)
        except LookupError:
            unplaced.append(name)
    assert not unplaced, f"place these modules in LAYERS: {unplaced}"
    names = set(modules()) | COMPILED
    unused = [
        p for _, ps in LAYERS for p in ps if not any(fnmatch.fnmatchcase(m, p) for m in names)
    ]
    assert not unused, f"LAYERS names modules that do not exist: {unused}"


def test_imports_point_down():
    known = set(modules()) | COMPILED
    unknown = sorted(
        {(a, b) for a, b, _, _ in graph() if b.startswith("padless") and b not in known}
    )
    assert not unknown, f"imports of modules that do not exist: {unknown}"
    upward: dict[tuple[str, str], list[int]] = {}
    for importer, imported, line, deferred in graph():
        if imported in known and layer_of(imported) > layer_of(importer):
            if deferred and LAYERS[layer_of(imported)][0] in FACES:
                continue  # a deferred import of torch's face, like one of torch
            upward.setdefault((importer, imported), []).append(line)
    new = {
        f"{a} ({LAYERS[layer_of(a)][0]}, line {lines[0]}) -> {b} ({LAYERS[layer_of(b)][0]})"
        for (a, b), lines in upward.items()
        if (a, b) not in ALLOWED
    }
    gone = {f"{a} -> {b}" for a, b in ALLOWED if (a, b) not in upward}
    assert not new, f"imports that point up a layer (import down, or move the code): {sorted(new)}"
    assert not gone, (
        f"these allowed upward imports are gone: delete them from ALLOWED: {sorted(gone)}"
    )


# function-local imports of padless modules kept for a reason the rule does not cover
DEFERRED: dict[tuple[str, str], str] = {}


@functools.cache
def typing_only() -> frozenset[tuple[str, int]]:
    """``(module, line)`` of the imports under ``if TYPE_CHECKING:`` (never run)."""
    out = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            test = node.test if isinstance(node, ast.If) else None
            if getattr(test, "id", getattr(test, "attr", None)) != "TYPE_CHECKING":
                continue
            for sub in node.body:
                out.update(
                    (name, n.lineno)
                    for n in ast.walk(sub)
                    if isinstance(n, (ast.Import, ast.ImportFrom))
                )
    return frozenset(out)


@functools.cache
def heavy_at_import(name: str) -> bool:
    """Whether importing module ``name`` loads the compiled kernels (``padless._core``) or a heavy
    library (what its module-level imports, its packages' and theirs load, TYPE_CHECKING ones
    aside)."""
    known, guarded = set(modules()), typing_only()
    eager: dict[str, set[str]] = {}
    for a, b, line, deferred in graph():
        if not deferred and (a, line) not in guarded:
            eager.setdefault(a, set()).add(b)
    seen, todo = set(), [name]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        if m in COMPILED or m.partition(".")[0] in HEAVY:
            return True
        parts = m.split(".")
        todo.extend(p for i in range(1, len(parts)) if (p := ".".join(parts[:i])) in known)
        todo.extend(eager.get(m, ()))
    return False


def test_deferred_imports_keep_heavy_modules_away_only():
    """The one rule for a function-local import of a padless module: it keeps a module that
    loads the compiled kernels or a heavy library (torch, Ray...) out of a module that does not
    load it (``import padless`` loads the extension only when a plan is made), or it is of
    torch's face; anything else belongs at the top of the module (or in DEFERRED)."""
    known = set(modules())
    loose, used = [], set()
    for a, b, line, deferred in graph():
        if not deferred or b not in known or b == a:
            continue
        if LAYERS[layer_of(b)][0] in FACES or (heavy_at_import(b) and not heavy_at_import(a)):
            continue
        if LAYERS[layer_of(a)][0] == "cli":
            continue  # the command's start-up rule: see the test below
        if (a, b) in DEFERRED:
            used.add((a, b))
            continue
        loose.append(f"{a}:{line} -> {b}")
    assert not loose, f"function-local imports to lift to the top of their module: {loose}"
    assert used == set(DEFERRED), f"stale DEFERRED entries: {sorted(set(DEFERRED) - used)}"
    # the rule holds something: light modules exist, and plan defers the kernels (the extension)
    assert not heavy_at_import("padless.core.plan") and heavy_at_import("padless._kernels")
    assert not heavy_at_import("padless") and not heavy_at_import("padless.cli")


def test_the_command_starts_without_numpy():
    """``padless <command> --help`` loads no numpy: the command modules import what a
    subcommand needs when it runs (the second reason a function-local import may have)."""
    import subprocess
    import sys

    skip = {"padless.cli.plot", "padless.cli.__main__"}  # plot: matplotlib; __main__ runs
    names = sorted(m for m in modules() if m.startswith("padless.cli.") and m not in skip)
    code = f"import sys; import {', '.join(names)}; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", (names, out.stdout, out.stderr)


def test_heavy_libraries_are_imported_at_top_only_at_the_edge():
    # elsewhere they are imported inside the function that needs them, so `import padless` (and
    # every core module) stays free of torch, Ray, HF, Lightning, pyarrow and matplotlib
    eager = sorted(
        f"{importer}:{line} imports {imported}"
        for importer, imported, line, deferred in graph()
        if imported.partition(".")[0] in HEAVY
        and not deferred
        and LAYERS[layer_of(importer)][0] not in EDGE
    )
    assert not eager, f"heavy libraries imported at module level outside the edge: {eager}"
    # the rule has something to hold: the edge does import them eagerly, the core only deferred
    assert any(i.startswith("padless.torch.") and t == "torch" and not d for i, t, _, d in graph())
    assert any(
        i == "padless.cli.plot" and t.startswith("matplotlib") and d for i, t, _, d in graph()
    )


def test_the_walker_sees_relative_local_and_guarded_imports():
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import spec\n"
        "from .. import _kernels as K\n"
        "from ..plan import BatchPlan\n"
        "import padless.core.lengths\n"
        "if TYPE_CHECKING:\n"
        "    from ..sampler import SamplerOptions\n"
        "class C:\n"
        "    def collate(self):\n"
        "        from ..torch import collate_padded\n"
        "        import torch\n"
    )
    known = {
        "padless.planners.spec",
        "padless._kernels",
        "padless.core.plan",
        "padless.sampling.sampler",
    }
    got = imports_of(source, "padless.planners.budget", False, known)
    assert [(t, d) for t, _, d in got if t != "typing"] == [
        ("padless.planners.spec", False),
        ("padless._kernels", False),
        ("padless.core.plan", False),
        ("padless.core.lengths", False),
        ("padless.sampling.sampler", False),
        ("padless.torch", True),
        ("torch", True),
    ]
    # a package's own relative imports resolve inside it
    assert imports_of("from .spec import Spec\n", "padless.planners", True, known)[0][0] == (
        "padless.planners.spec"
    )


# ---------------------------------------------------------------------- the plan types' old homes


def test_plan_types_moved_to_the_plan_module_and_still_load_from_their_old_homes(tmp_path):
    import padless
    from padless.core import plan as plan_module
    from padless.planners import packing, shapes

    assert packing.PackedPlan is plan_module.PackedPlan is padless.PackedPlan
    assert shapes.ShapedPlan is plan_module.ShapedPlan
    assert shapes.check_shapes is plan_module.check_shapes
    assert shapes.MAX_SHAPE_SIDE == plan_module.MAX_SHAPE_SIDE == 1 << 31
    packed = padless.plan_packing([5, 3, 3, 8, 1], capacity=8)
    shaped = padless.FixedShapes(shapes=[(2, 4), (1, 8)]).plan([3, 7, 4, 1])
    assert type(packed).__module__ == type(shaped).__module__ == "padless.core.plan"
    for plan, old in ((packed, "padless.planners.packing"), (shaped, "padless.planners.shapes")):
        kind = type(plan).__name__
        # a pickle made before the move names the old module (protocol 2 writes it as text)
        blob = pickle.dumps(plan, protocol=2)
        new_ref = f"cpadless.plan\n{kind}\n".encode()
        assert new_ref in blob
        back = pickle.loads(blob.replace(new_ref, f"c{old}\n{kind}\n".encode()))
        assert type(back) is type(plan) and back == plan
        # a plan saved before the move records the old module in its JSON record
        path = tmp_path / f"{kind}.npz"
        plan.save(path)
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(str(arrays["padless_plan"]))
        assert meta["module"] == "padless.core.plan"
        arrays["padless_plan"] = np.array(json.dumps({**meta, "module": old}))
        np.savez(path, **arrays)
        loaded = padless.BatchPlan.load(path)
        assert type(loaded) is type(plan) and loaded == plan


def test_nothing_imports_a_jit():
    """The kernels are compiled with the package (``padless._core``): no module imports numba or
    llvmlite, at module level or inside a function."""
    jit = sorted(
        f"{a}:{line}" for a, b, line, _ in graph() if b.partition(".")[0] in {"numba", "llvmlite"}
    )
    assert not jit, f"imports of a JIT: {jit}"
    assert any(b == "padless._core" for _, b, _, _ in graph())  # the walker sees the extension
