"""The live acceptance alarm end to end: an EAGLE3 draft served with --speculative-algorithm EAGLE (which the simulated
host, like SGLang, serves without an error while accepting nothing) is said at preflight, and the collapse is raised
on the run while it is still benchmarking, with its likely causes, through the real sshd and a Celery worker."""

from __future__ import annotations

import pytest

from experiments.models import ApiToken, Host, LogChunk, Run
from experiments.tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _explain(run: Run) -> str:
    tail = "\n".join(c.text for c in LogChunk.objects.filter(run=run).order_by("-first_line")[:2][::-1])
    return f"run {run.pk}: {run.state} {run.failure_message} warnings={run.warnings}\n--- log tail ---\n{tail[-3000:]}"


def _until_in(run: Run, what, timeout: float, awaited: str):
    """What `what` finds in the run, read afresh at each poll; a run that ends first fails the wait at once."""

    def found():
        run.refresh_from_db()
        return what(run)

    return until(found, timeout, awaited, lambda: _explain(run), give_up=lambda: run.state in Run.TERMINAL_STATES)


def test_it_raises_the_collapse_alarm_while_the_run_is_still_benchmarking(
    client, owner, sim_host: Host, celery_worker_process
):
    _, raw_token = ApiToken.issue(owner)
    headers = {"Authorization": f"Bearer {raw_token}"}
    models = sim_host.models_root
    eagle3_as_eagle = {
        "name": "eagle3-draft-as-eagle",
        "model_path": f"{models}/kimi-k2.5-sim",
        "tp_size": 1,
        "speculative_algorithm": "EAGLE",
        "speculative_draft_model_path": f"{models}/kimi-k2.5-sim-eagle3",
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 3,
    }
    # One config measured alone; a benchmark of ~23 s or more (8 waves of 128 one-token steps of ~23 ms, slower on a
    # loaded machine), where the alarm needs 3 Decode lines of 40 steps (~3 s): it must come well before the end.
    # The run is cancelled once it has (the test takes ~20 s).
    payload = {
        "name": "acceptance alarm",
        "host": sim_host.name,
        "baseline": eagle3_as_eagle,
        "profile": {"concurrency": [2], "num_prompts": 16, "input_len": 32, "output_len": 128, "seed": 1,
                    "passes": 1, "launches": 1, "warmup_requests": 1, "stall_timeout_s": 60,
                    "readiness_timeout_s": 120},
    }  # fmt: skip

    response = client.post("/api/experiments", payload, content_type="application/json", headers=headers)

    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["runs"][0]["id"])
    alarm = _until_in(run, lambda r: next((w for w in r.warnings if w["kind"] == "acceptance_collapse"), None), 90,
                      "the acceptance_collapse warning")  # fmt: skip
    # Read in the same row as the warning: raised live, not at the end.
    assert run.state == Run.State.BENCHMARKING, _explain(run)
    assert "Acceptance collapsed: accept length 1.00 on 3 Decode lines in a row" in alarm["message"]
    assert (
        "says LlamaForCausalLMEagle3, an EAGLE3 draft, and this config runs --speculative-algorithm EAGLE"
        in (alarm["message"])
    )
    assert "accept len: 1.00" in alarm["text"]
    assert [r["id"] for r in alarm["remedies"]] == ["eagle3-algorithm", "draft-target-mismatch", "draft-weights"]
    # Said before launch too, from the draft's config.json at preflight.
    assert any(w["kind"] == "algorithm_mismatch" for w in run.warnings), run.warnings
    # The API shows it while the run benchmarks.
    body = client.get(f"/api/runs/{run.pk}", headers=headers).json()
    assert any(w["kind"] == "acceptance_collapse" for w in body["warnings"])

    # The rest of the benchmark would measure nothing worth waiting for.
    assert client.post(f"/api/runs/{run.pk}/cancel", headers=headers).status_code == 200
    _until_in(run, lambda r: r.state in Run.TERMINAL_STATES, 60, "the cancelled run's end")
