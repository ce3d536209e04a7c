"""The built-in activities of every `weft runner`: `weft.http` and `weft.shell`.

They are what the step language's `http URL` and `shell COMMAND` steps schedule
(STEPS.md), written as ordinary `@activity` functions, so they heartbeat, hear
cancellation and report failures like user activities do.

    weft.http  {url, method="GET", headers={}, body=None, status_code=None, timeout=60}
               -> {status_code, headers, content, content_json}
    weft.shell {command, args=[], env={}, exit_code=0}
               -> {stdout, stderr, exit_code}

Values never become shell text: `command` is the script the definition wrote,
and the values a step puts into it travel as positional parameters (`args`,
read as `"$1"`, `"$2"`, … by `sh -c COMMAND weft.shell ARGS…`), which the shell
expands but never parses. `shell_script` builds that pair from a template's
literal text and values, so an input `world; id > f` is echoed, not run.

A status code or exit code the step did not expect fails the activity with
`HttpStatusError` / `ShellExitError`, the response or output in the details, so
an `on-error` handler can test it.

Both are off until the operator opts in, since each acts with the runner's
rights. `weft.shell` runs only on a runner started with `--allow-shell`.
`weft.http` reaches only the hosts of `--allow-http HOST` (`*`: any host whose
addresses are all public): a private, loopback, link-local, multicast or
unspecified address (every address a name resolves to is checked, and the
connection goes to a checked one) is refused unless its host is listed by name
or address, and each redirect is checked the same way, so a step cannot make a
runner fetch its cloud's metadata or an internal service. Proxies of the
environment are not used: through one, the checks could not hold. Refused, a
task fails at once with `ShellNotAllowed` / `HttpNotAllowed` (not retryable:
waiting cannot help) instead of waiting for a runner that never takes it.
"""

from __future__ import annotations

from sdk.activity import ActivityDefinition, activity
from workers.builtins.common import (
    VERSION,
    HttpNotAllowed,
    HttpRequestError,
    HttpStatusError,
    InvalidInput,
    ShellExitError,
    ShellNotAllowed,
)
from workers.builtins.weft_http import HTTP_OFF, HttpPolicy, http, http_activity
from workers.builtins.weft_shell import ShellValue, _shell_not_allowed, shell, shell_script
from workers.steps.model import SHELL_ACTIVITY

__all__ = [
    "HTTP_OFF",
    "HttpNotAllowed",
    "HttpPolicy",
    "HttpRequestError",
    "HttpStatusError",
    "InvalidInput",
    "ShellExitError",
    "ShellNotAllowed",
    "ShellValue",
    "builtins",
    "http",
    "http_activity",
    "shell",
    "shell_script",
]


def builtins(*, allow_shell: bool, allow_http: HttpPolicy = HTTP_OFF) -> list[ActivityDefinition]:
    """The built-in activities a runner offers: `weft.http` within `allow_http`
    (by default it refuses every task at once); `weft.shell` with `allow_shell`,
    else a stand-in that refuses every shell task at once."""
    web = http if allow_http == HTTP_OFF else http_activity(allow_http)
    if allow_shell:
        return [web, shell]
    refuse = activity(name=SHELL_ACTIVITY, version=VERSION)(_shell_not_allowed)
    return [web, refuse]
