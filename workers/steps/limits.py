"""The bounds that keep one step workflow from hurting the decider that runs it.

A decider process is shared by every run on its task lists: whatever a
definition or a payload says, deciding one run must end quickly, in bounded
memory, with an answer (issue 15). Each bound below is checked where the
value is made, and going past it is an `ExpressionError` the step's `on-error`
can handle (or, for a definition, a `weft register` error naming FILE:LINE).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

MAX_EXPRESSION_CHARS: Final = 10_000
"""The longest `let` expression or transform operation, in characters."""

MAX_EXPRESSION_DEPTH: Final = 32
"""How deep a `let` expression may nest parentheses, unary minus and `? :`.
Operator chains (`a + b + c …`) are evaluated in a loop and do not count."""

MAX_INTEGER: Final = 2**63 - 1
"""The largest integer arithmetic may give (a Java `long`, as in Brooklyn):
past it the result is an error, not a number thousands of digits long."""

MAX_NUMBER_CHARS: Final = 400
"""A text longer than this never reads as a number (Python refuses to read
ints of more than 4,300 digits, and a float that long is not meant as one)."""

MAX_TEXT_CHARS: Final = 1_048_576
"""The longest text an expression or transform may build (1 Mi characters, four
times the default payload limit, so such a value could not be recorded there).
It stays put when a server's limit is raised (`--max-payload-size`, up to 2
MiB): a run that met it must decide the same when it is replayed."""

MAX_VALUE_DEPTH: Final = 100
"""How deep a value made by `let json|yaml` or a transform may nest (the
service's payload depth limit)."""

MAX_VALUE_NODES: Final = 200_000
"""The most items (scalars, lists, maps) one value may hold once YAML aliases
are expanded: a few hundred bytes of nested anchors ("billion laughs") would
otherwise stand for billions of items."""

MAX_FOREACH_ITEMS: Final = 10_000
"""The most items a `foreach` or a nested workflow's `target` may iterate:
each item records a step marker, and a run holds at most 50,000 events (the
server's default `--max-history-events`)."""

MIN_TIMER: Final = timedelta(seconds=1)
"""Timers (`sleep`, `wait … timeout`, retry backoff, step timeouts) shorter
than this are rounded up to it. SWF's timers count whole seconds and
Temporal's are not meant for sub-second precision either; without a floor, a
`sleep 1ms` + `goto` loop would make the decider refold a growing history
many times a second."""

DECIDE_CPU_SECONDS: Final = 5.0
"""CPU time one decision task of one run may use (half the default decider
timeout, so the answer still arrives in time). Past it the run fails with
`DecisionBudgetExceeded` instead of holding the decider's core."""
