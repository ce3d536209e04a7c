"""The Starlette application: routes, sessions, rendering, and how the service's
errors become pages."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from sdk.errors import (
    UnauthenticatedError,
    WeftError,
)
from webui import actions, auth, cluster, runs
from webui.config import UiConfig
from webui.context import HERE, Ui, http_status, is_htmx, session_of, status_name, ui_of
from webui.segments import request_path, segment
from webui.sessions import COOKIE

_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    # No inline script anywhere; the timeline's SVG uses style attributes.
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; "
    "form-action 'self'; base-uri 'none'",
}


log = logging.getLogger("weft.ui")


def _same_origin(request: Request) -> bool:
    """A POST comes from this site's own pages: its Origin (or, lacking one, its
    Referer) is this site. Neither (not a browser's form): the CSRF token decides."""
    origin = request.headers.get("origin")
    if origin is None:
        referer = request.headers.get("referer")
        if referer is None:
            return True
        try:
            parts = urlsplit(referer)
        except ValueError:  # `http://[::1`: no origin at all, so not this one
            return False
        origin = f"{parts.scheme}://{parts.netloc}"
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    return origin.lower() == own.lower()


def _secure(response: Response, *, static: bool = False) -> Response:
    for name, value in _HEADERS.items():
        response.headers.setdefault(name, value)
    if not static:
        response.headers.setdefault("Cache-Control", "no-store")
    return response


async def _sessions(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    ui = ui_of(request)
    if request.url.path.startswith("/static/"):
        return _secure(await call_next(request), static=True)  # no session for a file
    if request.method == "POST" and not _same_origin(request):
        return _secure(
            PlainTextResponse("Refused: this form was not sent from this site.", status_code=403)
        )
    # A page's own polling (htmx GETs) is not its person being there: it does not
    # keep a session from going idle.
    polling = request.method == "GET" and is_htmx(request)
    cookie = request.cookies.get(COOKIE)
    session = ui.sessions.get(cookie, touch=not polling)
    if session is None:
        # An anonymous session pushed out (by anyone's cookie-less requests) comes
        # back under its id, its CSRF token unchanged; a login does not.
        session = ui.sessions.revive(cookie) or ui.sessions.new()
    given = cookie if session.sid == cookie else None
    request.state.session = session
    request.state.leases = []
    try:
        response = await call_next(request)
    except Exception as exc:
        log.exception("weft ui: %s %s failed", request.method, request.url.path)
        response = _failure(request, "INTERNAL", f"the UI failed: {type(exc).__name__}", 500)
    finally:
        # Synchronous: a cancelled request still releases every lease (the closes
        # of retired clients run in tasks of their own).
        for lease in request.state.leases:
            ui.clients.release(lease)
    current = session_of(request)  # login and logout rotate it
    if current.sid != given:
        response.set_cookie(
            COOKIE,
            current.sid,
            httponly=True,
            samesite="strict",
            secure=ui.config.https,
            path="/",
        )
    return _secure(response)


# The live parts htmx refreshes, by id: the element an error answer must be, so
# that it lands where the part was and keeps trying.
_LIVE_TAGS = {"run-status": "span", "live": "tr", "timeline": "div"}


def _failure(request: Request, code: str, message: str, status: int) -> Response:
    """An error page, or for htmx a fragment: a live part's own element that tries
    again later (2, 4, 8… up to 60 s), anything else a message."""
    ui = ui_of(request)
    if is_htmx(request):
        target = request.headers.get("HX-Target", "")
        tag = _LIVE_TAGS.get(target) if request.method == "GET" else None
        try:
            tries = max(0, min(int(request.query_params.get("retry", "0")), 10))
        except ValueError:
            tries = 0
        query = urlencode({**request.query_params, "retry": tries + 1})
        return ui.render(
            request,
            "_error.html",
            # htmx swaps only 2xx answers: the message is still an answer to show.
            status=200,
            code=code,
            message=message,
            tag=tag,
            target=target,
            retry_url=f"{request_path(request)}?{query}",
            delay=min(60, 2 ** (tries + 1)),
        )
    return ui.render(
        request,
        "error.html",
        status=status,
        code=code,
        message=message,
        namespace=request.path_params.get("ns", ui.config.namespace),
    )


async def _weft_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, WeftError)
    if isinstance(exc, UnauthenticatedError):
        if is_htmx(request):
            return Response("", status_code=401, headers={"HX-Redirect": "/login"})
        session_of(request).flash.append(("error", f"UNAUTHENTICATED: {exc.message}"))
        here = request_path(request) + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse("/login?" + urlencode({"next": here}), status_code=303)
    return _failure(request, status_name(exc), exc.message, http_status(exc))


def _bounded(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[..., Any]:
    """`endpoint` with its work (its calls to the service) bounded by the
    configured `rpc_timeout`: past it, a one-line 504 page."""

    @functools.wraps(endpoint)
    async def bounded(request: Request) -> Response:
        limit = ui_of(request).config.rpc_timeout.total_seconds()
        try:
            async with asyncio.timeout(limit):
                return await endpoint(request)
        except TimeoutError:
            return _failure(
                request,
                "DEADLINE_EXCEEDED",
                f"the service did not answer within {limit:g} s",
                504,
            )

    return bounded


async def _index(request: Request) -> Response:
    ns = ui_of(request).config.namespace
    return RedirectResponse(f"/namespaces/{segment(ns)}/runs", status_code=303)


def create_app(config: UiConfig) -> Starlette:
    ui = Ui(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await ui.clients.close()

    # A workflow id may hold "/" (sent as %2F, which the server decodes): it is
    # matched as a path, the run id as the segment after it, the page's own routes
    # before the run's. Names are written and read by `segments` (a name of dots).
    run = "/namespaces/{ns:name}/runs/{wid:namepath}/{rid:name}"
    routes = [
        Route("/", _index),
        Route("/login", auth.login_page, methods=["GET"]),
        Route("/login", auth.login, methods=["POST"]),
        Route("/logout", auth.logout, methods=["POST"]),
        Route("/namespaces/{ns:name}/runs", runs.runs_page),
        Route("/namespaces/{ns:name}/workflows", runs.find_run),
        Route("/namespaces/{ns:name}/workflows/{wid:namepath}", runs.current_run),
        Route(run + "/history", runs.history_page),
        Route(run + "/history/after/{after:int}", runs.history_after),
        Route(run + "/timeline", runs.timeline_page),
        Route(run + "/timeline/svg", runs.timeline_fragment),
        Route(run + "/steps", runs.steps_page),
        Route(run + "/status", runs.run_status),
        Route(run + "/actions/{action}", actions.run_action, methods=["POST"]),
        Route(run, runs.run_page),
        Route("/namespaces/{ns:name}/locks", cluster.locks_page),
        Route("/namespaces/{ns:name}/locks/release", actions.release_lock, methods=["POST"]),
        Route("/namespaces/{ns:name}/task-lists", cluster.task_lists_page),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    routes = [
        Route(r.path, _bounded(r.endpoint), methods=r.methods) if isinstance(r, Route) else r
        for r in routes
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            # DNS rebinding: a page elsewhere whose name now points here names
            # its own host, not ours.
            Middleware(TrustedHostMiddleware, allowed_hosts=config.hosts()),
            Middleware(BaseHTTPMiddleware, dispatch=_sessions),
        ],
        exception_handlers={WeftError: _weft_error},
        lifespan=lifespan,
    )
    app.state.ui = ui
    return app
