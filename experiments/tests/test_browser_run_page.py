"""The run page in a real browser: its first screen is ready before plotly.js is fetched, the GPU telemetry chart is
drawn by the same lazy, themed loader as every other chart (dark mode included), the server metrics chart folded
below it is drawn once opened, on a phone too, and a warning raised mid-run (the acceptance alarm) appears with its
remedies without a reload."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.utils import timezone

from experiments import serializers
from experiments.actions.environments import do_add_server_metric_samples
from experiments.actions.runs import do_add_run_warning
from experiments.analysis.telemetry import ServerMetricReading
from experiments.live import broadcast
from experiments.models import GpuSample, Run, ServerMetricSample
from experiments.remedies import acceptance_remedies

from .browser_support import DROP_SOCKETS, KEEP_SOCKETS
from .factories import make_run

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _run_with_telemetry() -> Run:
    run = make_run(state=Run.State.SUCCEEDED)
    start = timezone.now() - timedelta(minutes=2)
    GpuSample.objects.bulk_create(
        GpuSample(
            run=run,
            at=start + timedelta(seconds=i),
            gpu=gpu,
            sm_mhz=1980,
            mem_mhz=3201,
            temperature_c=60,
            power_w=450.0,
            utilization_pct=97,
            memory_used_mib=120000,
            reasons=0,
        )
        for i in range(60)
        for gpu in range(2)
    )
    return run


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_it_draws_the_telemetry_chart_lazily_in_the_pages_colours(browser, live_web, log_in, scheme):
    run = _run_with_telemetry()
    context = browser.new_context(color_scheme=scheme)
    page = context.new_page()
    try:
        log_in(page)
        fetched: list[str] = []
        page.on("request", lambda request: fetched.append(request.url))
        page.goto(f"{live_web}/runs/{run.pk}/", wait_until="load")

        # Ready with its first screen; plotly.js is not among what the load waited for.
        assert not any("plotly" in url for url in fetched), fetched
        page.locator("#telemetry-chart").scroll_into_view_if_needed()
        page.wait_for_selector("#telemetry-chart[data-drawn] .main-svg", timeout=30_000)
        background = page.evaluate(
            "getComputedStyle(document.querySelector('#telemetry-chart .main-svg')).backgroundColor"
        )
        if scheme == "dark":
            assert background in ("rgba(0, 0, 0, 0)", "transparent"), background  # the card's colour shows
        else:
            assert background not in ("rgba(0, 0, 0, 0)", "transparent"), background
    finally:
        context.close()


def test_it_draws_the_folded_server_metrics_once_opened_on_a_phone_in_dark_mode(browser, live_web, log_in):
    run = _run_with_telemetry()
    start = timezone.now() - timedelta(minutes=2)
    ServerMetricSample.objects.bulk_create(
        ServerMetricSample(
            run=run, at=start + timedelta(seconds=i / 4), num_running_reqs=4, num_queue_reqs=0, token_usage=0.2,
            gen_throughput=300.0, spec_accept_length=2.4, spec_accept_rate=0.7, spec_num_steps=2,
        )
        for i in range(120)
    )  # fmt: skip
    context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark")
    page = context.new_page()
    try:
        log_in(page)
        page.goto(f"{live_web}/runs/{run.pk}/", wait_until="load")
        assert page.locator("#server-metrics-chart").is_hidden()  # folded: the answer comes first

        page.locator("#server-metrics > summary").click()
        page.wait_for_selector("#server-metrics-chart[data-drawn] .main-svg", timeout=30_000)
        chart = page.locator("#server-metrics-chart").bounding_box()
        assert chart is not None and chart["width"] <= 390
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        background = page.evaluate(
            "getComputedStyle(document.querySelector('#server-metrics-chart .main-svg')).backgroundColor"
        )
        assert background in ("rgba(0, 0, 0, 0)", "transparent"), background
    finally:
        context.close()


def test_it_shows_a_warning_raised_mid_run_with_its_remedies_without_a_reload(browser, live_web, log_in):
    run = make_run(state=Run.State.BENCHMARKING)
    remedies = [r.as_json({}, {}) for r in acceptance_remedies("EAGLE", None, {"architectures": ["LlamaEagle3"]})]
    page = browser.new_page()
    try:
        log_in(page)
        page.goto(f"{live_web}/runs/{run.pk}/", wait_until="load")
        page.wait_for_selector("body[data-live=on]", timeout=15_000)
        assert page.locator("#warnings").count() == 0

        def warn() -> None:
            try:
                do_add_run_warning(run, "acceptance_collapse", "Acceptance collapsed: <b>1.00</b>", line=7,
                                   remedies=remedies)  # fmt: skip
            finally:
                connection.close()

        # Off this thread: Playwright's event loop runs here, and the broadcast is sync-to-async.
        thread = threading.Thread(target=warn)
        thread.start()
        thread.join()

        item = page.wait_for_selector('#warnings li[data-kind="acceptance_collapse"]', timeout=15_000)
        assert item is not None
        assert "Acceptance collapsed: <b>1.00</b>" in item.inner_text()  # the words, not markup
        assert page.locator('#warnings a[href="#L7"]').inner_text() == "log line 7"
        causes = page.eval_on_selector_all("#warnings li[data-remedy]", "items => items.map(i => i.dataset.remedy)")
        assert causes == ["eagle3-algorithm", "draft-target-mismatch", "draft-weights"]
    finally:
        page.close()


def test_it_extends_the_server_metrics_chart_while_the_run_benchmarks_folded_or_open(browser, live_web, log_in):
    run = make_run(state=Run.State.BENCHMARKING)
    page = browser.new_page()
    page.add_init_script(KEEP_SOCKETS)

    def stream(first: int, broadcast_them: bool) -> None:
        """What the worker does with samples the client streamed mid-cell: store them, then broadcast them with
        their ids and the id before them (`workers.run.benchmark.store_and_send_server_metrics`)."""
        now = timezone.now().timestamp()
        readings = [
            ServerMetricReading(t=now - 1 + i / 4, num_running_reqs=first + i, token_usage=0.5) for i in range(3)
        ]
        try:
            stored = do_add_server_metric_samples(run, readings)
            if broadcast_them:
                samples = serializers.server_metric_samples_json(readings, stored.ids)
                async_to_sync(broadcast.send_server_metrics)(run.pk, samples, after=stored.after)
        finally:
            connection.close()

    def stream_off_this_thread(first: int, broadcast_them: bool = True) -> None:  # Playwright's loop runs here
        thread = threading.Thread(target=stream, args=(first, broadcast_them))
        thread.start()
        thread.join()

    points = "document.querySelector('#server-metrics-chart').data[0].y"
    try:
        stream_off_this_thread(-2)  # before the page: drawn from storage
        log_in(page)
        page.goto(f"{live_web}/runs/{run.pk}/", wait_until="load")
        page.wait_for_selector("body[data-live=on]", timeout=15_000)

        stream_off_this_thread(1)  # folded: kept for the chart drawn on open
        page.wait_for_selector('#server-metrics-chart[data-streamed="3"]', state="attached", timeout=15_000)
        page.locator("#server-metrics > summary").click()
        page.wait_for_selector("#server-metrics-chart[data-drawn] .main-svg", timeout=30_000)
        page.wait_for_function(f"() => {points} && {points}.length === 6", timeout=15_000)
        stream_off_this_thread(4)  # open: drawn at once
        page.wait_for_function(f"() => {points}.length === 9", timeout=15_000)

        # The socket drops, and samples are stored while it is down (their broadcast reaches no one): the page
        # resumes after the newest sample it has and gets them, then the live ones, each once.
        page.evaluate("document.body.dataset.live = 'dropped'; " + DROP_SOCKETS)
        stream_off_this_thread(7, broadcast_them=False)
        page.wait_for_selector("body[data-live=on]", timeout=15_000)
        stream_off_this_thread(10)
        page.wait_for_function(f"() => {points}.length === 15", timeout=15_000)
        assert page.evaluate(points) == list(range(-2, 13))  # running requests, in order, each once
    finally:
        page.close()


# A stand-in for ui.perfetto.dev, served by the browser's own routing (nothing leaves the machine): it answers PING
# with PONG as Perfetto does, and keeps what it is sent.
PERFETTO_STUB = """<!doctype html><title>perfetto stub</title><script>
window.received = null;
window.addEventListener("message", (event) => {
  if (event.data === "PING") { event.source.postMessage("PONG", event.origin); return; }
  if (event.data && event.data.perfetto) {
    const p = event.data.perfetto;
    window.received = {bytes: Array.from(new Uint8Array(p.buffer)), title: p.title, fileName: p.fileName,
                       from: event.origin};
  }
});
</script>"""


def test_it_hands_a_profile_trace_to_perfetto_in_the_browser_and_nowhere_else(browser, live_web, log_in):
    import gzip

    from experiments.models import ProfileTrace

    run = make_run(state=Run.State.SUCCEEDED, profile_requested=True)
    trace = gzip.compress(b'{"traceEvents": []}')
    ProfileTrace.objects.create(
        run=run, concurrency=2, rank=0, file_name="p-TP-0.trace.json.gz", state=ProfileTrace.State.STORED,
        size_bytes=len(trace), steps=4, trace=trace, summary={"speculative": True, "by_batch_size": []},
    )  # fmt: skip
    context = browser.new_context()
    perfetto_requests: list[str] = []

    def stub(route):
        perfetto_requests.append(route.request.method)
        route.fulfill(status=200, content_type="text/html", body=PERFETTO_STUB)

    context.route("https://ui.perfetto.dev/**", stub)
    page = context.new_page()
    try:
        log_in(page)
        page.goto(f"{live_web}/runs/{run.pk}/")
        with context.expect_page() as opened:
            page.click("button.open-perfetto")
        perfetto = opened.value
        perfetto.wait_for_function("() => window.received !== null", timeout=30_000)
        received = perfetto.evaluate("window.received")

        assert bytes(received["bytes"]) == trace  # the stored trace, byte for byte, gzip and all
        assert received["title"] == f"run {run.pk} · c=2 · TP-0" and received["fileName"] == "p-TP-0.trace.json.gz"
        assert received["from"] == live_web  # handed over by the run page itself
        assert perfetto_requests == ["GET"]  # Perfetto's page was loaded, and nothing was sent to it over the network
        page.wait_for_selector(".perfetto-status:text('Opened in Perfetto.')", timeout=10_000)
    finally:
        context.close()
