"""Every binding of padless._core, driven with random and adversarial arguments in a subprocess.

The bindings are listed at run time and their arguments read from nanobind's signatures, so a new
binding is driven as soon as it exists; one whose signature says too little (an `object`) needs an
entry in HAND, and test_every_binding_can_be_driven fails until it has one.

Arrays have 0-16 items (2-D: up to 16 x 8) of the dtypes the overloads take (now and then one
none takes), drawn as edge values (-2**63, -1, 0, 2**31 - 1, 2**31, 2**63 - 1, the dtype's limits,
nan, inf, ...) among small ones, small ones, non-decreasing offsets, a range or a permutation;
arrays and ints of one case often share a length. They come contiguous, read-only, reversed,
strided, broadcast (a zero stride) or transposed; ints and floats from the same edges.

A case runs in a worker process (tests/_fuzz_worker.py) that outlives many cases: a crash there
(a signal, an abort, an AddressSanitizer or UBSan report under `make sanitize`) or a hang is
recorded with the case that caused it, and a fresh worker takes the next case. A ValueError,
TypeError, IndexError, OverflowError or ZeroDivisionError is a clean refusal; any other exception
(MemoryError from these tiny inputs included), a crash or a hang fails the binding's test, which
lists its shortest failing cases as calls to paste into Python.

`make test` draws the profile's fixed examples (40) per binding; `make fuzz` (the fuzz profile)
draws 1,000 random ones per binding. Both print "fuzz: N cases over B bindings, F failures
(C crashes)"; PADLESS_FUZZ_REPORT=file.json keeps every failing case.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import os
import pickle
import re
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import padless._core as core

WORKER = Path(__file__).with_name("_fuzz_worker.py")
BINDINGS = sorted(n for n in dir(core) if not n.startswith("_"))
TIMEOUT = float(os.environ.get("PADLESS_FUZZ_TIMEOUT", "10"))  # seconds a case may take
# a binding's cases stop after this many failures (each can cost a worker's start or a timeout)
MAX_FAILURES = int(os.environ.get("PADLESS_FUZZ_MAX_FAILURES", "20"))
REPORT = os.environ.get("PADLESS_FUZZ_REPORT")  # a JSON file for every failing case, if set
REPRODUCE = "in tests/: import padless._core; from _fuzz_worker import np, row_order, strided"
MEMORY_MB = 3072  # the worker's memory: a larger allocation from these inputs is a failure

EDGES = (-(2**63), -1, 0, 1, 2, 7, 2**31 - 1, 2**31, 2**62, 2**63 - 1)
FLOAT_EDGES = (0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e300, -1e300, 5e-324, 2.0**63)
FLOAT_EDGES += (float("inf"), float("-inf"), float("nan"))
INT_DTYPES = ("int64", "int32", "uint32", "uint16", "int16", "uint8", "int8", "uint64")
ANY_DTYPES = INT_DTYPES + ("float64", "bool")


@dataclasses.dataclass(frozen=True)
class Param:
    """One argument, as far as the signature tells it."""

    name: str
    kind: str  # "int", "float", "bool", "array" or "callable"
    dtypes: tuple[str, ...] = ()  # an array's dtype, or the dtypes it may have (unnamed: any)
    ndim: int = 1
    writable: bool = False
    most: int | None = None  # an int's largest value drawn: a count of work asked for, not checked


def _array(name: str, dtypes: tuple[str, ...], ndim: int = 1, writable: bool = False) -> Param:
    return Param(name, "array", dtypes, ndim, writable=writable)


# What a signature does not say: what the `object`s a binding checks in C++ are meant to be, the
# dtypes an untyped array may have (the others only reach a TypeError), and the ints that ask
# for that much work (count_labels draws n labels: a huge n is a long wait, not a bug).
_OUT = ("int64", "int32", "uint16")  # padless.streams.lm.OUT_DTYPES
_IDS = ("int64", "int32")  # the collate's outputs (csrc/collate.cpp)
HAND: dict[str, dict[str, Param]] = {
    "count_labels": {"n": Param("n", "int", most=64)},
    "gather_tokens": {"out": _array("out", _IDS, writable=True)},
    "packed_batch": {
        "ids": _array("ids", _IDS, writable=True),
        "labels": _array("labels", _IDS, writable=True),
    },
    "padded_batch": {"ids": _array("ids", _IDS, writable=True)},
    "lm_gather": {
        "src": _array("src", INT_DTYPES),
        "starts": _array("starts", ("int64",)),
        "x": _array("x", _OUT, ndim=2, writable=True),
        "y": _array("y", _OUT, ndim=2, writable=True),
    },
    "lm_random_batch": {
        "src": _array("src", INT_DTYPES),
        "round_keys": _array("round_keys", ("uint64",)),
        "x": _array("x", _OUT, ndim=2, writable=True),
        "y": _array("y", _OUT, ndim=2, writable=True),
    },
}


def _split(text: str) -> list[str]:
    """text split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


