"""The inference server on the GPU host: its launch command, its process group and its HTTP API.

The server runs under `setsid`, so its processes form their own group, which outlives our SSH session (a worker
may die, a connection may drop) and is signalled and counted whole. Its HTTP API is reached through a port forward
of the run's SSH connection; every call answers None (or raises, for the smoke generation) instead of hanging, and
the phase that asked decides what a silent port means (loading, or a server that died).
"""

from __future__ import annotations

import asyncio
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp

from experiments.rules import launch_fields, launch_policy, model_paths, secrets

from .. import engines
from ..hostreads import environ
from ..ssh import HostConnection, env_assignments, quote_command

if TYPE_CHECKING:
    from experiments.models import Host, ServerConfig

GONE_POLL = 0.25
KILL_WAIT = 10.0
HEALTH_TIMEOUT = aiohttp.ClientTimeout(total=5)


def launch_refusals(host: Host, config: ServerConfig) -> list[str]:
    """What in `config` may not be launched on `host` (the forms refuse it too; this holds for any stored config).
    The host's default environment is held to the same rules: it reaches the same shell."""
    spec = {**config.launch_spec(), "env": host.effective_env(config.env)}
    if config.engine not in launch_fields.ENGINE_NAMES:
        return launch_fields.refusals(config.engine, spec)
    engine = engines.of(config)
    if not engine.launcher(host):
        return [f"{host.name} has no {engine.label} launcher: an admin sets one on the host"]
    problems = launch_policy.launch_refusals(
        spec,
        host.extra_env_prefixes or (),
        launch_fields.managed_flags(config.engine),
        host.extra_flags or (),
        engine=config.engine,
    )
    return problems + model_paths.model_path_refusals(spec, host.models_root)


def launch_command(
    host: Host, config: ServerConfig, *, for_display: bool = False, adaptive_config: str | None = None
) -> str:
    """The shell command that starts `config`'s server on `host`: every value one quoted word. Raises ValueError
    for a config that breaks the launch policy (preflight reports that as a failure before this is reached).
    The command holds no secret: each one is passed on standard input (`launch_secrets`, `start`) and shows here
    as its name only, so the host's process list, the run page and the worker's log never show a value.
    `for_display`: the command as the run page shows it (the names of the secrets the server is given).
    `adaptive_config`: the path on the host of the config's adaptive schedule (`adaptive.install`)."""
    refusals = launch_refusals(host, config)
    if refusals:
        raise ValueError("; ".join(refusals))
    engine = engines.of(config)
    argv = engine.launch_argv(
        config.launch_spec(), host="127.0.0.1", port=host.server_port, adaptive_config=adaptive_config
    )
    argv = [*shlex.split(engine.launcher(host)), *argv]
    # PYTHONUNBUFFERED: uvicorn's access lines go to stdout, block-buffered when redirected to a file.
    env = {"PYTHONUNBUFFERED": "1", **host.effective_env(config.env)}
    command = quote_command(["env", *env_assignments(secrets.public(env)), *argv])
    given = sorted(secrets.secret_part(env))
    if for_display and given:
        return f"{command}  # and on standard input: {' '.join(given)}"
    return command


def launch_secrets(host: Host, config: ServerConfig) -> dict[str, str]:
    """The secrets `launch_command` leaves out, with their values: what `start` writes to the launch's stdin."""
    return secrets.secret_part(host.effective_env(config.env))


# Reads NAME=VALUE lines from standard input, up to an empty one, and exports each: `export` is a shell builtin, so
# no process is started with a value in its argv, and "$line" is one word, never expanded. Names were checked by the
# launch policy (and again here: a line that is not NAME=... is refused), values hold no newline or control
# character. The empty line ends it even when there is no secret (SSH sends no end of input after nothing).
EXPORT_FROM_STDIN = (
    'while IFS= read -r line && [ -n "$line" ]; do case "${line%%=*}" in ""|*[!A-Za-z0-9_]*) exit 97;; esac; '
    'export -- "$line" || exit 97; done'
)


def secrets_input(given: Mapping[str, str]) -> str:
    """What EXPORT_FROM_STDIN reads: a NAME=VALUE line per secret, then the empty line that ends it."""
    return "".join(f"{name}={value}\n" for name, value in given.items()) + "\n"


async def start(
    conn: HostConnection, work_dir: str, command: str, log_path: str, given: Mapping[str, str] | None = None
) -> tuple[int, int] | str:
    """Start `command` detached in `work_dir`, stdout and stderr to `log_path`: (pid, pgid), or why it failed.
    `given`: secrets for the server's environment, sent on the command's standard input (never in its text)."""
    # The group is read once the child has called setsid(): read at once, a loaded host could still show the
    # launching shell's group, which ends with this command; the run would then think its server gone, tear down
    # the wrong group and leave the real one holding GPU memory. Bounded (5 s), and a child already gone ends it.
    started = await conn.run(
        f"{EXPORT_FROM_STDIN}; cd -- {shlex.quote(work_dir)} && "
        f"{{ setsid {command} > {shlex.quote(log_path)} 2>&1 < /dev/null & }} && pid=$! && "
        'for _ in $(seq 50); do pg=$(ps -o pgid= -p "$pid" | tr -d " "); '
        '{ [ -z "$pg" ] || [ "$pg" = "$pid" ]; } && break; sleep 0.1; done; echo "$pid $pg"',
        input=secrets_input(given or {}),
    )
    words = started.stdout.strip().splitlines()[-1].split() if started.stdout.strip() else []
    if not started.ok or not words or not words[0].isdigit():
        if started.exit_status == 97:
            return "a secret's name or value could not be passed to the server's environment"
        return started.stderr_tail()
    pid = int(words[0])
    # setsid makes the child its own group's leader; a child gone before it was read is that group too.
    pgid = int(words[1]) if len(words) > 1 and words[1].isdigit() else pid
    return pid, pgid


