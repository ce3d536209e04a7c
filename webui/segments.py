"""Names in the UI's paths: a namespace, a workflow id or a run id written as one
path segment, and read back.

A browser drops a path segment "." and folds ".." into the one before it (the
URL standard does so for "%2E" as well) before the request leaves it, so a
name made of dots cannot travel as it is. Such a name is written with a "~" in
front; so is a name that would read as one so written ("~." or "~~x"), and the
routes' convertors take that "~" off on the way in. Any other name, "~team"
included, is written as it is.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request

MARK = "~"
_DOTS = (".", "..")


def segment(name: str) -> str:
    """`name` as a path segment (quoted whole: a "/" in it travels as %2F)."""
    if name in _DOTS or _marked(name):
        name = MARK + name
    return quote(name, safe="")


def _marked(text: str) -> bool:
    """Whether `text` reads as a name written with the mark."""
    rest = text[len(MARK) :]
    return text.startswith(MARK) and (rest in _DOTS or rest.startswith(MARK))


def _read(text: str) -> str:
    return text[len(MARK) :] if _marked(text) else text


class NameConvertor(Convertor[str]):
    """`{ns:name}`: one segment."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return _read(value)

    def to_string(self, value: str) -> str:
        return segment(value)


class NamePathConvertor(NameConvertor):
    """`{wid:namepath}`: a workflow id, whose "/" the server has decoded from %2F."""

    regex = ".*"


register_url_convertor("name", NameConvertor())
register_url_convertor("namepath", NamePathConvertor())


def request_path(request: Request) -> str:
    """The path `request` was sent to, as sent: a link back to it built from the
    decoded path would lose how its names were written (a "/" in an id, %2F)."""
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if isinstance(raw, bytes) else request.url.path
