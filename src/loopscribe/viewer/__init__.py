"""See what happened: a web viewer, an HTML report and the run timeline behind both.

A trace backend shows *when* things happened; the bodies of *what* happened
stay in the session file. This package closes the loop:

* :func:`create_app` — a read-only web viewer of a folder of sessions
  (``loopscribe serve DIR``), indexed in the background and listed a page
  at a time, with deep links a trace backend can use:
  ``/trace/{trace_id}`` and ``/trace/{trace_id}/span/{span_id}`` open the run
  and the execution behind a span, ``/session/{id}/record/{seq}`` one record;
* :func:`write_report` — a session's run timelines as one self-contained HTML
  file (``loopscribe report FILE -o report.html``), streamed record by record
  (:func:`stream_report` writes it to any text stream);
* :func:`session_stats` — per run: duration, calls, errors, retries,
  tokens by model, slowest executions (``loopscribe stats``);
* :class:`SessionTimeline` — the model all of them draw: every execution attempt of
  a run as a bar, folded from the records exactly as the span bridge folds
  them, so each bar is a span.

The web viewer needs the optional web framework (``pip install
'loopscribe[serve]'``); it is imported only by :func:`create_app`, never by
``import loopscribe`` or ``import loopscribe.viewer``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from .._stats import RunStats, SessionStats, session_stats
from .._timeline import Bar, BarState, RunTimeline, SessionTimeline, load_timeline
from ._catalog import Catalog, NotFoundError
from ._index import IndexingError
from ._page import LOOPBACK_HOSTS
from ._report import build_report, stream_report, write_report

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = [
    "LOOPBACK_HOSTS",
    "Bar",
    "BarState",
    "Catalog",
    "IndexingError",
    "NotFoundError",
    "RunStats",
    "RunTimeline",
    "SessionStats",
    "SessionTimeline",
    "build_report",
    "create_app",
    "load_timeline",
    "session_stats",
    "stream_report",
    "write_report",
]


def create_app(
    root: str | os.PathLike[str],
    *,
    allowed_hosts: tuple[str, ...] | None = LOOPBACK_HOSTS,
    catalog: Catalog | None = None,
    problems: Callable[[], Iterable[str]] | None = None,
) -> Starlette:
    """The read-only viewer of a folder of session files, as an ASGI application.

    The folder is indexed in the background from the start: the application
    answers at once, and its session list fills in newest first.

    Args:
        root: A folder of session files (searched recursively), or one file.
        allowed_hosts: ``Host`` headers to answer (the loopback names by
            default, against DNS rebinding); ``None`` answers any.
        catalog: An existing :class:`Catalog` of ``root`` to serve (closing it
            is then the caller's).
        problems: Called for every page: problems to show on it as text, one
            line each (``loopscribe serve URL`` passes its store copy's).

    Returns:
        A Starlette application; serve it with ``uvicorn`` (``loopscribe serve``
        does).

    Raises:
        ModuleNotFoundError: The web framework is not installed; the message
            says ``pip install 'loopscribe[serve]'``.
        NotFoundError: ``root`` does not exist.
    """
    try:
        from ._app import create_app as create
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            f"the loopscribe web viewer needs {exc.name}: pip install 'loopscribe[serve]'",
            name=exc.name,
        ) from exc
    return create(root, allowed_hosts=allowed_hosts, catalog=catalog, problems=problems)
