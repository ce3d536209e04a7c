"""What every page of the web UI needs: the `Ui` (settings, sessions, clients,
the history cache, templates) and the request's view of it. The pages import
this; `app.py` imports the pages and wires them into routes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from sdk.addresses import is_loopback
from sdk.client import AsyncClient
from sdk.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
    WeftError,
)
from webui import format as fmt
from webui.config import UiConfig
from webui.segments import segment
from webui.service import Clients, HistoryCache
from webui.sessions import Session, SessionStore

HERE = Path(__file__).resolve().parent


class Ui:
    """What every view needs, in `request.app.state.ui`."""

    def __init__(self, config: UiConfig) -> None:
        self.config = config
        self.sessions = SessionStore(
            idle_seconds=config.session_idle.total_seconds(),
            max_sessions=config.max_sessions,
            max_anonymous=config.max_anonymous_sessions,
        )
        self.clients = Clients(config)
        self.cache = HistoryCache(
            max_runs=config.history_cache_runs,
            max_bytes=config.history_cache_bytes,
            max_run_bytes=config.history_cache_run_bytes,
        )
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.filters.update(fmt.FILTERS)
        env.globals["q"] = lambda text: quote(str(text), safe="")  # a query or fragment
        env.globals["seg"] = lambda text: segment(str(text))  # a path segment
        self.templates = Jinja2Templates(env=env)

    async def client(self, request: Request, namespace: str) -> AsyncClient:
        """The client of this visitor: their key when logged in, else the UI's own
        for a request straight from this machine (`weft ui` refuses to listen
        elsewhere with it), else none (the service asks them to log in)."""
        key = session_of(request).api_key
        if key is None and self.config.api_key and from_this_machine(request):
            key = self.config.api_key
        return self.client_for(request, key, namespace)

    def client_for(self, request: Request, api_key: str | None, namespace: str) -> AsyncClient:
        """The client of `api_key`, in use until this request has been answered."""
        lease = self.clients.lease(api_key, namespace)
        request.state.leases.append(lease)
        return lease.client

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


PROXY_HEADERS = (
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
)


def from_this_machine(request: Request) -> bool:
    """The request's peer is loopback and it names no proxy: a reverse proxy on
    this host (nginx `proxy_pass http://127.0.0.1:7401`) relays other people's
    requests from loopback, so anything forwarded is not the UI's own person's."""
    peer = request.client.host if request.client else ""
    if not is_loopback(f"[{peer}]:0" if ":" in peer else f"{peer}:0"):
        return False
    return not any(name in request.headers for name in PROXY_HEADERS)


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


def http_status(exc: WeftError) -> int:
    """The HTTP status of a page the service refused."""
    for kind, status in (
        (InvalidArgumentError, 400),
        (PermissionDeniedError, 403),
        (NotFoundError, 404),
        (UnavailableError, 503),
    ):
        if isinstance(exc, kind):
            return status
    return 502
