"""The live-log path end to end: a log file on a GPU host -> SSH tail -> storage + channel layer -> websocket.

    python bench/log_pipeline.py                       # throughput: 1,000,000 lines, vs `cat` over SSH
    python bench/log_pipeline.py --latency             # latency: p50/p95/p99 at 1,000 lines/s for 20 s
    python bench/log_pipeline.py --web-process         # either, with the consumer in a daphne of its own

The "host" is this machine behind the simulated host's SSH server (`python -m simhost.sshd`), so the bytes take
the real path: asyncssh, `tail -F` on the host, the orchestrator's batching, `do_append_log` into the database,
the Redis channel layer, and the real `RunLogConsumer` behind the ASGI app: by default driven in this process by
Channels' WebsocketCommunicator (the tail and the consumer share one core: the conservative setup); with
`--web-process` served by a `daphne` process of its own and read over a real websocket by aiohttp, as a worker
machine and the web server are in production. The database is whatever DATABASE_URL says (PostgreSQL gives the
production figure; the SQLite default works too). Redis must be up (REDIS_URL).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # setup code below runs the ORM beside the event loop

import django  # noqa: E402

django.setup()

import aiohttp  # noqa: E402
import asyncssh  # noqa: E402
from asgiref.sync import sync_to_async  # noqa: E402
from channels.testing import WebsocketCommunicator  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

from dashboard.asgi import application  # noqa: E402
from experiments import roles  # noqa: E402
from experiments.actions.audit import Actor  # noqa: E402
from experiments.actions.experiments import do_create_experiment  # noqa: E402
from experiments.actions.users import do_set_role  # noqa: E402
from experiments.models import BenchmarkProfile, Host, LogChunk, Run, ServerConfig, SshKey  # noqa: E402
from simhost.ports import free_port, wait_for_port  # noqa: E402
from workers.hosts import host_access  # noqa: E402
from workers.run.server_log import ServerLog  # noqa: E402
from workers.ssh import HostConnection  # noqa: E402

LINE = (
    "[2026-11-29 10:00:00 TP0] Decode batch [{n}], #running-req: 4, #token: 4182, token usage: 0.01, "
    "accept len: 2.05, accept rate: 0.68, cuda graph: True, gen throughput (token/s): 351.20, #queue-req: 0"
)


def _rss_mib() -> float:
    """Current resident memory of this process (not the peak: flat is what matters)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def _start_sshd(work: Path) -> tuple[subprocess.Popen, int, Path, str]:
    client_key = work / "id_bench"
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(client_key))
    key.write_public_key(f"{client_key}.pub")
    port = free_port()
    sshd = subprocess.Popen(
        [sys.executable, "-m", "simhost.sshd", "--listen", "127.0.0.1", "--port", str(port),
         "--host-key", str(work / "host_key"), "--authorized-keys", f"{client_key}.pub"],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert sshd.stdout is not None
    sshd.stdout.readline()  # "simhost sshd listening on ..."
    host_key = asyncssh.read_public_key(str(work / "host_key.pub")).export_public_key().decode().strip()
    return sshd, port, client_key, host_key


def _make_run(work: Path, port: int, client_key: Path, host_key: str) -> tuple[Run, dict[str, str]]:
    from django.conf import settings

    settings.SPECDASH_SSH_KEY_DIR = client_key.parent
    call_command("migrate", verbosity=0)
    user, _ = get_user_model().objects.get_or_create(username="bench")
    do_set_role(user, roles.VIEWER, Actor.command())  # the live log is for anyone who reads
    public_key = " ".join(Path(f"{client_key}.pub").read_text().split()[:2])
    key, _ = SshKey.objects.update_or_create(
        name="bench-key", defaults={"file_name": client_key.name, "public_key": public_key}
    )
    host, _ = Host.objects.update_or_create(
        name="bench-host",
        defaults=dict(address="127.0.0.1", port=port, username=os.environ.get("USER", "root"),
                      ssh_key=key, host_key=host_key, work_dir=str(work), active_run=None),
    )  # fmt: skip
    experiment = do_create_experiment(
        actor=Actor(user),
        name="log pipeline bench",
        host=host,
        baseline=ServerConfig(name="flood", model_path="/models/none"),
        candidates=[],
        profile=BenchmarkProfile(name="bench", concurrency=[1]),
    )
    run = Run.objects.select_related("host", "config", "experiment__profile").get(experiment=experiment)
    client = Client()
    client.force_login(user)
    cookie = {"cookie": f"sessionid={client.cookies['sessionid'].value}"}
    return run, cookie


async def _follow(run: Run, log_path: Path, writer_pid: int) -> tuple[HostConnection, ServerLog]:
    """Follow the file as a run's orchestrator does: its ServerLog (tail, storage, broadcast, facts) over SSH."""
    run.log_path = str(log_path)
    run.remote_pid = writer_pid
    conn = await HostConnection.open(host_access(run.host))
    run_log = ServerLog(run)
    await run_log.follow(conn)
    return conn, run_log


class _InProcessPage:
    """The consumer on this process's loop, through Channels' WebsocketCommunicator."""

    def __init__(self, run: Run, cookie: dict[str, str]) -> None:
        headers = [(b"cookie", cookie["cookie"].encode()), (b"origin", b"http://127.0.0.1")]
        self.communicator = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/log/?after=0", headers=headers)

    async def open(self) -> None:
        connected, _ = await self.communicator.connect(timeout=10)
        assert connected, "the websocket was refused"

    async def receive(self) -> dict:
        return await self.communicator.receive_json_from(timeout=60)

    async def close(self) -> None:
        await self.communicator.disconnect()


class _WebProcessPage:
    """The consumer in a daphne process of its own (as in production), read over a real websocket."""

    def __init__(self, run: Run, cookie: dict[str, str]) -> None:
        port = free_port()
        self.url = f"ws://127.0.0.1:{port}/ws/runs/{run.pk}/log/?after=0"
        self.headers = {"Cookie": cookie["cookie"], "Origin": f"http://127.0.0.1:{port}"}
        env = {**os.environ}
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # the served process runs as in production
        argv = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "dashboard.asgi:application"]
        # daphne's log is kept where the bench failed (a refused or closed socket is explained there).
        self.log = tempfile.NamedTemporaryFile(prefix="daphne-", suffix=".log", delete=False)
        self.daphne = subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        wait_for_port(port, timeout=60, process=self.daphne, what="daphne")

    async def open(self) -> None:
        self.http = aiohttp.ClientSession()
        self.socket = await self.http.ws_connect(self.url, headers=self.headers, max_msg_size=0)

    async def receive(self) -> dict:
        message = await self.socket.receive(timeout=60)
        assert message.type == aiohttp.WSMsgType.TEXT, message
        return json.loads(message.data)

    async def close(self) -> None:
        await self.socket.close()
        await self.http.close()
        self.daphne.terminate()
        self.daphne.wait()
        os.unlink(self.log.name)


