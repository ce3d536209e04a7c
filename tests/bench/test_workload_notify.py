"""The bench workload's last activity tells the driver its run is done with one
datagram, and keeps no socket open for it (one kept for the process was never
closed)."""

from __future__ import annotations

import os
import socket

from bench import workload


def test_a_notification_reaches_the_driver_and_leaves_no_socket_open() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as driver:
        driver.bind(("127.0.0.1", 0))
        driver.settimeout(5)
        address = f"127.0.0.1:{driver.getsockname()[1]}"
        open_before = len(os.listdir("/proc/self/fd"))
        workload.notify(address, "run-7")
        assert len(os.listdir("/proc/self/fd")) == open_before
        assert driver.recv(100) == b"run-7"
    # (a socket opened at import would not show in the count above)
    assert not any(isinstance(value, socket.socket) for value in vars(workload).values())
