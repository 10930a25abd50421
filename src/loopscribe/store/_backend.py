"""The objects of a store: read, list, put, put if absent, replace if unchanged, delete.

Keys are relative to the store's root and come only from the key builders
of :mod:`._layout`. Three backends:

* :class:`FolderBackend` — a local folder or network mount. Every path is
  walked from the root one part at a time with ``O_NOFOLLOW``, so a symbolic
  link planted in the store is refused, never followed out of it. Objects
  are written to a temporary name and renamed (replace) or hard-linked (put
  if absent); a manifest is replaced only under an exclusive ``flock`` of a
  lock file beside it, after checking it is still the version read.
  Created files are 0600, created folders 0700.
* :class:`S3Backend` — the S3 API through s3fs: ``If-None-Match: *`` puts
  an object only if it is absent, ``If-Match: <ETag>`` replaces it only if
  it is unchanged.
* :class:`Backend` — any other fsspec filesystem (gs://, az://, ftp://, ...):
  the same operations, but "if absent" and "if unchanged" are checked
  before the write, not by the backend (see docs/store.md).

Every failure of the backend is one :class:`~loopscribe.StoreError` line
that says what failed, where (the store's URL without its credentials) and
what to do; ``FileNotFoundError`` from a read is left to the caller.
"""

from __future__ import annotations

import contextlib
import errno
import ftplib
import os
import socket
import stat
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import LoopscribeError, StoreError
from .._locks import fcntl
from .._logsafe import hide
from ._layout import is_stale_temp, temp_name

__all__ = ["Backend", "Conflict", "Entry", "FolderBackend", "S3Backend", "TooLarge", "backend"]

Version = str | None
"""What a replace-if-unchanged compares: an ETag, or inode, size and mtime; ``None``: absent."""

_REASON_CHARS = 300


class Conflict(Exception):
    """A conditional write found the object changed (or present) since it was read."""