async def _websocket(run: Run, cookie: dict[str, str], web_process: bool) -> _InProcessPage | _WebProcessPage:
    page = (_WebProcessPage if web_process else _InProcessPage)(run, cookie)
    try:
        await page.open()
    except BaseException:
        if isinstance(page, _WebProcessPage):
            page.daphne.kill()
            print(f"daphne's log: {page.log.name}", file=sys.stderr)
        raise
    return page


_WHAT_RUNS_HERE = {False: "tail + storage + consumer", True: "tail + storage; the consumer runs in daphne"}


async def _batches_stored(run: Run) -> str:
    count = await sync_to_async(LogChunk.objects.filter(run=run).count)()
    return f"{count:,} batches stored ({run.log_lines / max(count, 1):,.0f} lines each on average)"


async def _receive_lines(page: _InProcessPage | _WebProcessPage, until: int, on_lines=None) -> None:
    received = 0
    while received < until:
        message = await page.receive()
        if message["type"] != "lines":
            continue
        if on_lines:
            on_lines(message["lines"])
        received = message["first"] + len(message["lines"]) - 1


async def throughput(lines: int, web_process: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log_path = work / "flood.log"
        with log_path.open("w") as out:
            out.writelines(LINE.format(n=n) + "\n" for n in range(1, lines + 1))
        size_mb = log_path.stat().st_size / 1e6
        sshd, port, client_key, host_key = _start_sshd(work)
        try:
            run, cookie = await sync_to_async(_make_run)(work, port, client_key, host_key)
            conn = await HostConnection.open(host_access(run.host))
            started = time.perf_counter()
            result = await conn.run(f"cat {log_path} | wc -c", timeout=120)
            cat_s = time.perf_counter() - started
            assert int(result.stdout.strip()) == log_path.stat().st_size
            started = time.perf_counter()
            await conn._conn.run(f"cat {log_path}", encoding=None)  # the bytes themselves over SSH
            cat_s = time.perf_counter() - started
            await conn.close()

            rss_start = _rss_mib()
            communicator = await _websocket(run, cookie, web_process)
            finished = await asyncio.create_subprocess_exec("true")
            await finished.wait()  # a dead pid: `tail --pid` drains the file and ends
            started = time.perf_counter()
            tail_conn, run_log = await _follow(run, log_path, finished.pid)
            rss_samples: list[float] = []

            def sample_memory(_lines: list[str]) -> None:
                rss_samples.append(_rss_mib())

            await _receive_lines(communicator, lines, sample_memory)
            websocket_s = time.perf_counter() - started
            assert run_log.task is not None
            await run_log.task
            stored_s = time.perf_counter() - started
            await communicator.close()
            await run_log.stop_now()
            await tail_conn.close()
            await sync_to_async(run.refresh_from_db)()
            assert run.log_lines == lines, f"stored {run.log_lines} of {lines} lines"

            cat_rate = lines / cat_s
            ws_rate = lines / websocket_s
            print(f"log file: {lines:,} lines, {size_mb:.0f} MB")
            print(f"cat over SSH (physical limit): {cat_s:6.2f} s  {cat_rate:12,.0f} lines/s")
            print(f"stored in the database:        {stored_s:6.2f} s  {lines / stored_s:12,.0f} lines/s")
            print(f"received by the websocket:     {websocket_s:6.2f} s  {ws_rate:12,.0f} lines/s")
            print(f"ratio to the physical limit:   {ws_rate / cat_rate:.2f}")
            print(await _batches_stored(run))
            quarter = max(1, len(rss_samples) // 4)
            trend = ", ".join(f"{rss_samples[min(i * quarter, len(rss_samples) - 1)]:.0f}" for i in range(4))
            print(f"RSS of this process ({_WHAT_RUNS_HERE[web_process]}): {rss_start:.0f} MiB before, {trend}, "
                  f"{_rss_mib():.0f} MiB after (MiB, at each quarter of the stream)")  # fmt: skip
        finally:
            sshd.terminate()
            sshd.wait()


async def latency(rate: int, seconds: int, web_process: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log_path = work / "paced.log"
        log_path.touch()
        sshd, port, client_key, host_key = _start_sshd(work)
        try:
            run, cookie = await sync_to_async(_make_run)(work, port, client_key, host_key)
            communicator = await _websocket(run, cookie, web_process)
            # The writer stamps each line with the wall clock when written (same machine, same clock).
            writer = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _PACED_WRITER, str(log_path), str(rate), str(seconds)
            )
            cpu_start = time.process_time()
            tail_conn, run_log = await _follow(run, log_path, writer.pid)
            delays: list[float] = []

            def on_lines(lines: list[str]) -> None:
                now = time.time()
                delays.extend(now - float(line.rsplit(" ", 1)[1]) for line in lines)

            await _receive_lines(communicator, rate * seconds, on_lines)
            cpu_s = time.process_time() - cpu_start
            await writer.wait()
            await communicator.close()
            await run_log.stop_now()
            await tail_conn.close()
            delays.sort()
            ms = [d * 1000 for d in delays]
            print(f"{len(ms):,} lines at {rate:,} lines/s for {seconds} s, written -> received by the websocket:")
            print(f"p50 {statistics.median(ms):.0f} ms  p95 {ms[int(len(ms) * 0.95)]:.0f} ms  "
                  f"p99 {ms[int(len(ms) * 0.99)]:.0f} ms  max {ms[-1]:.0f} ms")  # fmt: skip
            await sync_to_async(run.refresh_from_db)()
            print(await _batches_stored(run))
            print(f"CPU of this process ({_WHAT_RUNS_HERE[web_process]}): {cpu_s:.1f} s in {seconds} s "
                  f"({cpu_s / seconds:.0%} of a core)")  # fmt: skip
        finally:
            sshd.terminate()
            sshd.wait()


_PACED_WRITER = """
import sys, time
path, rate, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "a", buffering=1) as out:
    start = time.time()
    for n in range(rate * seconds):
        due = start + n / rate
        pause = due - time.time()
        if pause > 0:
            time.sleep(pause)
        out.write(f"[2026-11-29 10:00:00 TP0] Decode batch [{n + 1}], gen throughput (token/s): 93.10 {time.time()}\\n")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--latency", action="store_true", help="measure latency at a steady rate instead")
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--web-process", action="store_true", help="serve the websocket from a daphne of its own")
    args = parser.parse_args()
    if args.latency:
        asyncio.run(latency(args.rate, args.seconds, args.web_process))
    else:
        asyncio.run(throughput(args.lines, args.web_process))


if __name__ == "__main__":
    main()