@dataclass(frozen=True)
class ServerProcess:
    pid: int
    title: str  # `ps -o args=`, cut at 200 characters
    env_names: frozenset[str]  # empty: unreadable (setproctitle zeroes the block the kernel shows)

    @classmethod
    def of(cls, process: environ.ProcessEnv) -> ServerProcess:
        return cls(process.pid, process.title, frozenset(process.env or ()))


def alive_command(pgid: int) -> str:
    """Prints "alive" while a process of group `pgid` lives (a zombie does not count), else "gone".

    It is asked every second or so of a run's life, so the usual answers cost no process on the host: a leader that
    lives (its /proc stat read by bash itself, and still of the group, not a reused pid) is an answer, and so is a
    group `kill -0` finds empty. Only a dead leader with something of its group left is looked into process by
    process (pgrep reads every process's stat, ~10 ms on a busy host)."""
    pg = int(pgid)
    # Each stat's fields after the command name, which ends at the last ")" (it may hold spaces): state ppid pgrp.
    return (
        f"if read -r stat < /proc/{pg}/stat; then set -- ${{stat##*) }}; "
        f'[ "$1" != Z ] && [ "$3" = {pg} ] && {{ echo alive; exit 0; }}; fi 2>/dev/null; '
        f"kill -0 -- -{pg} 2>/dev/null || {{ echo gone; exit 0; }}; "
        f"for pid in $(pgrep -g {pg}); do "
        'read -r stat < "/proc/$pid/stat" 2>/dev/null || continue; set -- ${stat##*) }; '
        '[ "$1" != Z ] && { echo alive; exit 0; }; '
        "done; echo gone"
    )


@dataclass(frozen=True)
class ServerGroup:
    """A launched server's process group, seen through one SSH connection (a new one after a reconnect)."""

    conn: HostConnection
    pgid: int

    async def alive(self) -> bool:
        """Whether a process of the group still runs. A zombie does not count: it is dead and holds no memory, and
        on a host whose init reaps late (a container without one) it would otherwise hold up every teardown."""
        result = await self.conn.run(alive_command(self.pgid))
        return result.stdout.strip().endswith("alive")

    async def pids(self) -> list[int]:
        result = await self.conn.run(f"pgrep -g {self.pgid} || true")
        return [int(p) for p in result.stdout.split() if p.isdigit()]

    async def environs(self) -> list[environ.ProcessEnv]:
        """Each live process of the group with its title and environment, in one command however many there are."""
        result = await self.conn.run(environ.group_command(self.pgid))
        return environ.parse_group(result.stdout)

    async def processes(self) -> list[ServerProcess]:
        """Each live process of the group with its title and the names in its environment."""
        return [ServerProcess.of(p) for p in await self.environs()]

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


class ServerApi:
    """The server's HTTP API through a local port forwarded over the run's SSH connection."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self.base_url = ""

    async def open(self, conn: HostConnection, remote_port: int) -> None:
        """Forward a local port to the server's loopback port (again after a reconnect: the old forward died
        with its connection); the HTTP session is kept."""
        local_port = await conn.forward_port(remote_port)
        self.base_url = f"http://127.0.0.1:{local_port}"
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("ServerApi.open() was not called")
        return self._session

    async def status(self, path: str) -> int | None:
        """The HTTP status, or None while nothing answers on the port (loading)."""
        try:
            async with self.session.get(self.base_url + path, timeout=HEALTH_TIMEOUT) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, TimeoutError, ConnectionError):
            return None

    async def get_json(self, path: str) -> dict[str, Any] | None:
        try:
            async with self.session.get(self.base_url + path) as response:
                if response.status != 200:
                    return None
                data = await response.json(content_type=None)
                return data if isinstance(data, dict) else None
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    async def served_models(self) -> list[Any]:
        """The models `/v1/models` lists: empty when it lists none or does not answer."""
        data = await self.get_json("/v1/models")
        models = (data or {}).get("data")
        return models if isinstance(models, list) else []

    async def get_text(self, path: str) -> str | None:
        """A GET's text when it answers 200 (Prometheus' `/metrics`, say), else None."""
        try:
            async with self.session.get(self.base_url + path) as response:
                return await response.text() if response.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
            return None

    async def post(self, path: str) -> int | None:
        try:
            async with self.session.post(self.base_url + path) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def post_json(self, path: str, body: dict[str, Any]) -> tuple[int | None, str]:
        """A POST with a JSON body: (status, the reply's first 2000 characters), or (None, why) when nothing
        answered."""
        try:
            async with self.session.post(self.base_url + path, json=body) as response:
                return response.status, (await response.text())[:2000]
        except (aiohttp.ClientError, TimeoutError) as exc:
            return None, repr(exc)

    async def generate(self, path: str, body: dict[str, Any]) -> tuple[int, str]:
        """One non-streaming generation (the engine's smoke request): (status, body text). Raises
        aiohttp.ClientError or TimeoutError."""
        async with self.session.post(self.base_url + path, json=body) as response:
            return response.status, await response.text()
