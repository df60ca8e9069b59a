"""Log lines as SGLang prints them. Every line is one os.write, so lines from the launcher and its
scheduler processes never interleave mid-line and nothing sits in a buffer when the log is a file."""

from __future__ import annotations

import os
import time

STDOUT = 1
STDERR = 2


def stamp(rank: int | None = None, tp_size: int = 1) -> str:
    now = time.time()
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    if os.environ.get("SGLANG_LOG_MS", "").lower() in ("1", "true"):
        text += f".{int(now * 1000) % 1000:03d}"
    if rank is not None and tp_size > 1:
        text += f" TP{rank}"
    return f"[{text}]"


def raw(text: str, fd: int = STDERR) -> None:
    """Write text as is (tqdm bars, bare warnings, traceback bodies)."""
    data = text.encode()
    while data:
        written = os.write(fd, data)
        data = data[written:]


def line(message: str, rank: int | None = None, tp_size: int = 1, fd: int = STDERR) -> None:
    """`[YYYY-MM-DD HH:MM:SS( TPr)] message`; rank is given for scheduler lines."""
    raw(f"{stamp(rank, tp_size)} {message}\n", fd)


def uvicorn(message: str, fd: int = STDERR) -> None:
    line(f"INFO:     {message}", fd=fd)
