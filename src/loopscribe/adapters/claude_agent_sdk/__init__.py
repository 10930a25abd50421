"""Claude Agent SDK sessions, recorded live: a ``SessionStore`` that writes loopscribe sessions.

``pip install 'loopscribe[claude-agent-sdk]'``, then::

    from loopscribe.adapters.claude_agent_sdk import LoopscribeSessionStore

    options = ClaudeAgentOptions(session_store=LoopscribeSessionStore("sessions"))

The SDK mirrors every line of Claude Code's transcript to the store while
the agent works; the store maps each one with the Claude Code importer's
mapping (``loopscribe.importers.claude_code.ClaudeCodeMapping``), so the
session file holds what ``loopscribe import claude-code`` would write, and
its observers and span processor see the records as they are written.

How entries are kept. Each entry is stored verbatim in the session file
itself, as a session-level ``source_entry`` record written just before the
records mapped from it, rather than in a sidecar file:

* one file is the truth: one writer lock, one fsync, one file to ship or
  delete, and a crash can only cut it after a whole line;
* a store reopened by another process rebuilds the mapping's state (the
  open model response, the tool calls waiting for results, the open run) by
  replaying those entries against the records that follow them, and
  completes a batch a crash cut short without writing anything twice;
* ``uuid``\\ s are the idempotency key, rebuilt from the same records.

The mapped records strip what Claude Code keeps beside a tool result
(``toolUseResult``, which can hold whole files) and the bridge and viewer
ignore ``source_entry`` records, so the verbatim copies cost file size only.
A small ``<file>.sdk-summary.json`` beside each file keeps the SDK's folded
summary for ``list_session_summaries`` (derived data, rebuilt on reopen).

An entry JSON cannot hold as it is (``inf``, an integer beyond 64 bits, a
lone surrogate, non-string keys) is kept as tagged JSON text that loads back
equal (``_values``); each key has its own file name (``_names``); ``redact=``
scrubs records and summaries as in live recording; files are 0600, folders
0700.
"""

from ._names import SessionKeyError
from ._store import LoopscribeSessionStore, SessionReplacedError

__all__ = ["LoopscribeSessionStore", "SessionKeyError", "SessionReplacedError"]
