"""The websockets, through the real ASGI application and the real Redis channel layer.

A logged-in browser is imitated with the session cookie of the Django test client; the consumers read the
database from another thread, hence transactional tests.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from dashboard.asgi import application
from experiments import serializers
from experiments.actions.environments import do_add_server_metric_samples
from experiments.analysis.telemetry import ServerMetricReading
from experiments.live import broadcast, consumers, log_messages
from experiments.models import Run

from .factories import make_log, make_run

pytestmark = pytest.mark.django_db(transaction=True)

# AllowedHostsOriginValidator checks the Origin against ALLOWED_HOSTS.
ORIGIN = (b"origin", b"http://127.0.0.1")


@pytest.fixture
def browser(client, owner) -> list[tuple[bytes, bytes]]:
    """Headers of a logged-in browser's websocket handshake."""
    client.force_login(owner)
    return [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()), ORIGIN]


@pytest.fixture
def run() -> Run:
    run = make_run(state=Run.State.LOADING)
    make_log(run, [["l1", "l2", "l3"], ["l4", "l5"]])
    return run


async def _connect(path: str, headers: list[tuple[bytes, bytes]]) -> tuple[WebsocketCommunicator, bool, Any]:
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, detail = await communicator.connect(timeout=5)
    return communicator, connected, detail


async def _receive(communicator: WebsocketCommunicator, timeout: float = 1) -> dict[str, Any]:
    """The next message as a page reads it (a lines message is a JSON header, then its lines)."""
    return log_messages.parse(await communicator.receive_from(timeout))


async def _lines(communicator: WebsocketCommunicator, count: int) -> list[tuple[int, str]]:
    """The next `count` numbered lines, however they are split into messages."""
    out: list[tuple[int, str]] = []
    while len(out) < count:
        message = await _receive(communicator, timeout=5)
        if message["type"] in ("facts", "state"):
            continue  # the snapshot sent after the replay (tested on its own below)
        assert message["type"] == "lines", message
        out += [(message["first"] + i, text) for i, text in enumerate(message["lines"])]
    return out


async def _snapshot(communicator: WebsocketCommunicator) -> None:
    """The run's stored facts and state, sent once after the replay."""
    assert (await _receive(communicator, timeout=5))["type"] == "facts"
    assert (await _receive(communicator, timeout=5))["type"] == "state"


def _numbered(first: int, last: int) -> list[tuple[int, str]]:
    return [(n, f"l{n}") for n in range(first, last + 1)]


@pytest.mark.parametrize("path", ["/ws/runs/{run}/log/", "/ws/experiments/{experiment}/"])
async def test_it_refuses_an_anonymous_connection(run, path):
    url = path.format(run=run.pk, experiment=run.experiment_id)

    communicator, connected, code = await _connect(url, [ORIGIN])

    assert not connected
    assert code == 4403
    await communicator.disconnect()


@pytest.mark.parametrize("path", ["/ws/runs/987654/log/", "/ws/experiments/987654/"])
async def test_it_refuses_an_unknown_run_or_experiment(browser, path):
    communicator, connected, code = await _connect(path, browser)

    assert (connected, code) == (False, 4403)
    await communicator.disconnect()


async def test_it_replays_stored_lines_after_the_clients_last_then_forwards_live_ones(browser, run):
    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/?after=2", browser)
    assert connected
    try:
        assert await _lines(communicator, 3) == _numbered(3, 5)

        await sync_to_async(make_log)(run, [["l6", "l7"]])
        await broadcast.send_log_lines(run.pk, 6, ["l6", "l7"])

        assert await _lines(communicator, 2) == _numbered(6, 7)
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()


