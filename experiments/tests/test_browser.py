"""The spine in a real browser: log in, submit an experiment with the form, watch it run, see the comparison."""

from __future__ import annotations

import pytest

from experiments.models import Experiment, Host
from experiments.tests.waiting import until
from simhost import hostsetup

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_it_submits_an_experiment_in_the_browser_and_shows_live_runs_and_the_comparison(
    browser_user, log_in, sim_host, live_web, celery_worker_process, browser
):
    context = browser.new_context()
    page = context.new_page()
    log_in(page, through_form=True)  # as a person does: the other browser tests set the session's cookie
    # The form suggests the host's models as a worker last listed them: list them from the host's page first.
    page.goto(f"{live_web}/hosts/{sim_host.pk}/")
    page.click("#models button[type=submit]")
    until(lambda: Host.objects.get(pk=sim_host.pk).listed_models(), 60, "a worker storing the host's model listing")

    page.goto(f"{live_web}/experiments/new/")
    page.fill("#id_experiment-name", "browser: eagle3 2 steps")
    page.select_option("#id_experiment-host", sim_host.name)
    # The model path fields suggest the host's model directories, as listed.
    page.wait_for_selector("#host-models option[value$='/kimi-k2.5-sim-eagle3']", state="attached", timeout=30_000)
    # Every model directory the simulated host ships (a directory with a config.json, as the listing finds them).
    shipped = sum(1 for d in hostsetup.MODELS_ROOT.iterdir() if (d / "config.json").is_file())
    assert page.inner_text("#host-models-status").startswith(f"{shipped} models on {sim_host.name}")
    page.fill("#id_baseline-tp_size", "2")
    page.fill("#id_cand-0-tp_size", "2")
    page.fill("#id_profile-concurrency_text", "1, 2")
    page.fill("#id_profile-num_prompts", "2")
    page.fill("#id_profile-output_len", "32")
    page.fill("#id_profile-passes", "2")  # the fewest that give each row an interval (the default is 3)
    page.click("button[type=submit].primary")

    page.wait_for_load_state()
    assert page.locator(".error").count() == 0, page.locator("form").inner_text()
    page.wait_for_url("**/experiments/*/")
    experiment = Experiment.objects.get(name="browser: eagle3 2 steps")
    assert page.locator("#runs tbody tr").count() == 2

    # A run's log streams in over the websocket without a reload.
    run = experiment.run_set.order_by("sequence")[0]
    log_page = context.new_page()  # same session
    log_page.goto(f"{live_web}/runs/{run.pk}/")
    log_page.wait_for_selector("#log .line", timeout=60_000)
    # Only the visible window of the log is in the DOM: look for the ready line with the viewer's filter.
    log_page.fill("#log-filter", "fired up and ready to roll")
    log_page.wait_for_function(
        "() => document.querySelector('#log').textContent.includes('fired up and ready to roll')", timeout=60_000
    )

    # The experiment page follows the states live and, once finished, draws both Plotly charts.
    # The throughput chart appears with the baseline's results; the speedup chart once a candidate has some too.
    page.wait_for_selector("#speedup-chart", timeout=180_000)
    page.locator("#speedup-chart").scroll_into_view_if_needed()  # charts are drawn as they come into view
    page.wait_for_selector("#speedup-chart .main-svg", timeout=10_000)
    page.locator("#throughput-chart").scroll_into_view_if_needed()
    page.wait_for_selector("#throughput-chart .main-svg", timeout=10_000)
    assert page.locator("#comparison tbody tr").count() == 2
    assert "succeeded" in page.locator("#runs").inner_text()
