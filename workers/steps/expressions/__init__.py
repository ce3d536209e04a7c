"""Values inside steps: `${…}` references, the `let` expression language and types.

The language is described where it is implemented: references in
`references`, the `let` language in `letlang`, value conversions in
`coercion`. This module is the package's public face; its names are what the
rest of Weft imports.
"""

from __future__ import annotations

from workers.steps.expressions.base import (
    ABSENT,
    TYPES,
    ExpressionError,
    LimitExceeded,
    Scope,
    UnknownName,
    total,
)
from workers.steps.expressions.coercion import coerce
from workers.steps.expressions.letlang import check_expression, check_value, evaluate
from workers.steps.expressions.paths import get_path, resolve_path
from workers.steps.expressions.references import (
    interpolate,
    interpolate_lenient,
    pieces,
    references,
)
from workers.steps.expressions.values import compare, loose_equals, text, truthy
from workers.steps.expressions.words import text_value, word_value, words

__all__ = [
    "ABSENT",
    "TYPES",
    "ExpressionError",
    "LimitExceeded",
    "Scope",
    "UnknownName",
    "check_expression",
    "check_value",
    "coerce",
    "compare",
    "evaluate",
    "get_path",
    "interpolate",
    "interpolate_lenient",
    "loose_equals",
    "pieces",
    "references",
    "resolve_path",
    "text",
    "text_value",
    "total",
    "truthy",
    "word_value",
    "words",
]
