"""Team review in a real browser: the experiments table, comparing across experiments, notes, any screen (390 px)
and theme (dark), and the log viewer's keyboard shortcuts. One browser for the module; one seeded world."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from experiments.actions.audit import Actor
from experiments.actions.headroom import do_start_headroom
from experiments.models import (
    AdaptiveSchedule,
    Experiment,
    HeadroomStudy,
    LogChunk,
    Measurement,
    Run,
    ServerMetricSample,
)

from .factories import make_config, make_eagle_config, make_experiment, make_host, make_profile

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NO_SIDEWAYS_SCROLL = "document.documentElement.scrollWidth <= window.innerWidth"
LOG = [
    "[2026-11-29 10:00:00] Load weight begin.",
    *[f"[2026-11-29 10:00:01 TP0] Decode batch, #running-req: 1, line {i}" for i in range(2, 40)],
    "[2026-11-29 10:00:02] ERROR: first thing that went wrong",  # line 40
    *[f"[2026-11-29 10:00:03 TP0] Decode batch, #running-req: 1, line {i}" for i in range(41, 80)],
    "[2026-11-29 10:00:04] ERROR: second thing that went wrong",  # line 80
    *[f"[2026-11-29 10:00:05 TP0] Decode batch, #running-req: 1, line {i}" for i in range(81, 400)],
]


def _finished(name: str, owner, *, host=None, tags: str = "", candidates=None, speed: float = 1.15) -> Experiment:
    experiment = make_experiment(
        name=name, created_by=owner, host=host or make_host(), tags=tags,
        baseline=make_config(name="baseline"), profile=make_profile(concurrency=[1, 2, 4, 8], passes=3),
        candidates=candidates if candidates is not None else [make_eagle_config(name="eagle3-2step")],
    )  # fmt: skip
    for run in experiment.run_set.select_related("config"):
        run.state = Run.State.SUCCEEDED
        run.save(update_fields=["state"])
        factor = speed if run.config.is_speculative else 1.0
        # A speculative config's cells have per-position acceptance, overall and per category (their tables scroll
        # inside the card on a narrow screen).
        positions = {
            "accepted_drafts_histogram": [10, 20, 70],
            "position_acceptance_by_category": {
                "code": {"accepted_drafts_histogram": [2, 4, 34]},
                "chat": {"accepted_drafts_histogram": [8, 16, 36]},
            },
        }
        Measurement.objects.bulk_create(
            Measurement(run=run, pass_index=p, concurrency=c, completed=16, duration_s=10.0,
                        output_throughput=83.0 * c * factor * (1 + 0.01 * p), total_throughput=1.0,
                        request_throughput=1.0, mean_ttft_ms=40.0 * c, p99_ttft_ms=80.0 * c, mean_tpot_ms=10.0 + c,
                        steady_state_output_throughput=86.0 * c * factor, steady_state_window_s=9.2,
                        **({"accept_length": 2.4, "steady_state_accept_length": 2.45, **positions}
                           if run.config.is_speculative else {}))
            for c in (1, 2, 4, 8) for p in range(3)
        )  # fmt: skip
    return experiment


@pytest.fixture
def world(browser_user):
    first = _finished("a very long experiment name that would push a narrow page sideways " * 2, browser_user,
                      tags="nightly h200")  # fmt: skip
    second = _finished("another host's run", browser_user, host=make_host(name="second-host"), speed=0.8,
                       candidates=[make_eagle_config(name="eagle3-3step", steps=3)])  # fmt: skip
    run = first.run_set.get(config=first.baseline)
    LogChunk.objects.create(run=run, first_line=1, line_count=len(LOG), text="\n".join(LOG))
    Run.objects.filter(pk=run.pk).update(log_lines=len(LOG))
    _verified_schedule(first, browser_user)
    return first, second, run


def _verified_schedule(source: Experiment, owner) -> AdaptiveSchedule:
    """A schedule of `source` whose verification ran, with the server's step gauge sampled over its launches."""
    winner = source.ordered_candidates()[0]
    schedule = AdaptiveSchedule.objects.create(
        experiment=source, version=1,
        config_json=json.dumps({"1": {"candidate_steps": [2]}, "4": {"candidate_steps": [0]}}),
        bands=[{"low": 1, "high": 2, "config": winner.name, "config_id": winner.pk, "steps": 2},
               {"low": 4, "high": 8, "config": "baseline", "config_id": source.baseline_id, "steps": 0}],
        notes=["a long note about what the schedule cannot express, " * 3], created_by=owner,
    )  # fmt: skip
    adaptive = make_eagle_config(name="adaptive v1", adaptive_schedule=schedule)
    schedule.verification = _finished("a very long verification name " * 3, owner, candidates=[adaptive, winner])
    schedule.save(update_fields=["verification"])
    start = timezone.now()
    for run in schedule.verification.run_set.filter(config=adaptive):
        ServerMetricSample.objects.bulk_create(
            ServerMetricSample(run=run, at=start + timedelta(seconds=i), spec_num_steps=2 if i % 4 < 2 else 0,
                               num_running_reqs=1 if i % 4 < 2 else 8)
            for i in range(40)
        )  # fmt: skip
    return schedule