def parse_param(name: str, text: str) -> Param | None:
    """The Param of one `name: type` of a nanobind signature; None for a type it cannot draw."""
    if text in ("int", "float", "bool"):
        return Param(name, text)
    if text == "collections.abc.Callable":
        return Param(name, "callable")
    m = re.fullmatch(r"ndarray\[(.*)\]", text)
    if m is None:
        return None
    fields = dict(f.split("=", 1) for f in _split(m.group(1)))
    shape = fields.get("shape", "")
    if not re.fullmatch(r"\((\*(, )?)+\)", shape):
        return None
    dtype = fields.get("dtype")
    return Param(
        name,
        "array",
        (dtype,) if dtype else ANY_DTYPES,
        ndim=shape.count("*"),
        writable=fields.get("writable") != "False",
    )


@functools.cache
def overloads(name: str) -> list[list[Param | tuple[str, str]]]:
    """Each overload's parameters: a Param, or (name, type) where neither it nor HAND can say."""
    found = []
    for signature, *_ in getattr(core, name).__nb_signature__:
        m = re.fullmatch(rf"def {name}\((.*)\) -> .*", signature, flags=re.S)
        assert m, signature
        params: list[Param | tuple[str, str]] = []
        for part in _split(m.group(1)):
            # "name: type" or "name: type = default"; a "*" or "/" marker is not drawn
            pname, _, ptype = part.partition(": ")
            ptype = ptype.split(" = ", 1)[0]
            hand = HAND.get(name, {}).get(pname)
            params.append(hand or parse_param(pname, ptype) or (pname, ptype))
        found.append(params)
    return found


def test_every_binding_can_be_driven():
    """Every parameter of every overload of every binding has a strategy (HAND has no leftovers)."""
    undrawable = [
        f"{name}({p[0]}: {p[1]})"
        for name in BINDINGS
        for params in overloads(name)
        for p in params
        if not isinstance(p, Param)
    ]
    assert not undrawable, f"add these to HAND in {__file__}: {undrawable}"
    stale = [n for n in HAND if n not in BINDINGS] + [
        f"{n}.{p}"
        for n, hand in HAND.items()
        if n in BINDINGS
        for p in hand
        if all(p not in [q.name for q in params if isinstance(q, Param)] for params in overloads(n))
    ]
    assert not stale, f"HAND names what no binding has: {stale}"
    assert len(BINDINGS) >= 60  # the module is the compiled one, with its bindings


# ---- strategies ---------------------------------------------------------------------------------


@functools.cache
def _edges(dtype: str) -> np.ndarray:
    """The edge values a dtype can hold (as objects: uint64's do not fit int64)."""
    if dtype == "float64":
        return np.array(FLOAT_EDGES, dtype=object)
    if dtype == "bool":
        return np.array([False, True], dtype=object)
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    extra = (2**63, 2**64 - 1) if dtype == "uint64" else ()
    return np.array(sorted({v for v in EDGES + extra if lo <= v <= hi} | {lo, hi, hi - 1}), object)


MODES = ("edges", "small", "offsets", "range", "permutation")


