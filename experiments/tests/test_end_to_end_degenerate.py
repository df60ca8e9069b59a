"""Degenerate benchmarks end to end on the simulated host (issue 52): a candidate whose outputs loop, one whose server
applies another prompt template, and a baseline fed repeated filler prompts are each caught from the benchmark
client's request rows, kept out of the verdict and the CI gate, with the reason on the pages and in the API; a
healthy candidate beside them is not flagged. The faults are simhost's (`SIMHOST_FAULTS`, simhost/workload.py), set
per config through its environment."""

from __future__ import annotations

import json

import pytest

from experiments.cli import gates
from experiments.models import ApiToken, Host, PromptResults, Run
from simhost.vllm import versions as vllm_versions

from .test_end_to_end import FAST, _eagle, _explain, _wait_for_experiment
from .test_end_to_end_engines import _vllm_eagle

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
# Two ranks: each is a process the loaded 2-core machine starts at every launch; nothing here depends on how many.
TP_SIZE = 2
# Long enough for a loop after 40 tokens to be called one (workers/benchclient/repetition.py: 24 tokens of tail).
OUTPUT_LEN = 64
PROFILE = {
    "concurrency": [1],
    "num_prompts": 8,
    "input_len": 64,
    "output_len": OUTPUT_LEN,
    "passes": 1,
    "warmup_requests": 0,
    "stall_timeout_s": 60,
    "readiness_timeout_s": 120,
}


def _candidate(models: str, name: str, **env: str) -> dict:
    config = _eagle(models, name, 2)
    return {**config, "tp_size": TP_SIZE, "env": {**config["env"], **FAST, **env}}


def _run(client, headers, payload: dict) -> dict:
    response = client.post("/api/experiments", payload, content_type="application/json", headers=headers)
    assert response.status_code == 201, response.content
    body = _wait_for_experiment(client, headers, response.json()["id"], timeout=300)
    assert body["status"] == "finished", _explain(body)
    return body


def _gate(body: dict) -> list[gates.Check]:
    return gates.evaluate(body, gates.parse_fail_on("slower,outputs-differ"))


