"""One demo per checkout: the lock a live demo holds on var/demo.lock, and who holds it.

The kernel drops an flock with the process that holds it, however that process ends (SIGKILL, a closed terminal), so
a demo killed hard never blocks the next one, whose children are then cleaned up as leftovers; a pid written in a file
could be stale or reused, a lock cannot. The demo's children do not inherit it (Popen closes every other descriptor).
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import IO


class DemoRunning(Exception):
    """Another demo of this checkout lives; the message says where it serves and how to stop it."""


def hold(var_dir: Path, web_port: int) -> IO[str]:
    """The lock, held for as long as the returned file stays open (the demo keeps it for its life), with this
    process's pid and port written in it for the next demo's message; DemoRunning when another demo holds it."""
    path = var_dir / "demo.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        text = lock.read()
        lock.close()
        raise DemoRunning(_holder(text, path)) from None
    lock.seek(0)
    lock.truncate()
    lock.write(json.dumps({"pid": os.getpid(), "port": web_port}))
    lock.flush()
    return lock


def _holder(text: str, path: Path) -> str:
    try:
        holder = json.loads(text)
        pid, port = int(holder["pid"]), int(holder["port"])
    except (ValueError, KeyError, TypeError):
        return f"A demo of this checkout is already running (it holds {path})."
    return (
        f"A demo of this checkout is already running: http://127.0.0.1:{port}/ (pid {pid}). Use it, or stop it "
        f"first (Ctrl-C in its terminal, or `kill {pid}`); a second one would stop its processes."
    )
