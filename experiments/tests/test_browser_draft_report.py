"""The draft's report card in a real browser, its training figures read by a real worker from the simulated host's
SpecForge directory over SSH: the answer, the callout and the chart of served accept length against training step,
at 390 px in either theme, under the enforced policy."""

from __future__ import annotations

import pytest

from simhost import hostsetup

from .test_browser_every_page import NO_SIDEWAYS_SCROLL, THEMES
from .test_browser_policy import RECORD_REFUSALS
from .test_draft_report import measured_experiment

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

RUN = "kimi-k2.5-sim-eagle3-sf"


def test_the_card_reads_the_hosts_training_run_and_draws_its_chart(
    browser_user, log_in, sim_host, live_web, celery_worker_process, browser
):
    sim_host.draft_training_dirs = [str(hostsetup.MODELS_ROOT / "kimi-k2.5-sim-specforge")]
    sim_host.save(update_fields=["draft_training_dirs"])
    experiment = measured_experiment(host=sim_host, models=f"{hostsetup.MODELS_ROOT}/{RUN}")

    problems: list[str] = []
    for theme, background in THEMES.items():
        context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme=theme)
        page = context.new_page()
        page.add_init_script(RECORD_REFUSALS)
        page.on("pageerror", lambda error, theme=theme: problems.append(f"{theme}: {error}"))
        try:
            log_in(page)
            page.goto(f"{live_web}/experiments/{experiment.pk}/drafts/")
            answer = page.locator("#drafts-answer").inner_text()
            assert answer.startswith("Ship step4000: served accept length 2.3"), answer
            assert "2.33 in training" in answer  # the simulated run's step 4000: 1 + 0.6448 + 0.6448² + 0.6448³
            assert "step5000 serves accept length 1.00" in page.locator(".drafts-callout").inner_text()
            assert page.locator("#drafts-training-note").count() == 0
            page.locator("#drafts-chart").scroll_into_view_if_needed()
            page.wait_for_selector("#drafts-chart .main-svg .scatterlayer .trace", state="attached", timeout=20_000)
            problems.extend(f"{theme}: refused {what}" for what in page.evaluate("() => window.refused || []"))
            assert page.evaluate("getComputedStyle(document.body).backgroundColor") == background
            assert page.evaluate(NO_SIDEWAYS_SCROLL), page.evaluate("document.documentElement.scrollWidth")
        finally:
            context.close()
    assert problems == []
