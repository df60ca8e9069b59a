"""The browsers of many_watchers.py: K websocket clients of one run's log, in a process of their own (as browsers
are on machines of their own), so that their parsing takes no CPU from the web process or the tail being measured.

    python bench/log_watchers.py URL --origin ORIGIN --clients K --lines N    (the session cookie in $WATCH_COOKIE)

Prints "connected" once every socket is open, then, after each client has received all N lines and listened
`--settle` seconds more (a late duplicate would come then), one JSON line: each client's account and the
written -> received latencies of all clients together. Standard library, aiohttp, scale_figures and the pure
experiments.live.log_messages only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale_figures import Delivery, distribution

from experiments.live import log_messages  # pure: no Django

QUIET_LIMIT = 30.0  # a client that hears nothing for this long stops (and reports what it lacks)


async def _receive(socket: aiohttp.ClientWebSocketResponse, delivery: Delivery, settle: float) -> None:
    settle_until: float | None = None
    while True:
        wait = QUIET_LIMIT if settle_until is None else settle_until - time.monotonic()
        if wait <= 0:
            return
        try:
            message = await socket.receive(timeout=wait)
        except TimeoutError:
            return
        if message.type != aiohttp.WSMsgType.TEXT:
            return  # closed
        event = log_messages.parse(message.data)
        if event["type"] == "lines":
            delivery.add(event["first"], event["lines"], time.time())
            if delivery.complete and settle_until is None:
                settle_until = time.monotonic() + settle


async def watch(url: str, origin: str, cookie: str, clients: int, lines: int, settle: float, stalled: int) -> dict:
    headers = {"Cookie": cookie, "Origin": origin}
    async with aiohttp.ClientSession() as http:
        sockets = [await http.ws_connect(url, headers=headers, max_msg_size=0) for _ in range(clients)]
        # Frozen tabs: open, never read. Once aiohttp's buffer is full it stops reading the socket, so TCP pushes
        # back on the web process, which must then hold (or drop) what it cannot send.
        frozen = [await http.ws_connect(url, headers=headers, max_msg_size=0) for _ in range(stalled)]
        print("connected", flush=True)
        started, cpu = time.monotonic(), time.process_time()
        deliveries = [Delivery(lines) for _ in sockets]
        await asyncio.gather(*(_receive(s, d, settle) for s, d in zip(sockets, deliveries, strict=True)))
        busy = (time.process_time() - cpu) / (time.monotonic() - started)
        for socket in [*sockets, *frozen]:
            await socket.close()
    every = sorted(latency for d in deliveries for latency in d.latencies)
    accounts = [{k: v for k, v in d.summary().items() if k != "latencies"} for d in deliveries]
    return {
        "clients": accounts,
        "received": sum(len(d.latencies) for d in deliveries),
        "latency_s": distribution(every) if every else None,
        "cpu": busy,  # of one core: near 1, the clients' own queueing would be in their latencies
        "client_p95_s": [distribution(sorted(d.latencies))["p95"] for d in deliveries if d.latencies],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("--origin", required=True)
    parser.add_argument("--clients", type=int, required=True)
    parser.add_argument("--lines", type=int, required=True)
    parser.add_argument("--settle", type=float, default=2.5)
    parser.add_argument("--stalled", type=int, default=0, help="more clients that connect and never read")
    args = parser.parse_args()
    cookie = os.environ["WATCH_COOKIE"]
    result = asyncio.run(watch(args.url, args.origin, cookie, args.clients, args.lines, args.settle, args.stalled))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
