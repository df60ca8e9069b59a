"""The run page in a real browser: its first screen is ready before plotly.js is fetched, and the GPU telemetry
chart is drawn by the same lazy, themed loader as every other chart (dark mode included)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from experiments.models import GpuSample, Run

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
