"""The live-log path end to end: a log file on a GPU host -> SSH tail -> storage + channel layer -> websocket.

    python bench/log_pipeline.py                       # throughput: 1,000,000 lines, vs `cat` over SSH
    python bench/log_pipeline.py --flood traceback     # the same with a crash's traceback storm
    python bench/log_pipeline.py --latency             # latency: p50/p95/p99 at 1,000 lines/s for 20 s
    python bench/log_pipeline.py --web-process         # either, with the consumer in a daphne of its own

The "host" is this machine behind a real OpenSSH sshd on loopback (bench/openssh_host.py), as a GPU host is
reached, so the bytes take the real path: asyncssh, `tail -F` on the host, the orchestrator's batching and fact
reading, `do_append_log` into the database, the Redis channel layer, and the real `RunLogConsumer` behind the ASGI
app: by default driven in this process by Channels' WebsocketCommunicator and read here too (the tail, the consumer
and the client share one core: the conservative setup); with `--web-process` served by a `daphne` process of its
own and read over a real websocket by an aiohttp client in a process of its own (the browser), as a worker
machine, the web server and a browser are in production. The database is whatever DATABASE_URL says (PostgreSQL
gives the production figure; the SQLite default works too). Redis must be up (REDIS_URL).

The anchor is `cat` of the same file over the same SSH connection, its bytes read as they come and dropped; the
throughput run also prints what every process on the machine spent through the stream (the chain's CPU).
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # setup code below runs the ORM beside the event loop

import django  # noqa: E402

django.setup()

from asgiref.sync import sync_to_async  # noqa: E402
from channels.testing import WebsocketCommunicator  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from openssh_host import KEY_NAME, start_sshd  # noqa: E402
from proc_cpu import TICK, busiest_since, every_process, machine_ticks  # noqa: E402

from dashboard.asgi import application  # noqa: E402
from experiments import roles  # noqa: E402
from experiments.actions.audit import Actor  # noqa: E402
from experiments.actions.experiments import do_create_experiment  # noqa: E402
from experiments.actions.users import do_set_role  # noqa: E402
from experiments.live import log_messages  # noqa: E402
from experiments.models import BenchmarkProfile, Host, LogChunk, Run, ServerConfig, SshKey  # noqa: E402
from simhost import tracebacks  # noqa: E402
from simhost.ports import free_port, wait_for_port  # noqa: E402
from workers.hosts import host_access  # noqa: E402
from workers.run.server_log import ServerLog  # noqa: E402
from workers.ssh import HostConnection  # noqa: E402

LINE = (
    "[2026-11-29 10:00:00 TP0] Decode batch [{n}], #running-req: 4, #token: 4182, token usage: 0.01, "
    "accept len: 2.05, accept rate: 0.68, cuda graph: True, gen throughput (token/s): 351.20, #queue-req: 0"
)


def _decode_flood(count: int) -> Iterator[str]:
    """SGLang's Decode-batch lines (a log_flood's)."""
    return (LINE.format(n=n) for n in range(1, count + 1))


def _traceback_flood(count: int) -> Iterator[str]:
    """A crash's traceback storm: every rank's scheduler logging the same traceback, over and over."""
    block = tracebacks.request_crash_traceback(speculative=True).splitlines()
    written = 0
    while written < count:
        rank = (written // len(block)) % 8
        for i, line in enumerate(block[: count - written]):
            yield f"[2026-11-29 10:00:00 TP{rank}] Scheduler hit an exception: {line}" if i == 0 else line
        written += min(len(block), count - written)


FLOODS: dict[str, Callable[[int], Iterator[str]]] = {"decode": _decode_flood, "traceback": _traceback_flood}


def _rss_mib() -> float:
    """Current resident memory of this process (not the peak: flat is what matters)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


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
    """The consumer on this process's loop, through Channels' WebsocketCommunicator, read here too."""

    def __init__(self, run: Run, cookie: dict[str, str]) -> None:
        headers = [(b"cookie", cookie["cookie"].encode()), (b"origin", b"http://127.0.0.1")]
        self.communicator = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/log/?after=0", headers=headers)

    async def open(self) -> None:
        connected, _ = await self.communicator.connect(timeout=10)
        assert connected, "the websocket was refused"

    async def receive_lines(self, until: int, stamped: bool) -> Received:
        received = Received()
        last = 0
        while last < until:
            message = log_messages.parse(await self.communicator.receive_from(timeout=60))
            if message["type"] == "lines":
                if stamped:
                    received.note(message["lines"])
                last = message["first"] + len(message["lines"]) - 1
        received.finished_at = time.time()
        return received

    async def close(self) -> None:
        await self.communicator.disconnect()