async def test_a_flood_batch_crosses_the_channel_layer_packed_and_reaches_the_page_line_for_line(browser, run):
    # Lines of a traceback storm: blank ones, non-ASCII, a line that is only spaces, one that looks like a separator.
    flood = [f"[TP0] Decode batch [{n}], gen throughput (token/s): 93.{n % 10} · ü" for n in range(6, 3006)]
    flood[10], flood[11], flood[12], flood[-1] = "", "   ", "\\n not a newline", ""
    event = broadcast.log_lines_event(6, flood)
    assert "text" not in event and len(event["packed"]) < sum(map(len, flood)) / 5
    trickle = broadcast.log_lines_event(6, ["l6", "l7"])
    assert trickle["text"] == "l6\nl7" and "packed" not in trickle

    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/?after=5", browser)
    assert connected
    try:
        await _snapshot(communicator)
        await sync_to_async(make_log)(run, [flood])
        await broadcast.send_log_lines(run.pk, 6, flood)
        assert await _lines(communicator, len(flood)) == list(enumerate(flood, start=6))
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()


def test_a_packed_batch_that_does_not_unpack_to_its_messages_is_refused():
    event = broadcast.log_lines_event(1, ["x" * 100] * 3000)
    other = broadcast.log_lines_event(1, ["x" * 100] * 1000)
    with pytest.raises(ValueError, match="of 3000 lines came as 100999 characters for messages of 3000 lines ending"):
        broadcast.messages_of({**event, "packed": other["packed"]})


async def test_it_replays_everything_without_a_position(browser, run):
    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/", browser)
    assert connected
    try:
        assert await _lines(communicator, 5) == _numbered(1, 5)
        await _snapshot(communicator)
        assert await communicator.receive_nothing(timeout=0.2)
    finally:
        await communicator.disconnect()


async def test_it_drops_live_lines_the_client_already_has(browser, run):
    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/?after=2", browser)
    assert connected
    try:
        assert await _lines(communicator, 3) == _numbered(3, 5)

        # The batch was stored and broadcast while the replay ran: lines 4 and 5 arrive twice.
        await sync_to_async(make_log)(run, [["l6", "l7"]])
        await broadcast.send_log_lines(run.pk, 4, ["l4", "l5", "l6", "l7"])
        await broadcast.send_log_lines(run.pk, 1, ["l1", "l2"])

        assert await _lines(communicator, 2) == _numbered(6, 7)
        assert await communicator.receive_nothing(timeout=0.3)
    finally:
        await communicator.disconnect()


async def test_it_fills_a_gap_from_storage_before_the_live_batch(browser, run):
    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/", browser)
    assert connected
    try:
        assert await _lines(communicator, 5) == _numbered(1, 5)

        # Lines 6-8 were stored but their broadcast was lost (e.g. the layer dropped it); 9-10 arrive live.
        await sync_to_async(make_log)(run, [["l6", "l7", "l8"], ["l9", "l10"]])
        await broadcast.send_log_lines(run.pk, 9, ["l9", "l10"])

        assert await _lines(communicator, 5) == _numbered(6, 10)
        assert await communicator.receive_nothing(timeout=0.3)
    finally:
        await communicator.disconnect()


async def test_it_forwards_run_state_events(browser, run):
    log, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/?after=5", browser)
    assert connected
    await _snapshot(log)
    experiment, connected, _ = await _connect(f"/ws/experiments/{run.experiment_id}/", browser)
    assert connected
    try:
        run.loading_progress = 40
        await sync_to_async(broadcast.send_run_state)(run)

        for communicator in (log, experiment):
            message = await _receive(communicator, timeout=5)
            assert message["type"] == "state"
            assert message["run"] == run.pk
            assert message["state"] == "loading"
            assert message["loading_progress"] == 40
            assert message["cancel_requested"] is False
    finally:
        await log.disconnect()
        await experiment.disconnect()


async def test_it_sends_the_stored_facts_and_state_after_the_replay(browser, run):
    point = {"n": 4, "ts": "2026-11-29 10:00:01", "accept_len": 2.05, "gen_throughput": 93.1}
    run.live_facts = {"decode": [point], "metrics": {"verify_ms": [[5, 17.1]]}}
    await sync_to_async(run.save)(update_fields=["live_facts"])

    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/?after=5", browser)
    facts = await _receive(communicator, timeout=5)
    state = await _receive(communicator, timeout=5)

    assert connected
    assert facts == {"type": "facts", "decode": [point], "metrics": {"verify_ms": [[5, 17.1]]}}
    assert state["type"] == "state" and state["state"] == Run.State.LOADING and state["run"] == run.pk
    await communicator.disconnect()


