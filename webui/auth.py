"""Login with one's own API key, logout, and the CSRF check of every form.

The key stays in this process (the session's), never in the browser: the cookie
holds only a random session id. A key is accepted when the service answers the
check call, or refuses it as PERMISSION_DENIED or NOT_FOUND (a narrow key, a
signaler's say, may see little, but it is a known key); any other answer
(UNAUTHENTICATED, UNAVAILABLE, INTERNAL, a timeout…) logs nobody in. What a key
may do is the service's to decide on each call.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from sdk.errors import NotFoundError, PermissionDeniedError, UnauthenticatedError, WeftError
from webui.context import http_status, session_of, status_name, ui_of

MAX_KEY = 512


def safe_next(target: str) -> str:
    """Only paths of this site (no `//host`, no scheme): no open redirect."""
    if target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


async def csrf_ok(request: Request) -> bool:
    form = await request.form()
    return session_of(request).check_csrf(str(form.get("csrf", "")))


async def login_page(request: Request) -> Response:
    ui = ui_of(request)
    return ui.render(
        request, "login.html", next=safe_next(request.query_params.get("next", "/")), error=""
    )


async def login(request: Request) -> Response:
    ui = ui_of(request)
    form = await request.form()
    target = safe_next(str(form.get("next", "/")))
    key = str(form.get("api_key", "")).strip()

    def again(error: str, status: int) -> Response:
        return ui.render(request, "login.html", status=status, next=target, error=error)

    if not session_of(request).check_csrf(str(form.get("csrf", ""))):
        return again("The form expired; try again.", 403)
    if not key:
        return again("Give an API key.", 400)
    if len(key) > MAX_KEY or not all("!" <= ch <= "~" for ch in key):
        # It goes into a gRPC header: printable ASCII only, no spaces.
        return again("That is not an API key: a key is printable ASCII without spaces.", 400)
    client = ui.client_for(request, key, ui.config.namespace)
    try:
        await client.describe_namespace(ui.config.namespace)
    except UnauthenticatedError as exc:
        ui.clients.forget(key)
        return again(f"UNAUTHENTICATED: {exc.message}", 401)
    except (PermissionDeniedError, NotFoundError):
        pass  # the key is known, but narrow: it may not describe the namespace
    except WeftError as exc:  # no answer about the key (unavailable, internal, timed out)
        ui.clients.forget(key)
        return again(
            f"could not check the key: {status_name(exc)}: {exc.message}", http_status(exc)
        )
    except Exception as exc:  # the channel would not take it: still not a key
        ui.clients.forget(key)
        return again(f"That key could not be sent ({type(exc).__name__}).", 400)
    request.state.session = ui.sessions.login(session_of(request), key, _key_id(key))
    return RedirectResponse(target, status_code=303)


async def logout(request: Request) -> Response:
    ui = ui_of(request)
    if not await csrf_ok(request):
        return Response("The form expired; go back and try again.", status_code=403)
    old = session_of(request)
    if old.api_key:
        ui.clients.forget(old.api_key)
    session = ui.sessions.rotate(old)
    session.flash.append(("ok", "Logged out."))
    request.state.session = session
    return RedirectResponse("/login", status_code=303)


def _key_id(key: str) -> str:
    """`weft.k_3f9a1c2e7b01.<secret>` → `k_3f9a1c2e7b01` (never the secret)."""
    parts = key.split(".")
    return parts[1] if len(parts) == 3 and parts[1].startswith("k_") else "API key"
