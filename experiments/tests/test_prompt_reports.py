"""The comparison's prompt-level parts through the API and the page: the equivalence gate and the category table."""

from __future__ import annotations

import pytest

from experiments.actions.runs import do_advance_run
from experiments.models import ApiToken, Candidate, Measurement, PromptResults, PromptSet, Run

from .factories import make_config, make_eagle_config, make_experiment, make_measurement, make_profile, make_run

pytestmark = pytest.mark.django_db


def _requests(changed_from: dict[int, int], prompts: int = 50) -> list[dict]:
    rows = []
    for p in range(prompts):
        ids = [p * 100 + t for t in range(40)]
        if p in changed_from:
            ids[changed_from[p] :] = [t + 1 for t in ids[changed_from[p] :]]
        rows.append({"index": p, "category": "code" if p % 2 else "chat", "ok": True, "output_len": 40,
                     "accept_length": 2.0, "output_ids": ids})  # fmt: skip
    return rows


def _experiment(temperature: float = 0.0, buggy_env: dict | None = None):
    prompt_set = PromptSet.objects.create(name="s", kind="upload", content_hash="s")
    baseline, honest, buggy = (
        make_config(name="baseline"),
        make_eagle_config(name="honest"),
        make_eagle_config(name="buggy", env=buggy_env or {}),
    )
    profile = make_profile(concurrency=[1], passes=3, prompt_set=prompt_set, temperature=temperature)
    experiment = make_experiment(baseline=baseline, candidates=[honest, buggy], profile=profile, with_runs=False)
    for config, tok_s, changed in ((baseline, 100.0, {}), (honest, 120.0, {3: 40 - 5}), (buggy, 130.0, {1: 4, 2: 9})):
        run = make_run(experiment=experiment, config=config, state=Run.State.TEARDOWN)
        for pass_index in range(3):
            make_measurement(run, concurrency=1, output_throughput=tok_s + pass_index, pass_index=pass_index)
        Measurement.objects.filter(run=run).update(
            raw={"categories": {"code": {"requests": 25, "accept_length": 2.5 if config != baseline else None,
                                          "mean_request_tok_s": 50.0}, "chat": {"requests": 25, "accept_length": 1.8,
                                                                               "mean_request_tok_s": 40.0}}}
        )  # fmt: skip
        PromptResults.objects.create(run=run, pass_index=0, concurrency=1, requests=_requests(changed))
        do_advance_run(run, Run.State.SUCCEEDED)  # (stores the candidates' gates)
    return experiment


def _get(client, owner, experiment) -> dict:
    _, token = ApiToken.issue(owner)
    return client.get(f"/api/experiments/{experiment.pk}", headers={"Authorization": f"Bearer {token}"}).json()


def test_it_marks_the_candidate_whose_outputs_differ_early_and_passes_late_divergence(client, owner):
    body = _get(client, owner, _experiment())

    rows = {r["candidate"]: r for r in body["comparison"]}
    assert rows["buggy"]["speedup"] > 1.2 and rows["buggy"]["verdict"] == "outputs differ"
    assert rows["honest"]["verdict"] == "faster" and not rows["honest"]["outputs_differ"]
    honest, buggy = body["equivalence"]["honest"], body["equivalence"]["buggy"]
    # The honest candidate's one late divergence (token 35 of 40) is reported, not counted against it.
    assert (honest["identical"], honest["early_divergences"], honest["late_divergences"]) == (49, 0, 1)
    assert [(d["prompt"], d["token"]) for d in buggy["divergences"]] == [(1, 4), (2, 9)]
    assert buggy["outputs_differ"] and buggy["share_identical"] == 0.96


def test_it_shows_the_gate_side_by_side_and_the_categories_on_the_page(client, owner):
    experiment = _experiment()
    client.force_login(owner)
    html = client.get(experiment.get_absolute_url()).content.decode()
    assert 'class="verdict verdict-outputs-differ">outputs differ' in html
    assert "buggy: where outputs part" in html and "<td>#1</td><td>4</td>" in html
    assert "<code>104 105 106 107 108 109 110 111</code></td><td><code>105 106 107 108 109 110 111 112</code>" in html
    assert "<td>code</td><td>honest</td><td>25.0</td><td>2.50 · 50.0</td>" in html
    assert "16 upload prompts · ≤128 in / ≤128 out" in html


def test_it_has_no_gate_when_the_profile_samples(client, owner):
    body = _get(client, owner, _experiment(temperature=0.8))
    assert body["equivalence"] == {}
    assert {r["verdict"] for r in body["comparison"]} == {"faster"}


def test_a_simulated_acceptance_config_is_exempt_from_the_gate(client, owner):
    # Its verify step accepts what SGLANG_SIMULATE_ACC_LEN tells it: its outputs are not the model's to compare.
    experiment = _experiment(buggy_env={"SGLANG_SIMULATE_ACC_LEN": "3", "SGLANG_SIMULATE_ACC_METHOD": "match-expected"})

    body = _get(client, owner, experiment)

    assert "buggy" not in body["equivalence"] and "honest" in body["equivalence"]
    rows = {r["candidate"]: r for r in body["comparison"]}
    assert rows["buggy"]["verdict"] == "faster" and not rows["buggy"]["outputs_differ"]
    assert not Candidate.objects.get(experiment=experiment, config__name="buggy").outputs_differ
    # Nor is it the answer: the headline names the real candidate, not the faster simulated one.
    assert body["headline"].startswith("honest serves")


def test_it_stores_each_candidates_gate_and_withholds_the_win_in_the_experiments_table(client, owner):
    experiment = _experiment()
    stored = {c.config.name: c for c in Candidate.objects.filter(experiment=experiment).select_related("config")}
    assert stored["buggy"].outputs_differ and not stored["honest"].outputs_differ
    assert stored["buggy"].equivalence["early_divergences"] == 2

    client.force_login(owner)
    html = client.get("/experiments/").content.decode()
    best = html[html.index('<td class="best">') :].split("</td>", 1)[0]
    assert "honest @c=1" in best and "verdict-faster" in best  # the best honest candidate, not the faster buggy one
