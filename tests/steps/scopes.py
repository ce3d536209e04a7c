"""A scope over a plain dict, for testing expressions, conditions and
transforms without a workflow around them."""

from __future__ import annotations

from typing import Any

from workers.steps.expressions import UnknownName


class DictScope:
    """The names of a dict; any other name is unknown, as in a real step."""

    def __init__(self, names: dict[str, Any]) -> None:
        self.names = names

    def root(self, name: str) -> Any:
        if name in self.names:
            return self.names[name]
        raise UnknownName(f"unknown name {name!r}")
