"""Prompt sets end to end: an uploaded set's sample reaches the simulated host, per-category results come back, and
the equivalence gate marks a faster candidate whose draft path changes the outputs, while an honest one passes."""

from __future__ import annotations

import json

import pytest

from experiments.models import ApiToken, Host, PromptResults

from .test_end_to_end import _eagle, _explain, _wait_for_experiment

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
# Two ranks, not the eight of the real model: each rank is a process the loaded machine starts at every launch,
# and nothing here depends on how many there are (the simulated speed does not).
TP_SIZE = 2

PROMPTS = [
    {
        "prompt": f"def handler_{i}(event): return event  # make this python function validate its input",
        "category": "code",
    }
    for i in range(3)
] + [
    {"prompt": f"tell me a short story number {i} about a lighthouse keeper and a storm", "category": "chat"}
    for i in range(3)
]


def test_it_marks_a_faster_candidate_that_changes_outputs_and_passes_an_honest_one(
    client, owner, sim_host: Host, celery_worker_process
):
    _, raw_token = ApiToken.issue(owner)
    headers = {"Authorization": f"Bearer {raw_token}"}
    content = "\n".join(json.dumps(p) for p in PROMPTS)
    prompt_set = client.post(
        "/api/prompt-sets", {"name": "mixed", "content": content}, content_type="application/json", headers=headers
    ).json()
    models = sim_host.models_root
    buggy = _eagle(models, "eagle3-draft-bug", 2)
    # Its draft also accepts more than the honest one's (0.85 a token, not 0.62): "faster" by a margin no load on
    # this machine hides in cells this short (at the default it once measured 0.97 of the baseline under load).
    buggy["env"] = {
        **buggy["env"],
        "SIMHOST_FAULTS": "draft_bug",
        "SIMHOST_DRAFT_BUG_AFTER": "4",
        "SIMHOST_ACCEPT_P": "0.85",
    }
    payload = {
        "name": "gate",
        "host": sim_host.name,
        "baseline": {"name": "baseline", "model_path": f"{models}/kimi-k2.5-sim", "tp_size": TP_SIZE},
        "candidates": [_eagle(models, "eagle3-honest", 2), buggy],
        "profile": {
            "prompt_set": prompt_set["id"],
            "concurrency": [1],
            "num_prompts": 6,
            "input_len": 64,
            "output_len": 24,
            "passes": 2,
            "warmup_requests": 0,
            "stall_timeout_s": 60,
            "readiness_timeout_s": 120,
        },
    }

    response = client.post("/api/experiments", payload, content_type="application/json", headers=headers)

    assert response.status_code == 201, response.content
    body = _wait_for_experiment(client, headers, response.json()["id"], timeout=240)
    assert body["status"] == "finished", _explain(body)
    rows = {r["candidate"]: r for r in body["comparison"]}
    gates = body["equivalence"]
    assert gates["eagle3-honest"]["identical"] == gates["eagle3-honest"]["compared"] == 6
    assert gates["eagle3-draft-bug"]["early_divergences"] == 6
    assert {d["token"] for d in gates["eagle3-draft-bug"]["divergences"]} == {4}
    code = [c for c in body["categories"] if c["config"] == "eagle3-honest" and c["category"] == "code"]
    chat = [c for c in body["categories"] if c["config"] == "eagle3-honest" and c["category"] == "chat"]
    assert code[0]["cells"][0]["accept_length"] > chat[0]["cells"][0]["accept_length"]
    assert rows["eagle3-draft-bug"]["speedup"] > 1.0  # faster...
    assert rows["eagle3-draft-bug"]["verdict"] == "outputs differ"  # ...and no win
    assert rows["eagle3-draft-bug"]["outputs_differ"] is True
    assert rows["eagle3-honest"]["verdict"] != "outputs differ" and rows["eagle3-honest"]["outputs_differ"] is False

    client.force_login(owner)
    html = client.get(f"/experiments/{body['id']}/").content.decode()
    assert 'id="equivalence"' in html and 'id="category-table"' in html
    assert "<td>code</td>" in html and "<td>chat</td>" in html
    assert 'class="verdict verdict-outputs-differ">outputs differ' in html

    results = PromptResults.objects.get(run__experiment_id=body["id"], run__config__name="baseline")
    assert sorted(r["category"] for r in results.requests) == ["chat"] * 3 + ["code"] * 3
    assert all(len(r["output_ids"]) == 24 for r in results.requests)
