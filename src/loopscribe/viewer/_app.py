"""The read-only web viewer: a Starlette application over a :class:`Catalog`.

Pages (HTML, built in the browser from embedded JSON):

==========================================  ============================================
``/``                                       the sessions, newest first
``/session/{id}``                           a session and its runs
``/session/{id}/run/{run}?span=HEX``        a run's timeline; ``span`` (or ``seq``, or
                                            ``execution`` + ``attempt``) selects a bar
``/session/{id}/record/{seq}``              one record, its body clipped
``/session/{id}/record/{seq}/raw``          the record's line, exactly as in the file
``/trace/{trace_id}``                       redirects to the run (or lists the runs)
``/trace/{trace_id}/span/{span_id}``        redirects to the run with that bar selected
==========================================  ============================================

JSON for scripts and for the page's own requests: ``/api/sessions``,
``/api/session/{id}``, ``/api/session/{id}/run/{run}`` (the timeline, never a
body), ``/api/session/{id}/span/{span}`` (a bar's records, clipped),
``/api/session/{id}/record/{seq}``, ``/api/trace/{trace_id}`` and
``/api/trace/{trace_id}/span/{span_id}``. A ``model_request`` recorded
without messages (an imported transcript's) carries ``context``: the
committed messages that formed the call, derived from the conversation
(see :func:`~loopscribe.viewer._context.derived_context`).

An unknown ID is a 404 whose message says what was searched and where to
look instead. Nothing here writes to a session file.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import events as ev
from .._errors import FormatError
from ..otel._genai import MessageReferenceError, resolve_reference
from ._context import derived_context, has_messages
from ._conversation import CONVERSATION_PAGE, conversation
from ._page import LOOPBACK_HOSTS, render
from ._store import (
    Catalog,
    NotFoundError,
    parse_id,
    run_summary_json,
    summary_json,
)
from ._timeline import Bar, RunTimeline, SessionTimeline

__all__ = ["LOOPBACK_HOSTS", "create_app"]

_SPAN_PAGE = 200
"""Records a bar's request returns at most; more are paged with ``offset``."""
ROW_PAGE = 300
"""Timeline rows a run page loads at once; the rest are paged (``?offset=``)."""
_LIST_WAIT_SECONDS = 0.25
"""How long the session list waits for a file another request is indexing."""