@pytest.fixture
def headroom_study(world, browser_user) -> HeadroomStudy:
    """An acceptance headroom study of the first experiment's candidate, measured: its page has a chart and a table."""
    first = world[0]
    study = do_start_headroom(
        first,
        config=first.ordered_candidates()[0],
        accept_lengths=[1.5, 2.0, 2.5, 3.0],
        actor=Actor.command(browser_user),
    )
    for run in study.experiment.run_set.select_related("config"):
        Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED)
        length = run.config.simulated_accept_length or (2.4 if run.config.is_speculative else None)
        Measurement.objects.bulk_create(
            Measurement(run=run, pass_index=p, concurrency=c, completed=16, duration_s=10.0, total_throughput=1.0,
                        output_throughput=83.0 * c * (length / 2.0 if length else 1.0) * (1 + 0.01 * p),
                        request_throughput=1.0, accept_length=length)
            for c in (1, 2, 4, 8) for p in range(3)
        )  # fmt: skip
    return study


def test_it_fits_a_390_px_screen_with_a_menu_and_follows_a_dark_system_theme(
    log_in, live_web, browser, world, headroom_study
):
    first, second, run = world
    compare = f"/compare/?pick=c{first.pk}-{first.baseline_id}&pick=c{second.pk}-{second.ordered_candidates()[0].pk}"
    series = f"/history/{first.host_id}/{first.baseline.content_hash}/{first.profile.series_key}/"
    # (Every page's width and theme at 390 px: test_browser_every_page.py. This world's long names, two
    # experiments on Compare, a measured headroom study and a verified schedule are walked here.)
    schedule = AdaptiveSchedule.objects.get(experiment=first)
    pages = ["/experiments/", first.get_absolute_url(), run.get_absolute_url(), compare,
             headroom_study.get_absolute_url(), headroom_study.experiment.get_absolute_url(),
             schedule.get_absolute_url()]  # fmt: skip
    context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        log_in(page)
        for path in pages:
            page.goto(f"{live_web}{path}")
            page.wait_for_load_state("load")
            assert page.evaluate(NO_SIDEWAYS_SCROLL), (path, page.evaluate("document.documentElement.scrollWidth"))

        # The history's figure is fetched once its chart is in view, and drawn on the time axis.
        page.goto(f"{live_web}{series}")
        page.locator("#history-chart").scroll_into_view_if_needed()
        page.wait_for_selector("#history-chart .main-svg", timeout=15_000)
        assert page.evaluate("document.getElementById('history-chart').specdashFigure.layout.xaxis.type") == "date"

        # The schedule's switching chart, drawn at the screen's width.
        page.goto(f"{live_web}{schedule.get_absolute_url()}")
        page.locator("#chart-switching-figure").scroll_into_view_if_needed()
        page.wait_for_selector("#chart-switching-figure .main-svg", timeout=15_000)
        assert (
            page.evaluate("document.querySelector('#chart-switching-figure .main-svg').getBoundingClientRect().width")
            <= 390
        )
        assert page.evaluate(NO_SIDEWAYS_SCROLL)

        # The headroom chart: drawn at the screen's width, its break-even marks on the baseline's lines.
        page.goto(f"{live_web}{headroom_study.get_absolute_url()}")
        page.wait_for_selector("#headroom-chart .main-svg", timeout=15_000)
        box = page.evaluate("document.querySelector('#headroom-chart .main-svg').getBoundingClientRect().width")
        assert box <= 390 and page.evaluate(NO_SIDEWAYS_SCROLL)
        page.click("#headroom-levels summary")
        assert page.is_visible("#headroom-table") and page.evaluate(NO_SIDEWAYS_SCROLL)

        # The navigation folds behind the menu button.
        page.goto(f"{live_web}/experiments/")
        assert not page.is_visible("#main-nav") and page.is_visible("#menu-button")
        page.click("#menu-button")
        assert page.is_visible("#main-nav a[href='/compare/']")
        assert page.get_attribute("#menu-button", "aria-expanded") == "true"
        # The wide table scrolls inside its card rather than the page.
        assert page.evaluate("document.querySelector('.table-scroll').scrollWidth > innerWidth")

        # Charts: drawn when scrolled to, at the screen's width, in the dark template.
        page.goto(f"{live_web}{first.get_absolute_url()}")
        assert page.locator("#latency-chart .main-svg").count() == 0  # below the fold: not drawn yet
        # The steady-state table, opened, scrolls inside its card too.
        page.click("#steady-state summary")
        assert page.is_visible("#steady-cells") and page.evaluate(NO_SIDEWAYS_SCROLL)
        page.locator("#speedup-chart").scroll_into_view_if_needed()
        page.wait_for_selector("#speedup-chart .main-svg")
        width = page.evaluate("document.querySelector('#speedup-chart .main-svg').getBoundingClientRect().width")
        assert width <= 390
        # The legend goes below the plot on a phone, so the plot keeps most of the width (beside it: ~60 px).
        plot_width = page.evaluate("document.querySelector('#speedup-chart')._fullLayout._size.w")
        assert plot_width > 0.6 * width, (plot_width, width)
        # A title does not wrap in Plotly: a narrow chart keeps the part before its parenthesis.
        assert page.evaluate("document.querySelector('#speedup-chart')._fullLayout.title.text") == "Speedup vs baseline"
        paper = page.evaluate("document.querySelector('#speedup-chart')._fullLayout.paper_bgcolor")
        assert paper.replace(" ", "") == "rgba(0,0,0,0)"
        assert page.evaluate("document.querySelector('#speedup-chart')._fullLayout.font.color") == "#e4e7ec"
        # The frontier: per GPU against per user, each point labelled with its concurrency, in the dark template.
        page.locator("#frontier-chart").scroll_into_view_if_needed()
        page.wait_for_selector("#frontier-chart .main-svg")
        assert page.evaluate("document.querySelector('#frontier-chart')._fullLayout.font.color") == "#e4e7ec"
        assert page.locator("#frontier-chart text", has_text="c=1").count() >= 1
    finally:
        context.close()
    assert errors == []

    light = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme="light")
    try:
        page = light.new_page()
        log_in(page)
        page.goto(f"{live_web}{first.get_absolute_url()}")
        assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(247, 248, 250)"
        assert page.is_visible("#main-nav") and not page.is_visible("#menu-button")
        # One line at 1280 px: the pages opened now and then are behind "More".
        assert page.evaluate("document.querySelector('.topbar').getBoundingClientRect().height") < 50
        assert not page.is_visible("#nav-more a[href='/audit/']")
        page.click("#nav-more summary")
        assert page.is_visible("#nav-more a[href='/audit/']") and page.is_visible("#nav-more a[href='/api/docs']")
        # The speedup chart leads the page, beside the verdict cards; the throughput chart is drawn when scrolled to.
        page.wait_for_selector("#speedup-chart .main-svg")
        page.locator("#throughput-chart").scroll_into_view_if_needed()
        page.wait_for_selector("#throughput-chart .main-svg")
        assert page.evaluate("document.querySelector('#throughput-chart')._fullLayout.paper_bgcolor") == "#fff"
        page.locator("#frontier-chart").scroll_into_view_if_needed()
        page.wait_for_selector("#frontier-chart .main-svg")
        assert page.evaluate("document.querySelector('#frontier-chart')._fullLayout.paper_bgcolor") == "#fff"
        assert page.locator("#frontier-chart .legendtext", has_text="best (frontier)").count() == 1
        # The latency table is filled when opened, from the page's JSON: 2 configs x 4 concurrencies.
        assert page.locator("#latency tbody tr").count() == 0
        page.click("#latency-details summary")
        page.wait_for_selector("#latency tbody tr")
        assert page.locator("#latency tbody tr").count() == 8
        assert page.locator("#latency tbody tr").first.inner_text().split("\t")[:4] == ["baseline", "1", "3", "40.0"]
    finally:
        light.close()


