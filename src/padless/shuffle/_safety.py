"""What keeps the shuffle from leaving files behind or overrunning the machine.

* Temporary names that say who made them, their removal once their owner is gone, and SIGTERM
  and SIGHUP handled like SIGINT: :mod:`padless.core._temporary` (shared with every file padless
  writes into place), whose names the shuffle uses from here.
* Budgets checked against the machine: ``memory`` against its physical memory (and a cgroup
  limit), ``shards`` against the open-files limit.
"""

from __future__ import annotations

import os
from typing import Any

from ..core._temporary import (
    BOOT,
    FOLDER_PATTERN,
    HAS_PID_NAMESPACES,
    HOST,
    OUTPUT_PATTERN,
    PIDNS,
    Signals,
    Terminated,
    folder_name,
    output_name,
    owner_gone,
    owner_tag,
    remove_stale,
)

__all__ = [
    "BOOT",
    "FOLDER_PATTERN",
    "HAS_PID_NAMESPACES",
    "HOST",
    "OUTPUT_PATTERN",
    "PIDNS",
    "Signals",
    "Terminated",
    "check_memory",
    "check_open_files",
    "folder_name",
    "machine_memory",
    "open_files_limit",
    "output_name",
    "owner_gone",
    "owner_tag",
    "remove_stale",
]

# --------------------------------------------------------------------------- machine limits


def machine_memory() -> int | None:
    """Bytes of memory this process may use: physical memory, or a lower cgroup limit."""
    total: int | None = None
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        total = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and (total is None or int(text) < total):
            total = int(text)
    return total


def _size(nbytes: int) -> str:
    """A size for messages: ``1.5G``; any int (a 400-digit one included).

    >>> _size(3 << 29), _size(10**400)[:6]
    ('1.5G', '>1024T')
    """
    if nbytes > 1 << 50:
        return ">1024T"
    for unit, shift in (("T", 40), ("G", 30), ("M", 20)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f}{unit}"
    return f"{nbytes}B"


def check_memory(budget: int, value: Any, name: str = "memory") -> None:
    """Refuse a budget larger than the machine's memory (a clear error, not a MemoryError)."""
    total = machine_memory()
    if total is not None and budget > total:
        raise ValueError(
            f"{name}={value!r} ({_size(budget)}) is more than this machine's memory "
            f"({_size(total)}); give a budget that fits in it, such as {_size(total // 2)}"
        )


def open_files_limit() -> tuple[int, int] | None:
    """(soft, hard) limit on open files, or None where unknown or unlimited."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    return soft, hard


def check_open_files(shards: int, spare: int = 64, name: str = "shards") -> None:
    """Make room for ``shards`` output files open at once (and ``spare`` more), or refuse.

    Raises the soft limit up to the hard one if needed; raises ``ValueError`` naming ``name``
    (the caller's word for the setting) when even that is not enough. (Bucket files make room for themselves when they are opened:
    ``_passes._raise_open_files_limit``.)
    """
    limits = open_files_limit()
    if limits is None:
        return
    soft, hard = limits
    needed = shards + spare
    if needed <= soft:
        return
    import resource

    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError):  # pragma: no cover - not allowed
        target = soft
    if needed > target:
        shown = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
        raise ValueError(
            f"{name}={shards} needs {shards} output files open at once (and a few more), more "
            f"than this process may open (limit {soft}, hard limit {shown}); write fewer "
            f"shards, or raise the limit (ulimit -n)"
        )
