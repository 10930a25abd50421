"""``loopscribe find --genai-json``: a span's messages in the GenAI conventions' JSON schema.

Given a ``gen_ai.*_ref`` value (``file:///.../s.jsonl#seq=12``) in place of
the folder, it follows that reference; given a trace and span ID, it
resolves every model request and response behind the span. Each result is
one JSON line: :func:`loopscribe.otel.resolve_reference`'s object, plus the
``file`` it came from.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import events as ev
from .._errors import FormatError
from ..otel._genai import MessageReferenceError, parse_reference, resolve_reference
from ._find import session_files
from ._options import parse_hex
from ._output import CliError, Out

_REFERENCED = frozenset({ev.MODEL_REQUEST, ev.MODEL_EXEC_END})


def cmd_find_genai(args: argparse.Namespace, out: Out) -> int:
    """Print the conventions' message JSON of a reference, or of a span's model calls."""
    from ._find import find_records

    if "#" in args.dir:
        try:
            path, seq = parse_reference(args.dir)
            out.emit({"file": str(path), **resolve_reference(path, seq)})
        except (MessageReferenceError, FormatError, OSError) as exc:
            raise CliError(str(exc)) from None
        return 0
    if args.trace_id is None:
        raise CliError(
            "give a reference (file:///path/s.jsonl#seq=N, a gen_ai.*_ref value) "
            "or --trace-id (and --span-id) with --genai-json"
        )
    trace = parse_hex(args.trace_id, 128, "trace id")
    span = None if args.span_id is None else parse_hex(args.span_id, 64, "span id")
    files = session_files(Path(args.dir))
    found = 0
    for path, record in find_records(files, trace, span, out):
        if record.type not in _REFERENCED:
            continue
        found += 1
        out.emit({"file": str(path), **resolve_reference(path, record.seq)})
    if not found:
        raise CliError(f"no model requests or responses for that span in {args.dir}")
    return 0
