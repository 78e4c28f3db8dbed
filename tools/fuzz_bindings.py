"""Drive compiled bindings with random small arrays and scalars, in subprocesses; count crashes.

Run: .venv/bin/python tools/fuzz_bindings.py [--calls 2000] [--seed 0] [NAME ...]
(FUZZ_CORE=path/to/_core.so drives that build of the module instead of padless's own.)

Every call is drawn from (seed, binding, call number) alone, so a crash is reproduced by its
number. A child process makes the calls of one binding in order and notes each number before
it calls; a child that dies (a signal, or any exit but the normal one) or hangs past
``--timeout`` is a crash at the noted call, and a new child goes on from the next one. Any
Python exception is a clean refusal. The children run under a 4 GiB address-space limit, so an
absurd size is a MemoryError rather than the machine's memory.

Arguments come from each binding's nanobind signature. Half the calls are hostile throughout:
arrays of 0 to 8 entries in a random dtype (the overload's own more often than not) holding
values from a hostile pool (0, ±1, 2**31 - 1, 2**62, 2**63 - 1, -2**63...), or small counts, or
sorted bounds from 0; ints, floats and bools from similar pools; callables that return a
permutation, the wrong length, the wrong type or raise. The other half are near-valid, read off
the parameters' names (arrays of one length, bounds from 0 to it, counts and sizes that fit),
with one hostile argument in half of them: the calls that get past the checks into a kernel. Without names, the bindings of
csrc/base.cpp, budget, cost, exact, buckets, shapes, streams and windows are driven.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

FAMILIES_A = [
    # base.cpp: rng, order, segments, the greedy budget rule, the saturating helpers
    "mul_exceeds", "sat_add", "sat_mul", "random_below", "stream_key", "hash_ints",
    "counting_order", "counting_order_named", "shuffle_runs", "segment_max", "take_segments",
    "offset_list", "unnamed_segments", "budget_ends_runs",
    # budget.cpp
    "gather_walk", "walk_first_error", "narrow_into",
    # cost.cpp
    "budget_cost_ends", "budget_field_cost_ends", "packed_batch_costs", "best_fit_rows_cost",
    # exact.cpp, buckets.cpp
    "exact_split", "capped_ends", "least_padding_ends", "optimal_cuts",
    # shapes.cpp
    "shape_ends", "pick_shapes", "static_cuts", "shaped_cost", "polish_ends", "carry_cuts",
    # streams.cpp
    "budget_round",
    # windows.cpp
    "window_items", "gather_rows", "scan_lengths", "window_order", "budget_ends_runs1",
    "budget_window", "budget_window_count", "best_fit_visits", "width_scatter",
    "pack_window_count", "pack_rows",
]  # fmt: skip

INT_POOL = [-(2**63), -(2**31), -2, -1, 0, 0, 1, 1, 2, 3, 4, 7, 8, 64, 2**31 - 1, 2**32,
            2**62, 2**63 - 1]  # fmt: skip
FLOAT_POOL = [0.0, 0.0, 1.0, 2.5, -1.0, 1e300, float("nan"), float("inf"), -float("inf")]
DTYPES = ["int64", "int32", "uint32", "uint16", "float64"]


def parse(signature: str) -> list[tuple[str, dict]]:
    """The parameters of a nanobind signature: (name, {kind, dtype, ndim, writable})."""
    inner = signature[signature.index("(") + 1 : signature.rindex(") ->")]
    params, depth, cur = [], 0, ""
    for ch in inner:
        depth += ch in "[("
        depth -= ch in "])"
        if ch == "," and depth == 0:
            params.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        params.append(cur.strip())
    out = []
    for p in params:
        name, _, kind = p.partition(": ")
        if kind.startswith("ndarray") or kind.startswith("numpy.ndarray"):
            dtype = re.search(r"dtype=(\w+)", kind)
            shape = re.search(r"shape=\(([^)]*)\)", kind)
            ndim = shape.group(1).count("*") if shape else 1
            out.append(
                (
                    name,
                    {
                        "kind": "array",
                        "dtype": dtype.group(1) if dtype else "int64",
                        "ndim": ndim,
                        "writable": "writable=False" not in kind,
                    },
                )
            )
        elif "Callable" in kind:
            out.append((name, {"kind": "callable"}))
        elif kind == "float":
            out.append((name, {"kind": "float"}))
        elif kind == "bool":
            out.append((name, {"kind": "bool"}))
        else:
            out.append((name, {"kind": "int"}))
    return out


def fit(v: int, dtype, np):
    """v as an entry of dtype (integers wrap as C casts do; floats as floats)."""
    if dtype.kind == "f":
        return float(v)
    if dtype.kind == "b":
        return bool(v & 1)
    bits = 8 * dtype.itemsize
    v &= (1 << bits) - 1
    if dtype.kind == "i" and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def make_array(rng: random.Random, spec: dict, np):
    dtype = spec["dtype"] if rng.random() < 0.6 else rng.choice(DTYPES + ["bool"])
    dtype = np.dtype(dtype)
    ndim = spec["ndim"] if rng.random() < 0.95 else rng.choice([1, 2])
    shape = tuple(rng.randint(0, 8) if i == 0 else rng.randint(0, 3) for i in range(ndim))
    count = int(np.prod(shape)) if shape else 1
    mode = rng.random()
    if mode < 0.35:  # hostile values
        vals = [rng.choice(INT_POOL) for _ in range(count)]
    elif mode < 0.7:  # small counts and sizes
        vals = [rng.randint(0, 8) for _ in range(count)]
    else:  # bounds from 0, not decreasing
        vals, at = [], 0
        for _ in range(count):
            vals.append(at)
            at += rng.randint(0, 3)
    arr = np.array([fit(v, dtype, np) for v in vals], dtype=dtype).reshape(shape)
    if rng.random() < 0.05 and arr.ndim == 1 and arr.size > 1:
        arr = arr[::2]  # not contiguous
    if rng.random() < 0.05:
        arr.setflags(write=False)
    return arr


def make_callable(rng: random.Random, np):
    choice = rng.randrange(7)
    if choice == 0:
        return lambda k: np.random.default_rng(0).permutation(k).astype(np.int64)
    if choice == 1:
        return lambda k: np.arange(k, dtype=np.int64)
    if choice == 2:
        return lambda k: np.zeros(k + 1, dtype=np.int64)
    if choice == 3:
        return lambda k: np.full(k, k + 5, dtype=np.int64)
    if choice == 4:
        return lambda k: [0] * k
    if choice == 5:
        return lambda k: np.arange(k, dtype=np.int32)
    return lambda k: 1 // 0


# Parameters that bound runs or segments of another array, and scalars by what they count.
BOUNDS = {"starts", "offsets", "row_bounds", "row_offsets", "ends"}
SIZES_OF = {"n", "num_keys", "span", "n_items", "runs"}


def coherent_value(rng: random.Random, name: str, length: int, top: int) -> int:
    """A scalar that keeps the rules most of the time, given the call's array length and
    largest entry: what gets a call past the checks and into the kernel."""
    if name in SIZES_OF and rng.random() < 0.8:  # what the arrays need most of the time
        return length if name in ("n", "runs") else top + 1 + rng.randint(0, 2)
    if name in SIZES_OF:
        return rng.choice([length, top + 1, top + 2, length + 1, max(length - 1, 0)])
    if name in ("block",):
        return rng.randint(1, max(length, 1) + 1)
    if name in ("rotation", "lo", "low", "first_id"):
        return rng.randint(0, max(length - 1, 0))
    if name in ("hi",):
        return length
    if name in ("k", "multiple", "rows_per_batch"):
        return rng.randint(1, 4)
    if name in ("mode",):
        return rng.randint(0, 2)
    if name in ("max_sentences", "max_per_row"):
        return rng.randint(0, 4)
    if name in ("max_tokens", "capacity", "limit", "bound"):
        if rng.random() < 0.7:
            return top + rng.choice([0, 0, 1, top + 3, 40])
        return rng.choice([0, rng.randint(1, 40)])
    return rng.randint(0, 9)


def coherent_array(rng: random.Random, name: str, spec: dict, length: int, np):
    """An array that keeps the rules most of the time: `length` entries of small sizes, or
    bounds from 0 to `length` for the parameters that bound runs of the others."""
    dtype = np.dtype(spec["dtype"])
    if spec["ndim"] == 2:
        vals = np.array([[rng.randint(0, 8) for _ in range(2)] for _ in range(length)])
        return np.ascontiguousarray(vals.reshape(length, 2).astype(dtype))
    if name == "starts" and rng.random() < 0.25:  # (budget_ends_runs: one size per position)
        return np.zeros(0, dtype=dtype)
    if name in BOUNDS:
        cuts = sorted(rng.randint(0, length) for _ in range(rng.randint(0, 4)))
        vals = [0, *cuts, length]
        if name == "ends":  # group ends: ascending positions ending at the last
            vals = sorted({rng.randint(0, max(length - 1, 0)) for _ in range(2)} | {length - 1})
    elif name in ("blocks", "picked", "items", "bounds", "order"):
        vals = [rng.randint(0, max(length - 1, 0)) for _ in range(rng.randint(0, length))]
        if name == "order":
            vals = rng.sample(range(length), length)
    elif name in ("values", "tiers", "lengths"):  # often sorted and distinct
        vals = sorted(rng.sample(range(1, 20), length))
    elif name in ("counts", "rows", "caps", "run_size"):
        vals = [rng.randint(1, 4) for _ in range(length)]
    else:
        vals = [rng.randint(0, 8) for _ in range(length)]
    if dtype.kind == "b":
        return np.array([bool(v & 1) for v in vals], dtype=dtype)
    return np.array(vals, dtype=dtype)


def make_args(rng: random.Random, params, np) -> list:
    args: list = []
    if rng.random() < 0.5:  # near-valid: arrays of one length, scalars that fit them
        length = rng.randint(0, 8)
        for name, spec in params:
            if spec["kind"] == "array":
                args.append(coherent_array(rng, name, spec, length, np))
        top = max([int(x.max()) for x in args if x.size and x.dtype.kind in "iu"], default=0)
        arrays = iter(args)
        args = []
        for name, spec in params:
            kind = spec["kind"]
            if kind == "array":
                args.append(next(arrays))
            elif kind == "int":
                args.append(coherent_value(rng, name, length, top))
            elif kind == "float":
                args.append(rng.choice([0.0, 1.0, 5.0, 1e9]))
            elif kind == "bool":
                args.append(rng.random() < 0.5)
            else:
                args.append(make_callable(rng, np))
        if rng.random() < 0.5 and args:  # one hostile argument among them
            at = rng.randrange(len(args))
            name, spec = params[at]
            if spec["kind"] == "array":
                args[at] = make_array(rng, spec, np)
            elif spec["kind"] == "int":
                args[at] = rng.choice(INT_POOL)
            elif spec["kind"] == "float":
                args[at] = rng.choice(FLOAT_POOL)
        return args
    for _, spec in params:
        kind = spec["kind"]
        if kind == "array":
            args.append(make_array(rng, spec, np))
        elif kind == "int":
            args.append(rng.choice(INT_POOL) if rng.random() < 0.5 else rng.randint(0, 9))
        elif kind == "float":
            args.append(rng.choice(FLOAT_POOL))
        elif kind == "bool":
            args.append(rng.random() < 0.5)
        else:
            args.append(make_callable(rng, np))
    if rng.random() < 0.03 and args:  # a wrong type somewhere
        args[rng.randrange(len(args))] = rng.choice([None, "x", 1.5, [1, 2]])
    return args


def call_rng(seed: int, name: str, i: int) -> random.Random:
    return random.Random(f"{seed}:{name}:{i}")


def child(name: str, start: int, calls: int, seed: int, progress: str, tally: str) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    import numpy as np

    if os.environ.get("FUZZ_CORE"):  # another build of the module (a .so file), to compare
        import importlib.util

        spec = importlib.util.spec_from_file_location("_core", os.environ["FUZZ_CORE"])
        assert spec is not None and spec.loader is not None
        _core = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_core)
    else:
        from padless import _core

    fn = getattr(_core, name)
    overloads = [parse(sig[0]) for sig in fn.__nb_signature__]
    counts: collections.Counter = collections.Counter()
    fd = os.open(progress, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    for i in range(start, calls):
        rng = call_rng(seed, name, i)
        args = make_args(rng, rng.choice(overloads), np)
        os.pwrite(fd, f"{i:12d}".encode(), 0)
        try:
            fn(*args)
            counts["returned"] += 1
        except Exception as exc:  # a clean refusal
            counts[type(exc).__name__] += 1
    os.pwrite(fd, f"{calls:12d}".encode(), 0)
    with open(tally, "w") as f:
        json.dump(dict(counts), f)


def drive(name: str, calls: int, seed: int, timeout: float) -> tuple[list, collections.Counter]:
    crashes, counts = [], collections.Counter()
    start = 0
    with tempfile.TemporaryDirectory() as tmp:
        progress, tally = os.path.join(tmp, "at"), os.path.join(tmp, "tally")
        while start < calls:
            cmd = [sys.executable, __file__, "--child", name, str(start), str(calls), str(seed),
                   progress, tally]  # fmt: skip
            t0 = time.time()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
                rc, tail = proc.returncode, (proc.stderr.strip().splitlines() or [""])[-1]
            except subprocess.TimeoutExpired:
                rc, tail = "hang", f"no answer in {timeout:.0f} s"
            at = int(open(progress).read().strip() or start) if os.path.exists(progress) else start
            if rc == 0 and at >= calls:
                counts.update(json.load(open(tally)))
                break
            crashes.append({"call": at, "exit": rc, "said": tail[-200:],
                            "seconds": round(time.time() - t0, 1)})  # fmt: skip
            start = at + 1
    return crashes, counts


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        name, start, calls, seed, progress, tally = sys.argv[2:8]
        child(name, int(start), int(calls), int(seed), progress, tally)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    names = args.names or FAMILIES_A
    total_calls, total_crashes = 0, 0
    for name in names:
        crashes, counts = drive(name, args.calls, args.seed, args.timeout)
        total_calls += args.calls
        total_crashes += len(crashes)
        common = ", ".join(f"{k} {v}" for k, v in counts.most_common(4))
        print(f"{name:22s} crashes {len(crashes):4d}   {common}", flush=True)
        for c in crashes[:3]:
            print(f"    call {c['call']}: exit {c['exit']} {c['said']}", flush=True)
    print(f"\n{total_calls} calls over {len(names)} bindings: {total_crashes} crashes")


if __name__ == "__main__":
    main()
