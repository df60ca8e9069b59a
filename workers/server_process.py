"""The server's processes on the GPU host: started under `setsid`, so that they form their own process group,
which outlives our SSH session (a worker may die, a connection may drop) and is signalled and counted whole."""

from __future__ import annotations

import asyncio
import shlex
import time
from dataclasses import dataclass

from .ssh import HostConnection

GONE_POLL = 0.25
KILL_WAIT = 10.0


@dataclass(frozen=True)
class ServerProcess:
    pid: int
    title: str  # `ps -o args=`, cut at 200 characters
    env_names: frozenset[str]  # empty: unreadable (setproctitle zeroes the block the kernel shows)


async def start(conn: HostConnection, work_dir: str, command: str, log_path: str) -> tuple[int, int] | str:
    """Start `command` detached in `work_dir`, stdout and stderr to `log_path`: (pid, pgid), or why it failed."""
    started = await conn.run(
        f"cd -- {shlex.quote(work_dir)} && "
        f"{{ setsid {command} > {shlex.quote(log_path)} 2>&1 < /dev/null & }} && echo $!"
    )
    pid_text = started.stdout.strip().splitlines()[-1] if started.stdout.strip() else ""
    if not started.ok or not pid_text.isdigit():
        return started.stderr_tail()
    pid = int(pid_text)
    pgid_result = await conn.run(f"ps -o pgid= -p {pid}")
    pgid = int(pgid_result.stdout.strip()) if pgid_result.stdout.strip().isdigit() else pid
    return pid, pgid


@dataclass(frozen=True)
class ServerGroup:
    """A launched server's process group, seen through one SSH connection (a new one after a reconnect)."""

    conn: HostConnection
    pgid: int

    async def alive(self) -> bool:
        result = await self.conn.run(f"kill -0 -- -{self.pgid} 2>/dev/null && echo alive || echo gone")
        return result.stdout.strip().endswith("alive")

    async def pids(self) -> list[int]:
        result = await self.conn.run(f"pgrep -g {self.pgid} || true")
        return [int(p) for p in result.stdout.split() if p.isdigit()]

    async def processes(self) -> list[ServerProcess]:
        """Each live process of the group with its title and the names in its environment."""
        found = []
        for pid in await self.pids():
            result = await self.conn.run(
                f"ps -o args= -p {pid} | head -c 200; echo; tr '\\0' '\\n' < /proc/{pid}/environ 2>/dev/null"
            )
            lines = result.stdout.splitlines()
            if not lines or not lines[0].strip():
                continue  # exited meanwhile
            names = frozenset(line.split("=", 1)[0] for line in lines[1:] if "=" in line)
            found.append(ServerProcess(pid, lines[0].strip(), names))
        return found

    async def wait_gone(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not await self.alive():
                return True
            await asyncio.sleep(GONE_POLL)
        return not await self.alive()

    async def stop(self, grace: float) -> bool:
        """SIGTERM the group, SIGKILL whatever is left after `grace` seconds; True once nothing of it is left."""
        await self.conn.run(f"kill -TERM -- -{self.pgid} 2>/dev/null; true")
        if await self.wait_gone(grace):
            return True
        await self.conn.run(f"kill -KILL -- -{self.pgid} 2>/dev/null; true")
        return await self.wait_gone(KILL_WAIT)
