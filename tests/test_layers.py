"""padless's layers are its folders: every import points down, none forms a cycle, heavy
libraries stay at the edge.

The test reads the source (pure AST, nothing is imported) and finds every import of a padless
module: module level, inside functions, under ``TYPE_CHECKING``, relative (``from . import x``,
``from .x import y``) or absolute. Each module lives in one room (a folder, or a top-level edge
module); rooms stand on levels, lowest first. A module may import its own room or any room of a
lower level, never a higher level nor a sibling room of its own level; there is no allow-list and
no exemption. Imports made by ``import_module`` on a computed name (the lazy
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

# levels, lowest first; each holds rooms (name -> patterns of dotted module names) that may import
# their own room and every room of a lower level, and not each other
LAYERS: tuple[tuple[str, dict[str, tuple[str, ...]]], ...] = (
    # the C++ kernels (csrc/) and splitmix64's plain-Python twin: they import nothing of padless
    ("compiled", {"compiled": ("padless._core", "padless._splitmix")}),
    ("kernels", {"kernels": ("padless._kernels", "padless._kernels.*")}),  # typed wrappers
    ("core", {"core": ("padless.core", "padless.core.*")}),  # pure values, no file I/O
    # lengths and tokens from files; below the planners, which plan anything lengths_of reads
    ("io", {"io": ("padless.io", "padless.io.*")}),
    ("planners", {"planners": ("padless.planners", "padless.planners.*")}),
    ("epochs", {"epochs": ("padless.epochs", "padless.epochs.*")}),  # the batches of one epoch
    (
        "consumers",
        {
            "streams": ("padless.streams", "padless.streams.*"),
            "sampling": ("padless.sampling", "padless.sampling.*"),
            "shuffle": ("padless.shuffle", "padless.shuffle.*"),
        },
    ),
    ("face", {"face": ("padless",)}),  # the package's lazy __init__
    ("torch", {"torch": ("padless.torch", "padless.torch.*")}),
    (
        "integrations",
        {
            "hf": ("padless.hf",),
            "lightning": ("padless.lightning",),
            "ray": ("padless.ray", "padless.ray.*"),
            "lhotse": ("padless.lhotse",),
            "grain": ("padless.grain",),
            "jax": ("padless.jax",),
        },
    ),
    ("cli", {"cli": ("padless.cli", "padless.cli.*")}),
)
# the levels whose modules may import a heavy library at module level
EDGE = {"torch", "integrations"}

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
        "grain",
        "jax",
        "torchtitan",
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


def place_of(name: str) -> tuple[int, str]:
    """``(level, room)`` of a module: the first room with a pattern matching its dotted name."""
    for level, (_, rooms) in enumerate(LAYERS):
        for room, patterns in rooms.items():
            if any(fnmatch.fnmatchcase(name, p) for p in patterns):
                return level, room
    raise LookupError(name)


def layer_of(name: str) -> str:
    return LAYERS[place_of(name)[0]][0]


def test_every_module_has_one_room_and_every_pattern_a_module():
    unplaced = []
    for name in modules():
        try:
            place_of(name)
        except LookupError:
            unplaced.append(name)
    assert not unplaced, f"place these modules in LAYERS: {unplaced}"
    names = set(modules()) | COMPILED
    unused = [
        p
        for _, rooms in LAYERS
        for ps in rooms.values()
        for p in ps
        if not any(fnmatch.fnmatchcase(m, p) for m in names)
    ]
    assert not unused, f"LAYERS names modules that do not exist: {unused}"


def test_the_top_level_holds_only_the_face_the_compiled_kernels_and_the_edge():
    top = {n for n in modules() if n.count(".") == 1 and not (SRC / n.split(".")[1]).is_dir()}
    assert top <= {
        "padless._splitmix",
        "padless.hf",
        "padless.lightning",
        "padless.lhotse",
        "padless.grain",
        "padless.jax",
    }, top


def test_imports_point_down():
    known = set(modules()) | COMPILED
    unknown = sorted(
        {(a, b) for a, b, _, _ in graph() if b.startswith("padless") and b not in known}
    )
    assert not unknown, f"imports of modules that do not exist: {unknown}"
    wrong = set()
    for importer, imported, line, _ in graph():
        if imported not in known:
            continue
        (la, ra), (lb, rb) = place_of(importer), place_of(imported)
        if lb > la or (lb == la and ra != rb):
            wrong.add(f"{importer}:{line} ({ra}) -> {imported} ({rb})")
    assert not wrong, (
        f"imports that point up or sideways (import down, or move the code): {sorted(wrong)}"
    )


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of a directed graph (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    nodes = sorted(set(edges) | {b for bs in edges.values() for b in bs})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    out.append(sorted(component))
    return out


def test_the_import_graph_has_no_cycle():
    """Every import counted (function-local and TYPE_CHECKING ones too): each strongly connected
    component of the graph between padless modules is one module."""
    edges: dict[str, set[str]] = {}
    for a, b, _, _ in graph():
        if b.startswith("padless") and b != a:
            edges.setdefault(a, set()).add(b)
    cycles = [c for c in strongly_connected(edges) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"
    # the search finds one when there is one
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ["a", "b", "c"],
        ["d"],
    ]


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
    load it (``import padless`` loads the extension only when a plan is made); anything else
    belongs at the top of the module. No exception, no list of exemptions."""
    known = set(modules())
    loose = []
    for a, b, line, deferred in graph():
        if not deferred or b not in known or b == a:
            continue
        if heavy_at_import(b) and not heavy_at_import(a):
            continue
        if layer_of(a) == "cli":
            continue  # the command's start-up rule: see the test below
        loose.append(f"{a}:{line} -> {b}")
    assert not loose, f"function-local imports to lift to the top of their module: {loose}"
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
        if imported.partition(".")[0] in HEAVY and not deferred and layer_of(importer) not in EDGE
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
        "from ..core.plan import BatchPlan\n"
        "import padless.core.lengths\n"
        "if TYPE_CHECKING:\n"
        "    from ..sampling.sampler import SamplerOptions\n"
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
        new_ref = f"cpadless.core.plan\n{kind}\n".encode()
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
        # a plan saved by 0.1.0's flat layout names the module "padless" + ".plan": it loads from
        # padless.core.plan (tools/relayout.py writes that table); the old module is gone (no shims)
        flat = "padless" + ".plan"  # spelled apart so that tools/relayout.py leaves it as it is
        arrays["padless_plan"] = np.array(json.dumps({**meta, "module": flat}))
        np.savez(path, **arrays)
        loaded = padless.BatchPlan.load(path)
        assert type(loaded) is type(plan) and loaded == plan
    assert not (SRC / "plan.py").exists() and not (SRC / "sampler.py").exists()


def test_nothing_imports_a_jit():
    """The kernels are compiled with the package (``padless._core``): no module imports numba or
    llvmlite, at module level or inside a function."""
    jit = sorted(
        f"{a}:{line}" for a, b, line, _ in graph() if b.partition(".")[0] in {"numba", "llvmlite"}
    )
    assert not jit, f"imports of a JIT: {jit}"
    assert any(b == "padless._core" for _, b, _, _ in graph())  # the walker sees the extension
