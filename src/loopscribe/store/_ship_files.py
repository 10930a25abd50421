"""What a pass reads locally: complete lines in chunks, artifacts (no links followed), side logs."""

from __future__ import annotations

import errno
import io
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .._errors import StoreError
from .._format import Scanner, is_session_id
from .._logsafe import scrub
from .._sidelog import side_path
from ._layout import (
    MAX_ARTIFACT_DEPTH,
    MAX_ARTIFACTS,
    check_artifact_name,
    shown,
)

__all__ = [
    "_chunks",
    "_local_artifacts",
    "_read_artifact",
    "_refusal",
    "_session_id_of",
    "_side_signature",
    "_signature",
]

_READ_BYTES = 1 << 20


def _side_signature(path: Path) -> dict[str, int] | None:
    """Size and mtime of a session's side log, or ``None`` when it has none."""
    try:
        st = side_path(path).stat()
    except FileNotFoundError:
        return None
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _session_id_of(path: Path) -> str:
    """The session ID from a file's first line (validated; it names objects in the store)."""
    with open(path, "rb") as stream:
        first = stream.readline()
    if not first.endswith(b"\n"):
        return ""  # not one complete line yet: nothing to ship
    scanner = Scanner(path)
    scanner.check(1, 0, first)
    sid = scanner.session_id or ""
    if not is_session_id(sid):
        raise StoreError(
            f"{path}: its session ID {shown(sid)} is not 32 lowercase hex digits, so it "
            "cannot name objects in a store; it cannot be shipped"
        )
    return sid


def _chunks(stream: io.BufferedReader | Any, start: int, end: int, limit: int) -> Iterator[bytes]:
    """Runs of complete lines between ``start`` and ``end``, each up to ``limit`` bytes.

    A line longer than ``limit`` makes a longer run; bytes after the last
    ``\\n`` before ``end`` (an unfinished line) are left for later.
    """
    stream.seek(start)
    pos = start
    carry = b""
    while pos < end:
        want = min(max(limit - len(carry), _READ_BYTES), end - pos)
        block = stream.read(want)
        if not block:
            break
        pos += len(block)
        buf = carry + block
        if len(buf) < limit and pos < end:
            carry = buf
            continue
        cut = buf.rfind(b"\n", 0, limit) + 1 or buf.find(b"\n") + 1
        if cut == 0:
            carry = buf  # one line longer than the limit: keep reading
            continue
        yield buf[:cut]
        carry = buf[cut:]
    while carry:
        cut = carry.rfind(b"\n", 0, limit) + 1 or carry.find(b"\n") + 1
        if cut == 0:
            return
        yield carry[:cut]
        carry = carry[cut:]


# -- artifacts: walked and read without following a symbolic link ----------------------


def _refusal(folder: Path, name: str, exc: BaseException | None = None) -> str:
    where = folder / name if name else folder
    if exc is None or (isinstance(exc, OSError) and exc.errno == errno.ELOOP):
        return (
            f"{where}: a symbolic link; artifacts are never followed: copy the file into "
            f"{folder.name}/ instead (not shipped)"
        )
    return f"{where}: cannot be shipped as an artifact ({scrub(str(exc))})"


def _local_artifacts(path: Path) -> tuple[dict[str, tuple[int, int]], list[str]]:
    """The artifacts beside a session file (name to size and mtime_ns), and what was refused.

    A symbolic link (to a file or a folder, or the artifacts folder itself),
    anything but a regular file, a name a store cannot hold, a folder deeper
    than the layout allows, or more artifacts than it allows: one line each.
    """
    folder = path.with_name(path.name.removesuffix(".jsonl") + ".artifacts")
    out: dict[str, tuple[int, int]] = {}
    refused: list[str] = []
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return out, refused
    if stat.S_ISLNK(mode):
        return out, [_refusal(folder, "")]
    if not stat.S_ISDIR(mode):
        return out, refused

    def walk(where: Path, prefix: str, depth: int) -> None:
        with os.scandir(where) as entries:
            items = sorted(entries, key=lambda e: e.name)
        for entry in items:
            name = f"{prefix}{entry.name}"
            if entry.is_symlink():
                refused.append(_refusal(folder, name))
            elif entry.is_dir(follow_symlinks=False):
                if depth + 1 >= MAX_ARTIFACT_DEPTH:
                    refused.append(f"{folder / name}: more than {MAX_ARTIFACT_DEPTH} folders deep")
                else:
                    walk(Path(entry.path), f"{name}/", depth + 1)
            elif not entry.is_file(follow_symlinks=False):
                refused.append(f"{folder / name}: not a regular file (not shipped)")
            elif len(out) >= MAX_ARTIFACTS:
                refused.append(f"{folder / name}: more than {MAX_ARTIFACTS} artifacts")
            else:
                try:
                    check_artifact_name(name, str(folder))
                except StoreError as exc:
                    refused.append(f"{exc} (not shipped)")
                    continue
                st = entry.stat(follow_symlinks=False)
                out[name] = (st.st_size, st.st_mtime_ns)

    walk(folder, "", 0)
    return out, refused


def _read_artifact(folder: Path, name: str) -> bytes:
    """An artifact's bytes, opened part by part with ``O_NOFOLLOW`` (no link is followed)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(folder, flags)
    try:
        *dirs, base = name.split("/")
        for part in dirs:
            child = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = child
        file_fd = os.open(
            base, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd
        )
    finally:
        os.close(fd)
    with os.fdopen(file_fd, "rb") as stream:
        if not stat.S_ISREG(os.fstat(file_fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return stream.read()


def _signature(artifacts: dict[str, tuple[int, int]]) -> list[list[Any]]:
    return [[name, size, mtime] for name, (size, mtime) in sorted(artifacts.items())]
