"""Which listen addresses stay on this host: one rule for the server (`weft
server` refuses to listen beyond loopback insecurely) and the web UI (`weft ui`
likewise)."""

from __future__ import annotations

import ipaddress


def is_loopback(address: str) -> bool:
    """HOST:PORT on this host only: 127.0.0.0/8, ::1, `localhost`, or a unix socket.
    An empty host, 0.0.0.0 and [::] listen on every interface: not loopback."""
    if address.startswith(("unix:", "unix-abstract:")):
        return True
    host = address.rpartition(":")[0].strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # another host name: it may resolve anywhere
        return False