async def test_it_resumes_after_a_reconnect_in_the_middle_of_a_flood(browser, run):
    """The worker stores then broadcasts batch after batch; the browser drops off and comes back with its last
    line number: it ends up with every line exactly once."""
    from experiments.actions.runs import do_append_log

    batches, size = 40, 250
    total = 5 + batches * size
    stored = await sync_to_async(Run.objects.get)(pk=run.pk)

    async def flood() -> None:
        for b in range(batches):
            first = 6 + b * size
            lines = [f"l{n}" for n in range(first, first + size)]
            await sync_to_async(do_append_log)(stored, first, lines, first * 10)
            await broadcast.send_log_lines(run.pk, first, lines)
            await asyncio.sleep(0.005)

    received: list[tuple[int, str]] = []
    producer = asyncio.create_task(flood())
    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/", browser)
    assert connected
    received += await _lines(communicator, 2000)
    await communicator.disconnect()  # a network blip mid-flood
    await asyncio.sleep(0.1)

    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/?after={received[-1][0]}", browser)
    assert connected
    try:
        await producer
        received += await _lines(communicator, total - len(received))
        assert received == _numbered(1, total)
        # Nothing more of the log: no line twice (a state or facts message, which the storage check may send
        # again after a lost broadcast, carries no line).
        while not await communicator.receive_nothing(timeout=0.3):
            message = await _receive(communicator)
            assert message["type"] != "lines", message
    finally:
        await communicator.disconnect()


async def test_it_sends_stored_lines_whose_broadcast_never_came(browser, run, caplog):
    """A crash's last batch is stored and its broadcast lost, and no later batch comes to reveal the gap: the
    consumer notices that storage is ahead of what it sent, sends the lines and logs the lost broadcast."""
    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/", browser)
    assert connected
    try:
        assert await _lines(communicator, 5) == _numbered(1, 5)
        await sync_to_async(make_log)(run, [["l6", "l7", "l8"]])  # stored; never broadcast

        started = asyncio.get_running_loop().time()
        assert await _lines(communicator, 3) == _numbered(6, 8)
        assert asyncio.get_running_loop().time() - started < 3 * consumers.STORAGE_CHECK_SECONDS
        assert "log lines 6-8 were stored but not broadcast" in caplog.text
    finally:
        await communicator.disconnect()


async def test_it_sends_a_stored_state_whose_broadcast_never_came(browser, run):
    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/?after=5", browser)
    assert connected
    try:
        await _snapshot(communicator)
        await Run.objects.filter(pk=run.pk).aupdate(state=Run.State.FAILED)  # no broadcast

        message = await _receive(communicator, timeout=5 * consumers.STORAGE_CHECK_SECONDS)
        while message["type"] != "state":
            message = await _receive(communicator, timeout=5 * consumers.STORAGE_CHECK_SECONDS)
        assert message["state"] == Run.State.FAILED
    finally:
        await communicator.disconnect()


async def test_it_does_not_resend_what_the_broadcast_delivered(browser, run, caplog):
    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/", browser)
    assert connected
    try:
        assert await _lines(communicator, 5) == _numbered(1, 5)
        await sync_to_async(make_log)(run, [["l6", "l7"]])
        await broadcast.send_log_lines(run.pk, 6, ["l6", "l7"])

        assert await _lines(communicator, 2) == _numbered(6, 7)
        assert await communicator.receive_nothing(timeout=2.5 * consumers.STORAGE_CHECK_SECONDS)
        assert "not broadcast" not in caplog.text
    finally:
        await communicator.disconnect()


# ---- server-metric samples: each reaches the page once, a lost broadcast is refilled from storage ----------------


def _readings(first: int, count: int) -> list[ServerMetricReading]:
    """`count` samples whose running-requests gauge numbers them from `first`."""
    return [ServerMetricReading(t=1_700_000_000 + n, num_running_reqs=float(n)) for n in range(first, first + count)]


async def store_and_send_server_metrics(run: Run, readings: list[ServerMetricReading]) -> None:
    """What the worker does with samples (workers.run.benchmark's function of this name): store, then broadcast."""
    stored = await sync_to_async(do_add_server_metric_samples)(run, readings)
    await broadcast.send_server_metrics(
        run.pk, serializers.server_metric_samples_json(readings, stored.ids), after=stored.after
    )


