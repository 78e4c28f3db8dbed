"""Files padless reads in place: what identifies them, and whether they shrank under a map.

**Identity** (:func:`identity_of`), what a cache padless writes beside a user's file records of
that file; the cache is recomputed when any part differs: the size, ``st_mtime_ns``,
``st_ctime_ns``, the inode (``st_ino``, ``st_dev``), and a blake2b digest of sampled blocks (the
first and the last 64 KiB and evenly spaced ones between, 16 in all: 1 MiB read; the whole file
when it is smaller).

- It tells: a file replaced by another (a new inode: ``mv``, ``cp`` to a new name, ``rsync``
  without ``--inplace``); any write through the file system, even when the mtime is put back
  (the ctime moves, which no user call can set: ``cp -p``, ``rsync -a --inplace``, ``tar x``,
  ``touch -r``); a change of size; and a change inside a sampled block when the clock is too
  coarse for the ctime to move.
- It cannot tell: a same-size rewrite in place that leaves the ctime as it was (a coarse clock,
  a file system without ctime) and every sampled block unchanged; it also takes a change of
  metadata alone (``chmod``, ``chown``, a rename, a new hard link: the ctime moves) or a copy of
  the folder to a new place (new inodes) for a change, and recomputes once; and the same file
  seen through mounts with other device numbers (NFS or Lustre clients) for another file.

**Shrink watch** (:class:`Watch`): a file kept open beside its memory maps. Reading a map past
the end of a file that was cut after it was mapped reads zeros inside the last page and raises
``SIGBUS`` beyond it, which kills the process. ``Watch.check()`` compares the size of the file
it holds open (``os.lseek`` to the end of its descriptor: the mapped inode, whatever the path
now names; a cheaper call than ``os.fstat``) with the size it had when opened, and raises a ``ValueError`` naming both; the token stores call
it once per batch or item served. A cut between that check and the read is not seen: the kernel
then stops the process with ``SIGBUS``, as it does Megatron's and fairseq's readers.
"""

from __future__ import annotations

import hashlib
import os
import struct
import weakref
from typing import BinaryIO, NamedTuple

#: Bytes per sampled block, and blocks sampled, of the identity's digest.
BLOCK = 1 << 16
BLOCKS = 16
_WORD = (1 << 64) - 1


class Stamp(NamedTuple):
    """What ``os.stat`` says of a file's identity."""

    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    dev: int


def stamp_of(st: os.stat_result) -> Stamp:
    """The identity fields of a stat result."""
    return Stamp(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def sampled_digest(fd: int, size: int) -> bytes:
    """blake2b (32 bytes) of the file's size and of ``BLOCKS`` blocks of ``BLOCK`` bytes read
    at evenly spaced offsets from the first byte to the last block (the whole file when it
    holds at most that many blocks). Cost: at most 1 MiB read."""
    digest = hashlib.blake2b(struct.pack("<Q", size & _WORD), digest_size=32)
    if size <= BLOCK * BLOCKS:
        starts = list(range(0, size, BLOCK))
    else:  # the first block, the last, and evenly spaced ones between
        starts = [(size - BLOCK) * k // (BLOCKS - 1) for k in range(BLOCKS)]
    for start in starts:
        digest.update(os.pread(fd, BLOCK, start))
    return digest.digest()


#: The identity record: magic, size, mtime_ns, ctime_ns, st_ino, st_dev, digest.
RECORD = struct.Struct("<8s5Q32s")
_MAGIC = b"padlsID1"


def identity_of(fd: int) -> bytes:
    """The identity record of the file open at ``fd`` (:data:`RECORD` bytes): its stamp and
    the digest of its sampled blocks. Two records are equal when the file is, as far as its
    identity tells (see the module's docstring). Cost: one fstat and at most 1 MiB read."""
    stamp = stamp_of(os.fstat(fd))
    words = [value & _WORD for value in stamp]
    return RECORD.pack(_MAGIC, *words, sampled_digest(fd, stamp.size))


class Watch:
    """``path`` opened for reading and kept open, to map it and notice it shrink.

    ``file`` is the open file (``np.memmap(watch.file, ...)`` maps exactly this inode, the
    path as its ``filename``); ``size`` its size when opened. The descriptor is closed when the
    watch is collected.
    """

    def __init__(self, path: str, what: str = "file") -> None:
        self.path = path
        self.what = what
        self.file: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed by the finalizer
        weakref.finalize(self, self.file.close)
        self._fd = self.file.fileno()
        self.size = os.fstat(self._fd).st_size

    def fileno(self) -> int:
        return self._fd

    def read(self, offset: int, count: int) -> bytes:
        """Up to ``count`` bytes at ``offset`` (fewer at the end of the file)."""
        return os.pread(self._fd, count, offset)

    def check(self) -> None:
        """Raise ValueError when the file is now shorter than when it was opened.

        Cost: one ``os.lseek`` (well under a microsecond). It moves the descriptor's offset,
        which nothing reads by (``read`` is a ``pread``; a map seeks for itself)."""
        now = os.lseek(self._fd, 0, os.SEEK_END)
        if now < self.size:
            raise ValueError(
                f"{self.what} {self.path!r} shrank: it held {self.size} bytes when it was "
                f"opened and holds {now} now (cut or rewritten in place while in use); reading "
                "its memory map past the new end would read zeros or kill the process "
                "(SIGBUS): open it again once it is complete"
            )
