"""Temporary files that say who made them, and signals that remove them.

Every file padless writes under a temporary name before renaming it into place (an output of
``padless shuffle``, ``padless plan -o``, ``write_indexed``...) is named
``.{final}.{tag}.padless-tmp``, a shuffle's folder of bucket files
``.padless-shuffle-{tag}``, where ``tag`` is ``{host}-{boot}-n{pidns}-{pid}-{random}``: ``host``
and ``boot`` are 8 hex digits of a hash of the host name and of the boot id, ``pidns`` the PID
namespace in hex (``0``: unknown). A later write into the same folder removes those whose owner
is gone (:func:`remove_stale`): same user, same host, and a boot id from before the last
restart, or, in the same PID namespace, a process id that no longer exists. Nothing else is
touched: other users' files, other hosts' (a shared network folder), other PID namespaces'
(containers on one host that share a folder and a host name: a process id says nothing across
them), live processes', names of the older format without a namespace (on Linux: their
namespace cannot be told), and any name that does not match exactly.

SIGTERM and SIGHUP (what schedulers and closing terminals send) are handled like SIGINT while
such a file is written (:class:`Signals`): the temporary files are removed, then the signal is
delivered again with its default action, so the process still ends as the sender meant. Over
renames that put several files in place, SIGINT, SIGTERM and SIGHUP are held back
(:meth:`Signals.deferred`) so that no signal leaves some files new and others old.
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
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

# host, boot, PID namespace (absent in names of the older format), pid, random
_TAG = r"([0-9a-f]{8})-([0-9a-f]{8})-(?:n([0-9a-f]{1,16})-)?([0-9]{1,10})-[0-9a-f]{8}"
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


def _pid_namespace() -> str:
    """This process's PID namespace: the inode of ``/proc/self/ns/pid`` in hex ("0": unknown)."""
    try:
        return f"{os.stat('/proc/self/ns/pid').st_ino:x}"
    except (OSError, AttributeError):  # not Linux, or /proc not mounted
        return "0"


HOST = _short_hash(socket.gethostname())
BOOT = _short_hash(_boot_id())
# Read once per process: a process never changes its own PID namespace (unshare and setns
# change its children's).
PIDNS = _pid_namespace()
# Where PID namespaces exist, a name whose namespace is unknown is never judged by its pid.
HAS_PID_NAMESPACES = sys.platform.startswith("linux")


def owner_tag() -> str:
    """``{host}-{boot}-n{pidns}-{pid}-{random}``: the middle of every temporary name made here."""
    return f"{HOST}-{BOOT}-n{PIDNS}-{os.getpid()}-{secrets.token_hex(4)}"


def output_name(base: str) -> str:
    """The temporary name of an output file whose final name is ``base``.

    >>> name = output_name("train.bin")
    >>> name.startswith(".train.bin.") and name.endswith(".padless-tmp")
    True
    >>> OUTPUT_PATTERN.fullmatch(name) is not None
    True
    """
    return f".{base}.{owner_tag()}.padless-tmp"


def create_temporary(folder: str, base: str) -> str:
    """Create an empty file named :func:`output_name` of ``base`` in ``folder``; its path."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        path = os.path.join(folder, output_name(base))
        try:
            os.close(os.open(path, flags, 0o666))
            return path
        except FileExistsError:  # pragma: no cover - 32 random bits collided
            continue


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

    The owner must be on this host; it is gone if the machine restarted since (another boot id),
    or if it ran in this process's PID namespace and no process has its id there. A process id
    read in another namespace names another process (or none) here, so such names are kept; so
    are names whose namespace is unknown (the older format without one, or a process that could
    not read it), except where PID namespaces do not exist (not Linux).

    >>> owner_gone(output_name("x"))  # this process made it, and it runs
    False
    >>> owner_gone(".x.padless-tmp"), owner_gone("notes.txt")
    (False, False)
    """
    match = OUTPUT_PATTERN.fullmatch(name) or FOLDER_PATTERN.fullmatch(name)
    if match is None:
        return False
    host, boot, pidns, pid = match.group(1), match.group(2), match.group(3), int(match.group(4))
    if host != HOST:
        return False
    if boot != BOOT:
        return True  # every process of an earlier boot is gone, whatever its namespace
    known = pidns not in (None, "0") and PIDNS != "0"
    if known and pidns != PIDNS:
        return False  # another namespace: its pid cannot be checked from here
    if not known and HAS_PID_NAMESPACES:
        return False  # cannot tell which namespace the pid belongs to
    return not _pid_alive(pid)


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
        self.holding = False  # inside ``deferred``: note the signal, raise nothing yet

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        if not self.holding:
            raise Terminated(signum)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold back SIGINT, SIGTERM and SIGHUP while the block runs; act on them after it.

        For a step that must not stop half way (the renames that put several outputs in
        place). A signal that arrives meanwhile is noted; when the block ends normally, a held
        SIGTERM or SIGHUP raises :class:`Terminated` and a held SIGINT ``KeyboardInterrupt``.
        When the block raises, its exception goes on (a held SIGTERM or SIGHUP still ends the
        process when the ``with Signals()`` block is left). Only in the main thread, and only
        the signals whose handling is the default: SIGTERM and SIGHUP handled by this object,
        SIGINT by Python's own handler.
        """
        interrupted: list[int] = []
        previous: Any = None
        if threading.current_thread() is threading.main_thread():
            try:
                if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                    previous = signal.signal(
                        signal.SIGINT, lambda signum, frame: interrupted.append(signum)
                    )
            except (OSError, ValueError):  # pragma: no cover - not allowed here
                previous = None
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        self.check()
        if interrupted:
            raise KeyboardInterrupt

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