class _WebProcessPage:
    """The consumer in a daphne process of its own (as in production), read over a real websocket by a client
    process of its own (the browser, which in production is on another machine)."""

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
        self.client: asyncio.subprocess.Process | None = None

    async def open(self) -> None:
        self.client = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _WEBSOCKET_CLIENT, self.url, json.dumps(self.headers), str(REPO),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, limit=1 << 26,  # its answer: a line with every delay
        )  # fmt: skip
        assert self.client.stdout is not None
        line = await asyncio.wait_for(self.client.stdout.readline(), 30)
        assert line.strip() == b"connected", f"the websocket client said {line!r}"

    async def receive_lines(self, until: int, stamped: bool) -> Received:
        assert self.client is not None and self.client.stdin is not None and self.client.stdout is not None
        self.client.stdin.write(f"{until} {int(stamped)}\n".encode())
        await self.client.stdin.drain()
        answer = json.loads(await self.client.stdout.readline())
        received = Received(delays=answer["delays"])
        received.finished_at = answer["finished_at"]
        return received

    async def close(self) -> None:
        if self.client is not None and self.client.returncode is None:
            self.client.kill()
            await self.client.wait()
        self.daphne.terminate()
        self.daphne.wait()
        os.unlink(self.log.name)


@dataclass
class Received:
    """What the websocket client received: when its last line came, and each line's delay since it was written
    (lines stamped with the wall clock by the paced writer; none for the flood)."""

    delays: list[float] = field(default_factory=list)
    finished_at: float = 0.0

    def note(self, lines: list[str]) -> None:
        now = time.time()
        self.delays.extend(now - float(line.rsplit(" ", 1)[1]) for line in lines)


# The browser's part, in a process of its own: connect, say so, then read until the line number asked for on stdin
# and answer with when the last one came and, for stamped lines, each one's delay.
_WEBSOCKET_CLIENT = """
import asyncio, json, sys, time
import aiohttp
sys.path.insert(0, sys.argv[3])
from experiments.live import log_messages  # pure: no Django

async def main(url, headers):
    async with aiohttp.ClientSession() as http:
        socket = await http.ws_connect(url, headers=headers, max_msg_size=0)
        print("connected", flush=True)
        asked = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        until, stamped = (int(word) for word in asked.split())
        last, delays = 0, []
        while last < until:
            message = await socket.receive(timeout=60)
            assert message.type == aiohttp.WSMsgType.TEXT, message
            data = log_messages.parse(message.data)
            if data["type"] != "lines":
                continue
            now = time.time()
            if stamped:
                delays.extend(now - float(line.rsplit(" ", 1)[1]) for line in data["lines"])
            last = data["first"] + data["count"] - 1
        print(json.dumps({"finished_at": time.time(), "delays": delays}), flush=True)
        await socket.close()

asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
"""


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


_WHAT_RUNS_HERE = {
    False: "tail + storage + consumer + websocket client",
    True: "tail + storage; the consumer runs in daphne, the client in a process of its own",
}


async def _cat_seconds(conn: HostConnection, log_path: Path, size: int) -> float:
    """`cat` of the file over the connection, its bytes read here as they come and dropped: the link's own speed.
    (Held whole, as `run()` holds them, it also measures this process's page faults: 1.1-1.2 s for the 202 MB
    Decode flood on one machine, against 0.3 s read as they come.)"""
    started = time.perf_counter()
    process = await conn.start(f"cat {log_path}")
    received = 0
    while chunk := await process.stdout.read(1 << 20):
        received += len(chunk)
    await process.wait()
    assert received == size, f"cat over SSH gave {received:,} of {size:,} bytes"
    return time.perf_counter() - started


async def _batches_stored(run: Run) -> str:
    count = await sync_to_async(LogChunk.objects.filter(run=run).count)()
    return f"{count:,} batches stored ({run.log_lines / max(count, 1):,.0f} lines each on average)"


async def _sample_memory(samples: list[float]) -> None:
    while True:
        samples.append(_rss_mib())
        await asyncio.sleep(0.1)


