"""The Starlette application: routes, sessions, rendering, and how the service's
errors become pages."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from sdk.client import AsyncClient
from sdk.errors import NotFoundError, UnauthenticatedError, UnavailableError, WeftError
from webui import format as fmt
from webui.config import UiConfig
from webui.service import Clients, HistoryCache
from webui.sessions import COOKIE, Session, SessionStore

HERE = Path(__file__).resolve().parent

_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    # No inline script anywhere; the timeline's SVG uses style attributes.
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; "
    "form-action 'self'; base-uri 'none'",
}


class Ui:
    """What every view needs, in `request.app.state.ui`."""

    def __init__(self, config: UiConfig) -> None:
        self.config = config
        self.sessions = SessionStore(
            idle_seconds=config.session_idle.total_seconds(), max_sessions=config.max_sessions
        )
        self.clients = Clients(config)
        self.cache = HistoryCache(
            max_runs=config.history_cache_runs, max_events=config.history_cache_events
        )
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.filters.update(fmt.FILTERS)
        env.globals["q"] = lambda text: quote(str(text), safe="")
        self.templates = Jinja2Templates(env=env)

    async def client(self, request: Request, namespace: str) -> AsyncClient:
        """The client of this visitor: their key when logged in, else the UI's own."""
        key = session_of(request).api_key or self.config.api_key
        return await self.clients.get(key, namespace)

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        session = session_of(request)
        context.setdefault("namespace", self.config.namespace)
        base = {
            "csrf": session.csrf,
            "who": session.key_id,
            "logged_in": session.api_key is not None,
            "flash": session.take_flash() if not is_htmx(request) else [],
            "now": datetime.now(UTC),
            "path": request.url.path,
        }
        return self.templates.TemplateResponse(
            request, name, {**base, **context}, status_code=status
        )


def ui_of(request: Request) -> Ui:
    ui: Ui = request.app.state.ui
    return ui


def session_of(request: Request) -> Session:
    session: Session = request.state.session
    return session


def is_htmx(request: Request) -> bool:
    return request.headers.get("HX-Request") == "true"


def status_name(exc: WeftError) -> str:
    return exc.status.name if exc.status is not None else "UNKNOWN"


async def _sessions(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    ui = ui_of(request)
    session = ui.sessions.get(request.cookies.get(COOKIE))
    given = session.sid if session else None
    if session is None:
        session = ui.sessions.new()
    request.state.session = session
    response = await call_next(request)
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
    for name, value in _HEADERS.items():
        response.headers.setdefault(name, value)
    if not request.url.path.startswith("/static/"):
        response.headers.setdefault("Cache-Control", "no-store")
    return response


async def _weft_error(request: Request, exc: Exception) -> Response:
    ui = ui_of(request)
    assert isinstance(exc, WeftError)
    if isinstance(exc, UnauthenticatedError):
        if is_htmx(request):
            return Response("", status_code=401, headers={"HX-Redirect": "/login"})
        session_of(request).flash.append(("error", f"UNAUTHENTICATED: {exc.message}"))
        return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
    status = (
        404 if isinstance(exc, NotFoundError) else 503 if isinstance(exc, UnavailableError) else 502
    )
    if is_htmx(request):
        # A live fragment that fails stops polling; the message replaces it.
        return ui.render(
            request, "_error.html", status=200, code=status_name(exc), message=exc.message
        )
    return ui.render(
        request,
        "error.html",
        status=status,
        code=status_name(exc),
        message=exc.message,
        namespace=request.path_params.get("ns", ui.config.namespace),
    )


async def _index(request: Request) -> Response:
    ns = ui_of(request).config.namespace
    return RedirectResponse(f"/namespaces/{quote(ns, safe='')}/runs", status_code=303)


def create_app(config: UiConfig) -> Starlette:
    from webui import actions, auth, cluster, runs

    ui = Ui(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await ui.clients.close()

    # A workflow id may hold "/" (sent as %2F, which the server decodes): it is
    # matched as a path, the run id as the segment after it, the page's own routes
    # before the run's.
    run = "/namespaces/{ns}/runs/{wid:path}/{rid}"
    routes = [
        Route("/", _index),
        Route("/login", auth.login_page, methods=["GET"]),
        Route("/login", auth.login, methods=["POST"]),
        Route("/logout", auth.logout, methods=["POST"]),
        Route("/namespaces/{ns}/runs", runs.runs_page),
        Route("/namespaces/{ns}/workflows/{wid:path}", runs.current_run),
        Route(run + "/history", runs.history_page),
        Route(run + "/history/after/{after:int}", runs.history_after),
        Route(run + "/timeline", runs.timeline_page),
        Route(run + "/timeline/svg", runs.timeline_fragment),
        Route(run + "/steps", runs.steps_page),
        Route(run + "/status", runs.run_status),
        Route(run + "/actions/{action}", actions.run_action, methods=["POST"]),
        Route(run, runs.run_page),
        Route("/namespaces/{ns}/locks", cluster.locks_page),
        Route("/namespaces/{ns}/locks/release", actions.release_lock, methods=["POST"]),
        Route("/namespaces/{ns}/task-lists", cluster.task_lists_page),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=_sessions)],
        exception_handlers={WeftError: _weft_error},
        lifespan=lifespan,
    )
    app.state.ui = ui
    return app