def test_it_finds_notes_and_compares_experiments_in_the_browser(log_in, live_web, browser, world):
    first, second, _ = world
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        log_in(page)
        # Notes: Markdown in, sanitised HTML out; tags then filter the table.
        page.goto(f"{live_web}{second.get_absolute_url()}#notes")
        page.fill("#notes-notes", "Slower: **draft too deep** <img src=x onerror=\"document.title='pwned'\">")
        page.fill("#notes-tags", "regression, h200")
        page.click("#notes-form button[type=submit]")
        page.wait_for_selector("#notes-text strong")
        assert page.inner_text("#notes-text strong") == "draft too deep"
        assert page.locator("#notes-text img").count() == 0 and page.title() != "pwned"

        page.goto(f"{live_web}/experiments/")
        page.fill("#filter-q", "too deep")
        page.press("#filter-q", "Enter")
        page.wait_for_url("**/experiments/?q=too+deep*")
        assert page.locator("#experiments tbody tr").count() == 1
        page.goto(f"{live_web}/experiments/?tag=h200&sort=-speedup")
        names = page.locator("#experiments tbody tr td:first-child").all_inner_texts()
        assert names[0].startswith("a very long") and names[1] == "another host's run"
        page.select_option("#filter-host", "second-host")  # a select applies the view at once
        page.wait_for_url("**host=second-host**")
        assert page.locator("#experiments tbody tr").count() == 1
        page.click("#copy-view")
        page.wait_for_function("() => document.querySelector('#copy-view-status').textContent !== ''")

        # Compare: a config of one experiment with a config of another, added from the suggestions.
        page.goto(f"{live_web}{first.get_absolute_url()}")
        page.click(f"#configs a.compare-link[href$='c{first.pk}-{first.baseline_id}']")
        page.wait_for_selector("#pick-another")
        page.click("#suggestions a.add-pick:has-text('eagle3-3step')")
        page.wait_for_selector("#comparison tbody tr")
        assert page.locator("#comparison tbody tr").count() == 4
        assert "host" in page.inner_text("#what-differs") and "steps" in page.inner_text("#what-differs")
        assert "never pays at the measured concurrencies" in page.inner_text("#break-even")
        page.locator("#throughput-chart").scroll_into_view_if_needed()
        page.wait_for_selector("#throughput-chart .main-svg")
    finally:
        context.close()


