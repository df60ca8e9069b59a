"""The sweep builder in a real browser: preview a grid, use its candidates and submit them; and the errors a sweep
gets, at preview and at submit, shown where the user is looking."""

from __future__ import annotations

import pytest

from experiments.models import Experiment

from .factories import make_host

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _rows(page, table: str) -> list[str]:
    return [row.inner_text() for row in page.locator(f"#{table} tbody tr").all()]


def test_it_previews_a_sweep_uses_its_candidates_and_submits_them(log_in, live_web, browser):
    make_host(name="gpu8")
    page = browser.new_context().new_page()
    log_in(page)
    page.goto(f"{live_web}/experiments/new/")
    page.fill("#id_experiment-name", "sweep in the browser")
    page.check("#id_cand-0-profile_eagle3")

    page.fill("#id_sweep-speculative_num_steps", "2, 3")
    page.fill("#id_sweep-speculative_eagle_topk", "1, 2")
    page.fill("#id_sweep-speculative_num_draft_tokens", "4, 8")
    page.click("#sweep-preview")
    page.wait_for_selector("#sweep-use", state="visible")

    names = [row.split("\t")[0] for row in _rows(page, "sweep-candidates")]
    assert names == ["s2-k1-d3", "s2-k2-d4", "s3-k1-d4", "s3-k2-d4", "s3-k2-d8"]
    skipped = _rows(page, "sweep-skipped")
    assert len(skipped) == 4
    assert any(row.startswith("s2-k2-d8") and "at most 7" in row for row in skipped)
    assert any(row.startswith("s2-k1-d8") and "runs as s2-k1-d3" in row for row in skipped)
    summary = page.inner_text("#sweep-summary")
    assert "5 candidates, 4 left out · 6 launches (the baseline and 5 candidates, 1 launch each)" in summary
    assert "profile: concurrency [1, 4] · 16 prompts" in summary

    page.click("#sweep-use")
    blocks = page.locator("fieldset.candidate")
    assert blocks.count() == 5
    assert page.input_value("#id_cand-5-name") == "s3-k2-d8"
    assert page.input_value("#id_cand-5-speculative_num_draft_tokens") == "8"
    assert page.input_value("#id_cand-5-model_path").endswith("/kimi-k2.5-sim")
    assert page.is_checked("#id_cand-5-profile_eagle3")
    assert page.locator("#sweep-result").is_hidden()

    page.click("button[type=submit].primary")
    page.wait_for_url("**/experiments/*/")
    experiment = Experiment.objects.get(name="sweep in the browser")
    candidates = experiment.ordered_candidates()
    assert [c.name for c in candidates] == names
    assert all(c.env.get("EAGLE3_PROFILE") == "1" and "verify_ms" in c.log_metrics for c in candidates)


def test_it_shows_a_sweeps_errors_at_preview_and_at_submit(log_in, live_web, browser):
    make_host(name="gpu8")  # 8 GPUs
    page = browser.new_context().new_page()
    log_in(page)
    page.goto(f"{live_web}/experiments/new/")
    page.fill("#id_experiment-name", "sweep errors")

    # A bad value list: its message under the box, nothing to use.
    page.fill("#id_sweep-speculative_num_steps", "2, x")
    page.fill("#id_sweep-speculative_eagle_topk", "1")
    page.press("#id_sweep-speculative_eagle_topk", "Enter")  # Enter previews too (the sweep's own form)
    page.wait_for_selector("#sweep-errors li")
    steps_field = page.locator("label.field", has=page.locator("#id_sweep-speculative_num_steps"))
    assert "'x' is not a whole number." in steps_field.inner_text()
    assert "has-error" in (steps_field.get_attribute("class") or "")
    assert page.locator("#sweep-use").is_hidden()

    # No valid combination: said as such, with every combination's reason.
    page.fill("#id_sweep-speculative_num_steps", "1")
    page.fill("#id_sweep-speculative_eagle_topk", "2")
    page.fill("#id_sweep-speculative_num_draft_tokens", "8")
    page.click("#sweep-preview")
    page.wait_for_function("() => document.querySelector('#sweep-errors').textContent.includes('No valid candidate')")
    assert _rows(page, "sweep-skipped") == ["s1-k2-d8\t8 draft tokens are more than the draft tree holds: at steps 1 "
                                             "and topk 2 it has 2 nodes and SGLang verifies draft tokens - 1 of them, "
                                             "so at most 3"]  # fmt: skip
    assert page.locator("#sweep-use").is_hidden()

    # Valid lists on a candidate too large for the host: the submission says so on each block it filled in.
    page.fill("#id_cand-0-tp_size", "16")
    page.fill("#id_sweep-speculative_eagle_topk", "1")
    page.fill("#id_sweep-speculative_num_draft_tokens", "")
    page.fill("#id_sweep-speculative_num_steps", "2, 3")
    page.click("#sweep-preview")
    page.wait_for_selector("#sweep-use", state="visible")
    page.click("#sweep-use")
    page.click("button[type=submit].primary")
    page.wait_for_selector(".message.error")
    assert page.locator("fieldset.candidate").count() == 2
    assert page.locator("fieldset.candidate .error", has_text="fewer than tp 16").count() == 2
    assert page.input_value("fieldset.candidate >> nth=1 >> [name$='-name']") == "s3-k1-d4"
    assert not Experiment.objects.filter(name="sweep errors").exists()
