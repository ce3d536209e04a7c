"""Rules the server's engine owns that a process which may not import the server
keeps a copy of (tests/test_layout.py: `workers/` imports no `orchestrator/`).
Each copy names the engine's constant as its home; these tests hold them equal."""

from __future__ import annotations

from orchestrator.engine import events as engine_events
from orchestrator.engine import limits, start
from sdk import events as sdk_events
from workers.steps import model


def test_the_step_interpreter_defaults_to_the_engines_version() -> None:
    assert model.DEFAULT_VERSION == start.DEFAULT_VERSION


def test_the_sdk_names_the_event_types_as_the_engine_does() -> None:
    assert sdk_events.EVENT_TYPES == engine_events.EVENT_TYPES
    assert set(engine_events.CLOSE_EVENTS) == sdk_events.CLOSE_TYPES
    assert sdk_events.CHILD_CLOSE_TYPES == engine_events.CHILD_CLOSES


def test_the_step_loader_bounds_a_file_at_the_engines_definition_limit() -> None:
    assert model.MAX_DEFINITION_BYTES == limits.MAX_DEFINITION_BYTES
