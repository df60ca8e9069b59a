"""`python -m simhost.sshd`: a small SSH server on loopback for the zero-setup demo.

Public-key auth only (the authorized_keys file is re-read on every connection); exec requests run as
`/bin/bash -c <command>` as the current user in $HOME with this server's environment; SFTP on the real
filesystem; direct-tcpip forwarding to 127.0.0.1/localhost only. When a channel closes, the exec'd shell's
process group is killed (processes that called setsid live on, as with OpenSSH).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import asyncssh

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
HOME = os.path.expanduser("~")


class _Server(asyncssh.SSHServer):
    def __init__(self, authorized_keys: Path) -> None:
        self._authorized_keys = authorized_keys
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn

    def begin_auth(self, username: str) -> bool:
        assert self._conn is not None
        try:
            self._conn.set_authorized_keys(str(self._authorized_keys))
        except (OSError, ValueError):
            self._conn.set_authorized_keys(asyncssh.import_authorized_keys(""))
        return True

    def password_auth_supported(self) -> bool:
        return False

    def kbdint_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> bool:
        if dest_host in LOOPBACK:
            return True
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, "only loopback forwarding")

    def server_requested(self, listen_host: str, listen_port: int) -> bool:
        return False


def _kill_group(pgid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


async def _pump(reader: asyncio.StreamReader, writer: asyncssh.SSHWriter[bytes]) -> None:
    with contextlib.suppress(OSError, asyncssh.Error):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


async def _pump_stdin(reader: asyncssh.SSHReader[bytes], writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncssh.Error):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()


async def _handle(process: asyncssh.SSHServerProcess[bytes]) -> None:
    command = process.command
    argv = ["/bin/bash", "-c", command] if command is not None else ["/bin/bash", "-l"]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=HOME,
        env=dict(os.environ),
        start_new_session=True,  # its own group, so closing the channel can kill the shell and its jobs
    )
    assert proc.stdin and proc.stdout and proc.stderr
    stdin = asyncio.ensure_future(_pump_stdin(process.stdin, proc.stdin))
    # Like OpenSSH, the session ends when the shell has exited and its output pipes are closed.
    finished = asyncio.ensure_future(
        asyncio.gather(_pump(proc.stdout, process.stdout), _pump(proc.stderr, process.stderr), proc.wait())
    )
    closed = asyncio.ensure_future(process.wait_closed())
    try:
        waiting: set[asyncio.Future[Any]] = {finished, closed}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if finished.done() and not closed.done():
            code = proc.returncode or 0
            if code < 0:
                process.exit_with_signal(signal.Signals(-code).name.removeprefix("SIG"))
            else:
                process.exit(code)
    finally:
        for task in (stdin, finished, closed):
            task.cancel()
        # Collect what the cancelled pumps raised, so nothing is reported as "never retrieved".
        await asyncio.gather(stdin, finished, closed, return_exceptions=True)
        if proc.returncode is None:
            _kill_group(proc.pid)
            with contextlib.suppress(ProcessLookupError):
                await proc.wait()


def _host_key(path: Path) -> asyncssh.SSHKey:
    if path.exists():
        return asyncssh.read_private_key(str(path))
    key = asyncssh.generate_private_key("ssh-ed25519")
    path.parent.mkdir(parents=True, exist_ok=True)
    key.write_private_key(str(path))
    path.chmod(0o600)
    key.write_public_key(str(path) + ".pub")
    return key


async def serve(listen: str, port: int, host_key: Path, authorized_keys: Path) -> None:
    key = _host_key(host_key)
    acceptor = await asyncssh.create_server(
        lambda: _Server(authorized_keys),
        listen,
        port,
        server_host_keys=[key],
        process_factory=_handle,
        sftp_factory=True,
        encoding=None,
        allow_scp=True,
        agent_forwarding=False,
        x11_forwarding=False,
    )
    bound = acceptor.sockets[0].getsockname()[1] if acceptor.sockets else port
    print(f"simhost sshd listening on {listen}:{bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    acceptor.close()
    await acceptor.wait_closed()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simhost.sshd", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--listen", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=2222, help="port (default 2222; 0 = any free port)")
    parser.add_argument(
        "--host-key",
        type=Path,
        default=Path("simhost_host_ed25519_key"),
        help="host private key; an ed25519 key is generated there if missing",
    )
    parser.add_argument(
        "--authorized-keys",
        type=Path,
        default=Path.home() / ".ssh" / "authorized_keys",
        help="public keys allowed to log in (re-read on every connection)",
    )
    ns = parser.parse_args(argv)
    asyncio.run(serve(ns.listen, ns.port, ns.host_key, ns.authorized_keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())
