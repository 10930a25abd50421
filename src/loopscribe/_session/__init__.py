"""The writer: a Session owns one file; a Run scopes one loop invocation.

Durability rules, and why:

* Each record is one ``os.write`` of one complete line on an ``O_APPEND``
  descriptor, with no application buffer, so a crash loses at most the line
  being written and never interleaves two records. (A *buffered* Session,
  for bulk loads that can be done again, such as the transcript importers,
  writes blocks of lines instead: see ``Session.create(buffered=True)``.)
* No fsync per event: that would cost milliseconds per record. ``Run.close``,
  ``Session.close`` and ``save_checkpoint`` fsync; a new file also fsyncs
  its directory so the file itself survives a power loss.
* A short write is completed or cut back to the last line boundary, and the
  handle fails: a partial line is never followed by another record.
* Write, sync and encoding errors are sticky (see ``loopscribe._errors``).
  Data never causes one: a value the codec cannot hold is recorded as a
  ``snapshot_error`` diagnostic and recording goes on. An encoding error
  is the host's set-up mistake (an unregistered class where a message
  belongs, a custom codec's refusal), raised before anything is written.
  A failed fsync is never retried, because a retry can report success for
  data the kernel has already dropped.
* One writer per file: an exclusive, non-blocking ``flock`` on the open
  file description. It fails at once for a second handle in this or
  another process and dies with the process, so SIGKILL leaves no stale lock.
"""

from ._bulk import BulkWriter
from ._observers import Observer
from ._parent import ACTIVE_SPAN
from ._run import Run, current_run
from ._writer import Session, open_handle

__all__ = [
    "ACTIVE_SPAN",
    "BulkWriter",
    "Observer",
    "Run",
    "Session",
    "current_run",
    "open_handle",
]
