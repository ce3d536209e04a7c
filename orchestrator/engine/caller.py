"""Who the current request comes from, as the server authenticated them.

The api layer sets it once per call (`orchestrator.auth.gate`); every
transition made while serving the call stamps it on the events it appends, so
no command has to carry it. Work the service does on its own (timeouts, the
purge) runs outside any call and stamps nothing.
"""

from __future__ import annotations

from contextvars import ContextVar

principal: ContextVar[str] = ContextVar("weft_principal", default="")
