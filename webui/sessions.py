"""Sessions of the people using the UI, kept in this process's memory only.

A session is a random id in a cookie (HttpOnly, SameSite=Strict, Secure under
HTTPS). It holds the CSRF token its forms carry (derived from the id with a
secret of this process, so an anonymous session pushed out and made again under
the same cookie keeps its token), the API key its person logged
in with (never sent back to the browser), and one message to show on the next
page. Bounded: idle sessions are forgotten, and past their bound the least
recently used go first. Anonymous sessions (anyone can make one with a request)
and logged-in ones are bounded apart, so that traffic from nobody in particular
never pushes out a person who logged in.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

COOKIE = "weft_ui_session"
_SID = re.compile(r"[A-Za-z0-9_-]{43}")
"""What `secrets.token_urlsafe(32)` makes: a session id."""
MAX_PER_KEY = 50
"""Logged-in sessions one key holds: logging in again past it ends its oldest, so
one key logging in over and over cannot push out everyone else."""


@dataclass
class Session:
    sid: str
    csrf: str
    """HMAC-SHA256 of `sid` under the process's secret (`SessionStore.csrf_of`)."""
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
    def __init__(
        self, *, idle_seconds: float, max_sessions: int, max_anonymous: int | None = None
    ) -> None:
        self.idle_seconds = idle_seconds
        self.max_sessions = max_sessions
        """Logged-in sessions."""
        self.max_anonymous = max_anonymous if max_anonymous is not None else max_sessions
        self._anonymous: OrderedDict[str, Session] = OrderedDict()
        self._logged_in: OrderedDict[str, Session] = OrderedDict()
        self._secret = secrets.token_bytes(32)

    def get(self, sid: str | None, *, touch: bool = True) -> Session | None:
        """The live session of `sid`, or None. `touch=False` (a page's own polling):
        it does not count as the person being there, so idleness still ends it."""
        if not sid:
            return None
        now = time.monotonic()
        for store in (self._logged_in, self._anonymous):
            session = store.get(sid)
            if session is None:
                continue
            if now - session.last_seen > self.idle_seconds:
                del store[sid]
                return None
            if touch:
                session.last_seen = now
                store.move_to_end(sid)
            return session
        return None

    def new(self) -> Session:
        """An anonymous session."""
        return self._anonymous_session(secrets.token_urlsafe(32))

    def revive(self, sid: str | None) -> Session | None:
        """An anonymous session under a cookie's well-formed id that no session holds
        (any more: the anonymous bound pushed it out, or it went idle), so that a form
        it was given still carries a valid token. Only ever anonymous: a login never
        comes back from a cookie alone. None: no such id."""
        if not sid or not _SID.fullmatch(sid) or self.get(sid, touch=False) is not None:
            return None
        return self._anonymous_session(sid)

    def csrf_of(self, sid: str) -> str:
        """The CSRF token of a session id: derived from it with this process's
        secret, so it needs no stored session."""
        return hmac.new(self._secret, sid.encode(), hashlib.sha256).hexdigest()

    def _anonymous_session(self, sid: str) -> Session:
        self._expire(self._anonymous)
        session = Session(sid=sid, csrf=self.csrf_of(sid))
        self._anonymous[session.sid] = session
        while len(self._anonymous) > self.max_anonymous:
            self._anonymous.popitem(last=False)
        return session

    def rotate(self, session: Session) -> Session:
        """A new id and CSRF token for the same person (at logout), so an id known
        before is worth nothing after it. The new session is anonymous."""
        self._drop(session.sid)
        fresh = self.new()
        fresh.flash = session.flash
        return fresh

    def login(self, session: Session, api_key: str, key_id: str) -> Session:
        """A new id and CSRF token (the old id is worth nothing), holding the key."""
        self._drop(session.sid)
        self._expire(self._logged_in)
        sid = secrets.token_urlsafe(32)
        fresh = Session(
            sid=sid,
            csrf=self.csrf_of(sid),
            api_key=api_key,
            key_id=key_id,
            flash=session.flash,
        )
        self._logged_in[fresh.sid] = fresh
        same = [sid for sid, s in self._logged_in.items() if s.api_key == api_key]
        for sid in same[: max(0, len(same) - MAX_PER_KEY)]:  # oldest first
            del self._logged_in[sid]
        while len(self._logged_in) > self.max_sessions:
            self._logged_in.popitem(last=False)
        return fresh

    def __len__(self) -> int:
        return len(self._anonymous) + len(self._logged_in)

    def _drop(self, sid: str) -> None:
        self._anonymous.pop(sid, None)
        self._logged_in.pop(sid, None)

    def _expire(self, store: OrderedDict[str, Session]) -> None:
        now = time.monotonic()
        while store:
            sid, oldest = next(iter(store.items()))
            if now - oldest.last_seen <= self.idle_seconds:
                break
            del store[sid]
