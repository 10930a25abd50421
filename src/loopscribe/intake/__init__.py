"""Keep your instrumentation: every GenAI span's bodies into a session file, only references on.

Hosts that already run an OpenTelemetry GenAI, OpenInference or OpenLLMetry
instrumentation add one line and get every prompt, message, argument and
tool output in a local append-only session file, and none in their trace
backend:

* :class:`OffloadingProcessor` — a ``SpanProcessor`` put in front of the
  host's own: spans go on with their bodies removed and references added;
  it records the GenAI metrics of the spans whose instrumentation records
  none (OpenInference's; ``metrics=`` forces them on or off);
* :class:`OffloadingLogProcessor` — its ``LogRecordProcessor`` twin, for
  content sent as log records;
* :class:`LoopscribeCompletionHook` — util-genai's completion hook
  (``OTEL_INSTRUMENTATION_GENAI_COMPLETION_HOOK=loopscribe``): the official
  instrumentations hand it their content, with content capture left off.

How spans become records:

* a **session** per conversation (``session.id`` or
  ``gen_ai.conversation.id`` on the span or its trace), else one per process;
  the file is ``<directory>/<session_id>.jsonl``;
* a **run** per trace (its ``run_start`` holds the trace's ``traceparent``);
* an **execution** per span, ``otel:<span id>``, nested under its parent
  span's, of kind ``model``, ``tool``, ``agent``, ``retrieval``,
  ``embedding`` or ``other``; the same span again with other content is its
  next attempt;
* messages as loopscribe's message types; what a convention holds beyond
  them under ``otel`` in the record; the span as it was handed on in a
  ``host_span`` record, so that replay (``loopscribe export``) gives exactly
  the spans the host's processor received, with the host's IDs, and
  ``loopscribe find DIR --trace-id T --span-id S`` gives a span's records.
"""

from ._hook import DEFAULT_DIR, DIR_ENV, LoopscribeCompletionHook
from ._logs import OffloadingLogProcessor
from ._processor import OffloadingProcessor

__all__ = [
    "DEFAULT_DIR",
    "DIR_ENV",
    "LoopscribeCompletionHook",
    "OffloadingLogProcessor",
    "OffloadingProcessor",
]
