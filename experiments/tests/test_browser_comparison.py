"""The comparison page of a finished experiment in a real browser: every chart is drawn, the verdict shows."""

from __future__ import annotations

import pytest

from experiments.models import Measurement, Run
from experiments.tests.factories import make_config, make_eagle_config, make_experiment, make_profile

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CHARTS = (
    "throughput-chart", "frontier-chart", "speedup-chart", "accept-length-chart", "positions-chart", "latency-chart",
)  # fmt: skip


def _finished_experiment():
    profile = make_profile(concurrency=[1, 2, 4], passes=3)
    candidate = make_eagle_config(name="eagle3-2step")
    experiment = make_experiment(baseline=make_config(name="baseline"), candidates=[candidate], profile=profile)
    for run in experiment.run_set.select_related("config"):
        run.state = Run.State.SUCCEEDED
        if run.config.is_speculative:
            run.live_facts = {
                "decode": [{"n": 1, "running_req": 1}],
                "metrics": {"verify_ms": [[2, 18.0], [3, 18.4]], "draft_ms": [[2, 3.0], [3, 3.1]]},
            }
        run.save(update_fields=["state", "live_facts"])
        speed = 1.12 if run.config.is_speculative else 1.0
        for level in (1, 2, 4):
            for pass_index in range(3):
                tok_s = 83.0 * level**0.8 * speed * (1 + 0.01 * pass_index) / (1 + 0.05 * level * (speed - 1) * 4)
                Measurement.objects.create(
                    run=run, pass_index=pass_index, concurrency=level, completed=16, duration_s=10.0,
                    output_throughput=tok_s, total_throughput=2 * tok_s, request_throughput=1.0,
                    accept_length=2.0 + 0.05 * pass_index if run.config.is_speculative else None,
                    accepted_drafts_histogram=[10, 20, 70 + pass_index] if run.config.is_speculative else None,
                    mean_ttft_ms=40.0 * level, p99_ttft_ms=80.0 * level, mean_tpot_ms=12.0, p99_tpot_ms=18.0,
                    mean_itl_ms=11.0, p99_itl_ms=25.0,
                )  # fmt: skip
    return experiment


def test_it_draws_every_chart_of_the_comparison_and_shows_the_verdict(browser_user, log_in, live_web, browser):
    experiment = _finished_experiment()
    page = browser.new_context().new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    log_in(page)

    page.goto(f"{live_web}{experiment.get_absolute_url()}")

    for chart in CHARTS:
        # Charts below the fold are drawn as they scroll into view.
        page.locator(f"#{chart}").scroll_into_view_if_needed()
        page.wait_for_selector(f"#{chart} .main-svg", timeout=15_000)
    # The band, the break-even marker and the three latency panels made it into the drawing.
    assert page.locator("#throughput-chart path.js-fill").count() >= 2
    assert page.locator("#latency-chart .xy").count() == 3
    # Off-screen sections are not laid out (content-visibility), so their text reads empty until scrolled back to.
    page.locator("#comparison").scroll_into_view_if_needed()
    page.wait_for_function("() => document.querySelector('#comparison tbody tr').innerText !== ''", timeout=5_000)
    rows = page.locator("#comparison tbody tr")
    assert rows.count() == 3
    assert "eagle3-2step" in rows.first.inner_text()
    assert page.locator("#comparison .verdict").count() == 3
    assert "needed to break even" in page.locator("#models").inner_text()
    assert page.locator("#configs tr.cfg-differs td.cfg-changed").count() >= 1
    # Only the differences: rows where all configs agree disappear.
    same = page.locator("#configs tr.cfg-same").first
    assert same.is_visible()
    page.check("#only-differences")
    assert not same.is_visible()
    assert page.locator("a.export-link").count() == 6  # runs, verdict, deployment gains and cells, latency, configs
    assert errors == []
