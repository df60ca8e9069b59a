"""The environment each process of a server's group received, read from `/proc/<pid>/environ` in one command.

An empty block is reported as unreadable, not as an empty environment: setproctitle (SGLang's scheduler titles)
zeroes the block the kernel shows, and a process that exited between `pgrep` and the read shows nothing either.
Only the variables a launch may set (the launch policy's prefixes) are kept, and values of names that look secret
are masked: the page shows them to every member.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass, field

from experiments.rules.launch_policy import is_launch_variable
from experiments.rules.secrets import shown

MAX_TITLE = 200


def group_command(pgid: int) -> str:
    """For each process of group `pgid`: `@@pid N`, its args (cut), then its environ block as one base64 line."""
    return _each_pid(f"$(pgrep -g {int(pgid)})")


def pid_command(pids: Iterable[int]) -> str:
    """Like `group_command`, for given pids."""
    return _each_pid(" ".join(str(int(p)) for p in pids))


def _each_pid(listing: str) -> str:
    return (
        f"for pid in {listing}; do "
        'echo "@@pid $pid"; '
        f'ps -o args= -p "$pid" | head -c {MAX_TITLE} | tr "\\n" " "; echo; '
        'base64 -w0 < "/proc/$pid/environ" 2>/dev/null; echo; '
        "done"
    )


@dataclass(frozen=True)
class ProcessEnv:
    pid: int
    title: str
    # None: the block was empty or could not be read (unreadable, which proves nothing either way).
    env: dict[str, str] | None = field(default=None)

    @property
    def readable(self) -> bool:
        return self.env is not None


def parse_environ_block(raw: bytes) -> dict[str, str] | None:
    """A `/proc/<pid>/environ` block (NUL-separated NAME=value) -> a dict; None when it is blank."""
    entries = [e for e in raw.split(b"\0") if e.strip()]
    if not entries:
        return None
    env = {}
    for entry in entries:
        name, sep, value = entry.decode("utf-8", errors="replace").partition("=")
        if sep and name:
            env[name] = value
    return env or None


def parse_group(output: str) -> list[ProcessEnv]:
    """The answer to `group_command` -> one ProcessEnv per process that was still there for `ps`."""
    found = []
    lines = output.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.startswith("@@pid ") or not line[6:].strip().isdigit():
            continue
        pid = int(line[6:].strip())
        title = lines[i].strip() if i < len(lines) else ""
        encoded = lines[i + 1].strip() if i + 1 < len(lines) else ""
        i += 2
        if not title:
            continue  # exited meanwhile
        try:
            env = parse_environ_block(base64.b64decode(encoded, validate=True)) if encoded else None
        except (binascii.Error, ValueError):
            env = None
        found.append(ProcessEnv(pid, title[:MAX_TITLE], env))
    return found


def shown_env(env: dict[str, str], extra_prefixes: Iterable[str] = ()) -> dict[str, str]:
    """The variables of `env` a launch may set (the launch policy's names, the host's extra prefixes included),
    secrets masked."""
    extra = tuple(extra_prefixes)
    return shown({name: value for name, value in sorted(env.items()) if is_launch_variable(name, extra)})
