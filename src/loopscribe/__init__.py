"""loopscribe: record AI-agent sessions into append-only JSONL files.

Every model and tool call of an agent host becomes a record in a local
session file; ``loopscribe.otel`` turns those records into OpenTelemetry
spans that carry references, never bodies.
"""

from typing import IO as _IO
from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._deferred import provide as _provide
from ._lazy import listing as _listing
from ._lazy import loader as _loader
from ._source import set_url_opener as _set_url_opener

if _TYPE_CHECKING:
    from . import events
    from ._codec import Codec
    from ._errors import (
        CorruptRecordError,
        DecodeError,
        EncodeError,
        ForkedWriterError,
        FormatError,
        LoopscribeError,
        RunStateError,
        SessionClosedError,
        SessionExistsError,
        SessionLockedError,
        StoreError,
        UnknownTypeError,
        UnsupportedPlatformError,
        UnsupportedVersionError,
        WriteError,
    )
    from ._executor import (
        Chunk,
        LLMRequest,
        ModelExecution,
        ModelExecutor,
        ModelResult,
        Recorder,
        StreamEnd,
        TextDelta,
        ThinkingDelta,
    )
    from ._format import FORMAT_VERSION
    from ._freeze import freeze_config, freeze_request
    from ._home import HOME_ENV, sessions_home
    from ._loop import AgentLoop, LoopContext, ToolContext, TransformContext, checkpoint_turns
    from ._messages import (
        AssistantMessage,
        FileContent,
        ImageContent,
        SystemMessage,
        TextContent,
        ThinkingContent,
        ToolCall,
        ToolResultMessage,
        Usage,
        UserMessage,
    )
    from ._model import Actor, CallRef, Event, Execution, Record, Transient
    from ._reader import load_checkpoint, read
    from ._redact import COMMON_PATTERNS, Redactor
    from ._session import BulkWriter, Observer, Run, Session, current_run
    from ._verify import BrokenLink, VerifyReport, verify
    from .summary import summarize
    from .workspace import SessionSummary, Workspace

_EXPORTS: dict[str, tuple[str, ...]] = {
    ".events": ("events",),
    "._codec": ("Codec",),
    "._errors": (
        "CorruptRecordError",
        "DecodeError",
        "EncodeError",
        "ForkedWriterError",
        "FormatError",
        "LoopscribeError",
        "RunStateError",
        "SessionClosedError",
        "SessionExistsError",
        "SessionLockedError",
        "StoreError",
        "UnknownTypeError",
        "UnsupportedPlatformError",
        "UnsupportedVersionError",
        "WriteError",
    ),
    "._executor": (
        "Chunk",
        "LLMRequest",
        "ModelExecution",
        "ModelExecutor",
        "ModelResult",
        "Recorder",
        "StreamEnd",
        "TextDelta",
        "ThinkingDelta",
    ),
    "._format": ("FORMAT_VERSION",),
    "._freeze": ("freeze_config", "freeze_request"),
    "._home": ("HOME_ENV", "sessions_home"),
    "._loop": ("AgentLoop", "LoopContext", "ToolContext", "TransformContext", "checkpoint_turns"),
    "._messages": (
        "AssistantMessage",
        "FileContent",
        "ImageContent",
        "SystemMessage",
        "TextContent",
        "ThinkingContent",
        "ToolCall",
        "ToolResultMessage",
        "Usage",
        "UserMessage",
    ),
    "._model": ("Actor", "CallRef", "Event", "Execution", "Record", "Transient"),
    "._reader": ("load_checkpoint", "read"),
    "._redact": ("COMMON_PATTERNS", "Redactor"),
    "._session": ("BulkWriter", "Observer", "Run", "Session", "current_run"),
    "._verify": ("BrokenLink", "VerifyReport", "verify"),
    ".summary": ("summarize",),
    ".workspace": ("SessionSummary", "Workspace"),
}
"""Where each public name lives: imported when first used, so that ``import
loopscribe`` (which every import of a submodule runs first) stays light and a
command that only reads a file never loads the recorder or OpenTelemetry."""

__getattr__ = _loader(__name__, _EXPORTS, globals())

__dir__ = _listing(globals())


def _open_store_url(url: str) -> _IO[bytes]:
    # A shipped session (<store>/sessions/<id>, any fsspec URL): its segments as one
    # stream. The store is imported when a URL is first read, never with the package.
    from .store import open_session

    return open_session(url)


_set_url_opener(_open_store_url)


def _offloading_processor() -> object:
    # loopscribe.otel offers the intake's processor where users import it from; the
    # intake (a way in) is a layer above otel, so the import is made here, on first use.
    from .intake import OffloadingProcessor

    return OffloadingProcessor


_provide("loopscribe.otel", "OffloadingProcessor", _offloading_processor)

__version__ = "0.1.0"

__all__ = [
    "COMMON_PATTERNS",
    "FORMAT_VERSION",
    "HOME_ENV",
    "Actor",
    "AgentLoop",
    "AssistantMessage",
    "BrokenLink",
    "BulkWriter",
    "CallRef",
    "Chunk",
    "Codec",
    "CorruptRecordError",
    "DecodeError",
    "EncodeError",
    "Event",
    "Execution",
    "FileContent",
    "ForkedWriterError",
    "FormatError",
    "ImageContent",
    "LLMRequest",
    "LoopContext",
    "LoopscribeError",
    "ModelExecution",
    "ModelExecutor",
    "ModelResult",
    "Observer",
    "Record",
    "Recorder",
    "Redactor",
    "Run",
    "RunStateError",
    "Session",
    "SessionClosedError",
    "SessionExistsError",
    "SessionLockedError",
    "SessionSummary",
    "StoreError",
    "StreamEnd",
    "SystemMessage",
    "TextContent",
    "TextDelta",
    "ThinkingContent",
    "ThinkingDelta",
    "ToolCall",
    "ToolContext",
    "ToolResultMessage",
    "TransformContext",
    "Transient",
    "UnknownTypeError",
    "UnsupportedPlatformError",
    "UnsupportedVersionError",
    "Usage",
    "UserMessage",
    "VerifyReport",
    "Workspace",
    "WriteError",
    "checkpoint_turns",
    "current_run",
    "events",
    "freeze_config",
    "freeze_request",
    "load_checkpoint",
    "read",
    "sessions_home",
    "summarize",
    "verify",
]