async def throughput(lines: int, web_process: bool, flood: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log_path = work / "flood.log"
        with log_path.open("w") as out:
            out.writelines(line + "\n" for line in FLOODS[flood](lines))
        size = log_path.stat().st_size
        size_mb = size / 1e6
        sshd, port, key_dir, host_key = start_sshd(work)
        client_key = key_dir / KEY_NAME
        try:
            run, cookie = await sync_to_async(_make_run)(work, port, client_key, host_key)
            conn = await HostConnection.open(host_access(run.host))
            result = await conn.run(f"cat {log_path} | wc -c", timeout=120)  # the file in the host's page cache
            assert int(result.stdout.strip()) == size
            cat_s = await _cat_seconds(conn, log_path, size)
            started = time.perf_counter()
            await conn._conn.run(f"cat {log_path}", encoding=None)  # held whole: the anchor until 2026-12-07
            held_cat_s = time.perf_counter() - started
            await conn.close()

            rss_start = _rss_mib()
            page = await _websocket(run, cookie, web_process)
            try:
                finished = await asyncio.create_subprocess_exec("true")
                await finished.wait()  # a dead pid: `tail --pid` drains the file and ends
                rss_samples: list[float] = []
                sampling = asyncio.create_task(_sample_memory(rss_samples))
                processes_before, ticks_before = every_process(), machine_ticks()
                started_wall, started = time.time(), time.perf_counter()
                tail_conn, run_log = await _follow(run, log_path, finished.pid)
                received = await page.receive_lines(lines, stamped=False)
                websocket_s = received.finished_at - started_wall
                assert run_log.task is not None
                await run_log.task
                stored_s = time.perf_counter() - started
                busiest = busiest_since(processes_before)
                busy, total = (after - before for after, before in zip(machine_ticks(), ticks_before, strict=True))
                sampling.cancel()
                await run_log.stop_now()
                await tail_conn.close()
                await sync_to_async(run.refresh_from_db)()
                assert run.log_lines == lines, f"stored {run.log_lines} of {lines} lines"

                cat_rate = lines / cat_s
                ws_rate = lines / websocket_s
                print(f"log file: {lines:,} lines ({flood}), {size_mb:.0f} MB")
                print(f"cat over SSH (physical limit): {cat_s:6.2f} s  {cat_rate:12,.0f} lines/s")
                print(f"  (its output held whole:      {held_cat_s:6.2f} s, the anchor of figures before 2026-12-07)")
                print(f"stored in the database:        {stored_s:6.2f} s  {lines / stored_s:12,.0f} lines/s")
                print(f"received by the websocket:     {websocket_s:6.2f} s  {ws_rate:12,.0f} lines/s")
                print(f"ratio to the physical limit:   {ws_rate / cat_rate:.2f}")
                print(await _batches_stored(run))
                print(f"the machine's CPU through the stream: {busy / max(total, 1):.0%} busy, "
                      f"{busy / TICK:.1f} CPU-s; the busiest processes (CPU-s):")  # fmt: skip
                for pid, name, cpu_s in busiest:
                    print(f"  {cpu_s:5.2f}  {'this process (the worker side)' if pid == os.getpid() else name}")
                rss_samples = rss_samples or [_rss_mib()]
                quarter = max(1, len(rss_samples) // 4)
                trend = ", ".join(f"{rss_samples[min(i * quarter, len(rss_samples) - 1)]:.0f}" for i in range(4))
                print(f"RSS of this process ({_WHAT_RUNS_HERE[web_process]}): {rss_start:.0f} MiB before, {trend}, "
                      f"{_rss_mib():.0f} MiB after (at each quarter of the stream)")  # fmt: skip
            finally:
                await page.close()
        finally:
            sshd.terminate()
            sshd.wait()


async def latency(rate: int, seconds: int, web_process: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log_path = work / "paced.log"
        log_path.touch()
        sshd, port, key_dir, host_key = start_sshd(work)
        client_key = key_dir / KEY_NAME
        try:
            run, cookie = await sync_to_async(_make_run)(work, port, client_key, host_key)
            page = await _websocket(run, cookie, web_process)
            try:
                # The writer stamps each line with the wall clock when written (same machine, same clock).
                writer = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", _PACED_WRITER, str(log_path), str(rate), str(seconds)
                )
                cpu_start = time.process_time()
                tail_conn, run_log = await _follow(run, log_path, writer.pid)
                received = await page.receive_lines(rate * seconds, stamped=True)
                cpu_s = time.process_time() - cpu_start
                await writer.wait()
                await run_log.stop_now()
                await tail_conn.close()
                delays = received.delays
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
                await page.close()
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
    parser.add_argument("--flood", choices=sorted(FLOODS), default="decode", help="what the flood's lines are")
    parser.add_argument("--latency", action="store_true", help="measure latency at a steady rate instead")
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--web-process", action="store_true", help="serve the websocket from a daphne of its own")
    args = parser.parse_args()
    if args.latency:
        asyncio.run(latency(args.rate, args.seconds, args.web_process))
    else:
        asyncio.run(throughput(args.lines, args.web_process, args.flood))


if __name__ == "__main__":
    main()
