"""Many browsers watching one live run's log: every line to each, in order, once; latency; the web process's memory.

    python bench/many_watchers.py [--clients 50] [--rate 1000] [--seconds 20]

The lines take the production path of bench/log_pipeline.py (its helpers are reused): a writer on the "GPU host"
(this machine behind a real OpenSSH sshd, bench/openssh_host.py) appends Decode-batch lines at `--rate` a second,
each stamped with the wall clock; the run's ServerLog tails them over SSH, stores each batch with `do_append_log`
and broadcasts it on the Redis channel layer. The web process is a real daphne serving
`dashboard.asgi:application`, as `make demo` and the web unit start it, on the same database and Redis. The
browsers are `bench/log_watchers.py`, a process of their own: K aiohttp websocket clients of `/ws/runs/<id>/log/`,
logged in with a session cookie, each checking that every line arrives exactly once and in order and timing
written -> received.

Two phases in the same run, each on a fresh run of its own: the anchor with 1 client, then `--clients`. Printed
per phase: lines lost, duplicated or out of order per client, latency p50/p95/p99/max over all clients (and the
ratio of the p95s), daphne's resident memory (before the clients, connected, mid-stream, at the end, after they
left) and CPU, the consumers' catch-ups from storage (the "stored but not broadcast" warnings in daphne's log),
the database's transactions and new connections per second while the phase ran (PostgreSQL only), and with
`--page-every S` the time to GET the run's page every S seconds meanwhile. `--stalled K` adds K clients to the
crowd that never read (frozen tabs), to see what the web process holds for them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import aiohttp
import log_pipeline as pipeline  # (sets Django up)
from asgiref.sync import sync_to_async
from django.db import connection
from openssh_host import KEY_NAME, start_sshd
from scale_figures import distribution

from simhost.ports import free_port, wait_for_port

REPO = pipeline.REPO
CATCH_UP = "were stored but not broadcast"


def _start_web(work: Path) -> tuple[subprocess.Popen, int, Path]:
    port = free_port()
    env = {**os.environ}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # the served process runs as in production
    log_path = work / "daphne.log"
    web = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "dashboard.asgi:application"],
        cwd=REPO, env=env, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    wait_for_port(port, timeout=60, process=web, what="daphne")
    return web, port, log_path


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _catch_ups(web_log: Path, start: int) -> tuple[int, int]:
    """The consumers' catch-ups from storage that daphne logged after byte `start`, and where its log ends."""
    with web_log.open("rb") as out:
        out.seek(start)
        text = out.read()
    return text.decode(errors="replace").count(CATCH_UP), start + len(text)


