"""YAML read with its aliases bounded ("billion laughs").

PyYAML shares one object among the aliases of an anchor, so loading nested
anchors is cheap; the cost comes later, when the value is walked as a tree
(interpolated, copied into a step's variables, written as JSON): ten levels
of ten aliases are 10^10 items. So a document is composed first, the size it
has with every alias expanded is counted (once per node, so counting is
linear in the text), and only a document within the bound is constructed.
An alias that contains itself is refused too: its value would be infinite.
"""

from __future__ import annotations

from typing import Any

import yaml

from workers.steps.errors import StepInterpreterError
from workers.steps.limits import MAX_VALUE_NODES

__all__ = ["AliasBomb", "check_expansion", "load_all"]


class AliasBomb(StepInterpreterError, ValueError):
    """A YAML document stands for too many items, or for an infinite one;
    `line` is where (1-based)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1 if node.start_mark is not None else 1


def check_expansion(root: yaml.Node, limit: int = MAX_VALUE_NODES) -> None:
    """Raise `AliasBomb` if `root` with its aliases expanded has more than
    `limit` nodes, or if an alias contains itself. Iterative: a deep document
    cannot exhaust the stack here."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            open_nodes.discard(key)
            total = 1 + sum(sizes[id(child)] for child in _children(node))
            if total > limit:
                raise AliasBomb(
                    _line(node),
                    f"the YAML expands to more than {limit} items through its aliases",
                )
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            # Depth first, a node is met again before it is finished only
            # from inside itself.
            raise AliasBomb(_line(node), "a YAML alias refers to a node that contains it")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node))


def load_all(source: str, loader: type[yaml.SafeLoader]) -> list[Any]:
    """The documents of `source`, each checked by `check_expansion` before it
    is constructed."""
    reader = loader(source)
    try:
        documents = []
        while reader.check_node():
            node = reader.get_node()
            if node is None:  # pragma: no cover - check_node said there is one
                break
            check_expansion(node)
            documents.append(reader.construct_document(node))
        return documents
    finally:
        reader.dispose()
