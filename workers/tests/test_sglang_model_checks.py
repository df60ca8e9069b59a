"""The model pairs SGLang refuses, read from the target's and draft's config.json."""

from __future__ import annotations

import pytest

from workers.sglang import OVERRIDE_ENV, context_length_problem, vocab_problem

TARGET = {"architectures": ["KimiK25ForCausalLM"], "max_position_embeddings": 262144, "vocab_size": 163840}
DRAFT_131K = {"architectures": ["LlamaForCausalLMEagle3"], "max_position_embeddings": 131072, "vocab_size": 163840}

# --- draft vs target config.json ----------------------------------------------------------------------------


def test_it_explains_a_draft_with_a_shorter_context():
    problem = context_length_problem(TARGET, DRAFT_131K, context_length=None, env={})

    assert problem is not None
    assert "131072" in problem and "262144" in problem
    assert f"{OVERRIDE_ENV}=1" in problem
    assert "--context-length 131072" in problem


@pytest.mark.parametrize("value", ["1", "true", "True"])
def test_it_accepts_a_shorter_draft_when_the_override_is_set(value):
    assert context_length_problem(TARGET, DRAFT_131K, context_length=None, env={OVERRIDE_ENV: value}) is None


@pytest.mark.parametrize("value", ["0", "", "false"])
def test_it_ignores_an_override_that_is_off(value):
    assert context_length_problem(TARGET, DRAFT_131K, context_length=None, env={OVERRIDE_ENV: value}) is not None


@pytest.mark.parametrize("context_length", [131072, 100000])
def test_it_accepts_a_shorter_draft_when_the_context_is_capped(context_length):
    assert context_length_problem(TARGET, DRAFT_131K, context_length=context_length, env={}) is None


def test_it_checks_an_explicit_context_length_against_the_draft():
    problem = context_length_problem(TARGET, DRAFT_131K, context_length=200000, env={})

    assert problem is not None and "(200000)" in problem


@pytest.mark.parametrize(
    "target, draft",
    [
        pytest.param(TARGET, {**DRAFT_131K, "max_position_embeddings": 262144}, id="matching"),
        pytest.param(TARGET, {**DRAFT_131K, "max_position_embeddings": 524288}, id="longer-draft"),
        pytest.param(TARGET, {"vocab_size": 163840}, id="draft-unknown"),
        pytest.param({"vocab_size": 163840}, DRAFT_131K, id="target-unknown"),
    ],
)
def test_it_has_no_context_problem(target, draft):
    assert context_length_problem(target, draft, context_length=None, env={}) is None


def test_it_reads_the_context_of_a_multimodal_config():
    target = {"architectures": ["KimiVL"], "text_config": {"max_position_embeddings": 262144}}

    assert context_length_problem(target, DRAFT_131K, context_length=None, env={}) is not None


def test_it_explains_a_vocab_mismatch():
    problem = vocab_problem(TARGET, {**DRAFT_131K, "vocab_size": 32000})

    assert problem is not None and "32000" in problem and "163840" in problem


@pytest.mark.parametrize(
    "draft",
    [
        pytest.param(DRAFT_131K, id="same"),
        pytest.param({"max_position_embeddings": 131072}, id="unknown"),
        pytest.param({"text_config": {"vocab_size": 163840}}, id="nested-same"),
    ],
)
def test_it_has_no_vocab_problem(draft):
    assert vocab_problem(TARGET, draft) is None


def test_it_reads_the_vocab_of_a_multimodal_config():
    assert vocab_problem({"text_config": {"vocab_size": 163840}}, {"vocab_size": 32000}) is not None
