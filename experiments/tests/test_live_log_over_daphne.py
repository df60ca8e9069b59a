"""A log flood's batch through the real web server (daphne) to a real websocket client: daphne closes a socket it is
asked to send a message over 1 MiB on, which Channels' in-process communicator never does."""

from __future__ import annotations

import aiohttp
import pytest
from asgiref.sync import sync_to_async

from experiments.live import broadcast, log_messages
from experiments.models import Run

from .factories import make_log, make_run

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

DAPHNE_MESSAGE_LIMIT = 1024 * 1024


async def test_a_two_megabyte_batch_and_a_huge_line_reach_the_page_in_messages_daphne_carries(live_web, client, owner):
    run = await sync_to_async(make_run)(state=Run.State.BENCHMARKING)
    flood = [f"[TP0] Decode batch [{n}], #running-req: 4, gen throughput (token/s): 351.{n % 100:02d} " + "x" * 110
             for n in range(1, 10_001)]  # fmt: skip
    flood[4000] = "Traceback: " + "é" * 300_000  # a dump on one line; JSON sends each é as six bytes
    await sync_to_async(client.force_login)(owner)
    headers = {"Cookie": f"sessionid={client.cookies['sessionid'].value}", "Origin": live_web}
    url = live_web.replace("http://", "ws://") + f"/ws/runs/{run.pk}/log/?after=0"

    received: list[tuple[int, str]] = []
    sizes: list[int] = []
    async with aiohttp.ClientSession() as http, http.ws_connect(url, headers=headers, max_msg_size=0) as socket:
        await sync_to_async(make_log)(run, [flood])
        await broadcast.send_log_lines(run.pk, 1, flood)
        while len(received) < len(flood):
            message = await socket.receive(timeout=30)
            assert message.type == aiohttp.WSMsgType.TEXT, f"the socket ended after {len(received)} lines: {message}"
            sizes.append(len(message.data.encode()))
            event = log_messages.parse(message.data)
            if event["type"] == "lines":
                received += list(enumerate(event["lines"], start=event["first"]))

    assert max(sizes) < DAPHNE_MESSAGE_LIMIT
    assert [n for n, _ in received] == list(range(1, 10_001))
    cut = log_messages.LIVE_LINE_CHARS
    expected = [
        *flood[:4000],
        f"{flood[4000][:cut]} … [{300_011 - cut:,} more characters: the downloaded log has it whole]",
    ]
    assert [text for _, text in received] == [*expected, *flood[4001:]]
