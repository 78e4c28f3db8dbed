"""What keeps the shuffle from leaving files behind or overrunning the machine.

* Temporary names that say who made them: ``.{dst}.{host}-{boot}-{pid}-{random}.padless-tmp`` for
  an output being written and ``.padless-shuffle-{host}-{boot}-{pid}-{random}`` for the folder of
  bucket files, where ``host`` and ``boot`` are 8 hex digits of a hash of the host name and of the
  boot id. A later run removes those whose owner is gone (:func:`remove_stale`): same user, same
  host, and a process id that no longer exists (or a boot id from before the last restart).
  Nothing else is touched: other users' files, other hosts' (a shared network folder), live
  processes', and any name that does not match exactly.
* SIGTERM and SIGHUP (what schedulers and closing terminals send) handled like SIGINT while a
  shuffle runs (:class:`Signals`): the temporary files are removed, then the signal is delivered
  again with its default action, so the process still ends as the sender meant.
* Budgets checked against the machine: ``memory`` against its physical memory (and a cgroup
  limit), ``shards`` against the open-files limit.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import threading
from types import FrameType
from typing import Any

_TAG = r"([0-9a-f]{8})-([0-9a-f]{8})-([0-9]{1,10})-[0-9a-f]{8}"
OUTPUT_PATTERN = re.compile(r"\..+\." + _TAG + r"\.padless-tmp")
FOLDER_PATTERN = re.compile(r"\.padless-shuffle-" + _TAG)


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:  # pragma: no cover - not Linux
        return ""


HOST = _short_hash(socket.gethostname())
BOOT = _short_hash(_boot_id())


def owner_tag() -> str:
    """``{host}-{boot}-{pid}-{random}``: the middle of every temporary name this process makes."""
    return f"{HOST}-{BOOT}-{os.getpid()}-{secrets.token_hex(4)}"


def output_name(base: str) -> str:
    """The temporary name of an output file whose final name is ``base``.

    >>> name = output_name("train.bin")
    >>> name.startswith(".train.bin.") and name.endswith(".padless-tmp")
    True
    >>> OUTPUT_PATTERN.fullmatch(name) is not None
    True
    """
    return f".{base}.{owner_tag()}.padless-tmp"


def folder_name() -> str:
    """The name of a folder of bucket files.

    >>> FOLDER_PATTERN.fullmatch(folder_name()) is not None
    True
    """
    return f".padless-shuffle-{owner_tag()}"


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return True  # not a process id this module writes: leave the file alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True
    return True


def owner_gone(name: str) -> bool:
    """True if ``name`` is a temporary name of this module whose owner process no longer runs.

    The owner must be on this host; it is gone if the machine restarted since (another boot id)
    or no process has its id.

    >>> owner_gone(output_name("x"))  # this process made it, and it runs
    False
    >>> owner_gone(".x.padless-tmp"), owner_gone("notes.txt")
    (False, False)
    """
    match = OUTPUT_PATTERN.fullmatch(name) or FOLDER_PATTERN.fullmatch(name)
    if match is None:
        return False
    host, boot, pid = match.group(1), match.group(2), int(match.group(3))
    if host != HOST:
        return False
    return boot != BOOT or not _pid_alive(pid)


def remove_stale(folders: list[str]) -> list[str]:
    """Remove the shuffle's temporary files and folders in ``folders`` left by dead processes.

    Only entries whose name matches this module's patterns exactly, that belong to this user,
    are a regular file (outputs) or a real folder (bucket files; a link is never followed) and
    whose owner is gone (:func:`owner_gone`). Returns the paths removed. Errors (a folder that
    cannot be listed, a file removed meanwhile) are ignored: this is housekeeping.
    """
    removed: list[str] = []
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    for folder in dict.fromkeys(folders):
        try:
            entries = list(os.scandir(folder or "."))
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            if not name.startswith(".") or not owner_gone(name):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
                if uid is not None and info.st_uid != uid:
                    continue
                if OUTPUT_PATTERN.fullmatch(name) and stat.S_ISREG(info.st_mode):
                    os.unlink(entry.path)
                elif FOLDER_PATTERN.fullmatch(name) and stat.S_ISDIR(info.st_mode):
                    shutil.rmtree(entry.path)
                else:
                    continue
            except OSError:
                continue
            removed.append(entry.path)
    return removed


# --------------------------------------------------------------------------- signals


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when SIGTERM or SIGHUP arrives during a shuffle.

    A ``KeyboardInterrupt`` so that code which cleans up on Ctrl-C cleans up here too.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = signum


_HANDLED = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Signals:
    """Turn SIGTERM and SIGHUP into :class:`Terminated` while the ``with`` block runs.

    Only in the main thread, and only for a signal whose handler is the default one (which would
    end the process without any clean-up); a handler the program installed itself, or an ignored
    signal, is left as it is. On leaving the block the previous handlers come back, and if the
    block ended by :class:`Terminated`, the signal is sent again so that the process ends by it,
    as it would have without padless (exit status 128 + the signal's number).
    """

    def __init__(self) -> None:
        self.saved: dict[int, Any] = {}
        self.received: int | None = None

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        raise Terminated(signum)

    def check(self) -> None:
        """Raise :class:`Terminated` if a signal came whose exception was swallowed.

        A signal that lands in Python code that C calls back (a ``__del__``, a weakref callback)
        raises inside that callback, where the exception is printed and ignored; the work then
        goes on. Call this before anything irreversible (the final rename).
        """
        if self.received is not None:
            raise Terminated(self.received)

    def __enter__(self) -> Signals:
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in _HANDLED:
            try:
                if signal.getsignal(signum) is signal.SIG_DFL:
                    self.saved[signum] = signal.signal(signum, self._handler)
            except (OSError, ValueError):  # pragma: no cover - not allowed here
                continue
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        for signum, previous in self.saved.items():
            signal.signal(signum, previous)
        self.saved.clear()
        ended = exc.signum if isinstance(exc, Terminated) else self.received
        if ended is not None and signal.getsignal(ended) is signal.SIG_DFL:
            os.kill(os.getpid(), ended)  # ends the process (the default action)


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


def check_open_files(shards: int, spare: int = 64) -> None:
    """Make room for ``shards`` output files open at once (and ``spare`` more), or refuse.

    Raises the soft limit up to the hard one if needed; raises ``ValueError`` naming ``shards``
    when even that is not enough. (Bucket files make room for themselves when they are opened:
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
            f"shards={shards} needs {shards} output files open at once (and a few more), more "
            f"than this process may open (limit {soft}, hard limit {shown}); write fewer "
            f"shards, or raise the limit (ulimit -n)"
        )
