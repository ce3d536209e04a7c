"""The UI process's one frozen configuration, built by `weft ui` from its flags."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sdk.addresses import is_loopback
from sdk.client import DEFAULT_ADDRESS
from sdk.tls import TlsConfig


@dataclass(frozen=True)
class UiConfig:
    address: str = DEFAULT_ADDRESS
    """The Weft server the UI calls."""
    namespace: str = "default"
    """Where `/` leads; every page names its namespace in its URL."""
    listen: str = "127.0.0.1:7401"
    tls: TlsConfig | None = None
    """How the UI reaches the server (the client's --tls* options)."""
    api_key: str | None = None
    """Used for visitors who have not logged in (one person's UI on their own machine:
    loopback only, and never for a request that came through a proxy); None: they
    must log in when the server asks for credentials."""
    https_cert: str | None = None
    https_key: str | None = None
    """The UI's own HTTPS certificate and key (uvicorn serves HTTPS with them)."""
    insecure: bool = False
    """Off loopback: serve plain HTTP, and skip the check that the server asks for
    credentials, anyway. It never lets the UI's own key serve anonymous visitors."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names the UI answers to besides the --listen host and loopback (a request
    naming another Host is refused: DNS rebinding)."""
    session_idle: timedelta = timedelta(hours=8)
    """A login is forgotten after this long without a request made by its person."""
    max_sessions: int = 10_000
    """Logged-in sessions."""
    max_anonymous_sessions: int = 10_000
    history_cache_runs: int = 32
    """Closed runs whose whole history the UI keeps (a timeline redrawn, pages turned)."""
    history_cache_bytes: int = 256 * 1024 * 1024
    """...and at most about this much memory over all of them..."""
    history_cache_run_bytes: int = 64 * 1024 * 1024
    """...a history bigger than this is not kept at all."""
    rpc_timeout: timedelta = timedelta(seconds=10)
    """How long a page's work (its calls to the service) may take: past it, a 504."""

    @property
    def https(self) -> bool:
        return bool(self.https_cert and self.https_key)

    @property
    def exposed(self) -> bool:
        return not is_loopback(self.listen)

    def hosts(self) -> list[str]:
        """The Host names (no port) a request may carry."""
        host = self.listen.rpartition(":")[0].lower()
        names = {"localhost", "127.0.0.1", "[::1]", *(host_name(h) for h in self.allowed_hosts)}
        if host not in ("", "0.0.0.0", "[::]"):
            names.add(host)
        return sorted(names)

    @property
    def listens_everywhere(self) -> bool:
        return self.listen.rpartition(":")[0] in ("", "0.0.0.0", "[::]")

    def refusal(self) -> str | None:
        """Why this configuration must not start (secure by default), or None."""
        if bool(self.https_cert) != bool(self.https_key):
            return "--https-cert and --https-key go together; give both"
        if any(host_name(h) in ("*", "") for h in self.allowed_hosts):
            return (
                "--allowed-host '*' (or an empty name) would answer any Host, which turns off"
                " the DNS-rebinding check; name the hosts the UI is reached by"
            )
        if not self.exposed:
            return None
        if self.api_key:
            # Never waived, not even by --insecure.
            return (
                f"--listen {self.listen} is not a loopback address and an API key is given"
                " (--api-key or WEFT_API_KEY): it would act for every visitor who has not"
                " logged in; unset it (people log in with their own keys)"
            )
        if not self.https and not self.insecure:
            return (
                f"--listen {self.listen} is not a loopback address: give --https-cert and"
                " --https-key (HTTPS), or --insecure to serve plain HTTP to anyone who reaches it"
            )
        return None

    def waivers(self) -> list[str]:
        """What --insecure lets through here, a line each (for `weft ui` to warn)."""
        if not self.exposed or not self.insecure:
            return []
        lines = []
        if not self.https:
            lines.append(f"--insecure: serving plain HTTP on {self.listen}, not a loopback address")
        lines.append(
            "--insecure: not checking that the server requires credentials: if it does not,"
            " anyone reaching the UI acts through it"
        )
        return lines


def host_name(value: str) -> str:
    """An --allowed-host value as a Host name to match: lower case, without a
    `:port` (`ui.example:8443` → `ui.example`, `[::1]:7401` → `[::1]`)."""
    value = value.strip().lower()
    if value.startswith("[") and "]" in value:
        return value[: value.index("]") + 1]
    if value.count(":") == 1:
        return value.partition(":")[0]
    return value


async def server_refusal(config: UiConfig) -> str | None:
    """Off loopback: why the server behind the UI makes it unsafe to serve, or None.

    A call made as an anonymous visitor's would be (no API key; the UI's client
    certificate, if any) must be answered UNAUTHENTICATED: otherwise whoever reaches
    the UI gets whatever the server grants that call."""
    from sdk.client import AsyncClient
    from sdk.errors import UnauthenticatedError, UnavailableError, WeftError
    from sdk.retry import RetryPolicy

    client = AsyncClient(
        config.address,
        namespace=config.namespace,
        tls=config.tls,
        retry=RetryPolicy(give_up_after=timedelta(seconds=5)),
    )
    try:
        await client.describe_namespace(config.namespace)
    except UnauthenticatedError:
        return None
    except UnavailableError as exc:
        return (
            f"--listen {config.listen} is not a loopback address and the server at"
            f" {config.address} could not be asked whether it requires credentials"
            f" ({exc.message}); start it first, or give --insecure"
        )
    except WeftError:
        pass  # answered (not found, refused): the call was taken as someone's
    finally:
        await client.close()
    return (
        f"--listen {config.listen} is not a loopback address and the server at"
        f" {config.address} answers calls without an API key (no --auth, or the UI's"
        " client certificate is a principal): anyone reaching the UI could act through"
        " it; run the server with --auth, or give --insecure"
    )
