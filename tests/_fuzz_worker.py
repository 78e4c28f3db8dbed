"""The process that calls padless._core for tests/test_fuzz_bindings.py, one case at a time.

It reads cases from stdin and writes one outcome per case to stdout, each a length-prefixed
pickle, so that a case that crashes the process (a signal, an abort, a sanitizer's report) kills
only this process: the parent knows the case it had in flight, records it and starts another.

A case is (binding name, args); each arg is a plain value or a tagged tuple that this process
turns into the object passed (an array view, a callable), since a view's strides and flags and a
callable do not survive pickling.
"""

from __future__ import annotations

import os
import pickle
import resource
import struct
import sys

import numpy as np

# Exceptions that are a clean refusal; anything else (MemoryError included) is a failure.
# ZeroDivisionError: the shape kernels raise it on a batch of zero rows, as their numba originals did.
REFUSALS = (ValueError, TypeError, IndexError, OverflowError, ZeroDivisionError)


def strided(a: np.ndarray, how: str) -> np.ndarray:
    """An array equal to a, laid out as how says (for a case's reproducer too)."""
    if how == "readonly":
        a = a.copy()
        a.flags.writeable = False
    elif how == "reversed":  # a negative stride
        a = a[::-1].copy()[::-1]
    elif how == "every_other":  # a stride of two items
        a = np.repeat(a, 2, axis=0)[::2]
    elif how == "broadcast":  # a zero stride, read-only: a's rows must all be its first
        a = np.broadcast_to(a[:1], a.shape) if a.size else a
    elif how == "transposed":  # 2-D, columns apart by one item and rows by a row
        a = np.ascontiguousarray(a.T).T
    elif how == "fortran":
        a = np.asfortranarray(a)
    return a


def row_order(how: str, fixed: np.ndarray):
    """A callable argument (pack_rows' row_order): asked for an order of k rows."""

    def call(k: int):
        if how == "identity":
            return np.arange(k, dtype=np.int64)
        if how == "reverse":
            return np.arange(k, dtype=np.int64)[::-1].copy()
        if how == "raise":
            raise ValueError("row_order refused")
        if how == "not_an_array":
            return "rows"
        return fixed.copy()  # whatever was drawn, whatever k is

    return call


def build(arg):
    if isinstance(arg, tuple) and arg and arg[0] == "array":
        return strided(arg[1], arg[2])
    if isinstance(arg, tuple) and arg and arg[0] == "callable":
        return row_order(arg[1], arg[2])
    return arg


def touch(value) -> None:
    """Read every byte of what came back (a bad pointer in an output faults here, in this case)."""
    if isinstance(value, np.ndarray):
        value.tobytes()
    elif isinstance(value, (tuple, list)):
        for v in value:
            touch(v)


def send(stream, obj) -> None:
    data = pickle.dumps(obj)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def read_exact(stream, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def main() -> None:
    limit = int(os.environ.get("PADLESS_FUZZ_MEMORY_MB", "0"))
    if limit:  # a huge allocation fails at once as MemoryError instead of swapping the machine
        resource.setrlimit(resource.RLIMIT_AS, (limit << 20, limit << 20))
    import padless._core as core

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    send(stdout, core.__file__)  # hello: which build is loaded
    while True:
        head = read_exact(stdin, 8)
        if not head:
            return
        name, args = pickle.loads(read_exact(stdin, struct.unpack("<Q", head)[0]))
        built = [build(a) for a in args]
        try:
            result = getattr(core, name)(*built)
            touch(result)
            for a in built:
                touch(a)
            outcome = ("ok", type(result).__name__)
        except REFUSALS as e:
            outcome = ("refused", f"{type(e).__name__}: {e}")
        except MemoryError as e:
            outcome = ("memory", f"{type(e).__name__}: {e}")
        except BaseException as e:  # noqa: BLE001 - every other outcome is reported
            outcome = ("error", f"{type(e).__name__}: {e}")
        send(stdout, outcome)


if __name__ == "__main__":
    main()
