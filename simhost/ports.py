"""Loopback ports: a free one to listen on, whether one is taken, waiting for one to open.

Shared by the simulator's own tests, the demo, the product's test fixtures and the benchmarks: simhost imports
nothing of the product, so any of them may import this.
"""

from __future__ import annotations

import socket
import subprocess
import time


def free_port() -> int:
    """A loopback port nothing listens on now (the kernel's choice; free until someone else binds it)."""
    with socket.socket() as sock:
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
