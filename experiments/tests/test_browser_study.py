"""A study's page in a real browser: it follows the study live (a round's end re-reads its sections and draws the
search space) without a reload."""

from __future__ import annotations

import pytest

from experiments.models import ApiToken, Study
from experiments.tests.waiting import in_a_thread

from .factories import make_host
from .test_studies import BODY, TRUTH, _finish_round

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _end_round(study: Study) -> None:
    _finish_round(study, {**TRUTH, "s3-k1-d4": {1: 70.0, 8: 400.0}}, jitter=0.002)  # every config measured


def test_the_study_page_follows_the_study_live(client, browser, live_web, log_in, browser_user, private_queue):
    _, token = ApiToken.issue(browser_user)
    host = make_host()
    headers = {"Authorization": f"Bearer {token}"}
    answer = in_a_thread(
        lambda: client.post("/api/studies", {**BODY, "host": host.name}, content_type="application/json",
                            headers=headers)
    )  # fmt: skip
    study = Study.objects.get(pk=answer.json()["id"])
    page = browser.new_page()
    try:
        log_in(page)
        page.goto(f"{live_web}{study.get_absolute_url()}")
        assert page.inner_text("#study-budget strong") == "0"
        page.wait_for_selector("body[data-live=on]", timeout=15_000)  # the page's websocket is in the study's group

        in_a_thread(lambda: _end_round(study))

        page.wait_for_function("() => document.querySelector('#study-budget strong').textContent === '3'")
        # Charts draw as they come into view. A round's end sends several changes, each re-reading the sections, so
        # the chart is looked up afresh at each poll rather than held (a later re-read replaces it).
        page.wait_for_function(
            """() => {
                const chart = document.querySelector("#space [data-figure='space-figure-1']");
                if (!chart) return false;
                chart.scrollIntoView();
                return chart.hasAttribute("data-drawn");
            }""",
            timeout=15_000,
        )
        assert "s1-k1-d2" in page.inner_text("#trials") and "measured" in page.inner_text("#trials")
        assert page.inner_text("#study-state") == "running"
    finally:
        page.close()