class TooLarge(Exception):
    """An object is larger than the caller accepts; ``size`` says how large, if known."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


@dataclass(frozen=True, slots=True)
class Entry:
    """An object found by a listing: its name in the folder, size and version."""

    name: str
    size: int
    version: str


def _hint(exc: BaseException) -> str:
    """What to do about a backend failure."""
    name = type(exc).__name__
    if isinstance(exc, PermissionError) or "AccessDenied" in str(exc):
        return "check the credentials and the rights on the bucket or folder"
    if isinstance(exc, FileNotFoundError):
        return "check the bucket (or folder) and prefix in the URL"
    if isinstance(exc, (ConnectionError, TimeoutError, socket.gaierror)) or any(
        word in name for word in ("Connect", "Timeout", "Endpoint")
    ):
        return (
            "the backend cannot be reached: check the endpoint (FSSPEC_S3_ENDPOINT_URL for an "
            "S3-compatible server), the network, and try again"
        )
    if isinstance(exc, ftplib.error_perm):
        return "the server refused: check the path and the rights of the FTP user"
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return "free some space and try again"
    if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
        return "a store never follows a symbolic link: remove it from the store"
    return "check the URL and the backend's settings"


def failure(exc: object, doing: str, where: str, secrets: Sequence[str] = ()) -> StoreError:
    """One line for a backend failure: what, where (no credentials) and what to do.

    Args:
        exc: What the backend raised.
        doing: What failed ("list", "read", ...).
        where: The object's URL as shown.
        secrets: The store URL's credentials, taken out of the backend's text.
    """
    if isinstance(exc, StoreError):
        return exc
    if not isinstance(exc, BaseException):
        exc = RuntimeError(str(exc))
    reason = " ".join(hide(str(exc) or type(exc).__name__, list(secrets)).split())
    if len(reason) > _REASON_CHARS:
        reason = reason[: _REASON_CHARS - 3] + "..."
    return StoreError(f"{where}: cannot {doing} ({type(exc).__name__}: {reason}); {_hint(exc)}")


class Backend:
    """The objects of a store on any fsspec filesystem.

    Args:
        fs: The filesystem.
        root: The store's path in it (no trailing slash).
        where: The store's URL as shown (no credentials), for errors.
        secrets: The credentials in the store's URL, never to appear in an error.
    """

    def __init__(self, fs: Any, root: str, where: str, secrets: Sequence[str] = ()) -> None:
        self.fs = fs
        self.root = root
        self.where = where
        self.secrets = list(secrets)

    def path(self, key: str) -> str:
        """The filesystem path of ``key``."""
        return f"{self.root.rstrip('/')}/{key}" if key else self.root

    @contextlib.contextmanager
    def _errors(self, doing: str, key: str, *, missing_ok: bool = True) -> Iterator[None]:
        try:
            yield
        except (Conflict, TooLarge, LoopscribeError):
            raise
        except FileNotFoundError:
            if missing_ok:
                raise
            raise failure(
                FileNotFoundError(errno.ENOENT, "no such bucket or folder"), doing, self._at(key)
            ) from None
        except Exception as exc:  # backends raise their own types (botocore, aiohttp, ftplib)
            raise failure(exc, doing, self._at(key), self.secrets) from None

    def _at(self, key: str) -> str:
        return f"{self.where}/{key}" if key else self.where

    # -- reading ---------------------------------------------------------------

    def listdir(self, key: str) -> list[Entry]:
        """The objects directly in folder ``key`` (empty if there are none)."""
        with self._errors("list", key):
            try:
                found = self.fs.find(self.path(key), detail=True, refresh=True)
            except FileNotFoundError:
                return []
        base = self.path(key).rstrip("/")
        out = []
        for path, info in found.items():
            parent, _, name = str(path).rpartition("/")
            if parent == base and info.get("type", "file") == "file":
                out.append(Entry(name, _size(info), _version(info)))
        return out

    def list_manifests(self, key: str) -> list[Entry]:
        """The objects directly in folder ``key`` with one listing request (no recursion)."""
        with self._errors("list", key):
            try:
                found = self.fs.ls(self.path(key), detail=True, refresh=True)
            except FileNotFoundError:
                return []
        base = self.path(key).rstrip("/")
        out = []
        for info in found:
            parent, _, name = str(info["name"]).rpartition("/")
            if parent == base and info.get("type") == "file":
                out.append(Entry(name, _size(info), _version(info)))
        return out

    def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``start`` to ``end`` of an object (to its end when ``end`` is ``None``).

        Raises:
            FileNotFoundError: No such object.
        """
        with self._errors("read", key):
            data: bytes = self.fs.cat_file(self.path(key), start=start or None, end=end)
        return data

    def read_limited(self, key: str, limit: int) -> tuple[bytes, Version]:
        """A whole object and its version, if it holds at most ``limit`` bytes.

        Raises:
            TooLarge: It is larger (nothing of it was read).
            FileNotFoundError: No such object.
        """
        with self._errors("read", key):
            info = self.fs.info(self.path(key))
            if _size(info) > limit:
                raise TooLarge(_size(info))
            data: bytes = self.fs.cat_file(self.path(key), start=0, end=limit + 1)
        if len(data) > limit:
            raise TooLarge(len(data))
        return data, _version(info)

    def read_many(self, keys: Sequence[str], limit: int) -> list[bytes | BaseException]:
        """Objects read together (concurrently where the backend can), each at most ``limit``.

        Returns:
            For each key its bytes, or the exception reading it raised
            (:class:`TooLarge`, ``FileNotFoundError``, :class:`StoreError`).
        """
        if not keys:
            return []
        paths = [self.path(k) for k in keys]
        try:
            with self._errors("read", keys[0]):
                got = self.fs.cat_ranges(
                    paths, [0] * len(paths), [limit + 1] * len(paths), on_error="return"
                )
        except StoreError:
            got = [None] * len(paths)
        out: list[bytes | BaseException] = []
        for key, data in zip(keys, got, strict=True):
            if isinstance(data, bytes):
                out.append(TooLarge(len(data)) if len(data) > limit else data)
            elif isinstance(data, FileNotFoundError):
                out.append(data)
            else:
                try:
                    out.append(self.read_limited(key, limit)[0])  # once more, alone
                except (TooLarge, FileNotFoundError, StoreError) as exc:
                    out.append(exc)
        return out

    def read_ranges(
        self, keys: Sequence[str], starts: Sequence[int], ends: Sequence[int]
    ) -> list[bytes | BaseException]:
        """Byte ranges of several objects, read together (concurrently where the backend can).

        Returns:
            For each range its bytes, or the exception reading it raised.
        """
        if not keys:
            return []
        with self._errors("read", keys[0]):
            got = self.fs.cat_ranges(
                [self.path(k) for k in keys], list(starts), list(ends), on_error="return"
            )
        out: list[bytes | BaseException] = []
        for key, data in zip(keys, got, strict=True):
            if isinstance(data, (bytes, FileNotFoundError)):
                out.append(data)
            else:
                out.append(failure(data, "read", self._at(key), self.secrets))
        return out

    def exists(self, key: str) -> bool:
        """Whether object ``key`` exists."""
        with self._errors("look up", key):
            return bool(self.fs.exists(self.path(key)))

    # -- writing ---------------------------------------------------------------

    def put(self, key: str, data: bytes) -> None:
        """Create or replace an object in one step (a reader sees the old or the new one)."""
        with self._errors("write", key, missing_ok=False):
            self.fs.pipe_file(self.path(key), data)

    def put_new(self, key: str, data: bytes, *, doing: str = "write") -> bool:
        """Create an object only if none has its name; ``False`` when one has."""
        with self._errors(doing, key, missing_ok=False):
            if self.fs.exists(self.path(key)):
                return False
            self.fs.pipe_file(self.path(key), data)
        return True

    def replace_if(self, key: str, data: bytes, version: Version) -> Version:
        """Replace an object only if it is still at ``version`` (``None``: absent).

        Returns:
            The new object's version.

        Raises:
            Conflict: Another writer changed it since.
        """
        with self._errors("write", key, missing_ok=False):
            try:
                current = _version(self.fs.info(self.path(key)))
            except FileNotFoundError:
                current = None
            if current != version:
                raise Conflict(key)
            self.fs.pipe_file(self.path(key), data)
            return _version(self.fs.info(self.path(key)))

    def delete(self, key: str) -> None:
        """Remove an object (gone already is fine)."""
        with self._errors("remove", key, missing_ok=False), contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.path(key))

    def clean_temps(self, key: str) -> int:
        """Remove temporary objects of killed writers in folder ``key`` (a folder store's)."""
        return 0


