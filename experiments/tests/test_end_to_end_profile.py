"""Profiling end to end, through the API, a real Celery worker, a real sshd and the simulated host: a 2-step and a
3-step EAGLE-3 candidate profiled after their measured cells; each summary matches the speed model's draft and verify
times, and the diff of the two breakdowns names verify as what grew."""

from __future__ import annotations

import gzip

import pytest
from django.utils.html import escape

from experiments.models import ApiToken, Host
from simhost import speed

from .test_end_to_end import _eagle, _explain, _wait_for_experiment

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _config(models: str, name: str, steps: int) -> dict:
    config = {**_eagle(models, name, steps), "tp_size": 2}  # two rank traces each: enough to show, quick to fetch
    # A simulated GPU twice as fast: a trace's steps are the speed model's times, whatever the speed factor.
    return {**config, "env": {**config["env"], "SIMHOST_SPEED": "2"}}


def test_it_profiles_two_candidates_and_names_verify_as_the_difference(
    client, owner, sim_host: Host, celery_worker_process
):
    _, raw_token = ApiToken.issue(owner)
    headers = {"Authorization": f"Bearer {raw_token}"}
    models = sim_host.models_root
    payload = {
        "name": "why is verify 30 ms",
        "host": sim_host.name,
        "baseline": _config(models, "eagle3-2step", 2),
        "candidates": [_config(models, "eagle3-3step", 3)],
        "profile": {"concurrency": [1], "num_prompts": 3, "input_len": 32, "output_len": 32, "warmup_requests": 0,
                    "passes": 1, "launches": 1, "stall_timeout_s": 60, "readiness_timeout_s": 120},
        "profile_traces": True,
    }  # fmt: skip

    response = client.post("/api/experiments", payload, content_type="application/json", headers=headers)

    assert response.status_code == 201, response.content
    body = _wait_for_experiment(client, headers, response.json()["id"], timeout=180)
    assert body["status"] == "finished", _explain(body)
    runs = {r["config"]: client.get(f"/api/runs/{r['id']}", headers=headers).json() for r in body["runs"]}
    params = speed.SpeedParams()
    for name, steps in (("eagle3-2step", 2), ("eagle3-3step", 3)):
        run = runs[name]
        assert run["profile_requested"] and len(run["measurements"]) == 1
        traces = [t for t in run["profile_traces"] if t["state"] == "stored"]
        assert [t["rank"] for t in traces] == [0, 1], run["profile_traces"]
        row = next(r for r in traces[0]["summary"]["by_batch_size"] if r["batch_size"] == 1)
        cfg = speed.SpecConfig("EAGLE3", steps, 1, steps + 1, overlap=False)  # spec v1: the 0.5.9 default
        draft, forward = speed.iteration_parts(params, cfg, 1)
        parts = row["phases"]
        assert parts["draft"] == pytest.approx(draft, rel=0.10)
        assert parts["verify"] == pytest.approx(speed.phase_parts(params, cfg, 1).verify, rel=0.10)
        # What the model calls verify (EAGLE3 profile's "Target verify") is the trace's verify + extend + other.
        assert parts["verify"] + parts["draft_extend"] + parts["other"] == pytest.approx(forward, rel=0.10)

    two, three = runs["eagle3-2step"]["id"], runs["eagle3-3step"]["id"]
    change = client.get(f"/api/runs/{three}/profile-diff?against={two}", headers=headers).json()["diff"]
    assert change["lead"] == "verify" and change["text"].startswith("verify ")
    assert change["lead_family"]["family"] == "attention"
    assert runs["eagle3-3step"]["profile_diffs"][0]["text"] == change["text"]

    client.force_login(owner)
    html = client.get(f"/runs/{three}/").content.decode()
    assert 'id="profile-run"' in html and "Download the trace" in html and escape(change["text"]) in html
    trace = runs["eagle3-3step"]["profile_traces"][0]
    download = client.get(trace["download_url"])
    assert download.status_code == 200 and download["Content-Type"] == "application/gzip"
    assert b"step[TARGET_VERIFY bs=1]" in gzip.decompress(download.content)
