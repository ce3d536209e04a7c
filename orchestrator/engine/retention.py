"""Retention policies, as the service sees them: the grammar lives in
`sdk.retention` (the step-definition parser checks definitions with it too);
here a policy that does not parse is the caller's error, INVALID_ARGUMENT."""

from __future__ import annotations

from sdk import retention as grammar
from sdk.retention import (
    DEFAULT,
    SYSTEM_DEFAULT,
    Combine,
    Count,
    Disabled,
    Forever,
    Policy,
    Ref,
    Retention,
    Window,
    keeps,
    render,
    substitute_context,
)

from .errors import InvalidArgument


def parse(text: str) -> Retention:
    try:
        return grammar.parse(text)
    except grammar.RetentionError as exc:
        raise InvalidArgument(str(exc)) from None


__all__ = [
    "DEFAULT",
    "SYSTEM_DEFAULT",
    "Combine",
    "Count",
    "Disabled",
    "Forever",
    "Policy",
    "Ref",
    "Retention",
    "Window",
    "keeps",
    "parse",
    "render",
    "substitute_context",
]
