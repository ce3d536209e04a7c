"""What a step start recorded: the executor keeps one per step a frame has
started, and a continued run's new frame is given them back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Entry:
    """What a step start recorded: enough to resume it or replay from it."""

    key: str
    variables: dict[str, Any]
    input: dict[str, Any]
    previous_output: Any
