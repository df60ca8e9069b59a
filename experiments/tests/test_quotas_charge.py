"""GPU-hours charged by the estimate the pages show: a run reserves the upper end of its estimated time when it is
queued (the time-outs' bound only while nothing is measured on its host), and is settled to the time it took once it
ends. A refusal says the limit, what was asked in launches as the form counts them, and who can raise it, at the top
of the page and beside the field."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from experiments.actions.audit import Actor
from experiments.actions.runs import do_advance_run, do_cancel_run, do_claim_next_run
from experiments.models import Experiment, MemberQuota, Run

from .factories import make_host, make_measured_run, small_submission
from .test_quotas_gpu_hours import ONE_LAUNCH
from .test_views_experiments import _browser_post, _eagle_fields

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("private_queue")]


def _quota_message(response) -> str:
    assert response.status_code == 429, response.content
    return response.json()["errors"]["quota"][0]


def test_a_run_reserves_the_upper_end_of_its_estimate_and_is_settled_to_what_it_took(api, member, owner, settings):
    settings.SPECDASH_QUOTA_GPU_HOURS_PER_USER_PER_DAY = 10
    host = make_host()
    # The 4-prompt test of the quota tests: with nothing measured on the host, 8 GPUs x its time-outs' 1.5 h.
    refused = api(member, "post", "/api/experiments", small_submission(host, 1))
    assert "this asks 12.1 more for 1 launch of 1 config (0.0 used" in _quota_message(refused)
    # A worker measures one run of that config there (an admin's, who is not held): 90 s of it.
    admins = Experiment.objects.get(
        pk=api(owner, "post", "/api/experiments", small_submission(host, 1, "first")).json()["id"]
    )
    do_cancel_run(admins.run_set.get(), Actor(owner))
    make_measured_run(admins, load_s=60, warmup_s=10, cell_s=12, after_s=2, teardown_s=6)

    accepted = api(member, "post", "/api/experiments", small_submission(host, 1, "small test"))

    assert accepted.status_code == 201, accepted.content
    run = Run.objects.get(experiment_id=accepted.json()["id"])
    assert run.reserved_s is not None
    shown = api(member, "get", f"/api/runs/{run.pk}").json()
    # What it reserves is the end of the range its page shows, on its 8 GPUs: minutes, not 12 GPU-hours.
    assert run.reserved_s == pytest.approx(shown["estimate"]["duration_s"]["high"], abs=0.1)
    assert 90 < run.reserved_s < 300
    reserved = 8 * run.reserved_s / 3600
    assert shown["gpu_hours"] == {"gpus": 8, "reserved": pytest.approx(reserved, abs=1e-3),
                                  "charged": pytest.approx(reserved, abs=1e-3), "settled": False}  # fmt: skip
    over = api(member, "post", "/api/experiments", small_submission(host, 40, "over"))
    assert f"({reserved:,.1f} used or reserved in the last 24 h)" in _quota_message(over)
    assert ONE_LAUNCH > 20 * reserved

    # It runs for 30 minutes (longer than reserved): settled to 8 GPUs x 0.5 h.
    claimed = do_claim_next_run(host.pk, "worker-1")
    assert claimed == run
    Run.objects.filter(pk=run.pk).update(started_at=timezone.now() - timedelta(minutes=30))
    run.refresh_from_db()
    do_advance_run(run, Run.State.SUCCEEDED)

    settled = api(member, "get", f"/api/runs/{run.pk}").json()["gpu_hours"]
    assert settled["settled"] and settled["charged"] == pytest.approx(4.0, abs=1e-3)
    assert settled["reserved"] == pytest.approx(reserved, abs=1e-3)
    assert "(4.0 used or reserved in the last 24 h)" in _quota_message(
        api(member, "post", "/api/experiments", small_submission(host, 40, "many more"))
    )


def test_a_profiled_launch_reserves_its_profiling_too(api, owner):
    host = make_host()
    experiment = Experiment.objects.get(
        pk=api(owner, "post", "/api/experiments", small_submission(host, 1)).json()["id"]
    )
    do_cancel_run(experiment.run_set.get(), Actor(owner))
    make_measured_run(experiment, load_s=60, cell_s=12)
    finished = experiment.run_set.filter(state=Run.State.SUCCEEDED).get()

    response = api(owner, "post", f"/api/runs/{finished.pk}/profile", {})

    assert response.status_code == 201, response.content
    profiled = Run.objects.get(profile_requested=True).reserved_s
    plain = api(owner, "post", "/api/experiments", small_submission(host, 1, "plain")).json()
    unprofiled = Run.objects.get(experiment_id=plain["id"]).reserved_s
    assert profiled is not None and unprofiled is not None and profiled > unprofiled


def test_the_refusal_is_at_the_top_of_the_page_and_beside_launches_counted_as_the_form_counts_them(client, member):
    host = make_host()
    MemberQuota.objects.create(user=member, launches_queued=1)
    client.force_login(member)

    page = client.post("/experiments/new/", _browser_post(host, _eagle_fields("cand-0", "eagle3-2step"), 1))

    assert page.status_code == 400 and not Experiment.objects.exists()
    content = page.content.decode().replace("&#x27;", "'")
    refusal = (
        "1 pending run allowed for you (set by an admin); this asks 1 launch of 2 configs, 2 runs (0 pending). "
        "An admin can raise your limit on /team/."
    )
    top = content.index('id="quota-refusal"')
    assert content.index(refusal, top) < content.index('<form method="post" id="experiment-form"')
    assert 'role="alert">The experiment was not queued: ' + refusal in content
    launches = content.split('for="id_profile-launches"')[1].split("</label>")[0]
    assert refusal in launches
    assert "fix the fields marked below" not in content
