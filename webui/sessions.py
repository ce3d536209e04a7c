"""Sessions of the people using the UI, kept in this process's memory only.

A session is a random id in a cookie (HttpOnly, SameSite=Strict, Secure under
HTTPS). It holds the CSRF token its forms carry, the API key its person logged
in with (never sent back to the browser), and one message to show on the next
page. Bounded: idle sessions are forgotten, and past `max_sessions` the least
recently used go first.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

COOKIE = "weft_ui_session"


@dataclass
class Session:
    sid: str
    csrf: str
    api_key: str | None = None
    key_id: str = ""
    """The key's public id (`k_…`), shown as who is logged in."""
    flash: list[tuple[str, str]] = field(default_factory=list)
    """(kind, text) messages for the next page: kind "ok" or "error"."""
    last_seen: float = field(default_factory=time.monotonic)

    def check_csrf(self, token: str) -> bool:
        return bool(token) and hmac.compare_digest(token, self.csrf)

    def take_flash(self) -> list[tuple[str, str]]:
        out, self.flash = self.flash, []
        return out


class SessionStore:
    def __init__(self, *, idle_seconds: float, max_sessions: int) -> None:
        self.idle_seconds = idle_seconds
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        session = self._sessions.get(sid)
        now = time.monotonic()
        if session is None or now - session.last_seen > self.idle_seconds:
            self._sessions.pop(sid, None)
            return None
        session.last_seen = now
        self._sessions.move_to_end(sid)
        return session

    def new(self) -> Session:
        self._expire()
        session = Session(sid=secrets.token_urlsafe(32), csrf=secrets.token_urlsafe(32))
        self._sessions[session.sid] = session
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
        return session

    def rotate(self, session: Session) -> Session:
        """A new id and CSRF token for the same person (at login and logout), so an
        id known before login is worth nothing after it."""
        self._sessions.pop(session.sid, None)
        fresh = self.new()
        fresh.flash = session.flash
        return fresh

    def _expire(self) -> None:
        now = time.monotonic()
        while self._sessions:
            sid, oldest = next(iter(self._sessions.items()))
            if now - oldest.last_seen <= self.idle_seconds:
                break
            del self._sessions[sid]
