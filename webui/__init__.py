"""`weft ui`: the web UI, a process of its own that talks to the service only
through the SDK's `AsyncClient`, as any other client does.

Server-rendered pages (Starlette + Jinja2, autoescaped), with a vendored htmx
for the live parts (history and timeline following a run, actions answered in
place); every page reads with JavaScript off.
"""

from webui.app import create_app
from webui.config import UiConfig

__all__ = ["UiConfig", "create_app"]