def _database_counters() -> tuple[int, int] | None:
    """Transactions committed and sessions opened in this database so far (PostgreSQL's statistics, ~1 s late)."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT xact_commit, sessions FROM pg_stat_database WHERE datname = current_database()")
        row = cursor.fetchone()
    return int(row[0]), int(row[1])


async def _time_pages(url: str, cookie: str, every: float) -> list[float]:
    """GET the run's page every `every` seconds until cancelled, as people opening it meanwhile would: its times.
    The web process serves pages and the consumers' database calls on one thread, so a crowd's checks show here
    (and a page's rendering holds the interpreter, so it shows in the stream's latency too)."""
    times: list[float] = []
    if not every:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()  # until cancelled
        return times
    async with aiohttp.ClientSession(headers={"Cookie": cookie}) as http:
        while True:
            started = time.monotonic()
            try:
                async with http.get(url) as response:
                    await response.read()
                    assert response.status == 200, response.status
            except asyncio.CancelledError:
                return times
            times.append(time.monotonic() - started)
            try:
                await asyncio.sleep(every)
            except asyncio.CancelledError:
                return times


async def _phase(work: Path, sshd_port: int, client_key: Path, host_key: str, web, web_port: int, web_log: Path,
                 clients: int, rate: int, seconds: int, stalled: int = 0, page_every: float = 0) -> dict:  # fmt: skip
    run, cookie = await sync_to_async(pipeline._make_run)(work, sshd_port, client_key, host_key)
    log_path = work / f"run-{run.pk}.log"
    log_path.touch()
    lines = rate * seconds
    origin = f"http://127.0.0.1:{web_port}"
    rss = {"before": _rss_mib(web.pid)}
    log_mark = _catch_ups(web_log, 0)[1]
    watchers = await asyncio.create_subprocess_exec(
        sys.executable, str(REPO / "bench" / "log_watchers.py"), f"ws://127.0.0.1:{web_port}/ws/runs/{run.pk}/log/?after=0",
        "--origin", origin, "--clients", str(clients), "--lines", str(lines), "--stalled", str(stalled),
        stdout=asyncio.subprocess.PIPE, env={**os.environ, "WATCH_COOKIE": cookie["cookie"]},
    )  # fmt: skip
    assert watchers.stdout is not None
    ready = await asyncio.wait_for(watchers.stdout.readline(), timeout=120)
    assert ready.strip() == b"connected", f"the watchers did not connect: {ready!r}"
    await asyncio.sleep(1.5)  # every consumer past its replay and first storage check
    rss["connected"] = _rss_mib(web.pid)
    counters, cpu = await sync_to_async(_database_counters)(), _cpu_seconds(web.pid)
    started = time.monotonic()
    writer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", pipeline._PACED_WRITER, str(log_path), str(rate), str(seconds)
    )
    tail_conn, run_log = await pipeline._follow(run, log_path, writer.pid)
    pages = asyncio.create_task(_time_pages(f"{origin}{run.get_absolute_url()}", cookie["cookie"], page_every))
    samples: list[float] = []
    while writer.returncode is None:
        samples.append(_rss_mib(web.pid))
        try:
            await asyncio.wait_for(writer.wait(), timeout=0.5)
        except TimeoutError:
            pass
    pages.cancel()
    page_times = await pages
    result_line = await asyncio.wait_for(watchers.stdout.readline(), timeout=120)
    elapsed = time.monotonic() - started
    cpu = _cpu_seconds(web.pid) - cpu
    rss["middle"] = samples[len(samples) // 2] if samples else float("nan")
    rss["end"] = samples[-1] if samples else float("nan")
    rss["peak"] = max(samples, default=float("nan"))
    await watchers.wait()
    await run_log.stop_now()
    await tail_conn.close()
    await asyncio.sleep(1.5)  # the consumers' disconnects
    rss["after"] = _rss_mib(web.pid)
    later = await sync_to_async(_database_counters)()
    catch_ups, _ = _catch_ups(web_log, log_mark)
    result = json.loads(result_line)
    result.update(rss=rss, elapsed=elapsed, web_cpu=cpu / elapsed, catch_ups=catch_ups, lines=lines, stalled=stalled,
                  page_s=distribution(sorted(page_times)) if page_times else None)  # fmt: skip
    if counters is not None and later is not None:
        result["db_per_s"] = [(b - a) / elapsed for a, b in zip(counters, later, strict=True)]
    return result


def _report(name: str, phase: dict) -> None:
    accounts = phase["clients"]
    bad = [a for a in accounts if any(a[k] for k in ("missing", "duplicates", "out_of_order", "wrong_text"))]
    worst = {k: max(a[k] for a in accounts) for k in ("missing", "duplicates", "out_of_order", "wrong_text")}
    latency = phase["latency_s"] or {}
    ms = {k: v * 1000 for k, v in latency.items()}
    rss = phase["rss"]
    frozen = f" (and {phase['stalled']} that never read)" if phase["stalled"] else ""
    print(f"{name}: {len(accounts)} client(s){frozen}, {phase['lines']:,} lines each, {phase['received']:,} received")
    print(f"  delivery: {len(accounts) - len(bad)} of {len(accounts)} clients got every line once and in order; "
          f"worst client: {worst['missing']} missing, {worst['duplicates']} duplicated, "
          f"{worst['out_of_order']} out-of-order messages, {worst['wrong_text']} wrong lines")  # fmt: skip
    if ms:
        per_client = sorted(phase["client_p95_s"])
        print(f"  written -> received, all clients: p50 {ms['p50']:.0f} ms  p95 {ms['p95']:.0f} ms  "
              f"p99 {ms['p99']:.0f} ms  max {ms['max']:.0f} ms  (clients' own p95: {per_client[0] * 1000:.0f}-"
              f"{per_client[-1] * 1000:.0f} ms)")  # fmt: skip
    print(f"  daphne RSS: {rss['before']:.0f} MiB before the clients, {rss['connected']:.0f} connected, "
          f"{rss['middle']:.0f} mid-stream, {rss['end']:.0f} at the end (peak {rss['peak']:.0f}), "
          f"{rss['after']:.0f} after they left; CPU {phase['web_cpu']:.0%} of a core (the clients' process: "
          f"{phase['cpu']:.0%})")  # fmt: skip
    database = phase.get("db_per_s")
    extra = f"; database {database[0]:.0f} transactions/s, {database[1]:.1f} new connections/s" if database else ""
    print(f"  catch-ups from storage (lost or late broadcasts): {phase['catch_ups']}{extra}")
    if phase["page_s"]:
        page = {k: v * 1000 for k, v in phase["page_s"].items()}
        print(f"  the run's page meanwhile: p50 {page['p50']:.0f} ms  p95 {page['p95']:.0f} ms  "
              f"max {page['max']:.0f} ms")  # fmt: skip


async def _warm_up(url: str, cookie: str) -> None:
    """One GET of a page first: the web process's first request loads what every later one reuses."""
    async with aiohttp.ClientSession(headers={"Cookie": cookie}) as http, http.get(url) as response:
        await response.read()