def _values(rng: np.random.Generator, mode: str, dtype: str, count: int, n: int) -> np.ndarray:
    """count values of a dtype: edge values among small ones, small ones (up to about n),
    offsets (non-decreasing from 0), a range or a permutation. Drawn by numpy from a seed
    hypothesis draws: far cheaper than an element-by-element draw, and as reproducible."""
    if dtype == "float64":
        small = rng.uniform(-20, 20, count).astype(object)
    elif dtype == "bool":
        small = rng.integers(0, 2, count).astype(bool).astype(object)
    elif mode == "range":
        return np.arange(count).astype(dtype)
    elif mode == "permutation":
        return rng.permutation(count).astype(dtype)
    elif mode == "offsets":
        steps = rng.integers(0, 5, count)
        return (np.cumsum(steps) - steps[:1]).astype(dtype) if count else np.zeros(0, dtype)
    else:
        lo = max(int(np.iinfo(dtype).min), -3)
        small = rng.integers(lo, max(n, 1) + 3, count).astype(object)
        if mode == "small":
            return small.astype(dtype)
    edges = _edges(dtype)
    picked = np.where(rng.random(count) < 0.5, edges[rng.integers(0, len(edges), count)], small)
    return picked.astype(dtype)


_SIZES = st.integers(0, 16)
_COLUMNS = st.integers(0, 8)
_SEEDS = st.integers(0, 2**32 - 1)
_ONE_IN_5 = st.integers(0, 4)
_ONE_IN_10 = st.integers(0, 9)


@functools.cache
def _hows(ndim: int, writable: bool, readonly: bool = False) -> st.SearchStrategy[str]:
    # an output is mostly a plain buffer: nanobind refuses a strided one where order='C' is asked
    hows = ["plain"] * (8 if writable else 4) + ["reversed", "every_other"]
    if ndim == 2:
        hows += ["transposed", "fortran"]
    if not writable:
        hows += ["readonly", "broadcast"]
    elif readonly:
        hows += ["readonly"]  # a read-only buffer for an output: refused by nanobind
    return st.sampled_from(hows)


@functools.cache
def _sampled(items: tuple) -> st.SearchStrategy:
    return st.sampled_from(items)


@dataclasses.dataclass
class _Shared:
    """What the arrays and ints of one case often share, as the bindings' checks ask."""

    n: int  # a length
    columns: int  # a 2-D array's width
    odd: bool  # arrays in odd layouts (strided, read-only...) or dtypes: else plain, as asked
    dtypes: dict[tuple[str, ...], str]  # the dtype drawn first for a set of possible dtypes

    @property
    def vary(self) -> st.SearchStrategy[int]:
        """0 when an array leaves what its case shares: one in 5 in odd cases, else one in 10."""
        return _ONE_IN_5 if self.odd else _ONE_IN_10


def _dtype(draw, p: Param, shared: _Shared) -> str:
    if shared.odd and draw(_ONE_IN_10) == 0:  # a dtype no overload takes
        return draw(_sampled(ANY_DTYPES))
    if p.dtypes in shared.dtypes and draw(shared.vary) != 0:
        return shared.dtypes[p.dtypes]
    dtype = draw(_sampled(p.dtypes))
    shared.dtypes.setdefault(p.dtypes, dtype)
    return dtype


def _array_arg(draw, p: Param, shared: _Shared):
    """("array", values, how): the worker passes _fuzz_worker.strided(values, how)."""
    dtype = _dtype(draw, p, shared)
    rows = shared.n if draw(shared.vary) != 0 else draw(_SIZES)
    columns = shared.columns if draw(shared.vary) != 0 else draw(_COLUMNS)
    shape = (rows,) if p.ndim == 1 else (rows, columns) + (2,) * (p.ndim - 2)
    how = "plain"
    if shared.odd:
        how = draw(_hows(p.ndim, p.writable, p.writable and draw(_ONE_IN_10) == 0))
    rng = np.random.default_rng(draw(_SEEDS))
    a = _values(rng, draw(_sampled(MODES)), dtype, int(np.prod(shape)), shared.n)
    a = a.reshape(shape)
    if how == "broadcast" and a.size:
        a = np.ascontiguousarray(np.broadcast_to(a[:1], shape))
    return ("array", a, how)


_FLOATS = st.sampled_from(FLOAT_EDGES) | st.floats(-20, 20)
_EDGE_INTS = st.sampled_from(EDGES)
_SMALL_INTS = st.integers(-3, 20)
_CALLABLES = st.sampled_from(["identity", "reverse", "fixed", "raise", "not_an_array"])


