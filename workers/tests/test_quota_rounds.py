"""The beat's rounds are held to the quotas like a member's click: a scheduled round fired by
`launch_scheduled_experiments` past its owner's limit is not queued and says so on the experiment, and a study's
round past it waits until `advance_studies` finds room. The probe's member (4 launches) never holds a fifth."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from experiments.actions.audit import Actor
from experiments.actions.experiments import do_set_cadence
from experiments.models import ApiToken, Experiment, MemberQuota, Run, Study
from experiments.tests.factories import make_config, make_experiment, make_host
from experiments.tests.test_quotas_rounds import SMALL
from experiments.tests.test_studies import TRUTH, _finish_round
from workers.tasks import advance_studies, launch_scheduled_experiments

# The tasks close the connection they find (close_old_connections): the test's rows must be committed.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("private_queue")]


def _api(client, user, method: str, url: str, body: dict | None = None):
    _, token = ApiToken.issue(user)
    headers = {"Authorization": f"Bearer {token}"}
    if method == "get":
        return client.get(url, headers=headers)
    return client.post(url, body or {}, content_type="application/json", headers=headers)


def _pending(member) -> int:
    return Run.objects.exclude(state__in=Run.TERMINAL_STATES).filter(experiment__created_by=member).count()


def _due_now(experiment: Experiment) -> None:
    Experiment.objects.filter(pk=experiment.pk).update(next_scheduled_at=timezone.now() - timedelta(minutes=1))


def test_a_nightly_round_past_the_owners_limit_is_not_queued_and_the_refusal_is_on_the_experiment(client, member):
    MemberQuota.objects.create(user=member, launches_queued=4)
    host = make_host()
    nightly = make_experiment(host=host, candidates=[make_config()], created_by=member)  # 2 launches a round
    nightly.run_set.update(state=Run.State.SUCCEEDED)
    do_set_cadence(nightly, actor=Actor(member), every="nightly", hour=2)
    other = make_experiment(host=host, candidates=[make_config(), make_config()], created_by=member)  # 3 pending
    _due_now(nightly)

    assert launch_scheduled_experiments() == []

    nightly.refresh_from_db()
    assert nightly.run_set.count() == 2 and _pending(member) == 3
    assert (
        nightly.next_scheduled_at is not None and nightly.next_scheduled_at > timezone.now()
    )  # the turn is spent, not retried every minute
    assert nightly.schedule_refusal.startswith("The nightly round due ")
    assert nightly.schedule_refusal.endswith(
        "UTC was not queued: 4 pending runs allowed for member (set by an admin); this asks 1 launch of 2 configs, "
        "2 runs (3 pending). An admin can raise member's limit on /team/."
    )
    assert _api(client, member, "get", f"/api/experiments/{nightly.pk}").json()["schedule"]["refusal"] == (
        nightly.schedule_refusal
    )
    client.force_login(member)
    page = client.get(nightly.get_absolute_url()).content.decode()
    assert nightly.schedule_refusal.replace("'", "&#x27;") in page

    other.run_set.update(state=Run.State.CANCELLED)
    _due_now(nightly)

    assert launch_scheduled_experiments() == [nightly.pk]

    nightly.refresh_from_db()
    assert nightly.run_set.count() == 4 and nightly.schedule_refusal == "" and _pending(member) == 2


def test_a_studys_round_waits_for_room_and_the_beat_queues_it_once_there_is(client, member):
    quota = MemberQuota.objects.create(user=member, launches_queued=4)
    host = make_host()
    started = _api(client, member, "post", "/api/studies", {**SMALL, "host": host.name})
    study = Study.objects.get(pk=started.json()["id"])
    extra = _api(client, member, "post", "/api/experiments", {
        "name": "one more", "host": host.name, "baseline": {**SMALL["baseline"], "name": "one"},
        "profile": {**SMALL["profile"], "launches": 1},
    })  # fmt: skip
    assert extra.status_code == 201 and _pending(member) == 4  # the round's 3 and this one
    quota.launches_queued = 3  # an admin lowers the limit meanwhile
    quota.save()

    _finish_round(study, TRUTH)  # round 2 asks 3 more with 1 pending: past 3

    study.refresh_from_db()
    assert study.studyround_set.count() == 1 and study.round_refusal.startswith("Round 2 waits: 3 pending runs")
    assert advance_studies() == [] and _pending(member) == 1

    Run.objects.filter(experiment_id=extra.json()["id"]).update(state=Run.State.SUCCEEDED)

    assert advance_studies() == [study.pk]
    study.refresh_from_db()
    assert study.studyround_set.count() == 2 and study.round_refusal == "" and _pending(member) == 3
