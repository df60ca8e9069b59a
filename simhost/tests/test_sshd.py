"""The demo SSH server: exec with exit codes, SFTP, loopback-only forwarding, cleanup on channel close."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import asyncssh
import pytest
from aiohttp import web

from .conftest import REPO


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[tuple[int, asyncssh.SSHKey]]:
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    authorized = tmp_path / "authorized_keys"
    authorized.write_text(client_key.export_public_key().decode())
    proc = subprocess.Popen(
        [sys.executable, "-m", "simhost.sshd", "--port", "0", "--host-key", str(tmp_path / "hostkey"),
         "--authorized-keys", str(authorized)],
        cwd=REPO, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("simhost sshd listening on 127.0.0.1:")
    yield int(line.rsplit(":", 1)[1]), client_key
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    assert (tmp_path / "hostkey").exists()


async def test_it_runs_commands_and_passes_exit_status(sshd):
    port, key = sshd
    async with asyncssh.connect("127.0.0.1", port, client_keys=[key], known_hosts=None) as conn:
        result = await conn.run("echo out; echo err >&2; pwd; exit 3")
        assert result.exit_status == 3
        assert result.stdout == f"out\n{Path.home()}\n"
        assert result.stderr == "err\n"
        result = await conn.run('cat; printf %s "$SIMHOST_TEST_MARK"', input="piped\n")
        assert result.stdout == "piped\n" and result.exit_status == 0


async def test_it_refuses_unknown_keys(sshd):
    port, _ = sshd
    other = asyncssh.generate_private_key("ssh-ed25519")
    with pytest.raises(asyncssh.PermissionDenied):
        await asyncssh.connect("127.0.0.1", port, client_keys=[other], known_hosts=None)


async def test_it_serves_sftp(sshd, tmp_path):
    port, key = sshd
    local = tmp_path / "bench.py"
    local.write_text("print('hi')\n")
    remote = tmp_path / "uploaded" / "bench.py"
    async with asyncssh.connect("127.0.0.1", port, client_keys=[key], known_hosts=None) as conn:
        async with conn.start_sftp_client() as sftp:
            await sftp.makedirs(str(remote.parent), exist_ok=True)
            await sftp.put(str(local), str(remote))
            assert await sftp.exists(str(remote))
    assert remote.read_text() == "print('hi')\n"


async def test_it_forwards_to_loopback_only(sshd):
    port, key = sshd

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/health", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    target = runner.addresses[0][1]
    try:
        async with asyncssh.connect("127.0.0.1", port, client_keys=[key], known_hosts=None) as conn:
            listener = await conn.forward_local_port("127.0.0.1", 0, "127.0.0.1", target)
            async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{listener.get_port()}/health") as r:
                assert await r.text() == "ok"
            with pytest.raises(asyncssh.ChannelOpenError):
                await conn.open_connection("192.0.2.1", 80)
    finally:
        await runner.cleanup()


async def test_it_kills_the_shell_group_but_not_setsid_children_on_close(sshd, tmp_path):
    port, key = sshd
    pidfile = tmp_path / "detached.pid"
    async with asyncssh.connect("127.0.0.1", port, client_keys=[key], known_hosts=None) as conn:
        await conn.run(f"setsid sleep 30 > /dev/null 2>&1 < /dev/null & echo $! > {pidfile}", check=True)
        process = await conn.create_process("echo $$; exec sleep 30")
        shell_pid = int((await process.stdout.readline()).strip())
        process.close()
    assert await asyncio.to_thread(_gone_within, shell_pid, 5.0)
    detached = int(pidfile.read_text())
    assert not await asyncio.to_thread(_gone_within, detached, 0.2)
    with contextlib.suppress(ProcessLookupError):
        os.kill(detached, signal.SIGKILL)


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.05)
    return not Path(f"/proc/{pid}").exists()