def _scalar(draw, p: Param, shared: _Shared):
    if p.kind == "bool":
        return draw(st.booleans())
    if p.kind == "float":
        return draw(_FLOATS)
    if p.most is not None:
        return draw(_sampled(tuple(v for v in EDGES if v <= p.most)) | st.integers(-3, p.most))
    if draw(_ONE_IN_10) == 0:  # the case's common length, or near it
        return draw(_sampled((shared.n, shared.n + 1, 2 * shared.n)))
    # an edge in half the odd cases' ints and a quarter of the others' (many an edge is refused
    # by nanobind, as too large for an int32_t or negative for a uint64_t)
    return draw(_EDGE_INTS if draw(_ONE_IN_5) < (3 if shared.odd else 1) else _SMALL_INTS)


@st.composite
def cases(draw, name: str) -> list:
    """The arguments of one call of the binding name (one overload's worth, or near it)."""
    params = draw(_sampled(tuple(tuple(o) for o in overloads(name))))
    shared = _Shared(draw(_SIZES), draw(_COLUMNS), draw(_ONE_IN_5) < 2, {})
    args = []
    for p in params:
        assert isinstance(p, Param), p
        if p.kind == "array":
            args.append(_array_arg(draw, p, shared))
        elif p.kind == "callable":
            rng = np.random.default_rng(draw(_SEEDS))
            fixed = _values(rng, draw(_sampled(MODES)), "int64", draw(_COLUMNS), shared.n)
            args.append(("callable", draw(_CALLABLES), fixed))
        else:
            args.append(_scalar(draw, p, shared))
    return args


def _literal(v) -> str:
    return f"float('{v}')" if isinstance(v, float) and not np.isfinite(v) else repr(v)


def _numpy(values: np.ndarray) -> str:
    text = f"np.array([{', '.join(_literal(v) for v in values.ravel().tolist())}], "
    text += f"dtype='{values.dtype}')"
    return text + (f".reshape({values.shape})" if values.ndim != 1 else "")


def describe(name: str, args: list) -> str:
    """The case as a call to paste into Python (see REPRODUCE)."""

    def one(a) -> str:
        if isinstance(a, tuple) and a[0] == "array":
            _, values, how = a
            return _numpy(values) if how == "plain" else f"strided({_numpy(values)}, {how!r})"
        if isinstance(a, tuple) and a[0] == "callable":
            _, how, fixed = a
            return f"row_order({how!r}, {_numpy(fixed)})"
        return _literal(a)

    return f"padless._core.{name}({', '.join(one(a) for a in args)})"


# ---- the worker ---------------------------------------------------------------------------------


def _interesting(stderr: str) -> str:
    """The lines of a dead worker's stderr that say what happened."""
    keys = ("ERROR: AddressSanitizer", "SUMMARY:", "runtime error", "Fatal Python error")
    keys += ("terminate called", "what():", "free()", "malloc", "corrupted", "double free")
    lines = stderr.splitlines()
    picked = [ln.strip() for ln in lines if any(k in ln for k in keys)]
    frames = [ln.strip() for ln in lines if re.match(r"\s*#\d+ .* in padless::", ln)]
    return " | ".join(dict.fromkeys(picked[:4] + frames[:2])) or " | ".join(lines[-3:])