def test_a_looping_candidate_and_another_template_are_caught_and_a_healthy_one_is_not(
    client, owner, sim_host: Host, celery_worker_process
):
    # vLLM 0.11 (simhost's default) refuses EAGLE-3 on a Kimi target; the newest takes it.
    sim_host.shell_setup += f"\nexport SIMHOST_VLLM_VERSION={vllm_versions.NEWEST}"
    sim_host.save()
    _, raw_token = ApiToken.issue(owner)
    headers = {"Authorization": f"Bearer {raw_token}"}
    models = sim_host.models_root
    payload = {
        "name": "degenerate arms",
        "host": sim_host.name,
        "baseline": {"name": "baseline", "model_path": f"{models}/kimi-k2.5-sim", "tp_size": TP_SIZE, "env": FAST},
        "candidates": [
            _candidate(models, "healthy"),
            # Another engine, read from its OpenAI stream: its prompt-token counts are the baseline's (no template
            # differs), and its outputs are checked as they come.
            _vllm_eagle(models, "vllm-healthy", 2),
            # Every request loops after 40 tokens with period 4 (the simulated draft predicts the loop: 0.993 a token).
            _candidate(models, "looping", SIMHOST_FAULTS="output_loop", SIMHOST_LOOP_SHARE="1"),
            _candidate(models, "other-template", SIMHOST_FAULTS="template_mismatch"),
        ],
        "profile": PROFILE,
    }

    body = _run(client, headers, payload)

    runs = {r["config"]: r for r in body["runs"]}
    # The runs themselves: marked with why, the healthy ones not at all.
    for name in ("baseline", "healthy", "vllm-healthy"):
        assert runs[name]["degenerate"] is None, runs[name]["degenerate"]
    # Not for want of facts: each engine's rows carry the server's prompt-token counts and a loop check.
    rows_of = {n: PromptResults.objects.get(run_id=runs[n]["id"]).requests for n in ("baseline", "vllm-healthy")}
    assert [r["prompt_tokens"] for r in rows_of["vllm-healthy"]] == [r["prompt_tokens"] for r in rows_of["baseline"]]
    assert all(r["prompt_tokens"] and r["loop_unit"] and r["loop_at"] is None for r in rows_of["vllm-healthy"])
    looping = runs["looping"]["degenerate"]
    assert [f["kind"] for f in looping["findings"]] == ["repetition_loop"]
    assert looping["reason"].startswith("outputs loop after 40 tokens in 8 of 8 requests; acceptance ")
    assert looping["reason"].endswith(" is not a property of the draft")
    template = runs["other-template"]["degenerate"]
    assert [f["kind"] for f in template["findings"]] == ["template_mismatch"]
    assert "the server counted +11 prompt tokens on 8 of 8 prompts" in template["reason"]

    # The one answer: shown with the reason, never the best row, never passed by a gate.
    assert set(body["degenerate"]) == {"looping", "other-template"}
    rows = {r["candidate"]: r for r in body["comparison"]}
    assert rows["looping"]["degenerate"] == "its runs are degenerate: " + looping["reason"]
    assert rows["looping"]["degenerate"] in rows["looping"]["reasons"]
    assert rows["healthy"]["degenerate"] is None
    assert rows["looping"]["gate"]["outcome"] == "failed" and rows["other-template"]["gate"]["outcome"] == "failed"
    assert body["headline"] and "healthy" in body["headline"] and "looping" not in body["headline"]
    assert "other-template" not in body["headline"]
    cards = {v["candidate"]: v for v in body["verdicts"]}
    assert cards["looping"]["kind"] == "degenerate" and looping["reason"] in cards["looping"]["sentence"]
    checks = _gate(body)
    failed = {(c.gate, c.candidate) for c in checks if c.outcome == gates.FAILED}
    assert {("degenerate", "looping"), ("degenerate", "other-template"), ("slower", "looping")} <= failed
    assert not any(c.candidate in ("healthy", "vllm-healthy") and c.outcome == gates.FAILED for c in checks)
    assert gates.exit_code(checks, allow_inconclusive=True) == 1

    # On the pages, escaped like any text.
    client.force_login(owner)
    html = client.get(f"/experiments/{body['id']}/").content.decode()
    assert "outputs loop after 40 tokens in 8 of 8 requests" in html
    assert 'class="verdict verdict-slower degenerate-benchmark">degenerate benchmark' in html
    assert '<span class="failure degenerate-run">· degenerate benchmark: outputs loop after 40 tokens' in html
    run_html = client.get(Run.objects.get(pk=runs["looping"]["id"]).get_absolute_url()).content.decode()
    assert 'id="degenerate"' in run_html and "outputs loop after 40 tokens in 8 of 8 requests" in run_html
    healthy_html = client.get(Run.objects.get(pk=runs["healthy"]["id"]).get_absolute_url()).content.decode()
    assert 'id="degenerate"' not in healthy_html


FILLER = "please summarise this note about the weather today. " * 24


def test_a_baseline_fed_repeated_filler_prompts_leaves_no_verdict_trusted(
    client, owner, sim_host: Host, celery_worker_process
):
    _, raw_token = ApiToken.issue(owner)
    headers = {"Authorization": f"Bearer {raw_token}"}
    content = "\n".join(json.dumps({"prompt": FILLER, "category": "chat"}) for _ in range(8))
    prompt_set = client.post(
        "/api/prompt-sets", {"name": "filler", "content": content}, content_type="application/json", headers=headers
    ).json()
    models = sim_host.models_root
    payload = {
        "name": "filler prompts",
        "host": sim_host.name,
        "baseline": {"name": "baseline", "model_path": f"{models}/kimi-k2.5-sim", "tp_size": TP_SIZE, "env": FAST},
        "candidates": [_candidate(models, "eagle3")],
        "profile": {**PROFILE, "prompt_set": prompt_set["id"], "input_len": 1024},
    }

    body = _run(client, headers, payload)

    runs = {r["config"]: r for r in body["runs"]}
    for name in ("baseline", "eagle3"):
        kinds = [f["kind"] for f in runs[name]["degenerate"]["findings"]]
        assert kinds == ["repeated_prompts", "filler_prompts"], runs[name]["degenerate"]
    assert "prompts repeat: 1 distinct prompts among 8 requests" in runs["baseline"]["degenerate"]["reason"]
    assert body["headline"].startswith("No verdict can be trusted: the baseline's runs are degenerate (prompts repeat")
    (row,) = body["comparison"]
    assert row["gate"]["outcome"] == "failed" and "the baseline's runs are degenerate" in row["degenerate"]
    assert gates.exit_code(_gate(body), allow_inconclusive=True) == 1

    client.force_login(owner)
    html = client.get(f"/experiments/{body['id']}/").content.decode()
    assert "No verdict can be trusted: the baseline&#x27;s runs are degenerate" in html