async def bench(clients: int, rate: int, seconds: int, stalled: int, page_every: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sshd, sshd_port, key_dir, host_key = start_sshd(work)
        client_key = key_dir / KEY_NAME
        web = None
        try:
            # Migrated before daphne starts.
            first, cookie = await sync_to_async(pipeline._make_run)(work, sshd_port, client_key, host_key)
            web, web_port, web_log = _start_web(work)
            await _warm_up(f"http://127.0.0.1:{web_port}{first.get_absolute_url()}", cookie["cookie"])
            common = (work, sshd_port, client_key, host_key, web, web_port, web_log)
            anchor = await _phase(*common, clients=1, rate=rate, seconds=seconds, page_every=page_every)
            crowd = await _phase(*common, clients=clients, rate=rate, seconds=seconds, stalled=stalled,
                                 page_every=page_every)  # fmt: skip
        finally:
            if web is not None:
                web.terminate()
                web.wait(timeout=20)
            sshd.terminate()
            sshd.wait()
    print(f"{rate:,} lines/s for {seconds} s to each phase's own run, daphne pid serving both phases")
    _report("anchor", anchor)
    _report("crowd", crowd)
    if anchor["latency_s"] and crowd["latency_s"]:
        ratio = crowd["latency_s"]["p95"] / anchor["latency_s"]["p95"]
        print(f"p95 with {clients} clients / p95 with 1: {ratio:.2f}")
    peak_growth = crowd["rss"]["peak"] - crowd["rss"]["connected"]
    print(f"daphne RSS growth while streaming to {clients}: {peak_growth:+.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--stalled", type=int, default=0, help="frozen tabs beside the crowd: open, never reading")
    parser.add_argument("--page-every", type=float, default=0, help="GET the run's page every S seconds meanwhile")
    args = parser.parse_args()
    asyncio.run(bench(args.clients, args.rate, args.seconds, args.stalled, args.page_every))


if __name__ == "__main__":
    main()