class Worker:
    """A _fuzz_worker process, restarted after each crash or hang."""

    def __init__(self, tmp: Path):
        self.stderr_path = tmp / "worker.stderr"
        self.proc: subprocess.Popen | None = None
        self.core_file = ""

    def _env(self) -> dict[str, str]:
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        if "libasan" in env.get("LD_PRELOAD", ""):  # ASan maps terabytes: no RLIMIT_AS
            asan = env.get("ASAN_OPTIONS", "")
            env["ASAN_OPTIONS"] = (
                f"{asan}:allocator_may_return_null=1:max_allocation_size_mb={MEMORY_MB}"
            )
        else:
            env["PADLESS_FUZZ_MEMORY_MB"] = str(MEMORY_MB)
            env["MALLOC_PERTURB_"] = "165"  # fresh and freed heap memory is not zeros
        return env

    def start(self) -> None:
        self.stderr = open(self.stderr_path, "w+b")  # noqa: SIM115 - read after the worker dies
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=self._env(),
        )
        hello = self._receive(time.monotonic() + 60)
        assert hello is not None, f"the fuzz worker did not start: {self._stderr()}"
        self.core_file = hello

    def _stderr(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def _read(self, n: int, deadline: float) -> bytes | None:
        assert self.proc is not None and self.proc.stdout is not None
        fd, data = self.proc.stdout.fileno(), b""
        while len(data) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def _receive(self, deadline: float):
        head = self._read(8, deadline)
        body = head and self._read(struct.unpack("<Q", head)[0], deadline)
        return None if body is None else pickle.loads(body)

    def _died(self) -> str:
        assert self.proc is not None
        rc = self.proc.wait()
        how = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
        said = _interesting(self._stderr())
        detail = f"{how}: {said}" if said else how
        self.stop()
        return detail

    def run(self, name: str, args: list) -> tuple[str, str]:
        """(outcome, detail): ok, refused, memory (MemoryError), error (another exception),
        crash or hang."""
        if self.proc is None:
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        message = pickle.dumps((name, args))
        try:
            self.proc.stdin.write(struct.pack("<Q", len(message)) + message)
            self.proc.stdin.flush()
            outcome = self._receive(time.monotonic() + TIMEOUT)
        except BrokenPipeError:
            outcome = None
        except TimeoutError:
            self.stop()
            return "hang", f"no answer in {TIMEOUT:g} s"
        if outcome is not None:
            return outcome
        detail = self._died()
        if "AddressSanitizer: out-of-memory" in detail or "allocation-size-too-big" in detail:
            return "memory", detail  # what the plain build raises as MemoryError
        return "crash", detail

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    pipe.close()
            self.stderr.close()
            self.proc = None


# ---- the tests ----------------------------------------------------------------------------------


class Tally:
    """Cases and failures per binding; the total is printed at the end of the session."""

    def __init__(self):
        self.cases: collections.Counter[str] = collections.Counter()
        self.outcomes: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        self.failures: dict[str, list[tuple[str, str, str]]] = collections.defaultdict(list)

    def pytest_terminal_summary(self, terminalreporter):
        if REPORT:
            with open(REPORT, "w") as f:
                json.dump({"cases": self.cases, "failures": self.failures}, f, indent=1)
        failed = sum(len(f) for f in self.failures.values())
        crashes = sum(o["crash"] for o in self.outcomes.values())
        terminalreporter.write_line(
            f"fuzz: {sum(self.cases.values())} cases over {len(self.cases)} bindings, "
            f"{failed} failures ({crashes} crashes)"
            + "".join(
                f"\n  {name}: {len(f)} of {self.cases[name]} cases failed "
                f"({', '.join(f'{k} {v}' for k, v in sorted(self.outcomes[name].items()))})"
                for name, f in sorted(self.failures.items())
                if f
            )
        )


@pytest.fixture(scope="module")
def worker(tmp_path_factory, request):
    tally = Tally()
    request.config.pluginmanager.register(tally, "padless-fuzz-tally")
    w = Worker(tmp_path_factory.mktemp("fuzz"))
    w.tally = tally  # type: ignore[attr-defined]
    yield w
    w.stop()


def test_the_worker_loads_the_module_under_test(worker):
    worker.start()
    assert worker.core_file == core.__file__  # under `make sanitize`, the sanitized build
    expected = os.environ.get("PADLESS_CORE_SO")
    assert not expected or os.path.samefile(core.__file__, expected)
    worker.stop()


@pytest.mark.parametrize("name", BINDINGS)
def test_fuzz_binding(name, worker):
    tally: Tally = worker.tally

    @settings(
        max_examples=settings.default.max_examples,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(cases(name))
    def drive(args):
        if len(tally.failures[name]) >= MAX_FAILURES:
            return
        outcome, detail = worker.run(name, args)
        tally.cases[name] += 1
        tally.outcomes[name][outcome] += 1
        if outcome not in ("ok", "refused"):
            tally.failures[name].append((outcome, describe(name, args), detail))

    drive()
    failures = sorted(set(tally.failures[name]), key=lambda f: len(f[1]))
    if failures:
        pytest.fail(
            f"{len(tally.failures[name])} of {tally.cases[name]} cases of {name} failed "
            f"(it stops at {MAX_FAILURES}) "
            f"({len(failures)} distinct); the shortest ({REPRODUCE}):\n"
            + "\n".join(f"{kind}: {call}\n    {detail}" for kind, call, detail in failures[:5]),
            pytrace=False,
        )
