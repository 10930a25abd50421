"""Exceptions raised by loopscribe.

Every exception derives from :class:`LoopscribeError`; each leaf also derives
from the builtin a caller would catch anyway, so ``except ValueError`` keeps
working for code that does not know loopscribe::

    LoopscribeError
    ├── SessionExistsError(FileExistsError)     create() on an existing path
    ├── SessionLockedError(BlockingIOError)     another handle writes the file
    ├── SessionClosedError(RuntimeError)        the handle, run or file is closed
    ├── RunStateError(RuntimeError)             a run is already open / not open
    ├── ForkedWriterError(RuntimeError)         a forked child used its parent's handle
    ├── FormatError(ValueError)                 a file is not a valid session file
    │   ├── CorruptRecordError                  a complete line is damaged
    │   └── UnsupportedVersionError             format_version is not supported
    ├── EncodeError(TypeError)                  a value cannot be recorded
    │   └── UnknownTypeError                    a typed value has no codec entry
    ├── DecodeError(ValueError)                 a stored typed value cannot be decoded
    ├── WriteError(OSError)                     write, truncate or fsync failed
    ├── UnsupportedPlatformError(OSError)       writing needs fcntl locks (not on Windows)
    ├── StoreError(OSError)                     a session store (fsspec URL) cannot be used
    │   └── ManifestError                       a shipped session's manifest is damaged
    ├── SessionNotFoundError(FileNotFoundError) no session has this id (workspace, store)
    ├── ImportStateError(ValueError)            an import cursor does not fit its transcript
    ├── MessageReferenceError(ValueError)       a GenAI reference names no messages
    ├── SessionReplacedError(RuntimeError)      Claude Agent SDK store: the file was replaced
    ├── SessionKeyError(TypeError)              Claude Agent SDK store: a key it cannot name
    ├── NotFoundError(LookupError)              viewer: an ID names nothing in the folder
    ├── IndexingError(LookupError)              viewer: the files it needs are not indexed yet
    └── CliError                                a command failed: one line, exit status 1

``NotASessionError`` (a :class:`FormatError`) says a workspace file is not
a session file at all. The errors from ``ManifestError`` on are defined
beside the code that raises them and exported by its package
(``loopscribe.store``, ``loopscribe.workspace``, ``loopscribe.importers``,
``loopscribe.otel``, ``loopscribe.adapters.claude_agent_sdk``, ``loopscribe.viewer``,
``loopscribe.cli``).

Errors that come from a file carry ``path``, ``line`` (1-based) and
``offset`` (byte offset of the line) as attributes and in their message.

Recording failures are *sticky*: after a :class:`WriteError` or an
:class:`EncodeError` from ``Run.record``, every later ``record``,
``save_checkpoint`` and ``close`` on the same Session raises the same
exception object again, so a gap in the evidence can never go unnoticed.
Data is never such a failure: the built-in codec records a value JSON cannot
hold as a ``snapshot_error`` diagnostic. An encoding failure is the host's
set-up mistake — an object of an unregistered class where a message or an
artifact belongs (:class:`UnknownTypeError`), or a custom codec refusing a
record — and the record is refused before any of it is written.
"""

from __future__ import annotations

import os


class LoopscribeError(Exception):
    """Base class of every loopscribe exception."""


class SessionExistsError(LoopscribeError, FileExistsError):
    """``Session.create`` was given a path that already exists."""


class SessionLockedError(LoopscribeError, BlockingIOError):
    """Another handle, in this process or another, is writing the session file."""


class SessionClosedError(LoopscribeError, RuntimeError):
    """The Session or Run was used after it was closed."""


class RunStateError(LoopscribeError, RuntimeError):
    """``begin_run`` while a run is open, or a call that needs an open run."""


class ForkedWriterError(LoopscribeError, RuntimeError):
    """A forked child process tried to write through its parent's Session handle."""


class FormatError(LoopscribeError, ValueError):
    """A file is not a valid loopscribe session file.

    Attributes:
        path: The file, or ``None`` when reading an anonymous stream.
        line: 1-based line number of the offending line, when known.
        offset: Byte offset where the offending line starts, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | os.PathLike[str] | None = None,
        line: int | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)
        self.line = line
        self.offset = offset


class CorruptRecordError(FormatError):
    """A complete line is not a valid record (bad JSON, gap in seq, foreign session)."""


class UnsupportedVersionError(FormatError):
    """The file declares a ``format_version`` this version of loopscribe cannot read."""


class EncodeError(LoopscribeError, TypeError):
    """An event's data cannot be encoded as JSON by the session's codec."""


class UnknownTypeError(EncodeError):
    """A typed value (a class instance) has no codec registration.

    Raised for such a value in a typed position (a message, a content block,
    an artifact; see ``Codec.check_typed``) and by ``Codec.dumps(strict=True)``:
    loopscribe refuses to lower it silently, because reading it back would no
    longer give the application's type. Elsewhere, as data, it is diagnosed.
    """


class DecodeError(LoopscribeError, ValueError):
    """A stored typed value names a type the codec does not know, or does not fit it."""


class WriteError(LoopscribeError, OSError):
    """Writing, truncating or syncing the session file failed.

    The original ``OSError`` is the ``__cause__``; ``errno`` is copied from it.
    """


class UnsupportedPlatformError(LoopscribeError, OSError):
    """This platform lacks what writing a session needs (POSIX file locks: ``fcntl``).

    Reading works everywhere; recording, importing and shipping need Linux or macOS.
    """


class StoreError(LoopscribeError, OSError):
    """A session store (an fsspec URL) cannot be used: no backend, unreachable, or not a store.

    Also raised when a local session file no longer matches what was shipped
    from it (shorter than the shipped bytes, or another session's records).
    """
