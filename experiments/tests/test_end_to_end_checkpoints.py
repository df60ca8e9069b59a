"""From draft training to served speedup, end to end: a study over three of a SpecForge run's exported checkpoints x
two step counts on the simulated host (its training directory, simhost/README.md "Draft checkpoints"), through the
API, a Celery worker and the real sshd. The study's answer is the best trained checkpoint, and the draft's report card
picks it from the same comparison and flags the checkpoint whose weights the serving loader silently skipped."""

from __future__ import annotations

import pytest

from experiments.models import ApiToken, Host, Run, Study
from experiments.tests.test_end_to_end_study import TP_SIZE, _runs
from experiments.tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
RUN = "kimi-k2.5-sim-eagle3-sf"
STEPS = (2000, 4000, 5000)  # 4000 is the best trained; 5000's weights are skipped by the serving loader
# The simulated GPUs at four times their pace: their steps keep the speed model's clock, in a quarter of the time.
FAST = {"SIMHOST_LOAD_SECONDS": "0.2", "SIMHOST_SPEED": "4"}


def test_a_study_over_checkpoints_answers_with_the_best_and_its_report_card_flags_the_broken_one(
    client, owner, sim_host: Host, celery_worker_process
):
    sim_host.draft_training_dirs = [f"{sim_host.models_root}/kimi-k2.5-sim-specforge"]
    sim_host.save()
    _, token = ApiToken.issue(owner)
    headers = {"Authorization": f"Bearer {token}"}
    models = sim_host.models_root
    target = {"model_path": f"{models}/kimi-k2.5-sim", "tp_size": TP_SIZE, "env": FAST}
    drafts = [f"{models}/{RUN}-step{step}-sglang" for step in STEPS]
    payload = {
        "name": "which checkpoint",
        "host": sim_host.name,
        "baseline": {"name": "baseline", **target},
        "sweep": {
            "base": {
                **target,
                "speculative_algorithm": "EAGLE3",
                "speculative_draft_model_path": drafts[0],
                "speculative_num_steps": 2,
                "speculative_eagle_topk": 1,
                "speculative_num_draft_tokens": 3,
            },
            "drafts": drafts,
            "speculative_num_steps": [2, 3],
            "speculative_eagle_topk": [1],
        },
        "profile": {"concurrency": [1], "num_prompts": 4, "input_len": 32, "output_len": 48, "passes": 1},
        # Two rounds of the baseline and the six configs: every config launched twice where the race keeps it.
        "budget": {"launches": 14},
        "round_size": 6,
    }

    response = client.post("/api/studies", payload, content_type="application/json", headers=headers)

    assert response.status_code == 201, response.content
    study = Study.objects.get(pk=response.json()["id"])
    until(lambda: not Study.objects.get(pk=study.pk).is_running, 240, "the study's end", lambda: _runs(study))
    body = client.get(f"/api/studies/{study.pk}", headers=headers).json()
    runs = Run.objects.filter(experiment__studyround__study=study)
    assert all(run.state == Run.State.SUCCEEDED for run in runs), _runs(study)
    trials = {t["config"]: t for t in body["trials"] if not t["is_baseline"]}
    assert len(trials) == 6 and all(f"{RUN}-step" in name for name in trials), list(trials)
    (band,) = body["recommendation"]
    assert f"{RUN}-step4000" in band["config"], band

    # The draft's report card: the checkpoint to ship is the study's winner, beside its training figure on the same
    # definition; the checkpoint whose weights were skipped is called out with the likely causes.
    card = client.get(f"/api/studies/{study.pk}/drafts", headers=headers).json()
    assert card["answer"].startswith("Ship step4000: "), card["answer"]
    by_step = {c["training"]["step"]: c for c in card["checkpoints"] if c["training"]}
    assert sorted(by_step) == list(STEPS), card
    assert by_step[4000]["training"]["is_best"] and by_step[5000]["training"]["is_latest"]
    (callout,) = card["callouts"]
    assert callout.startswith("step5000 serves accept length 1.0") and "the serving loader skipped" in callout, callout
    healthy = [k for k in by_step[4000]["candidates"] if k["served_accept_length"] is not None]
    assert healthy and not any(k["far_below_training"] for k in healthy), by_step[4000]
    client.force_login(owner)
    page = client.get(f"/studies/{study.pk}/drafts/").content.decode()
    assert "Ship step4000" in page and "step5000 serves accept length" in page
