"""Everything that talks to a GPU host goes through `HostConnection` (asyncssh, pinned host key)."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

# AES-GCM before asyncssh's first choice, ChaCha20-Poly1305: with the processor's AES instructions, decrypting a 32 KiB
# packet costs 12 µs against 42 here (ChaCha's Poly1305 tag and length header are separate calls per packet), and a
# log flood's bytes are decrypted on the worker's event loop. ChaCha20 and CTR stay as fallbacks for a host that
# offers no GCM; an allow list, so nothing weaker than these is ever negotiated.
ENCRYPTION_ALGS = (
    "aes256-gcm@openssh.com",
    "aes128-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes256-ctr",
    "aes192-ctr",
    "aes128-ctr",
)


class SSHError(Exception):
    """The host could not be reached or refused us; the message says why in a user's words."""


class HostKeyMismatch(SSHError):
    pass


class ConnectionLost(SSHError):
    """The connection broke under a command; reconnecting may well work (the remote server keeps running)."""


class FileTooLarge(SSHError):
    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(f"{path} is {size:,} bytes, over the {limit:,}-byte limit")
        self.path, self.size, self.limit = path, size, limit


@dataclass(frozen=True)
class HostAccess:
    """What is needed to reach a host, detached from the ORM so async code never touches the database."""

    name: str
    address: str
    port: int
    username: str
    key_path: Path | None
    host_key: str  # pinned OpenSSH public key; empty only while pinning
    shell_setup: str = ""
    work_dir: str = "specdash-work"


@dataclass(frozen=True)
class CommandResult:
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def stderr_tail(self, lines: int = 5) -> str:
        """The last lines of stderr: what a failure message quotes."""
        return "\n".join(self.stderr.strip().splitlines()[-lines:])


def quote_command(argv: Sequence[str]) -> str:
    """One shell word per argument: a value with metacharacters is passed literally, never executed."""
    return " ".join(shlex.quote(str(arg)) for arg in argv)


def env_assignments(env: Mapping[str, str]) -> list[str]:
    return [f"{name}={value}" for name, value in env.items()]


