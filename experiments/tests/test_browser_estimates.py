"""A run page's estimate in a real browser, kept true as the run's state changes, without a reload: queued second, it
moves up when the run ahead starts; its queued line disappears the moment it starts itself; its end follows its
phases; and the estimate goes once it has ended. The experiment page's rows and finish follow the same events."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connection

from experiments.actions.hosts import do_release_host
from experiments.actions.runs import do_advance_run, do_claim_next_run
from experiments.models import Run

from .factories import make_config, make_experiment, make_host, make_measured_run, make_profile

pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("private_queue"),
]


def _off_thread(action: Callable[[], object]) -> None:
    """Off this thread: Playwright's event loop runs here, and the broadcasts are sync-to-async."""

    def run() -> None:
        try:
            action()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def _text(page, selector: str) -> str:
    return page.locator(selector).inner_text()


def test_the_run_page_keeps_its_estimate_true_as_the_run_moves(browser, live_web, log_in):
    host = make_host()
    config = make_config()
    profile = make_profile()
    history = make_experiment(host=host, baseline=config, candidates=[], profile=profile, with_runs=False)
    _off_thread(lambda: make_measured_run(history, config, load_s=60, warmup_s=10, cell_s=30))
    queued = make_experiment(host=host, baseline=config, candidates=[], profile=profile)
    first = queued.run_set.get()
    later = make_experiment(host=host, baseline=config, candidates=[], profile=profile).run_set.get()
    page = browser.new_page()
    try:
        log_in(page)
        page.goto(f"{live_web}/runs/{later.pk}/", wait_until="load")
        page.wait_for_selector("body[data-live=on]", timeout=15_000)
        assert _text(page, "#queue-standing").startswith(f"Queued: #2 on {host.name}, waits for 1 queued run ahead")
        estimate = _text(page, "#run-estimate")
        assert estimate.startswith("Estimate: starts in ") and "(from 1 run of this config on this host)" in estimate

        _off_thread(lambda: do_claim_next_run(host.pk, "worker-1"))  # the run ahead starts

        page.wait_for_function(
            "() => document.querySelector('#queue-standing [data-field=position]').textContent === '1'",
            timeout=15_000,
        )
        assert f"waits for run {first.pk} ({config.name}, connecting) to finish" in _text(page, "#queue-standing")

        def start_the_later_run() -> None:
            first.refresh_from_db()
            do_advance_run(first, Run.State.SUCCEEDED)
            do_release_host(first)
            assert do_claim_next_run(host.pk, "worker-1") == later

        _off_thread(start_the_later_run)

        page.wait_for_selector("#queue-standing", state="detached", timeout=15_000)
        page.wait_for_function(
            "() => document.querySelector('#run-estimate').innerText.startsWith('Estimate: done in ')", timeout=15_000
        )
        assert _text(page, "#run-state") == "connecting"
        assert "(from 1 run of this config on this host)" in _text(page, "#run-estimate")

        def benchmark() -> None:
            later.refresh_from_db()
            for state in (Run.State.LOADING, Run.State.WARMING, Run.State.BENCHMARKING):
                do_advance_run(later, state)

        _off_thread(benchmark)
        page.wait_for_function("() => document.querySelector('#run-state').textContent === 'benchmarking'")
        assert _text(page, "#run-estimate").startswith("Estimate: done in ")

        _off_thread(lambda: do_advance_run(later, Run.State.SUCCEEDED))

        page.wait_for_selector("#run-estimate", state="hidden", timeout=15_000)
    finally:
        page.close()


def test_the_experiment_page_follows_its_runs_estimates(browser, live_web, log_in):
    host = make_host()
    config = make_config()
    profile = make_profile()
    history = make_experiment(host=host, baseline=config, candidates=[], profile=profile, with_runs=False)
    _off_thread(lambda: make_measured_run(history, config, load_s=60, cell_s=30))
    experiment = make_experiment(host=host, baseline=config, candidates=[], profile=make_profile(launches=2))
    first, second = experiment.run_set.order_by("sequence")
    page = browser.new_page()
    try:
        log_in(page)
        page.goto(f"{live_web}{experiment.get_absolute_url()}", wait_until="load")
        page.wait_for_selector("body[data-live=on]", timeout=15_000)
        assert _text(page, f'tr[data-run="{second.pk}"] .queue-standing').startswith(f"#2 on {host.name}")
        assert "starts in " in _text(page, f'tr[data-run="{second.pk}"] .estimate')
        assert _text(page, "#experiment-estimate").startswith("Estimate for the last run: done in ")

        _off_thread(lambda: do_claim_next_run(host.pk, "worker-1"))

        page.wait_for_selector(f'tr[data-run="{first.pk}"] .queue-standing', state="detached", timeout=15_000)
        page.wait_for_function(
            f"() => document.querySelector('tr[data-run=\"{second.pk}\"] [data-field=position]').textContent === '1'",
            timeout=15_000,
        )
        assert _text(page, f'tr[data-run="{first.pk}"] .estimate').startswith("· done in ")
    finally:
        page.close()
