"""The new-experiment form in a real browser: duplicating an experiment, and "Add candidate" copying the last one."""

from __future__ import annotations

import pytest

from .factories import make_eagle_config, make_experiment

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_it_duplicates_an_experiment_and_adds_a_candidate_like_the_last(log_in, live_web, browser):
    source = make_experiment(candidates=[make_eagle_config(steps=3, env={"NCCL_PROTO": "LL"})])
    page = browser.new_context().new_page()
    log_in(page)

    page.goto(f"{live_web}/experiments/{source.pk}/")
    page.click("#duplicate")
    page.wait_for_url(f"**/experiments/new/?from={source.pk}")
    assert page.input_value("#id_experiment-name") == f"{source.name} (copy)"
    assert page.input_value("#id_cand-0-speculative_num_steps") == "3"
    page.click("#add-candidate")

    assert page.locator("fieldset.candidate").count() == 2
    assert page.input_value("#id_cand-1-name") == ""  # each candidate needs its own name
    assert page.input_value("#id_cand-1-speculative_num_steps") == "3"
    assert page.input_value("#id_cand-1-speculative_draft_model_path").endswith("/kimi-k2.5-sim-eagle3")
    assert page.input_value("#id_cand-1-env_text") == "NCCL_PROTO=LL"
    assert page.evaluate("document.activeElement.id") == "id_cand-1-name"

    # A block set to vLLM shows vLLM's settings and methods alone, emptied of SGLang's; a block added after it is vLLM.
    page.select_option("#id_cand-1-engine", "vllm")
    assert (
        page.is_hidden("#id_cand-1-speculative_eagle_topk")
        and page.input_value("#id_cand-1-speculative_eagle_topk") == ""
    )
    assert page.is_visible("#id_cand-1-option_draft_tensor_parallel_size")
    assert page.is_visible("#id_cand-0-speculative_eagle_topk")  # the other block keeps SGLang's
    methods = page.eval_on_selector_all(
        "#id_cand-1-speculative_algorithm option:not([disabled])", "options => options.map(o => o.value)"
    )
    assert "eagle3" in methods and "EAGLE3" not in methods
    page.click("#add-candidate")
    assert page.input_value("#id_cand-2-engine") == "vllm" and page.is_hidden("#id_cand-2-speculative_eagle_topk")


def test_it_shows_a_methods_own_settings_only_while_that_method_is_chosen(log_in, live_web, browser):
    make_experiment(candidates=[make_eagle_config(steps=3)])
    page = browser.new_context().new_page()
    log_in(page)
    page.goto(f"{live_web}/experiments/new/")
    breadth, block = (
        "#id_cand-0-option_speculative_ngram_max_bfs_breadth",
        "#id_cand-0-option_speculative_dflash_block_size",
    )
    assert page.is_hidden(breadth) and page.is_hidden(block)  # EAGLE3 or none: no method's own settings

    page.select_option("#id_cand-0-speculative_algorithm", "NGRAM")
    assert page.is_visible(breadth) and page.is_visible("#id_cand-0-option_speculative_ngram_match_type")
    assert page.is_hidden(block) and page.is_hidden("#id_cand-0-option_prompt_lookup_min")
    page.fill(breadth, "6")

    # Another method hides NGRAM's settings and empties them, so the block never posts one for DFLASH.
    page.select_option("#id_cand-0-speculative_algorithm", "DFLASH")
    assert page.is_hidden(breadth) and page.input_value(breadth) == ""
    assert page.is_visible(block)

    # vLLM's ngram shows its own lookup lengths, not SGLang's NGRAM settings.
    page.select_option("#id_cand-0-engine", "vllm")
    page.select_option("#id_cand-0-speculative_algorithm", "ngram")
    assert page.is_visible("#id_cand-0-option_prompt_lookup_min") and page.is_hidden(breadth)
