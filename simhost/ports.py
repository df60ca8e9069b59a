"""Loopback ports: a free one to listen on, whether one is taken, waiting for one to open.

Shared by the simulator's own tests, the demo, the product's test fixtures and the benchmarks: simhost imports
nothing of the product, so any of them may import this.
"""

from __future__ import annotations

import random
import socket
import subprocess
import time

# The kernel hands ports out of its ephemeral range to every outgoing connection (SSH, Redis, PostgreSQL clients),
# so a port chosen there can be taken by some client between choosing it and the server binding it: a suite of
# parallel workers hit exactly that ("address already in use"). Listening ports are chosen below that range.
_LOWEST_PORT = 10000
_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(part) for part in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _listening_range() -> tuple[int, int] | None:
    low, high = _ephemeral_range()
    if low - _LOWEST_PORT >= 1000:
        return _LOWEST_PORT, low - 1
    if 65535 - high >= 1000:
        return high + 1, 65535
    return None


def free_port() -> int:
    """A loopback port nothing listens on now, outside the kernel's ephemeral range, not handed out before by this
    process. Random, so parallel processes rarely pick the same one; free until someone binds it."""
    span = _listening_range()
    if span is not None:
        for _attempt in range(200):
            port = random.randint(*span)
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                return port
    with socket.socket() as sock:  # no room outside the ephemeral range: the kernel's choice is better than none
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


class PortNotOpen(RuntimeError):
    """The process that should open the port exited first, or did not open it in time."""


def wait_for_port(port: int, *, timeout: float = 20.0, process: subprocess.Popen | None = None, what: str = "") -> None:
    """Return once something listens on loopback `port`; raise PortNotOpen if `process` exits first or time runs
    out. `what` names the process in the message."""
    name = what or "the process"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise PortNotOpen(f"{name} exited with code {process.returncode} before opening port {port}.")
        if port_in_use(port):
            return
        time.sleep(0.1)
    raise PortNotOpen(f"{name} did not open port {port} within {timeout:g} s.")
