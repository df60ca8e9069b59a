"""Writing vLLM-shaped log lines from one process (API server, EngineCore or a TP worker).

vLLM logs to stdout (`VLLM_LOGGING_STREAM`, default `ext://sys.stdout`); uvicorn's lines, tqdm bars and Python's
own tracebacks go to stderr, uvicorn's access lines to stdout. Every record is one os.write, so lines of the
processes sharing one log file never interleave mid-line. The process prefix follows the version (lines.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from simhost.vllm import lines
from simhost.vllm.versions import VllmVersion

STDOUT, STDERR = 1, 2


def _write(fd: int, text: str) -> None:
    data = text.encode()
    while data:
        data = data[os.write(fd, data) :]


class ProcLog:
    """The log of one process: `name` is its vLLM process name (`APIServer`, `EngineCore_DP0`, `Worker_TP0`...)."""

    def __init__(self, ver: VllmVersion, name: str, env: Mapping[str, str] | None = None, worker: bool = False) -> None:
        env = os.environ if env is None else env
        self.ver = ver
        self.name = name
        self.pid = os.getpid()
        stream = env.get("VLLM_LOGGING_STREAM", "ext://sys.stdout")
        self.log_fd = STDERR if stream.endswith("stderr") else STDOUT
        self.user_prefix = env.get("VLLM_LOGGING_PREFIX", "")
        self.debug = env.get("VLLM_LOGGING_LEVEL", "INFO").upper() == "DEBUG"
        colour = ver.colour(env, sys.stdout.isatty())
        style = ver.prefix_style
        proc_prefix = lines.process_prefix(name, self.pid, colour)
        # Era A: only TP workers carry a prefix (their stdout/stderr wrapper); 0.10-0.30: every line of every
        # process (the wrapper); 0.31+: vLLM's own records only (the formatter), uvicorn/tqdm/tracebacks bare.
        if style == "workers":
            self.record_prefix = self.print_prefix = proc_prefix if worker else ""
        elif style == "wrapper":
            self.record_prefix = self.print_prefix = proc_prefix
        else:
            self.record_prefix, self.print_prefix = lines.process_prefix(name, self.pid, colour), ""

    def record(self, level: str, where: str, message: str) -> None:
        if level == "DEBUG" and not self.debug:
            return
        head = lines.log_head(level, where)
        _write(self.log_fd, lines.format_record(self.record_prefix + self.user_prefix, head, message))

    def info(self, where: str, message: str) -> None:
        self.record("INFO", where, message)

    def warning(self, where: str, message: str) -> None:
        self.record("WARNING", where, message)

    def error(self, where: str, message: str) -> None:
        self.record("ERROR", where, message)

    def printed(self, text: str, fd: int = STDERR) -> None:
        """Text printed outside vLLM's logger (tqdm, tracebacks, uvicorn): prefixed by the wrapper where there is
        one."""
        _write(fd, lines.prefix_lines(self.print_prefix, text))

    def uvicorn(self, message: str, fd: int = STDERR, level: str = "INFO") -> None:
        """uvicorn's `%(levelprefix)s %(message)s`: `INFO:     Started server process [N]`."""
        self.printed(f"{level + ':':<9} {message}\n", fd)
