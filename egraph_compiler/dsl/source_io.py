"""Reading a rule file safely: a regular file under a size cap, or a clear error.

``use "/dev/zero"`` read until the OOM killer stopped it, and a FIFO as a rule file
blocked forever. A rule file is opened without blocking, checked to be a regular
file with `fstat` (so a FIFO or device is refused before any read), and read up to
`MAX_RULE_FILE_BYTES` (the whole shipped library is under 100 KB).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_RULE_FILE_BYTES = 4 << 20


def read_rule_file(path: Path) -> str:
    """The UTF-8 text of ``path``; `OSError`/`ValueError` with a one-line reason when it
    is not a regular file, is over the cap, or is not UTF-8 text."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"not a regular file ({_kind(info.st_mode)})")
        if info.st_size > MAX_RULE_FILE_BYTES:
            raise ValueError(f"{info.st_size} bytes, over the {MAX_RULE_FILE_BYTES >> 20} MiB limit for a rule file")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_RULE_FILE_BYTES:  # it grew while we read it
                raise ValueError(f"over the {MAX_RULE_FILE_BYTES >> 20} MiB limit for a rule file")
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "a special file"
