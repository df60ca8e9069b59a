"""The new-experiment page's saved-config and saved-profile pickers in a real browser: pick, edit, submit, and the new
version links to the stored config it came from."""

from __future__ import annotations

import pytest

from experiments.models import Experiment

from .factories import make_eagle_config, make_host, make_profile

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _pick(page, picker: str, query: str) -> None:
    """Type `query` into a picker, wait for its suggestions, and choose the first (as picking from the list does)."""
    page.fill(picker, query)
    options = page.locator(f"#{page.get_attribute(picker, 'list')} option")
    options.first.wait_for(state="attached")
    page.fill(picker, options.first.get_attribute("value") or "")


def test_it_loads_a_saved_config_and_profile_and_saves_the_edit_as_a_linked_version(log_in, live_web, browser):
    make_host(name="gpu8")
    stored = make_eagle_config(steps=2, name="eagle-saved", env={"NCCL_PROTO": "LL"})
    make_profile(name="nightly profile", concurrency=[1, 8], num_prompts=32, passes=3, seed=42)
    page = browser.new_context().new_page()
    log_in(page)
    page.goto(f"{live_web}/experiments/new/")
    page.fill("#id_experiment-name", "from a saved config")

    _pick(page, "#cand-0-saved-config", "eagle-sav")
    assert page.input_value("#id_cand-0-name") == "eagle-saved"
    assert page.input_value("#id_cand-0-env_text") == "NCCL_PROTO=LL"
    assert page.input_value("#id_cand-0-source_config") == str(stored.pk)
    _pick(page, "#saved-profile", "nightly")
    assert page.input_value("#id_profile-concurrency_text") == "1, 8"
    assert page.input_value("#id_profile-seed") == "42"

    page.fill("#id_cand-0-env_text", "NCCL_PROTO=Simple")
    assert page.input_value("#id_cand-0-name") == "eagle-saved v2"  # a change is a new version, with a new name
    assert "a new version of eagle-saved" in page.inner_text("fieldset.candidate .saved-status")
    page.click("button[type=submit].primary")
    page.wait_for_url("**/experiments/*/")

    experiment = Experiment.objects.get(name="from a saved config")
    (version,) = experiment.ordered_candidates()
    assert (version.name, version.env, version.derived_from) == ("eagle-saved v2", {"NCCL_PROTO": "Simple"}, stored)
    assert (experiment.profile.concurrency, experiment.profile.seed) == ([1, 8], 42)
    page.goto(f"{live_web}/configs/{version.pk}/")
    assert page.inner_text("#derived-from") == "eagle-saved"


def test_a_picked_config_shows_its_methods_own_settings_and_keeps_its_name(log_in, live_web, browser):
    from experiments.models import ServerConfig

    make_host(name="gpu8")
    ServerConfig.objects.create(
        name="ngram-saved", model_path="/models/kimi-k2.5-sim", tp_size=8, speculative_algorithm="NGRAM",
        engine_options={"speculative_ngram_max_bfs_breadth": 6},
    )  # fmt: skip
    page = browser.new_context().new_page()
    log_in(page)
    page.goto(f"{live_web}/experiments/new/")
    breadth = "#id_cand-0-option_speculative_ngram_max_bfs_breadth"
    assert page.is_hidden(breadth)

    _pick(page, "#cand-0-saved-config", "ngram-sav")

    assert page.is_visible(breadth) and page.input_value(breadth) == "6"
    assert page.input_value("#id_cand-0-name") == "ngram-saved"  # shown, not changed: still the stored config
