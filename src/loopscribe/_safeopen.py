"""Opening a file that is supposed to be a session file, safely.

A path given on the command line or found in a folder can be anything: a
FIFO (opening it blocks until a writer comes), ``/dev/zero`` (an endless
line), a directory, a binary file. Every reader opens paths through
:func:`open_session_file`, so each of those is one clear
:class:`~loopscribe.FormatError` (or the ``OSError`` that names the path)
instead of a hang, a ``MemoryError`` or a traceback.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from ._errors import FormatError

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


_FIRST_BYTES = frozenset(bytes([b]) for b in b"{ \t\r\n\xef")
"""First bytes a session file, or a damaged one the reader explains better, can start with."""


def _refuse(path: Path, mode: int) -> FormatError:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return FormatError(
        f"{path}: not a session file: it is {kind}; give the path of a .jsonl session file",
        path=path,
    )


def check_regular(path: str | os.PathLike[str]) -> None:
    """Raise :class:`FormatError` unless ``path`` is a regular file (symlinks followed).

    Raises:
        FormatError: It is a directory, FIFO, device or socket.
        OSError: It does not exist or cannot be read.
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise _refuse(Path(path), mode)


def open_session_file(path: str | os.PathLike[str], buffering: int = -1) -> BinaryIO:
    """Open a session file for reading, refusing anything that is not one.

    The file is opened with ``O_NONBLOCK``, so a FIFO swapped in after the
    check cannot block the open, and checked again on the descriptor. A
    regular file whose first byte is not ``{`` (binary data, a file of
    zeros) is refused before any line is read, since a file without line
    breaks would otherwise be read whole as one line.

    Raises:
        FormatError: Not a regular file, or not JSON lines.
        OSError: It does not exist or cannot be read (the message names it).
    """
    where = Path(path)
    check_regular(where)
    fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(where, mode)
        os.set_blocking(fd, True)
        head = os.pread(fd, 1, 0)
        # Whitespace and a BOM go on to the reader, which names the line at fault.
        if head and head not in _FIRST_BYTES:
            raise FormatError(
                f"{where}: not a session file: it does not start with a JSON object "
                "(binary or other data); give the path of a .jsonl session file",
                path=where,
            )
        return os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def open_session_fd(path: str | os.PathLike[str]) -> int:
    """:func:`open_session_file` for callers that read with ``os.pread``: a raw descriptor.

    The caller closes it.
    """
    with open_session_file(path, buffering=0) as stream:
        return os.dup(stream.fileno())


def not_a_session_file(path: str | os.PathLike[str]) -> str:
    """Why ``path`` (not a regular file) cannot be read, in one line: missing, or what it is."""
    where = Path(path)
    try:
        mode = os.stat(where).st_mode
    except FileNotFoundError:
        return f"{where}: no such file"
    except OSError as exc:
        return f"{where}: cannot be read ({exc.strerror or exc})"
    return str(_refuse(where, mode))
