"""The read-only web viewer: a Starlette application over a :class:`Catalog`.

Pages (HTML, built in the browser from embedded JSON):

==========================================  ============================================
``/?q=&source=&status=&errors=1&cursor=``   the sessions, newest first, a page at a time
``/session/{id}``                           a session and its runs
``/session/{id}/run/{run}?span=HEX``        a run's timeline; ``span`` (or ``seq``, or
                                            ``execution`` + ``attempt``) selects a bar
``/session/{id}/record/{seq}``              one record, its body clipped
``/session/{id}/record/{seq}/raw``          the record's line, exactly as in the file
``/trace/{trace_id}``                       redirects to the run (or lists the runs)
``/trace/{trace_id}/span/{span_id}``        redirects to the run with that bar selected
==========================================  ============================================

JSON for scripts and for the page's own requests: ``/api/sessions`` (a page
of the list: ``?limit=`` rows after ``?cursor=``, the search ``?q=`` and the
filters applied by the server; ``next`` is the cursor of the next page),
``/api/session/{id}``, ``/api/session/{id}/run/{run}`` (the timeline, never a
body), ``/api/session/{id}/span/{span}`` (a bar's records, clipped),
``/api/session/{id}/record/{seq}``, ``/api/trace/{trace_id}`` and
``/api/trace/{trace_id}/span/{span_id}``. A ``model_request`` recorded
without messages (an imported transcript's) carries ``context``: the
committed messages that formed the call, derived from the conversation
(see :func:`~loopscribe.viewer._context.derived_context`).

An unknown ID is a 404 whose message says what was searched and where to
look instead; while the folder is still being indexed, a lookup that needs
files not read yet is a 503 that says how far indexing got. Every page
shows the problems the ``problems`` callable of :func:`create_app` reports
(a store's copy that could not be synced, a damaged object), as text.
Nothing here writes to a session file.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import orjson
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
from .._logsafe import scrub
from .._timeline import Bar, RunTimeline, SessionTimeline
from ..otel._genai import MessageReferenceError, resolve_reference
from ._catalog import Catalog, NotFoundError, parse_id, run_summary_json
from ._context import derived_context, has_messages
from ._conversation import CONVERSATION_PAGE, conversation
from ._index import (
    MAX_PAGE_SIZE,
    PAGE_SIZE,
    SKIPPED_LISTED,
    Filters,
    IndexingError,
    decode_cursor,
    shown_path,
    summary_json,
)
from ._page import LOOPBACK_HOSTS, render

__all__ = ["LOOPBACK_HOSTS", "Problems", "create_app", "problem_lines"]

logger = logging.getLogger("loopscribe")

Problems = Callable[[], Iterable[str]]
"""Returns the problems to show on every page now (one line each), e.g. a store's copy's."""

_SPAN_PAGE = 200
"""Records a bar's request returns at most; more are paged with ``offset``."""
ROW_PAGE = 300
"""Timeline rows a run page loads at once; the rest are paged (``?offset=``)."""
PROBLEMS_SHOWN = 20
"""Problems a page shows at most (it says when there are more)."""
_PROBLEM_CHARS = 500
_RETRY_AFTER_SECONDS = 5
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Control characters, and the marks that reorder text, shown as escapes in a problem."""

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


class _Assets(StaticFiles):
    """The page's script modules and stylesheet; a script is always ``text/javascript``.

    A browser runs a module script only when its type is JavaScript's, and
    ``mimetypes`` takes the type from the system's tables, which may say
    otherwise (a Windows registry can map ``.js`` to ``text/plain``).
    """

    def file_response(
        self,
        full_path: str | os.PathLike[str],
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        if os.fspath(full_path).endswith(".js"):
            response.headers["content-type"] = "text/javascript; charset=utf-8"
        return response


def create_app(
    root: str | os.PathLike[str],
    *,
    allowed_hosts: tuple[str, ...] | None = LOOPBACK_HOSTS,
    catalog: Catalog | None = None,
    problems: Problems | None = None,
) -> Starlette:
    """The viewer application for a folder of session files; it begins indexing at once.

    Args:
        root: The folder (searched recursively), or one session file.
        allowed_hosts: ``Host`` headers to answer; the loopback names by
            default, which stops another web site from reading local sessions
            through DNS rebinding. ``None`` answers any host.
        catalog: An existing index of ``root`` to share (the caller closes it).
        problems: Called for every page: the problems to show on it now (a
            store's copy that could not be synced, a damaged object).

    Returns:
        A Starlette (ASGI) application; serve it with ``uvicorn``.
    """
    cat = catalog or Catalog(root)
    cat.start()
    views = _Views(cat, problems)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        if catalog is None:
            cat.close()  # the index this application made stops with it

    routes = [
        Route("/", views.home),
        Route("/session/{session_id}", views.session),
        Route("/session/{session_id}/run/{run_id}", views.run),
        Route("/session/{session_id}/record/{seq:int}", views.record),
        Route("/session/{session_id}/record/{seq:int}/raw", views.raw),
        Route("/trace/{trace_id}", views.trace),
        Route("/trace/{trace_id}/span/{span_id}", views.span),
        Route("/api/sessions", views.api_sessions),
        Route("/api/usage", views.api_usage),
        Route("/api/session/{session_id}", views.api_session),
        Route("/api/session/{session_id}/run/{run_id}", views.api_run),
        Route("/api/session/{session_id}/conversation", views.api_conversation),
        Route("/api/session/{session_id}/span/{span_id}", views.api_span_records),
        Route("/api/session/{session_id}/record/{seq:int}", views.api_record),
        Route("/api/trace/{trace_id}", views.api_trace),
        Route("/api/trace/{trace_id}/span/{span_id}", views.api_span),
        Mount("/static", _Assets(directory=Path(__file__).with_name("static")), name="static"),
    ]
    middleware = [Middleware(_SecurityHeaders)]
    if allowed_hosts is not None:
        middleware.insert(0, Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={
            NotFoundError: _not_found,
            IndexingError: _indexing,
            FormatError: _damaged,
            HTTPException: _http_error,
            UnicodeError: _bad_request,
            ValueError: _bad_request,
        },
    )
    app.state.catalog = cat
    app.state.problems = views.problems
    return app


def problem_lines(problems: Problems | None) -> list[str]:
    """What ``problems`` reports now, fit for a page: at most a few, each one short line.

    Control characters and bidirectional marks become escapes (``\\x1b``),
    credentials in URLs are removed, and a callable that fails is itself
    reported rather than failing the page.
    """
    if problems is None:
        return []
    try:
        items = list(itertools.islice(iter(problems()), PROBLEMS_SHOWN + 1))
    except Exception as exc:  # the page is still shown; the failure is the problem
        logger.warning("the viewer could not get the list of problems", exc_info=True)
        items = [f"the list of problems could not be read ({type(exc).__name__})"]
    lines = [_one_line(str(item)) for item in items[:PROBLEMS_SHOWN]]
    if len(items) > PROBLEMS_SHOWN:
        lines.append(f"more problems than these {PROBLEMS_SHOWN}; the server's log names each")
    return lines


def _one_line(text: str) -> str:
    text = scrub(text).encode("utf-8", "backslashreplace").decode("utf-8")
    text = _UNSAFE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)
    return text if len(text) <= _PROBLEM_CHARS else text[: _PROBLEM_CHARS - 1] + "…"


# -- errors -----------------------------------------------------------------------


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def _error(
    request: Request, status: int, message: str, headers: dict[str, str] | None = None
) -> Response:
    problems: Callable[[], list[str]] = getattr(request.app.state, "problems", list)
    if _wants_json(request):
        body = {"error": message, "status": status, "problems": problems()}
        return JSONResponse(body, status, headers=headers)
    data = {"view": "error", "status": status, "message": message, "problems": problems()}
    title = "not found" if status == 404 else "error"
    return HTMLResponse(render(f"{title} · loopscribe", data, inline=False), status, headers)


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(request, 404, str(exc))


async def _indexing(request: Request, exc: Exception) -> Response:
    # Not an error of the request: the answer exists once indexing reaches it.
    headers = {"Retry-After": str(_RETRY_AFTER_SECONDS)}
    return _error(request, 503, str(exc), headers)


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


def _page(title: str, data: dict[str, Any], problems: list[str]) -> HTMLResponse:
    data = {"mode": "server", **data, "problems": problems}
    return HTMLResponse(render(f"{title} · loopscribe", data, inline=False))


def _query_text(request: Request, name: str) -> str | None:
    value = request.query_params.get(name, "").strip()
    return value or None


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

    def __init__(self, catalog: Catalog, problems: Problems | None = None) -> None:
        self.catalog = catalog
        self._problems = problems

    def problems(self) -> list[str]:
        """The problems every page shows now."""
        return problem_lines(self._problems)

    def _page(self, title: str, data: dict[str, Any]) -> HTMLResponse:
        return _page(title, data, self.problems())

    # -- helpers ---------------------------------------------------------------------

    def _session_data(self, timeline: SessionTimeline) -> dict[str, Any]:
        return summary_json(self.catalog.summary(timeline), timeline)

    def _sessions_data(self, request: Request) -> dict[str, Any]:
        """A page of the session list, as ``/`` embeds it and ``/api/sessions`` sends it."""
        filters = Filters(
            q=_query_text(request, "q"),
            text=_query_text(request, "text"),
            source=_query_text(request, "source"),
            status=_query_text(request, "status"),
            errors=request.query_params.get("errors", "") in ("1", "true", "on"),
        )
        token = _query_text(request, "cursor")
        try:
            cursor = decode_cursor(token) if token else None
        except ValueError as exc:
            raise HTTPException(400, f"{exc}; the list starts at /") from None
        limit = min(_int_param(request, "limit", PAGE_SIZE), MAX_PAGE_SIZE) or PAGE_SIZE
        page = self.catalog.page(filters, cursor=cursor, limit=limit)
        skipped, skipped_count = self.catalog.index.skipped(SKIPPED_LISTED)
        return {
            "root": shown_path(self.catalog.root),
            "q": filters.q,
            "text": filters.text,
            "source": filters.source,
            "status": filters.status,
            "errors": filters.errors,
            "cursor": token,
            "limit": limit,
            **page,
            "skipped": [
                {"file": shown_path(p), "error": shown_path(e)} for p, e in skipped.items()
            ],
            "skipped_count": skipped_count,
            "indexing": self.catalog.indexing,
            "problems": self.problems(),
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
        return self._page("sessions", {"view": "sessions", **self._sessions_data(request)})

    @_serialized
    def session(self, request: Request) -> Response:
        timeline = self.catalog.session(request.path_params["session_id"])
        data = self._session_data(timeline)
        runs = [run_summary_json(r) for r in timeline.iter_runs()]
        return self._page(
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
        return self._page(title, {"view": "run", **data})

    @_serialized
    def record(self, request: Request) -> Response:
        p = request.path_params
        timeline = self.catalog.session(p["session_id"])
        record = self._record(timeline, p["seq"])
        run, bar = timeline.run_of_seq(p["seq"])
        return self._page(
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
        return self._page(
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
        # orjson: the rows are kept as JSON already, and go out as they are.
        return Response(orjson.dumps(self._sessions_data(request)), media_type="application/json")

    @_serialized
    def api_usage(self, request: Request) -> Response:
        # Tokens and cost per day and model over the indexed sessions (the usage chart).
        usage = self.catalog.index.usage()
        usage["indexing"] = self.catalog.indexing
        return Response(orjson.dumps(usage), media_type="application/json")

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
