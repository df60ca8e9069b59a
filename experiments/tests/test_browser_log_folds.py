"""The run log viewer folds the benchmark client's /metrics scrapes (uvicorn's access line for each, four a second
while benchmarking) into one row per run of them, in a real browser: folded on load and as lines arrive live, opened
and closed by a click, found one by one by the filter, opened by a permalink, and every line still downloadable."""

from __future__ import annotations

import time

import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from experiments.models import LogChunk, Run

from .test_browser_log import _store_log, _visible_rows

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SCRAPE = 'INFO:     127.0.0.1:{port} - "GET /metrics HTTP/1.1" 200 OK'
DECODE = "[2026-12-03 10:00:00 TP0] Decode batch, #running-req: 4, #token: 812, gen throughput (token/s): 311.20"
PER_BLOCK = 24  # scrapes between two Decode lines
BLOCKS = 4000  # 100,000 lines: the flood the viewer is built for


def _log() -> list[str]:
    lines = ["[2026-12-03 09:59:59] The server is fired up and ready to roll!"]
    for block in range(BLOCKS):
        lines.append(DECODE)
        lines += [SCRAPE.format(port=40000 + (block * PER_BLOCK + i) % 20000) for i in range(PER_BLOCK)]
    # A scrape that failed is news, not noise: never folded.
    lines[3] = lines[3].replace(" 200 OK", " 500 Internal Server Error")
    return lines


def _benchmarking_run(user, sim_host, lines: list[str]) -> Run:
    from experiments.actions.audit import Actor
    from experiments.actions.experiments import do_create_experiment
    from experiments.models import BenchmarkProfile, ServerConfig

    models = sim_host.models_root
    with transaction.atomic():  # a worker told of the new runs finds them already taken
        experiment = do_create_experiment(
            actor=Actor(user),
            name="a benchmark scraping /metrics",
            host=sim_host,
            baseline=ServerConfig(name="base", model_path=f"{models}/kimi-k2.5-sim", tp_size=8),
            candidates=[],
            profile=BenchmarkProfile(name="short", concurrency=[4], num_prompts=2, output_len=32),
        )
        run = experiment.run_set.get()
        _store_log(run, lines)
        Run.objects.filter(pk=run.pk).update(
            state=Run.State.BENCHMARKING, log_lines=len(lines), started_at=timezone.now(), heartbeat_at=timezone.now()
        )
    return run


def test_it_folds_metrics_scrapes_live_and_on_load_without_losing_a_line(
    browser_user, log_in, sim_host, live_web, browser
):
    lines = _log()
    total = len(lines)
    run = _benchmarking_run(browser_user, sim_host, lines)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        log_in(page)
        started = time.monotonic()
        page.goto(f"{live_web}/runs/{run.pk}/")
        page.wait_for_function(f"() => document.querySelector('#line-count').textContent === '{total}'", timeout=30_000)
        loaded_s = time.monotonic() - started

        # Folded: one row per Decode line and one per run of scrapes; the 500 splits the first run into a lone
        # scrape (one line is no fold), itself and a fold.
        rows_in_view = 1 + BLOCKS * 2 + 2
        assert page.eval_on_selector("#log-spacer", "s => s.style.height") == f"{rows_in_view * 17}px"
        last_fold = page.locator("#log .log-fold").last
        assert last_fold.inner_text().startswith(f"▸ {PER_BLOCK} /metrics scrapes (folded) · lines {total - 23}–")
        assert last_fold.get_attribute("data-n") == str(total)  # following: the last row stands for the last line
        assert not [n for n, text in _visible_rows(page) if "GET /metrics" in text and n > 0 and "log-fold" not in text]

        # A click opens the fold: its lines with their own numbers; another folds it again.
        last_fold.locator("button").click()
        page.wait_for_selector(f"#log .line[data-n='{total}']:not(.log-fold)")
        opened = [n for n, text in _visible_rows(page) if "GET /metrics" in text and "scrapes" not in text]
        assert opened[-PER_BLOCK:] == list(range(total - PER_BLOCK + 1, total + 1))
        assert page.locator("#log .log-fold").last.locator("button").get_attribute("aria-expanded") == "true"
        page.locator("#log .log-fold").last.locator("button").click()
        page.wait_for_selector(f"#log .log-fold[data-n='{total}'] button[aria-expanded=false]")

        # The filter finds every scrape, one row each, numbered as in the log.
        page.fill("#log-filter", "GET /metrics")
        page.wait_for_function(
            f"() => document.querySelector('#match-count').textContent === ' · {BLOCKS * PER_BLOCK} matching'",
            timeout=30_000,
        )
        assert page.locator("#log .log-fold").count() == 0
        page.fill("#log-filter", " 500 ")
        page.wait_for_function("() => document.querySelector('#match-count').textContent === ' · 1 matching'")
        assert _visible_rows(page) == [[4, lines[3]]]
        page.fill("#log-filter", "")
        page.wait_for_function("() => document.querySelector('#match-count').hidden")

        # A permalink to a folded line opens its fold and marks the line.
        inside = 2 * (PER_BLOCK + 1) + 7
        page.goto(f"{live_web}/runs/{run.pk}/#L{inside}")
        page.wait_for_selector(f"#log .line.target-line[data-n='{inside}']", timeout=30_000)
        assert "GET /metrics" in page.inner_text(f"#log .line[data-n='{inside}'] .t")

        # Live: more scrapes join the last fold as they arrive; nothing is drawn one scrape a row.
        page.goto(f"{live_web}/runs/{run.pk}/")
        page.wait_for_function(f"() => document.querySelector('#line-count').textContent === '{total}'", timeout=30_000)
        more = [SCRAPE.format(port=50000 + i) for i in range(10)]
        LogChunk.objects.create(run=run, first_line=total + 1, line_count=len(more), text="\n".join(more))
        Run.objects.filter(pk=run.pk).update(log_lines=F("log_lines") + len(more), heartbeat_at=timezone.now())
        page.wait_for_function(
            f"() => document.querySelector('#line-count').textContent === '{total + len(more)}'", timeout=15_000
        )
        page.wait_for_selector(f"#log .log-fold[data-n='{total + len(more)}']")
        assert page.locator("#log .log-fold").last.inner_text().startswith(f"▸ {PER_BLOCK + 10} /metrics scrapes")

        # The download holds every line, scrapes and all.
        downloaded = page.evaluate("fetch(document.querySelector('#log-download').href).then(r => r.text())")
        assert downloaded.splitlines() == [*lines, *more]
        assert errors == []
        print(f"\n{total} lines loaded and folded in {loaded_s:.2f} s")
    finally:
        context.close()
        Run.objects.filter(pk=run.pk).update(state=Run.State.CANCELLED, finished_at=timezone.now())