_HEADERS = {
    # The page's script and stylesheet come from /static; the embedded JSON is
    # data, not script, so no inline script needs allowing.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class _SecurityHeaders:
    """Adds the headers above to every response (a pure ASGI middleware)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                for key, value in _HEADERS.items():
                    if key.lower().encode() not in present:
                        headers.append((key.lower().encode(), value.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


def create_app(
    root: str | os.PathLike[str],
    *,
    allowed_hosts: tuple[str, ...] | None = LOOPBACK_HOSTS,
    catalog: Catalog | None = None,
) -> Starlette:
    """The viewer application for a folder of session files.

    Args:
        root: The folder (searched recursively), or one session file.
        allowed_hosts: ``Host`` headers to answer; the loopback names by
            default, which stops another web site from reading local sessions
            through DNS rebinding. ``None`` answers any host.
        catalog: An existing index of ``root`` to share.

    Returns:
        A Starlette (ASGI) application; serve it with ``uvicorn``.
    """
    cat = catalog or Catalog(root)
    views = _Views(cat)
    routes = [
        Route("/", views.home),
        Route("/session/{session_id}", views.session),
        Route("/session/{session_id}/run/{run_id}", views.run),
        Route("/session/{session_id}/record/{seq:int}", views.record),
        Route("/session/{session_id}/record/{seq:int}/raw", views.raw),
        Route("/trace/{trace_id}", views.trace),
        Route("/trace/{trace_id}/span/{span_id}", views.span),
        Route("/api/sessions", views.api_sessions),
        Route("/api/session/{session_id}", views.api_session),
        Route("/api/session/{session_id}/run/{run_id}", views.api_run),
        Route("/api/session/{session_id}/conversation", views.api_conversation),
        Route("/api/session/{session_id}/span/{span_id}", views.api_span_records),
        Route("/api/session/{session_id}/record/{seq:int}", views.api_record),
        Route("/api/trace/{trace_id}", views.api_trace),
        Route("/api/trace/{trace_id}/span/{span_id}", views.api_span),
        Mount("/static", StaticFiles(directory=Path(__file__).with_name("static")), name="static"),
    ]
    middleware = [Middleware(_SecurityHeaders)]
    if allowed_hosts is not None:
        middleware.insert(0, Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={
            NotFoundError: _not_found,
            FormatError: _damaged,
            HTTPException: _http_error,
            UnicodeError: _bad_request,
            ValueError: _bad_request,
        },
    )
    app.state.catalog = cat
    return app


# -- errors -----------------------------------------------------------------------


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def _error(request: Request, status: int, message: str) -> Response:
    if _wants_json(request):
        return JSONResponse({"error": message, "status": status}, status)
    data = {"view": "error", "status": status, "message": message}
    title = "not found" if status == 404 else "error"
    return HTMLResponse(render(f"{title} · loopscribe", data, inline=False), status)


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(request, 404, str(exc))


async def _damaged(request: Request, exc: Exception) -> Response:
    # The file is at fault, not the server: a client error that names it.
    return _error(request, 422, str(exc))


async def _bad_request(request: Request, exc: Exception) -> Response:
    # An id or parameter that no session could hold (odd characters, bad digits).
    return _error(request, 400, f"bad request for {request.url.path}: {type(exc).__name__}")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = (
            f"nothing at {request.url.path}; the viewer has / (sessions), /session/ID, "
            "/session/ID/run/RUN, /session/ID/record/SEQ, /trace/TRACE_ID and "
            "/trace/TRACE_ID/span/SPAN_ID"
        )
        return _error(request, 404, message)
    return _error(request, exc.status_code, str(exc.detail))


# -- the views ----------------------------------------------------------------------


def _page(title: str, data: dict[str, Any]) -> HTMLResponse:
    return HTMLResponse(render(f"{title} · loopscribe", {"mode": "server", **data}, inline=False))


def run_url(session_id: str, run_id: str, span: str | None = None) -> str:
    """The run page, with a bar selected when ``span`` is given."""
    url = f"/session/{quote(session_id, safe='')}/run/{quote(run_id, safe='')}"
    return f"{url}?{urlencode({'span': span})}" if span else url


def _bar_view(run: RunTimeline, bar: Bar | None) -> dict[str, Any]:
    if bar is None:
        return {"span_id": f"{run.span_id:016x}", "kind": "run", "run_id": run.run_id}
    ex = bar.execution
    return {
        "span_id": f"{bar.span_id:016x}",
        "kind": ex.kind,
        "execution_id": ex.id,
        "attempt": ex.attempt,
        "name": bar.name,
        "state": bar.state,
        "seqs": list(bar.seqs),
    }


_View = Callable[["_Views", Request], Response]


def _serialized(view: _View) -> _View:
    """Run a view in a reading scope: the session it reads must not grow while it is read.

    Only that session's file is held; requests about other sessions run at
    the same time (each view runs in Starlette's thread pool).
    """

    @functools.wraps(view)
    def locked(self: _Views, request: Request) -> Response:
        with self.catalog.reading():
            return view(self, request)

    return locked


class _Views:
    """The endpoints; each runs in Starlette's thread pool, concurrently."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    # -- helpers ---------------------------------------------------------------------

    def _session_data(self, timeline: SessionTimeline) -> dict[str, Any]:
        return summary_json(self.catalog.summary(timeline), timeline)

    def _sessions_data(self, text: str | None = None) -> dict[str, Any]:
        pairs = self.catalog.sessions(wait=_LIST_WAIT_SECONDS)
        if text:
            found = self.catalog.search_text(text, [t for t, _ in pairs])
            pairs = [(t, s) for t, s in pairs if t.path in found]
        return {
            "root": str(self.catalog.root),
            "text": text,
            "sessions": [summary_json(s, t) for t, s in pairs],
            "skipped": [{"file": str(p), "error": e} for p, e in self.catalog.skipped.items()],
            "indexing": [str(p) for p in self.catalog.indexing],
        }

    def _run_data(
        self, timeline: SessionTimeline, run: RunTimeline, request: Request
    ) -> dict[str, Any]:
        q = request.query_params
        collapsed = frozenset(c for c in q.get("collapsed", "").split(",") if c)
        select = q.get("span")
        return {
            "session": self._session_data(timeline),
            "run": run.to_json(
                offset=_int_param(request, "offset", 0),
                limit=min(_int_param(request, "limit", ROW_PAGE), 5_000) or ROW_PAGE,
                collapsed=collapsed,
                select=parse_id(select, 64, "span id") if select else None,
            ),
            "runs": [r.run_id for r in timeline.iter_runs()],
        }

    def _record(self, timeline: SessionTimeline, seq: int) -> dict[str, Any]:
        """A record as the pages show it, its body clipped.

        A model call recorded without messages (an imported transcript's) also
        gets ``context``: the committed messages that formed it (see
        :func:`derived_context`); that context's cuts join the record's.
        """
        record = self.catalog.record(timeline, seq)
        if record["type"] == ev.MODEL_REQUEST and not has_messages(record["data"]):
            record["context"] = context = derived_context(timeline, seq)
            record["cuts"] = [*record["cuts"], *context.pop("cuts")]
        return record

    @staticmethod
    def _select(run: RunTimeline, request: Request) -> str | None:
        """The bar a run page opens with: ``span``, ``seq``, or ``execution`` + ``attempt``."""
        q = request.query_params
        if "span" in q:
            span = parse_id(q["span"], 64, "span id")
            if span != run.span_id and run.bar_of_span(span) is None:
                raise NotFoundError(
                    f"run {run.run_id} has no span {q['span']}; its timeline is at "
                    f"{run_url(run.session_id, run.run_id)}"
                )
            return f"{span:016x}"
        if "execution" in q:
            try:
                attempt = _ascii_int(q.get("attempt", "1"))
            except ValueError:
                raise NotFoundError(f"attempt {q['attempt']!r} is not a number") from None
            bar = run.bars.get((q["execution"], attempt))
            if bar is None:
                raise NotFoundError(
                    f"run {run.run_id} has no execution {q['execution']!r} attempt {attempt}; "
                    f"its timeline is at {run_url(run.session_id, run.run_id)}"
                )
            return f"{bar.span_id:016x}"
        if "seq" in q and q["seq"].isascii() and q["seq"].isdigit():
            seq = int(q["seq"])
            for bar in run.bars.values():
                if seq in bar.seqs:
                    return f"{bar.span_id:016x}"
        return None

    # -- pages -------------------------------------------------------------------------

    @_serialized
    def home(self, request: Request) -> Response:
        return _page("sessions", {"view": "sessions", **self._sessions_data()})

    @_serialized
    def session(self, request: Request) -> Response:
        timeline = self.catalog.session(request.path_params["session_id"])
        data = self._session_data(timeline)
        runs = [run_summary_json(r) for r in timeline.iter_runs()]
        return _page(
            data["title"] or f"session {timeline.session_id[:12]}",
            {
                "view": "session",
                "session": data,
                "runs": runs,
                "conversation": conversation(timeline),
            },
        )

    @_serialized
    def run(self, request: Request) -> Response:
        p = request.path_params
        timeline, run = self.catalog.run(p["session_id"], p["run_id"])
        select = self._select(run, request)
        data = self._run_data(timeline, run, request)
        if select is not None and select != data["run"]["span_id"]:
            # ?seq= or ?execution= chose the bar: load the page of rows that holds it.
            data["run"] = run.to_json(limit=ROW_PAGE, select=int(select, 16))
        data["select"] = select
        title = f"{run.agent or 'run'} {run.run_id[:8]}"
        return _page(title, {"view": "run", **data})

    @_serialized
    def record(self, request: Request) -> Response:
        p = request.path_params
        timeline = self.catalog.session(p["session_id"])
        record = self._record(timeline, p["seq"])
        run, bar = timeline.run_of_seq(p["seq"])
        return _page(
            f"record {p['seq']} · {record['type']}",
            {
                "view": "record",
                "session": self._session_data(timeline),
                "record": record,
                "run": None if run is None else run.run_id,
                "span": None if run is None else _bar_view(run, bar),
            },
        )

    @_serialized
    def raw(self, request: Request) -> Response:
        p = request.path_params
        timeline = self.catalog.session(p["session_id"])
        size, chunks = self.catalog.raw(timeline, p["seq"])
        return StreamingResponse(
            chunks,
            media_type="application/json; charset=utf-8",
            headers={
                "Content-Length": str(size),
                "Content-Disposition": (
                    f'inline; filename="{_safe_name(timeline.session_id)}-{p["seq"]}.json"'
                ),
            },
        )

    @_serialized
    def trace(self, request: Request) -> Response:
        trace = parse_id(request.path_params["trace_id"], 128, "trace id")
        runs = self.catalog.trace(trace)
        if len(runs) == 1:
            timeline, run = runs[0]
            return RedirectResponse(run_url(timeline.session_id, run.run_id), 302)
        return _page(
            f"trace {trace:032x}",
            {
                "view": "trace",
                "trace_id": f"{trace:032x}",
                "runs": [
                    {"session_id": t.session_id, "title": t.title, **run_summary_json(r)}
                    for t, r in runs
                ],
            },
        )

    @_serialized
    def span(self, request: Request) -> Response:
        p = request.path_params
        trace = parse_id(p["trace_id"], 128, "trace id")
        span = parse_id(p["span_id"], 64, "span id")
        timeline, run, _bar = self.catalog.span(trace, span)
        return RedirectResponse(run_url(timeline.session_id, run.run_id, f"{span:016x}"), 302)

    # -- JSON ------------------------------------------------------------------------------

    @_serialized
    def api_sessions(self, request: Request) -> Response:
        return JSONResponse(self._sessions_data(request.query_params.get("text") or None))

    @_serialized
    def api_conversation(self, request: Request) -> Response:
        timeline = self.catalog.session(request.path_params["session_id"])
        start = _int_param(request, "from", 0)
        limit = min(_int_param(request, "limit", CONVERSATION_PAGE), 1_000) or CONVERSATION_PAGE
        return JSONResponse(
            {"session_id": timeline.session_id, **conversation(timeline, start=start, limit=limit)}
        )

    @_serialized
    def api_session(self, request: Request) -> Response:
        timeline = self.catalog.session(request.path_params["session_id"])
        return JSONResponse(
            {
                "session": self._session_data(timeline),
                "runs": [run_summary_json(r) for r in timeline.iter_runs()],
                "session_records": list(timeline.session_records),
            }
        )

    @_serialized
    def api_run(self, request: Request) -> Response:
        p = request.path_params
        timeline, run = self.catalog.run(p["session_id"], p["run_id"])
        return JSONResponse(self._run_data(timeline, run, request))

    @_serialized
    def api_span_records(self, request: Request) -> Response:
        p = request.path_params
        timeline = self.catalog.session(p["session_id"])
        span = parse_id(p["span_id"], 64, "span id")
        for run in timeline.iter_runs():
            bar = run.bar_of_span(span)
            if bar is not None or run.span_id == span:
                seqs = run.records if bar is None else bar.seqs
                break
        else:
            raise NotFoundError(
                f"session {timeline.session_id} has no span {p['span_id']}; "
                f"its runs are listed at /session/{timeline.session_id}"
            )
        offset = _int_param(request, "offset", 0)
        page = seqs[offset : offset + _SPAN_PAGE]
        return JSONResponse(
            {
                **_bar_view(run, bar),
                "total": len(seqs),
                "offset": offset,
                "records": [self._record(timeline, seq) for seq in page],
            }
        )

    @_serialized
    def api_record(self, request: Request) -> Response:
        p = request.path_params
        timeline = self.catalog.session(p["session_id"])
        if request.query_params.get("format") == "genai":
            return JSONResponse(genai_record(timeline, p["seq"]))
        return JSONResponse(self._record(timeline, p["seq"]))

    @_serialized
    def api_trace(self, request: Request) -> Response:
        trace = parse_id(request.path_params["trace_id"], 128, "trace id")
        return JSONResponse(
            {
                "trace_id": f"{trace:032x}",
                "runs": [
                    {
                        "session_id": t.session_id,
                        "url": run_url(t.session_id, r.run_id),
                        **run_summary_json(r),
                    }
                    for t, r in self.catalog.trace(trace)
                ],
            }
        )

    @_serialized
    def api_span(self, request: Request) -> Response:
        p = request.path_params
        trace = parse_id(p["trace_id"], 128, "trace id")
        span = parse_id(p["span_id"], 64, "span id")
        timeline, run, bar = self.catalog.span(trace, span)
        return JSONResponse(
            {
                "session_id": timeline.session_id,
                "run_id": run.run_id,
                "trace_id": f"{trace:032x}",
                "file": str(timeline.path),
                "url": run_url(timeline.session_id, run.run_id, f"{span:016x}"),
                **_bar_view(run, bar),
            }
        )


def _ascii_int(text: str) -> int:
    """``int(text)`` for ASCII digits only (``int`` also takes other scripts' digits)."""
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"not a number: {text!r}")
    return int(text)


def _safe_name(text: str) -> str:
    """``text`` fit for a header's quoted filename: no quote, CR/LF or non-Latin-1."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:128]


def _int_param(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    if value is None:
        return default
    if not (value.isascii() and value.isdigit()):
        raise HTTPException(400, f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def genai_record(timeline: SessionTimeline, seq: int) -> dict[str, Any]:
    """A model request's or response's messages in the GenAI conventions' JSON schema."""
    try:
        return resolve_reference(timeline.path, seq)
    except MessageReferenceError as exc:
        raise HTTPException(404, str(exc)) from None