def _size(info: dict[str, Any]) -> int:
    size = info.get("size")
    return size if isinstance(size, int) and size >= 0 else 0


def _version(info: dict[str, Any]) -> str:
    tag = info.get("ETag") or info.get("etag") or info.get("md5Hash") or info.get("generation")
    if tag:
        return str(tag)
    return (
        f"{info.get('size')}:{info.get('mtime') or info.get('LastModified') or info.get('modify')}"
    )


class S3Backend(Backend):
    """The S3 API: conditional puts (``If-None-Match``, ``If-Match``) make the writes safe."""

    def read_limited(self, key: str, limit: int) -> tuple[bytes, Version]:
        """One GET: the length is checked from its headers before the body is read."""
        from fsspec.asyn import sync

        bucket, name, _ = self.fs.split_path(self.path(key))

        async def get() -> tuple[bytes, str]:
            resp = await self.fs._call_s3("get_object", Bucket=bucket, Key=name)
            body = resp["Body"]
            try:
                size = int(resp.get("ContentLength") or 0)
                if size > limit:
                    raise TooLarge(size)
                data: bytes = await body.read(limit + 1)
            finally:
                body.close()
            if len(data) > limit:
                raise TooLarge(len(data))
            return data, str(resp.get("ETag") or "")

        with self._errors("read", key):
            data, tag = sync(self.fs.loop, get)
        return bytes(data), str(tag)

    def put_new(self, key: str, data: bytes, *, doing: str = "write") -> bool:
        """``If-None-Match: *``: S3 puts the object only if none has its name."""
        with self._errors(doing, key, missing_ok=False):
            try:
                self.fs.pipe_file(self.path(key), data, mode="create")
            except (FileExistsError, OSError) as exc:
                if isinstance(exc, FileExistsError) or _precondition(exc):
                    return False
                raise
        return True

    def replace_if(self, key: str, data: bytes, version: Version) -> Version:
        """``If-Match: <ETag>`` (or ``If-None-Match: *``): S3 refuses a changed object."""
        with self._errors("write", key, missing_ok=False):
            try:
                if version is None:
                    out = self.fs.pipe_file(self.path(key), data, mode="create")
                else:
                    out = self.fs.pipe_file(self.path(key), data, IfMatch=version)
            except (FileExistsError, FileNotFoundError) as exc:
                raise Conflict(key) from exc
            except OSError as exc:
                if _precondition(exc):
                    raise Conflict(key) from exc
                raise
            tag = out.get("ETag") if isinstance(out, dict) else None
            if tag:
                return str(tag)
            self.fs.invalidate_cache(self.path(key))
            return _version(self.fs.info(self.path(key)))


