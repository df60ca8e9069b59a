"""Pure preflight checks on facts read from the host: nvidia-smi output and the models' config.json."""

from __future__ import annotations

import pytest

from workers.preflight import (
    OVERRIDE_ENV,
    ComputeApp,
    context_length_problem,
    parse_compute_apps,
    parse_gpu_inventory,
    vocab_problem,
)

TARGET = {"architectures": ["KimiK25ForCausalLM"], "max_position_embeddings": 262144, "vocab_size": 163840}
DRAFT_131K = {"architectures": ["LlamaForCausalLMEagle3"], "max_position_embeddings": 131072, "vocab_size": 163840}


# --- nvidia-smi ---------------------------------------------------------------------------------------------


def test_it_parses_compute_apps():
    text = "12345, 81920\n12346, 1024\n"

    assert parse_compute_apps(text) == [ComputeApp(pid=12345, used_mib=81920), ComputeApp(pid=12346, used_mib=1024)]


def test_it_reads_the_gpu_index_when_given():
    assert parse_compute_apps("777, 512, 3") == [ComputeApp(pid=777, used_mib=512, gpu_index=3)]


@pytest.mark.parametrize("text", ["", "\n", "No running processes found\n", "pid, used_gpu_memory [MiB]\n"])
def test_it_finds_no_compute_apps_on_idle_gpus(text):
    assert parse_compute_apps(text) == []


def test_it_counts_a_process_whose_memory_is_not_reported():
    assert [app.pid for app in parse_compute_apps("4242, [N/A]\n")] == [4242]


def test_it_parses_the_gpu_inventory():
    text = "0, NVIDIA H200, 0, 143771\n1, NVIDIA H200, 81920.0, 143771\n"

    assert parse_gpu_inventory(text) == [
        {"index": 0, "name": "NVIDIA H200", "memory_used_mib": 0, "memory_total_mib": 143771},
        {"index": 1, "name": "NVIDIA H200", "memory_used_mib": 81920, "memory_total_mib": 143771},
    ]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "index, name, memory.used [MiB], memory.total [MiB]\n",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        "0, NVIDIA H200, [N/A]\n",
        "0, NVIDIA H200, [N/A], [N/A]\n",
    ],
)
def test_it_skips_lines_that_are_not_gpus(text):
    assert parse_gpu_inventory(text) == []


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
