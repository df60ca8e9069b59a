"""Scheduled experiments: a saved experiment launched again every night or week by the beat."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from experiments.actions.audit import Actor
from experiments.actions.experiments import do_launch_scheduled_experiment, do_set_cadence
from experiments.models import AuditEvent, Experiment, Run

from .factories import make_experiment

pytestmark = pytest.mark.django_db

NOON = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _due(experiment: Experiment) -> datetime:
    assert experiment.next_scheduled_at is not None
    return experiment.next_scheduled_at


def _finished(experiment: Experiment) -> Experiment:
    experiment.run_set.update(state=Run.State.SUCCEEDED)
    return experiment


@pytest.mark.parametrize(
    "every, hour, expected",
    [
        ("nightly", 2, datetime(2026, 12, 2, 2, 0, tzinfo=UTC)),  # 02:00 has passed today: tomorrow's
        ("nightly", 13, datetime(2026, 12, 1, 13, 0, tzinfo=UTC)),
        ("weekly", 13, datetime(2026, 12, 1, 13, 0, tzinfo=UTC)),  # the first one as soon as the hour comes
        ("", 2, None),
    ],
)
def test_it_plans_the_first_launch_at_the_next_such_hour(every, hour, expected):
    experiment = Experiment(schedule=every, schedule_hour=hour)

    assert experiment.next_schedule_time(NOON) == expected


def test_it_keeps_to_the_timetable_after_a_launch_and_after_missed_ones():
    weekly = Experiment(schedule="weekly", schedule_hour=2, next_scheduled_at=datetime(2026, 12, 1, 2, tzinfo=UTC))
    nightly = Experiment(schedule="nightly", schedule_hour=2, next_scheduled_at=datetime(2026, 11, 20, 2, tzinfo=UTC))

    assert weekly.next_schedule_time(NOON) == datetime(2026, 12, 8, 2, tzinfo=UTC)
    assert nightly.next_schedule_time(NOON) == datetime(2026, 12, 2, 2, tzinfo=UTC)  # one launch, not eleven


def test_it_launches_a_due_experiment_once_even_if_two_beats_ask(owner):
    experiment = _finished(make_experiment(created_by=owner))
    do_set_cadence(experiment, actor=Actor(owner), every="nightly", hour=2)
    due = _due(experiment)
    later = due + timedelta(minutes=1)

    runs = do_launch_scheduled_experiment(Experiment.objects.get(pk=experiment.pk), now=later)
    again = do_launch_scheduled_experiment(Experiment.objects.get(pk=experiment.pk), now=later)

    assert len(runs) == 2 and again == []
    assert {r.state for r in runs} == {Run.State.QUEUED}
    experiment.refresh_from_db()
    assert experiment.next_scheduled_at == due + timedelta(days=1)
    event = AuditEvent.objects.filter(action=AuditEvent.Action.RERUN).get()
    assert event.via == "schedule" and event.actor is None


def test_it_does_not_pile_up_rounds_on_a_host_that_fell_behind(owner):
    experiment = make_experiment(created_by=owner)  # its first round is still queued
    do_set_cadence(experiment, actor=Actor(owner), every="nightly", hour=2)
    due = _due(experiment)

    assert do_launch_scheduled_experiment(experiment, now=due + timedelta(minutes=1)) == []
    experiment.refresh_from_db()
    assert experiment.next_scheduled_at == due + timedelta(days=1)  # the turn is spent, not retried every minute


def test_it_waits_for_the_due_time():
    experiment = _finished(make_experiment())
    do_set_cadence(experiment, actor=Actor(None), every="weekly", hour=3)

    assert do_launch_scheduled_experiment(experiment, now=_due(experiment) - timedelta(seconds=1)) == []
    assert list(Experiment.objects.scheduled_due(_due(experiment))) == [experiment]


def test_a_member_schedules_their_experiment_from_its_page(client, member):
    experiment = make_experiment(created_by=member)
    client.force_login(member)

    response = client.post(f"/experiments/{experiment.pk}/schedule/", {"every": "weekly", "hour_utc": "5"})

    assert response.status_code == 302
    experiment.refresh_from_db()
    assert experiment.schedule == "weekly" and _due(experiment).hour == 5
    page = client.get(experiment.get_absolute_url()).content.decode()
    assert "Runs again every week at 05:00 UTC" in page
    assert AuditEvent.objects.filter(action=AuditEvent.Action.SCHEDULE, target_id=experiment.pk).exists()


def test_it_refuses_a_bad_schedule_and_anyone_elses_experiment(client, member, owner):
    experiment = make_experiment()
    client.force_login(member)

    assert (
        client.post(f"/experiments/{experiment.pk}/schedule/", {"every": "nightly", "hour_utc": "2"}).status_code == 403
    )
    response = client.post(
        f"/api/experiments/{experiment.pk}/schedule",
        {"every": "hourly", "hour_utc": 2},
        content_type="application/json",
    )
    assert response.status_code == 403
    client.force_login(owner)
    response = client.post(
        f"/api/experiments/{experiment.pk}/schedule",
        {"every": "hourly", "hour_utc": 2},
        content_type="application/json",
    )
    assert response.status_code == 422 and "every" in response.json()["errors"]
    response = client.post(
        f"/api/experiments/{experiment.pk}/schedule",
        {"every": "nightly", "hour_utc": 24},
        content_type="application/json",
    )
    assert response.status_code == 422 and "hour_utc" in response.json()["errors"]


def test_the_api_sets_and_shows_a_schedule(owner_client):
    experiment = make_experiment()

    response = owner_client.post(
        f"/api/experiments/{experiment.pk}/schedule",
        {"every": "nightly", "hour_utc": 4},
        content_type="application/json",
    )

    assert response.status_code == 200
    schedule = owner_client.get(f"/api/experiments/{experiment.pk}").json()["schedule"]
    assert (
        schedule["every"] == "nightly" and schedule["hour_utc"] == 4 and schedule["next_at"].endswith("04:00:00+00:00")
    )