def _precondition(exc: BaseException) -> bool:
    """Whether S3 refused a conditional write (412, or 409 for a concurrent one)."""
    cause = exc.__cause__
    response = getattr(cause, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    return code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")


class FolderBackend(Backend):
    """A store in a local folder (or a network mount): no symbolic link is ever followed."""

    def __init__(self, fs: Any, root: str, where: str, secrets: Sequence[str] = ()) -> None:
        super().__init__(fs, root, where, secrets)
        self._pid = os.getpid()
        self._held = threading.local()

    # -- walking from the root, one part at a time ------------------------------

    def _parts(self, key: str) -> list[str]:
        parts = key.split("/") if key else []
        if any(p in ("", ".", "..") or "\0" in p for p in parts):
            raise StoreError(f"{self._at(key)}: not an object key of a store")  # never built
        return parts

    def _root_fd(self, create: bool) -> int:
        try:
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            if not create:
                raise
        # The store's own folder and any missing parent: private, like everything below.
        missing = []
        head = self.root
        while head and not os.path.exists(head):
            missing.append(head)
            head = os.path.dirname(head)
        for folder in reversed(missing):
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder, 0o700)
        return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def _dir_fd(self, parts: Sequence[str], create: bool) -> int:
        """An open descriptor of folder ``parts`` below the root (made when ``create``)."""
        fd = self._root_fd(create)
        try:
            for part in parts:
                try:
                    child = _open_dir(part, fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o700, dir_fd=fd)
                    child = _open_dir(part, fd)
                os.close(fd)
                fd = child
            return fd
        except BaseException:
            os.close(fd)
            raise

    @contextlib.contextmanager
    def _parent(self, key: str, create: bool = False) -> Iterator[tuple[int, str]]:
        parts = self._parts(key)
        held: dict[tuple[str, ...], int] | None = getattr(self._held, "dirs", None)
        if held is not None and not create:
            folder = tuple(parts[:-1])
            if folder not in held:
                held[folder] = self._dir_fd(folder, create=False)
            yield held[folder], parts[-1]
            return
        fd = self._dir_fd(parts[:-1], create)
        try:
            yield fd, parts[-1]
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Within it, this thread's reads open each folder once (a batch of many objects)."""
        self._held.dirs = {}
        try:
            yield
        finally:
            for fd in self._held.dirs.values():
                os.close(fd)
            self._held.dirs = None

    # -- reading ---------------------------------------------------------------

    def listdir(self, key: str) -> list[Entry]:
        """The regular files directly in folder ``key`` (symbolic links are not listed)."""
        with self._errors("list", key):
            try:
                fd = self._dir_fd(self._parts(key), create=False)
            except (FileNotFoundError, NotADirectoryError):
                return []
            try:
                out = []
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if entry.is_file(follow_symlinks=False):
                            st = entry.stat(follow_symlinks=False)
                            out.append(Entry(entry.name, st.st_size, _stat_version(st)))
                return out
            finally:
                os.close(fd)

    def list_manifests(self, key: str) -> list[Entry]:
        """The regular files directly in folder ``key``."""
        return self.listdir(key)

    @contextlib.contextmanager
    def _open_file(self, key: str) -> Iterator[int]:
        with self._parent(key) as (dfd, name):
            # O_NONBLOCK: a FIFO planted in the store cannot block the open.
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(name, flags, dir_fd=dfd)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise StoreError(
                        f"{self._at(key)}: not a regular file; the store was changed outside "
                        "loopscribe (remove it)"
                    )
                yield fd
            finally:
                os.close(fd)

    def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``start`` to ``end`` of a file (``os.pread``; no symbolic link followed)."""
        with self._errors("read", key), self._open_file(key) as fd:
            if end is None:
                end = os.fstat(fd).st_size
            return _pread_all(fd, max(0, end - start), start)

    def read_limited(self, key: str, limit: int) -> tuple[bytes, Version]:
        """A whole file and its version; its size is checked before it is read."""
        with self._errors("read", key), self._open_file(key) as fd:
            st = os.fstat(fd)
            if st.st_size > limit:
                raise TooLarge(st.st_size)
            data = _pread_all(fd, st.st_size + 1, 0)  # + 1: a file that grew since is seen
            if len(data) > limit:
                raise TooLarge(len(data))
            return data, _stat_version(st)

    def read_many(self, keys: Sequence[str], limit: int) -> list[bytes | BaseException]:
        """Files one after the other (a local read is not worth threads)."""
        out: list[bytes | BaseException] = []
        with self._reading():
            self._read_each(keys, limit, out)
        return out

    def _read_each(self, keys: Sequence[str], limit: int, out: list[bytes | BaseException]) -> None:
        for key in keys:
            try:
                out.append(self.read_limited(key, limit)[0])
            except (TooLarge, FileNotFoundError, StoreError) as exc:
                out.append(exc)

    def read_ranges(
        self, keys: Sequence[str], starts: Sequence[int], ends: Sequence[int]
    ) -> list[bytes | BaseException]:
        """Byte ranges of files, one after the other."""
        out: list[bytes | BaseException] = []
        with self._reading():
            for key, start, end in zip(keys, starts, ends, strict=True):
                try:
                    out.append(self.read(key, start, end))
                except (FileNotFoundError, StoreError) as exc:
                    out.append(exc)
        return out

    def exists(self, key: str) -> bool:
        """Whether file ``key`` exists (a symbolic link is not a file here)."""
        with self._errors("look up", key):
            try:
                with self._parent(key) as (dfd, name):
                    os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                return False
        return True

    # -- writing ---------------------------------------------------------------

    def _write_temp(self, dfd: int, name: str, data: bytes) -> tuple[str, os.stat_result]:
        """Write ``data`` to a new private temporary file beside ``name``, synced."""
        tmp = temp_name(name, self._pid)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600, dir_fd=dfd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            return tmp, os.fstat(fd)
        except BaseException:
            os.unlink(tmp, dir_fd=dfd)
            raise
        finally:
            os.close(fd)

    def put(self, key: str, data: bytes) -> None:
        """Write a temporary file, then rename it over the object (atomic)."""
        with self._errors("write", key, missing_ok=False), self._parent(key, True) as (dfd, name):
            tmp, _st = self._write_temp(dfd, name, data)
            try:
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                os.unlink(tmp, dir_fd=dfd)
                raise

    def put_new(self, key: str, data: bytes, *, doing: str = "write") -> bool:
        """Write a temporary file, then hard-link it to the name: fails if the name exists."""
        with self._errors(doing, key, missing_ok=False), self._parent(key, True) as (dfd, name):
            tmp, _st = self._write_temp(dfd, name, data)
            try:
                os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
                    raise
                return _create_exclusive(dfd, name, data)  # no hard links on this filesystem
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=dfd)
        return True

    def replace_if(self, key: str, data: bytes, version: Version) -> Version:
        """Rename a temporary file over the object under an exclusive lock, if unchanged."""
        with self._errors("write", key, missing_ok=False), self._parent(key, True) as (dfd, name):
            tmp, st = self._write_temp(dfd, name, data)
            try:
                lock = os.open(
                    f".{name}.lock",
                    os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o600,
                    dir_fd=dfd,
                )
                try:
                    # Held only for a stat and a rename; every writer of this name takes it.
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    try:
                        now = _stat_version(os.stat(name, dir_fd=dfd, follow_symlinks=False))
                    except FileNotFoundError:
                        now = None
                    if now != version:
                        raise Conflict(key)
                    os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
                finally:
                    os.close(lock)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
            return _stat_version(st)

    def delete(self, key: str) -> None:
        """Remove a file (a symbolic link is removed itself, never what it names)."""
        with self._errors("remove", key, missing_ok=False):
            try:
                with self._parent(key) as (dfd, name):
                    os.unlink(name, dir_fd=dfd)
            except (FileNotFoundError, NotADirectoryError):
                pass

    def clean_temps(self, key: str) -> int:
        """Remove temporary files that killed loopscribe processes of this host left in ``key``.

        Only names loopscribe gives its temporary files, with this host's
        tag, whose process is gone: nothing another host or a live process
        may still be writing, and no other file.
        """
        removed = 0
        with self._errors("clean up", key):
            try:
                fd = self._dir_fd(self._parts(key), create=False)
            except (FileNotFoundError, NotADirectoryError):
                return 0
            try:
                with os.scandir(fd) as entries:
                    names = [e.name for e in entries if e.is_file(follow_symlinks=False)]
                for name in names:
                    if is_stale_temp(name):
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(name, dir_fd=fd)
                            removed += 1
            finally:
                os.close(fd)
        return removed


def _open_dir(name: str, dir_fd: int) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)


def _create_exclusive(dfd: int, name: str, data: bytes) -> bool:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, 0o600, dir_fd=dfd)
    except FileExistsError:
        return False
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    parts = []
    while size > 0:
        chunk = os.pread(fd, min(size, 64 << 20), offset)
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(parts)


def _stat_version(st: os.stat_result) -> str:
    # Every replace is a rename of a new file: a new inode, size and mtime.
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def backend(fs: Any, root: str, where: str, secrets: Sequence[str] = ()) -> Backend:
    """The backend for an fsspec filesystem."""
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):
        return FolderBackend(fs, root, where, secrets)
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    if "s3" in protocol and hasattr(fs, "_call_s3"):
        return S3Backend(fs, root, where, secrets)
    return Backend(fs, root, where, secrets)
