"""The pages that draw charts, in a real browser under the enforced Content-Security-Policy: every chart drawn, and
not one refusal. (The walk of every page, test_browser_every_page.py, loads each page but draws only what is in
view.) A refusal is caught by the page's own `securitypolicyviolation` event: Chromium does not always say it in
the console (a refused `eval` inside a library's try/catch says nothing there)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Error as PlaywrightError

from experiments.models import ApiToken, Run, Study
from experiments.tests.waiting import in_a_thread

from .factories import finish_run, make_eagle_config, make_experiment, make_host
from .test_studies import BODY, TRUTH, _finish_round

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# Set up before any of the page's own scripts run (through the browser's debugging protocol, which the page's policy
# does not govern), it records every refusal the policy makes in the page.
RECORD_REFUSALS = """document.addEventListener("securitypolicyviolation", (e) => {
    const where = `${e.sourceFile}:${e.lineNumber}`;
    (window.refused = window.refused || []).push(`${e.violatedDirective} ${e.blockedURI} ${where}`);
});"""


def _watched(browser):
    page = browser.new_context(color_scheme="dark").new_page()
    page.add_init_script(RECORD_REFUSALS)
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"{page.url}: {error}"))
    page.on("console", lambda m: problems.append(f"{page.url}: {m.text}") if "Content Security" in m.text else None)
    return page, problems


def _draw_every_chart(page) -> int:
    """Scroll each chart into view (they draw lazily) until plotly.js has drawn its lines; the number of charts."""
    holders = page.locator("[data-figure], [data-figure-url]")
    for i in range(holders.count()):
        holders.nth(i).scroll_into_view_if_needed()
        # Attached, not visible: a chart may sit in a closed section, or draw a trace only its legend shows.
        drawn = holders.nth(i).locator(".main-svg .scatterlayer .trace, .main-svg .barlayer .trace").first
        drawn.wait_for(state="attached", timeout=15_000)
    return holders.count()


def _refused(page) -> list[str]:
    return page.evaluate("() => window.refused || []")


def test_the_study_page_draws_its_search_space_under_the_policy(client, browser, live_web, log_in, browser_user):
    _, token = ApiToken.issue(browser_user)
    host = make_host()
    answer = in_a_thread(
        lambda: client.post("/api/studies", {**BODY, "host": host.name}, content_type="application/json",
                            headers={"Authorization": f"Bearer {token}"})
    )  # fmt: skip
    study = Study.objects.get(pk=answer.json()["id"])
    in_a_thread(lambda: _finish_round(study, {**TRUTH, "s3-k1-d4": {1: 70.0, 8: 400.0}}, jitter=0.002))
    page, problems = _watched(browser)
    try:
        log_in(page)
        response = page.goto(f"{live_web}{study.get_absolute_url()}")
        assert response is not None
        assert "content-security-policy-report-only" not in response.headers
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-eval" not in policy

        assert _draw_every_chart(page) == 2  # the search space at each concurrency
        # Each measured config of the round is a line through its values, coloured by its speedup; and the colour
        # bar's trace.
        assert page.locator("#chart-space-figure-1 .scatterlayer .trace").count() == 2 + 1
        page.mouse.move(0, 0)
        refused = _refused(page)
    finally:
        page.context.close()
    assert refused == [] and problems == []


def test_the_experiment_and_run_pages_draw_their_charts_under_the_policy(browser, live_web, log_in, browser_user):
    experiment = make_experiment(created_by=browser_user, candidates=[make_eagle_config(name="eagle3-2step")])
    for queued in experiment.run_set.select_related("config"):
        finish_run(queued, {1: 83.0 * (1.15 if queued.config.is_speculative else 1.0), 4: 300.0})
    run = experiment.run_set.filter(state=Run.State.SUCCEEDED).first()
    assert run is not None
    page, problems = _watched(browser)
    drawn, refused = {}, {}
    try:
        log_in(page)
        for path in (experiment.get_absolute_url(), run.get_absolute_url()):
            page.goto(f"{live_web}{path}")
            drawn[path] = _draw_every_chart(page)
            refused[path] = _refused(page)
    finally:
        page.context.close()
    assert drawn[experiment.get_absolute_url()] >= 3  # throughput, speedup, latency at least
    assert refused == {path: [] for path in drawn} and problems == []


def test_the_api_docs_and_the_admin_site_work_under_the_policy(browser, live_web, log_in):
    # Not the app's own pages (the walk leaves them out), but served with the same policy.
    page, problems = _watched(browser)
    refused = {}
    try:
        log_in(page)
        page.goto(f"{live_web}/api/docs")
        page.locator(".swagger-ui .opblock").first.wait_for(timeout=15_000)  # Swagger UI drew the operations
        page.locator(".swagger-ui .opblock").first.click()  # and opens one
        page.locator(".swagger-ui .opblock-body").first.wait_for(timeout=15_000)
        refused["/api/docs"] = _refused(page)
        page.goto(f"{live_web}/admin/auth/user/add/")
        page.locator("#id_username").wait_for()
        refused["/admin/"] = _refused(page)
    finally:
        page.context.close()
    assert refused == {"/api/docs": [], "/admin/": []} and problems == []


def test_a_refusal_is_seen(browser, live_web, log_in):
    # The watch above can fail: an inline script, which the policy refuses, is recorded (and does not run).
    page, problems = _watched(browser)
    try:
        log_in(page)
        page.goto(f"{live_web}/experiments/")
        with pytest.raises(PlaywrightError, match="violates the following Content Security Policy directive"):
            page.add_script_tag(content="window.ran = true;")
        refused, ran = _refused(page), page.evaluate("() => window.ran === true")
    finally:
        page.context.close()
    assert not ran and len(refused) == 1 and refused[0].startswith("script-src-elem inline")
    assert problems and "Content Security Policy" in problems[0]
