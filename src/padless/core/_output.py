"""Files the user names: written exactly at that name, never half-written under it.

A regular file (or a new name) is written under a temporary name in the same folder, flushed to
disk and renamed into place, so a crash leaves the old file or nothing; the temporary file is
removed on any error, on SIGTERM and SIGHUP, and by a later write into that folder once its
writer is gone (killed by SIGKILL, say: :mod:`padless.core._temporary`). Anything else that exists
at the name — a device such as ``/dev/null``, a pipe — is written in place and never replaced,
and so is a descriptor of this process named by ``/dev/stdout`` or ``/dev/fd/N`` (through that
descriptor, whatever file it is open on). No
suffix is ever added to the name given. Errors name the user's path or folder, never a temporary
file.
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
from collections.abc import Callable
from typing import Any, BinaryIO, cast

from ._temporary import Signals, create_temporary, remove_stale


class _Sequential:
    """A device or pipe opened for writing, seen as a stream with no position.

    A character device answers ``tell()`` with 0 whatever was written, which misleads writers
    that seek back (``zipfile`` rewrites its headers); without a position they write straight
    through (``zipfile`` then uses data descriptors).
    """

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def write(self, data: Any) -> int:
        return int(self._raw.write(data))

    def flush(self) -> None:
        self._raw.flush()

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def read(self, *args: Any) -> bytes:  # present so writers take this for a file object
        raise io.UnsupportedOperation("not readable")

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        raise io.UnsupportedOperation("a device or pipe has no position")

    def seek(self, *args: Any) -> int:
        raise io.UnsupportedOperation("a device or pipe has no position")


def _name(path: str | os.PathLike[str], what: str) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what} must be a path, got {type(path).__name__} {path!r}")
    target = os.fspath(path)
    if not isinstance(target, str) or not target:
        raise ValueError(f"{what} must be a non-empty path, got {target!r}")
    return target


def check_output(path: str | os.PathLike[str], what: str = "output") -> str:
    """Check up front that ``path`` can name an output file; return it as a ``str``.

    Refuses a folder and a path whose folder does not exist, naming them.

    >>> check_output("/", "plot")
    Traceback (most recent call last):
    ...
    IsADirectoryError: plot '/' is a folder: name a file (inside it, or elsewhere)
    """
    target = _name(path, what)
    if os.path.isdir(target):
        raise IsADirectoryError(
            f"{what} {target!r} is a folder: name a file (inside it, or elsewhere)"
        )
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"the folder of {what} {target!r} does not exist: {folder}")
    return target


def _reworded(exc: OSError, what: str, target: str) -> OSError:
    reason = exc.strerror or str(exc)
    hint = " (the device or disk is full)" if exc.errno == errno.ENOSPC else ""
    # a closed pipe at the user's path is an error to report, not the CLI's quiet `| head` case
    kind = OSError if isinstance(exc, BrokenPipeError) else type(exc)
    out = kind(f"could not write {what} {target!r}: {reason}{hint}")
    out.errno = exc.errno
    return out


_OWN_FD = re.compile(r"/(?:dev/fd|proc/self/fd|proc/thread-self/fd|dev/(std)(out|err))(?:/(\d+))?")


def inherited_fd(path: str | os.PathLike[str]) -> int | None:
    """The open descriptor of this process that ``path`` names as given, if any:
    ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N``, ``/proc/self/fd/N``.

    An output there is written through that descriptor, where the caller put it (at its offset,
    appending under the shell's ``>>``, after what the shell's group wrote before): reopening
    the name would truncate a file the shell opened, and replacing it would unlink it.

    >>> inherited_fd("/dev/fd/999999"), inherited_fd("/tmp/x")
    (None, None)
    """
    name = os.path.normpath(os.fspath(path))
    match = _OWN_FD.fullmatch(name)
    if match is None:
        return None
    std, which, number = match.groups()
    if std:
        if number is not None:
            return None
        fd = 1 if which == "out" else 2
    elif number is None:
        return None
    else:
        fd = int(number)
    try:
        os.fstat(fd)
    except (OSError, OverflowError):
        return None
    return fd


def open_in_place(path: str | os.PathLike[str]) -> BinaryIO:
    """An existing device, pipe or inherited descriptor at ``path`` (see :func:`is_device`),
    opened for writing in place: a descriptor of this process is written through a copy of
    it (:func:`inherited_fd`), anything else opened by name."""
    fd = inherited_fd(path)
    if fd is None:
        return open(path, "wb")
    return os.fdopen(os.dup(fd), "wb")


def is_device(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an existing device or pipe (links followed: ``/dev/stdout`` and
    ``/dev/fd/N`` too), or names a descriptor of this process (:func:`inherited_fd`, whatever
    it is open on): an output is written into it in place, never beside or over.

    >>> is_device("/dev/null"), is_device(os.devnull + ".missing")
    (True, False)
    """
    if inherited_fd(path) is not None:
        return True
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def write_exactly(
    path: str | os.PathLike[str], write: Callable[[BinaryIO], None], *, what: str = "output"
) -> str:
    """Call ``write(file)`` to fill the file at exactly ``path``; return the path written.

    A symbolic link is followed (the file it points to is replaced, as ``sort -o`` does). An
    existing device or pipe is opened and written in place; a regular file or a new name is
    written to a hidden temporary file beside it, fsynced and renamed over it, keeping an existing
    file's permissions. On error the temporary file is removed and the error names ``path``.

    Cost: one write of the content, one fsync and one rename for regular files.

    >>> import os, tempfile
    >>> p = os.path.join(tempfile.mkdtemp(), "plan")
    >>> os.path.basename(write_exactly(p, lambda f: f.write(b"x")))
    'plan'
    """
    target = check_output(path, what)
    try:  # links followed, /dev/stdout and /dev/fd/N too (whose targets name no path)
        info: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        info = None
    if inherited_fd(target) is not None or (info is not None and not stat.S_ISREG(info.st_mode)):
        if info is not None and stat.S_ISDIR(info.st_mode):  # a link to a folder
            raise IsADirectoryError(f"{what} {target!r} is a folder: name a file")
        try:
            with open_in_place(target) as stream:
                write(cast(BinaryIO, _Sequential(stream)))
        except OSError as exc:
            raise _reworded(exc, what, target) from exc
        return target
    real = os.path.realpath(target)
    folder, base = os.path.split(real)
    remove_stale([folder])  # what killed writers left here (their process is gone)
    tmp = ""
    with Signals() as signals:  # SIGTERM and SIGHUP remove the temporary file too
        try:
            tmp = create_temporary(folder, base)
            with open(tmp, "wb") as stream:
                write(stream)
                stream.flush()
                if info is not None and hasattr(os, "fchmod"):
                    os.fchmod(stream.fileno(), stat.S_IMODE(info.st_mode))
                os.fsync(stream.fileno())
            signals.check()
            os.replace(tmp, real)
            tmp = ""
        except OSError as exc:
            raise _reworded(exc, what, target) from exc
        finally:
            if tmp:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
    return target


def save_json(path: str | os.PathLike[str], record: Any) -> str:
    """Write ``record`` as JSON to ``path`` atomically (:func:`write_exactly`: a temporary file
    beside it, then a rename over it); return the path written."""
    import json

    text = json.dumps(record, indent=1).encode()

    def write(stream: BinaryIO) -> None:
        stream.write(text)

    return write_exactly(path, write, what="path")


def load_json(path: str | os.PathLike[str], what: str) -> Any:
    """The JSON record saved at ``path`` (by :func:`save_json`); ``what`` it should hold names
    it in the errors."""
    import json

    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise TypeError(
            f"path must be a file name (a str or os.PathLike), got {type(path).__name__} "
            f"{path!r:.60}"
        )
    with open(path, encoding="utf-8") as stream:
        try:
            return json.load(stream)
        except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8 text, too deep
            raise ValueError(f"path {os.fspath(path)!r} holds no JSON {what}: {exc}") from None
