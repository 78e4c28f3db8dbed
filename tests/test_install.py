"""The installed package works where nothing can be written: read-only site-packages, HOME.

Kubernetes' ``readOnlyRootFilesystem`` and locked-down containers run a package from a file system
that cannot be written, with a HOME that cannot be either. The compiled kernels need no cache and
no compiler at run time, so every plan must work there. The test copies the installed package
(its Python files and the built extension, as a wheel would lay them out) into a folder, then runs
a fresh interpreter on it with HOME in another folder, both mounted read-only in a private mount
namespace where the system allows one (``unshare``; root in a namespace of its own, nothing
outside changes), and checks in every case that the run wrote nothing into either folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

import padless

CODE = """
import json, sys
import numpy as np
import padless
from padless import _core
lengths = padless.builtin_corpus()
plan = padless.plan_token_budget(lengths, max_tokens=4096, seed=1)
packed = padless.plan_packing(lengths, capacity=1024, seed=1)
sampler = padless.TokenBudgetSampler(lengths, max_tokens=4096, seed=1)
first = next(iter(sampler))
print(json.dumps({"core": _core.__file__, "padless": padless.__file__,
                  "batches": len(plan), "rows": len(packed), "first": [int(i) for i in first]}))
"""


def _tree(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


def _read_only_namespace() -> list[str]:
    """The command prefix that runs a program with the folders after ``--`` mounted read-only in a
    private mount namespace, or [] where the system does not allow one."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    probe = subprocess.run(
        [unshare, "-m", "--propagation", "private", "true"], capture_output=True, check=False
    )
    return [unshare, "-m", "--propagation", "private"] if probe.returncode == 0 else []


def test_installed_package_plans_from_a_read_only_tree_with_an_unwritable_home(tmp_path):
    import padless._core as core

    site = tmp_path / "site"
    shutil.copytree(
        Path(padless.__file__).parent,
        site / "padless",
        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"),
    )
    shutil.copy2(core.__file__, site / "padless")  # editable installs keep it in site-packages
    home = tmp_path / "home"
    home.mkdir()
    before = (_tree(site), _tree(home))
    numpy_site = str(Path(np.__file__).resolve().parent.parent)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(site), numpy_site]),
    }
    python = [sys.executable, "-S", "-c", CODE]  # -S: no .pth files (no editable finder)
    namespace = _read_only_namespace()
    if namespace:
        mounts = " && ".join(
            f"mount --bind {d} {d} && mount -o remount,bind,ro {d}" for d in (site, home)
        )
        probe = f"! touch {site}/padless/probe 2>/dev/null && ! touch {home}/probe 2>/dev/null"
        script = f'{mounts} && {probe} && exec "$@"'
        command = [*namespace, "sh", "-c", script, "sh", *python]
    else:  # pragma: no cover - no mount namespace here: the no-writes check below still holds
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # root may write anyway: no .pyc, then count files
        for p in [site, home, *site.rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)
        command = python
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["core"].startswith(str(site)) and result["padless"].startswith(str(site))
    assert (_tree(site), _tree(home)) == before, "the run wrote into the package or HOME"
    # the same plans as in this process
    lengths = padless.builtin_corpus()
    assert result["batches"] == len(padless.plan_token_budget(lengths, max_tokens=4096, seed=1))
    assert result["rows"] == len(padless.plan_packing(lengths, capacity=1024, seed=1))
    sampler = padless.TokenBudgetSampler(lengths, max_tokens=4096, seed=1)
    assert result["first"] == [int(i) for i in next(iter(sampler))]


def test_the_type_stub_is_the_compiled_module_s(tmp_path):
    """``src/padless/_core.pyi`` (what mypy and editors read) is what nanobind's stubgen writes for
    the module as built: a binding changed without ``make stub`` fails here."""
    import pytest

    pytest.importorskip("nanobind")
    out = tmp_path / "_core.pyi"
    subprocess.run(
        [sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "padless._core", "-o", str(out)],
        check=True,
        capture_output=True,
    )
    committed = Path(padless.__file__).with_name("_core.pyi")
    assert out.read_text() == committed.read_text(), "run `make stub` and commit _core.pyi"


def test_import_loads_no_kernels_and_starts_no_thread():
    """``import padless`` loads no compiled module and starts no thread or process; the first plan
    loads the extension (a few milliseconds), and still starts no thread."""
    code = (
        "import sys, threading, padless; "
        "print(int('padless._core' in sys.modules), threading.active_count()); "
        "padless.plan_token_budget([3, 1, 2], max_tokens=4); "
        "print(int('padless._core' in sys.modules), threading.active_count())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["0", "1", "1", "1"], out.stdout + out.stderr
