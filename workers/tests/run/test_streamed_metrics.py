"""The server's gauges streamed while a cell runs: the client's stderr line (bounded, each sample once: what it
streamed is not in its result), the worker storing a streamed line as it arrives and sending it to an open run page,
and the API showing it mid-cell."""

from __future__ import annotations

import json
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from dashboard.asgi import application
from experiments.analysis.telemetry import SERVER_METRIC_FIELDS, server_metric_readings
from experiments.live import log_messages
from experiments.models import Run, ServerMetricSample
from experiments.tests.factories import make_run
from workers.benchclient import prometheus
from workers.run import benchmark

ORIGIN = (b"origin", b"http://127.0.0.1")


def _sampler(count: int, value: float = 4.0) -> prometheus.GaugeSampler:
    """A sampler holding `count` samples taken 250 ms apart, the last one now."""
    sampler = prometheus.GaugeSampler("http://127.0.0.1:1", stream=True)
    now = time.perf_counter()
    sampler.samples = [(now - (count - 1 - i) * 0.25, [value + i, *[value] * 8]) for i in range(count)]
    return sampler


def test_it_streams_the_samples_not_yet_sent_and_the_result_keeps_only_the_rest():
    sampler = _sampler(6)

    line = sampler.stream_line(time.perf_counter())

    assert line is not None and line.startswith(benchmark.STREAMED_METRICS_PREFIX) and "\n" not in line
    streamed = benchmark.streamed_server_metrics(line)
    assert streamed["fields"] == ["ago_s", *prometheus.GAUGE_FIELDS]
    assert [s[1] for s in streamed["samples"]] == [4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
    assert sampler.stream_line(time.perf_counter()) is None  # nothing new: no line
    sampler.samples.append((time.perf_counter(), [10.0, *[4.0] * 8]))
    rest = sampler.report(time.perf_counter())
    assert rest is not None and [s[1] for s in rest["samples"]] == [10.0]  # not the streamed ones again


def test_a_streamed_line_stays_under_the_workers_cut_and_the_rest_waits():
    sampler = _sampler(200, value=123456789.123456789)

    lines = [line for _ in range(3) if (line := sampler.stream_line(time.perf_counter()))]

    assert all(len(line) <= prometheus.MAX_STREAM_LINE < 4096 for line in lines)
    sent = sum(len(benchmark.streamed_server_metrics(line)["samples"]) for line in lines)
    assert 0 < sent < 200 and sent + len(sampler.samples) == 200  # none lost: the rest go next, or in the result


def test_it_reads_no_samples_from_a_line_cut_short_or_of_another_kind():
    line = _sampler(3).stream_line(time.perf_counter())
    assert line is not None

    assert benchmark.streamed_server_metrics(line[:-5]) is None
    assert benchmark.streamed_server_metrics("benchclient: 12/32 done, 0 failed") is None
    assert benchmark.progress_counts(line) is None


@pytest.mark.django_db(transaction=True)
async def test_a_streamed_batch_is_stored_once_sent_to_the_open_page_and_shown_by_the_api(client, owner):
    run = await sync_to_async(make_run)(state=Run.State.BENCHMARKING)
    await sync_to_async(client.force_login)(owner)
    cookie = (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())
    socket = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/log/", headers=[cookie, ORIGIN])
    assert (await socket.connect(timeout=5))[0]
    try:
        while (log_messages.parse(await socket.receive_from(timeout=5)))["type"] != "state":
            pass  # the replay and snapshot sent on connecting
        sampler = _sampler(5)
        line = sampler.stream_line(time.perf_counter())
        assert line is not None

        assert await benchmark.store_streamed_metrics(run, line)

        message = log_messages.parse(await socket.receive_from(timeout=5))
        assert message["type"] == "server_metrics" and message["fields"] == ["t", *SERVER_METRIC_FIELDS]
        assert [s[1] for s in message["samples"]] == [4.0, 5.0, 6.0, 7.0, 8.0]
        assert abs(message["samples"][-1][0] - time.time()) < 5  # dated on the worker's clock, by arrival
        shown = (await sync_to_async(client.get)(f"/api/runs/{run.pk}/server-metrics")).json()
        assert [s[1] for s in shown["samples"]] == [4.0, 5.0, 6.0, 7.0, 8.0]  # mid-cell, before the result

        # The cell ends: its result carries what came after the last line, stored and sent the same one way, saying
        # which sample came before it (what the page needs to know it missed none).
        sampler.samples.append((time.perf_counter(), [9.0, *[4.0] * 8]))
        rest = server_metric_readings(json.loads(json.dumps(sampler.report(time.perf_counter()))), time.time())
        await benchmark.store_and_send_server_metrics(run, rest)
        last = log_messages.parse(await socket.receive_from(timeout=5))
        assert [s[1] for s in last["samples"]] == [9.0] and last["after"] == message["ids"][-1]
        assert message["ids"] == sorted(message["ids"]) and last["ids"][0] > message["ids"][-1]
    finally:
        await socket.disconnect()
    stored = await sync_to_async(_stored_running)(run)
    assert stored == [4.0, 5.0, 6.0, 7.0, 8.0, 9.0]  # each sample once


def _stored_running(run: Run) -> list[float | None]:
    return list(ServerMetricSample.objects.of_run(run).values_list("num_running_reqs", flat=True))


def test_it_leaves_streamed_samples_out_of_a_failure_message():
    stderr = 'benchclient: warming up\nTraceback: refused\nbenchclient: metrics {"samples": []}\n'

    assert benchmark._stderr_tail(stderr) == "benchclient: warming up\nTraceback: refused"