async def _samples(communicator: WebsocketCommunicator, count: int) -> list[tuple[int, float]]:
    """The next `count` samples as (id, running requests), however they are split into messages; each message's
    `after` must be the id of the sample before it, so the page can tell it has missed none."""
    out: list[tuple[int, float]] = []
    while len(out) < count:
        message = await _receive(communicator, timeout=5)
        if message["type"] != "server_metrics":
            continue
        assert message["after"] == (out[-1][0] if out else message["after"])
        running = message["fields"].index("num_running_reqs")
        out += [(sample_id, s[running]) for sample_id, s in zip(message["ids"], message["samples"], strict=True)]
    return out


async def test_it_resumes_server_metrics_after_the_newest_sample_the_page_has(browser, run):
    stored = await sync_to_async(do_add_server_metric_samples)(run, _readings(1, 5))
    have = stored.ids[1]  # the page's chart was drawn with samples 1 and 2

    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/?after=5&metrics_after={have}", browser)
    assert connected
    try:
        assert await _samples(communicator, 3) == list(zip(stored.ids[2:], [3.0, 4.0, 5.0], strict=True))
        await store_and_send_server_metrics(run, _readings(6, 2))  # live, as the worker sends them
        assert [running for _, running in await _samples(communicator, 2)] == [6.0, 7.0]
        assert await communicator.receive_nothing(timeout=2.5 * consumers.STORAGE_CHECK_SECONDS)
    finally:
        await communicator.disconnect()


async def test_it_replays_no_stored_sample_to_a_client_that_does_not_ask(browser, run):
    await sync_to_async(do_add_server_metric_samples)(run, _readings(1, 3))
    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/?after=5", browser)
    assert connected
    try:
        await _snapshot(communicator)
        await store_and_send_server_metrics(run, _readings(4, 1))
        assert [running for _, running in await _samples(communicator, 1)] == [4.0]
    finally:
        await communicator.disconnect()


async def test_it_sends_stored_samples_whose_broadcast_never_came(browser, run, caplog):
    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/?after=5&metrics_after=0", browser)
    assert connected
    try:
        await _snapshot(communicator)
        await sync_to_async(do_add_server_metric_samples)(run, _readings(1, 3))  # stored; never broadcast

        started = asyncio.get_running_loop().time()
        assert [running for _, running in await _samples(communicator, 3)] == [1.0, 2.0, 3.0]
        assert asyncio.get_running_loop().time() - started < 3 * consumers.STORAGE_CHECK_SECONDS
        assert "server-metric samples after id 0 were stored but not broadcast" in caplog.text
    finally:
        await communicator.disconnect()


async def test_it_refills_the_samples_of_a_lost_broadcast_before_the_next_one(browser, run):
    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/?after=5&metrics_after=0", browser)
    assert connected
    try:
        await _snapshot(communicator)
        lost = await sync_to_async(do_add_server_metric_samples)(run, _readings(1, 2))  # its broadcast lost
        await store_and_send_server_metrics(run, _readings(3, 2))  # the next one says what came before it

        received = await _samples(communicator, 4)
        assert [running for _, running in received] == [1.0, 2.0, 3.0, 4.0]  # in order, each once
        assert received[0][0] == lost.ids[0]
        assert await communicator.receive_nothing(timeout=2.5 * consumers.STORAGE_CHECK_SECONDS)
    finally:
        await communicator.disconnect()


@pytest.mark.parametrize("query", ["metrics_after=99999999999999999999999", "metrics_after=-3&after=x", "after=1e9"])
async def test_it_ignores_resume_points_that_are_not_ids(browser, run, query):
    await sync_to_async(do_add_server_metric_samples)(run, _readings(1, 2))
    communicator, connected, _ = await _connect(f"/ws/runs/{run.pk}/log/?{query}", browser)
    assert connected
    try:
        received = await _lines(communicator, 5)
        assert received == _numbered(1, 5)  # an unreadable `after` is no line: the whole log
    finally:
        await communicator.disconnect()
