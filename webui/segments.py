"""Names in the UI's paths: a namespace, a workflow id or a run id written as one
path segment, and read back.

A browser drops a path segment "." and folds ".." into the one before it (the
URL standard does so for "%2E" as well) before the request leaves it, so a
name made of dots cannot travel as it is. Such a name is written with a "~" in
front, and so is a name that starts with "~" (so that the mark means one thing
only); the routes' convertors take one "~" off on the way in.
"""

from __future__ import annotations

from urllib.parse import quote

from starlette.convertors import Convertor, register_url_convertor

MARK = "~"
_DOTS = (".", "..")


def segment(name: str) -> str:
    """`name` as a path segment (quoted whole: a "/" in it travels as %2F)."""
    if name in _DOTS or name.startswith(MARK):
        name = MARK + name
    return quote(name, safe="")


def _read(text: str) -> str:
    return text[len(MARK) :] if text.startswith(MARK) else text


class NameConvertor(Convertor[str]):
    """`{ns:name}`: one segment."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return _read(value)

    def to_string(self, value: str) -> str:
        return segment(value)


class NamePathConvertor(Convertor[str]):
    """`{wid:namepath}`: a workflow id, whose "/" the server has decoded from %2F."""

    regex = ".*"

    def convert(self, value: str) -> str:
        return _read(value)

    def to_string(self, value: str) -> str:
        return segment(value)


register_url_convertor("name", NameConvertor())
register_url_convertor("namepath", NamePathConvertor())