class HostConnection:
    def __init__(self, access: HostAccess, conn: asyncssh.SSHClientConnection) -> None:
        self.access = access
        self._conn = conn

    @classmethod
    async def open(cls, access: HostAccess, *, timeout: float = 15.0, pin: bool = False) -> HostConnection:
        """Connect; the host key must match the pinned one (or, with `pin`, any key is accepted to record it)."""
        known_hosts: Any
        if pin:
            known_hosts = None
        else:
            if not access.host_key.strip():
                raise SSHError(f"Host {access.name} has no pinned host key; test the connection first.")
            try:
                pinned = asyncssh.import_public_key(access.host_key.strip())
            except (asyncssh.KeyImportError, ValueError) as exc:
                raise SSHError(f"The pinned host key of {access.name} is not a valid public key: {exc}") from exc
            known_hosts = ([pinned], [], [])
        client_keys = [str(access.key_path)] if access.key_path else None
        try:
            conn = await asyncio.wait_for(
                asyncssh.connect(
                    access.address,
                    port=access.port,
                    username=access.username,
                    client_keys=client_keys,
                    known_hosts=known_hosts,
                    config=[],
                    encryption_algs=ENCRYPTION_ALGS,
                    keepalive_interval=15,
                    keepalive_count_max=4,
                ),
                timeout,
            )
        except asyncssh.HostKeyNotVerifiable as exc:
            raise HostKeyMismatch(
                f"The host key of {access.name} ({access.address}:{access.port}) does not match the pinned key; "
                "refusing to connect. If the host was really reinstalled, re-pin it with a connection test."
            ) from exc
        except asyncssh.PermissionDenied as exc:
            raise SSHError(f"{access.username}@{access.address}:{access.port} refused our key: {exc}") from exc
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
            raise SSHError(f"Cannot reach {access.address}:{access.port}: {reason}") from exc
        return cls(access, conn)

    @property
    def server_host_key(self) -> str:
        key = self._conn.get_server_host_key()
        return key.export_public_key().decode().strip() if key else ""

    def script(self, command: str) -> str:
        """The command prefixed with the host's shell setup, run by bash whatever the login shell is."""
        setup = self.access.shell_setup.strip()
        body = f"{setup}\n{command}" if setup else command
        return "exec bash -c " + shlex.quote(body)

    async def run(self, command: str, *, timeout: float | None = 60.0, input: str | None = None) -> CommandResult:
        """`input`: the command's standard input (closed after it); None: none."""
        try:
            result = await asyncio.wait_for(self._conn.run(self.script(command), check=False, input=input), timeout)
        except TimeoutError as exc:
            raise SSHError(f"Command timed out after {timeout} s on {self.access.name}: {command[:200]}") from exc
        except (OSError, asyncssh.Error) as exc:
            raise ConnectionLost(f"SSH connection to {self.access.name} failed: {exc!r}") from exc
        exit_status = result.exit_status if result.exit_status is not None else 255
        return CommandResult(exit_status, _text(result.stdout), _text(result.stderr))

    async def run_reading_stderr(
        self,
        command: str,
        *,
        on_stderr_line: Callable[[str], Awaitable[None]],
        timeout: float | None = 60.0,
        max_line: int = 4096,
    ) -> CommandResult:
        """`run`, with each line of stderr handed to `on_stderr_line` as it arrives (a client's progress), and kept
        for the result as `run` keeps it. Lines are cut at `max_line` characters."""

        async def execute() -> CommandResult:
            process = await self._conn.create_process(self.script(command), encoding="utf-8", errors="replace")
            try:
                stdout_task = asyncio.ensure_future(process.stdout.read())
                stderr_lines: list[str] = []
                while line := await process.stderr.readline():  # "" at the end of the stream
                    stderr_lines.append(line)
                    await on_stderr_line(line[:max_line])
                stdout = await stdout_task
                completed = await process.wait(check=False)
            finally:
                process.close()
            exit_status = completed.exit_status if completed.exit_status is not None else 255
            return CommandResult(exit_status, _text(stdout), "".join(stderr_lines))

        try:
            return await asyncio.wait_for(execute(), timeout)
        except TimeoutError as exc:
            raise SSHError(f"Command timed out after {timeout} s on {self.access.name}: {command[:200]}") from exc
        except (OSError, asyncssh.Error) as exc:
            raise ConnectionLost(f"SSH connection to {self.access.name} failed: {exc!r}") from exc

    async def start(self, command: str) -> asyncssh.SSHClientProcess:
        """A long-running remote command whose stdout is read as bytes (the log tail)."""
        try:
            return await self._conn.create_process(self.script(command), encoding=None)
        except (OSError, asyncssh.Error) as exc:
            raise ConnectionLost(f"SSH connection to {self.access.name} failed: {exc!r}") from exc

    async def put_tree(self, local_dir: Path, remote_parent: str) -> None:
        """Copy a directory into `remote_parent` (created if missing), replacing files of the same name."""
        try:
            async with self._conn.start_sftp_client() as sftp:
                await sftp.makedirs(remote_parent, exist_ok=True)
                await sftp.put(str(local_dir), remote_parent, recurse=True)
        except (OSError, asyncssh.Error) as exc:
            raise SSHError(f"Could not copy {local_dir.name} to {self.access.name}:{remote_parent}: {exc}") from exc

    async def put_bytes(self, data: bytes, remote_path: str) -> None:
        """Write `data` to the file `remote_path` over SFTP (its directory must exist): data reaches the host as a
        file, never inside a command line."""
        try:
            async with self._conn.start_sftp_client() as sftp, sftp.open(remote_path, "wb") as remote:
                await remote.write(data)
        except (OSError, asyncssh.Error) as exc:
            raise SSHError(f"Could not write {self.access.name}:{remote_path}: {exc}") from exc

    async def get_bytes(self, remote_path: str, max_bytes: int) -> bytes:
        """Read the file `remote_path` over SFTP, at most `max_bytes` of it; a larger file raises FileTooLarge
        before anything past the limit crosses the network."""
        try:
            async with self._conn.start_sftp_client() as sftp:
                size = (await sftp.stat(remote_path)).size or 0
                if size > max_bytes:
                    raise FileTooLarge(remote_path, size, max_bytes)
                async with sftp.open(remote_path, "rb") as remote:
                    raw: bytes | str = await remote.read(max_bytes + 1)
        except (OSError, asyncssh.Error) as exc:
            raise SSHError(f"Could not read {self.access.name}:{remote_path}: {exc}") from exc
        data = raw if isinstance(raw, bytes) else raw.encode()
        if len(data) > max_bytes:  # it grew since the stat
            raise FileTooLarge(remote_path, len(data), max_bytes)
        return data

    async def get_range(self, remote_path: str, offset: int, length: int) -> tuple[bytes, int]:
        """Up to `length` bytes of the file `remote_path` from byte `offset` over SFTP, and the file's size as it
        was read (a slice of a log that may still grow)."""
        try:
            async with self._conn.start_sftp_client() as sftp:
                size = (await sftp.stat(remote_path)).size or 0
                async with sftp.open(remote_path, "rb") as remote:
                    raw: bytes | str = await remote.read(max(0, min(length, size - offset)), offset)
        except (OSError, asyncssh.Error) as exc:
            raise SSHError(f"Could not read {self.access.name}:{remote_path}: {exc}") from exc
        return (raw if isinstance(raw, bytes) else raw.encode()), size

    async def forward_port(self, remote_port: int) -> int:
        """A local loopback port that reaches 127.0.0.1:`remote_port` on the host through this connection."""
        try:
            listener = await self._conn.forward_local_port("127.0.0.1", 0, "127.0.0.1", remote_port)
        except (OSError, asyncssh.Error) as exc:
            raise ConnectionLost(f"Port forwarding to {self.access.name} failed: {exc!r}") from exc
        return listener.get_port()

    async def close(self) -> None:
        self._conn.close()
        try:
            await asyncio.wait_for(self._conn.wait_closed(), 5)
        except (TimeoutError, OSError, asyncssh.Error):
            pass


def _text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value
