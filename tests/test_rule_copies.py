"""Rules the server's engine owns that a process which may not import the server
keeps a copy of (tests/test_layout.py: `workers/` imports no `orchestrator/`).
Each copy names the engine's constant as its home; these tests hold them equal."""

from __future__ import annotations

from orchestrator.engine import start
from workers.steps import model


def test_the_step_interpreter_defaults_to_the_engines_version() -> None:
    assert model.DEFAULT_VERSION == start.DEFAULT_VERSION