def test_it_moves_through_the_log_with_keyboard_shortcuts(log_in, live_web, browser, world):
    _, _, run = world
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        log_in(page)
        page.goto(f"{live_web}{run.get_absolute_url()}")
        page.wait_for_function(f"() => document.querySelector('#line-count').textContent === '{len(LOG)}'")
        page.wait_for_selector("#next-error:not([disabled])")

        page.keyboard.press("?")
        assert page.is_visible("#shortcuts")
        page.keyboard.press("Escape")
        assert not page.is_visible("#shortcuts")

        page.keyboard.press("n")
        page.wait_for_selector("#log .line.target-line[data-n='40']")
        page.keyboard.press("n")
        page.wait_for_selector("#log .line.target-line[data-n='80']")
        assert not page.is_checked("#follow")
        page.keyboard.press("p")
        page.wait_for_selector("#log .line.target-line[data-n='40']")
        page.keyboard.press("p")  # wraps round to the last error
        page.wait_for_selector("#log .line.target-line[data-n='80']")

        page.keyboard.press("Shift+G")
        page.wait_for_function("() => document.querySelector('#follow').checked")
        page.wait_for_selector(f"#log .line[data-n='{len(LOG)}']")

        page.keyboard.press("/")
        assert page.evaluate("document.activeElement.id") == "log-filter"
        page.keyboard.type("n")  # typed into the filter, not a shortcut
        assert page.input_value("#log-filter") == "n"
    finally:
        context.close()
