"""GPU-hours a day, per member and per host: how launches are counted (the pure rule), and a member's request past
the quota refused through the API as a member would send it, with nothing queued and nothing sent to a worker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from experiments.models import ApiToken, Experiment, Run, ServerConfig
from experiments.rules import gpu_hours
from experiments.rules.gpu_hours import LaunchShape, LaunchSpan

from .factories import make_eagle_config, make_experiment, make_host, make_run, small_submission

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
# One launch of the API payload below: 8 GPUs, 1 level, 1 pass, 4 prompts, the default timeouts (600 s, 1800 s):
# (1800 + (5 waves x 600 + 60) + 600) s x 8 GPUs = 12.13 GPU-hours.
ONE_LAUNCH = 8 * (1800 + 5 * 600 + 60 + 600) / 3600
CONTEXT_ERROR = (
    "ValueError: Warning: Target model's context_length (262144) is greater than the derived context_length "
    "(131072). This may lead to incorrect model outputs or CUDA errors."
)


# The rule (pure).


def test_it_bounds_a_cell_as_the_worker_stops_it():
    assert gpu_hours.cell_time_bound_s(64, 16, 120) == 120 * 5 + 60  # 4 waves, one more for the remainder
    assert gpu_hours.cell_time_bound_s(1, 4, 600) == 600 + 60


def test_it_reserves_a_launch_at_its_profiles_timeouts_times_its_gpus():
    shape = LaunchShape(gpus=8, concurrency=(1, 4), passes=3, num_prompts=16, request_timeout_s=600,
                        readiness_timeout_s=1800)  # fmt: skip

    cells = (17 * 600 + 60) + (5 * 600 + 60)
    assert shape.time_bound_s == 1800 + 3 * cells + 600
    assert shape.gpu_hours_bound == pytest.approx(8 * (1800 + 3 * cells + 600) / 3600)
    assert LaunchShape(1, (1,), 1, 4, 600, 1800).gpu_hours_bound == pytest.approx(ONE_LAUNCH / 8)


def test_it_counts_a_finished_launch_at_the_time_it_took():
    span = LaunchSpan(gpus=4, started_at=NOW - timedelta(hours=3), finished_at=NOW - timedelta(hours=1),
                      is_finished=True, time_bound_s=10 * 3600)  # fmt: skip

    assert gpu_hours.launch_gpu_hours(span, NOW) == pytest.approx(8.0)
    assert gpu_hours.gpu_hours_used([span], NOW) == pytest.approx(8.0)


def test_it_counts_a_pending_launch_at_its_bound_or_what_it_has_taken_if_longer():
    queued = LaunchSpan(gpus=2, started_at=None, finished_at=None, is_finished=False, time_bound_s=1800)
    running = LaunchSpan(gpus=2, started_at=NOW - timedelta(minutes=10), finished_at=None, is_finished=False,
                         time_bound_s=3600)  # fmt: skip
    overran = LaunchSpan(gpus=2, started_at=NOW - timedelta(hours=3), finished_at=None, is_finished=False,
                         time_bound_s=3600)  # fmt: skip

    assert gpu_hours.launch_gpu_hours(queued, NOW) == pytest.approx(1.0)
    assert gpu_hours.launch_gpu_hours(running, NOW) == pytest.approx(2.0)
    assert gpu_hours.launch_gpu_hours(overran, NOW) == pytest.approx(6.0)
    assert gpu_hours.gpu_hours_used([queued, running, overran], NOW) == pytest.approx(9.0)


def test_it_leaves_out_launches_that_started_before_the_day_and_those_cancelled_before_starting():
    yesterday = LaunchSpan(gpus=8, started_at=NOW - timedelta(hours=25), finished_at=NOW - timedelta(hours=20),
                           is_finished=True, time_bound_s=3600)  # fmt: skip
    never_started = LaunchSpan(gpus=8, started_at=None, finished_at=NOW, is_finished=True, time_bound_s=3600)
    today = LaunchSpan(gpus=1, started_at=NOW - timedelta(hours=23), finished_at=NOW - timedelta(hours=22),
                       is_finished=True, time_bound_s=3600)  # fmt: skip

    assert gpu_hours.gpu_hours_used([yesterday, never_started, today], NOW) == pytest.approx(1.0)


def test_the_reported_attack_profile_reserves_more_than_any_quota_allows():
    # 32 levels x 50 passes x 100,000 prompts with 24 h timeouts, at tp 8.
    shape = LaunchShape(8, tuple(range(1, 33)), 50, 100_000, 24 * 3600, 24 * 3600)

    assert shape.gpu_hours_bound > 1e9


# Through the API, as a member.


def _headers(user) -> dict:
    _, token = ApiToken.issue(user)
    return {"Authorization": f"Bearer {token}"}


def _post(client, path, body, user):
    return client.post(path, body, content_type="application/json", headers=_headers(user))


@pytest.mark.django_db
def test_a_members_submission_past_their_gpu_hours_is_refused_and_nothing_is_queued_or_sent(
    client, member, settings, django_capture_on_commit_callbacks
):
    settings.SPECDASH_QUOTA_GPU_HOURS_PER_USER_PER_DAY = 100
    host = make_host()

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        refused = _post(client, "/api/experiments", small_submission(host, 9), member)  # 9 x 12.13 = 109 GPU-hours

    assert refused.status_code == 429
    message = refused.json()["errors"]["quota"][0]
    assert message.startswith(
        "100.0 GPU-hours a day allowed for you (the default, SPECDASH_QUOTA_GPU_HOURS_PER_USER_PER_DAY); this asks "
        "109.2 more for 9 launches of 1 config (0.0 used or reserved in the last 24 h)."
    )
    assert message.endswith("An admin can raise your limit on /team/.")
    assert not Experiment.objects.exists() and not Run.objects.exists()
    assert callbacks == []  # no wake-up for a worker


@pytest.mark.django_db
def test_a_members_rerun_is_bounded_by_the_same_quota(client, member, settings):
    settings.SPECDASH_QUOTA_GPU_HOURS_PER_USER_PER_DAY = 100
    host = make_host()
    first = _post(client, "/api/experiments", small_submission(host, 5), member)  # 60.7 GPU-hours reserved

    rerun = _post(client, f"/api/experiments/{first.json()['id']}/rerun", {"launches": 4}, member)

    assert first.status_code == 201
    assert rerun.status_code == 429
    message = rerun.json()["errors"]["quota"][0]
    assert "this asks 48.5 more for 4 launches of 1 config (60.7 used or reserved in the last 24 h)" in message
    assert Run.objects.count() == 5
    assert _post(client, f"/api/experiments/{first.json()['id']}/rerun", {"launches": 3}, member).status_code == 201


@pytest.mark.django_db
def test_what_finished_launches_took_today_counts_and_what_they_took_yesterday_does_not(client, member, settings):
    settings.SPECDASH_QUOTA_GPU_HOURS_PER_USER_PER_DAY = 100
    host = make_host()
    now = timezone.now()
    earlier = make_experiment(host=host, candidates=[], created_by=member, with_runs=False)
    # 8 GPUs for 10 hours today (80 GPU-hours), and for 10 hours the day before (not counted).
    make_run(experiment=earlier, state=Run.State.SUCCEEDED, started_at=now - timedelta(hours=11),
             finished_at=now - timedelta(hours=1))  # fmt: skip
    make_run(experiment=earlier, state=Run.State.FAILED, started_at=now - timedelta(hours=40),
             finished_at=now - timedelta(hours=30))  # fmt: skip

    refused = _post(client, "/api/experiments", small_submission(host, 2), member)  # 24.3 GPU-hours
    accepted = _post(client, "/api/experiments", small_submission(host, 1, "one"), member)

    assert refused.status_code == 429
    assert "(80.0 used or reserved in the last 24 h)" in refused.json()["errors"]["quota"][0]
    assert accepted.status_code == 201


@pytest.mark.django_db
def test_a_hosts_gpu_hours_count_everyones_launches_there_and_an_admin_is_not_held_to_either(
    client, member, owner, settings
):
    settings.SPECDASH_QUOTA_GPU_HOURS_PER_HOST_PER_DAY = 50
    host = make_host()

    admin = _post(client, "/api/experiments", small_submission(host, 5), owner)  # 60.7 GPU-hours: past both, exempt
    refused = _post(client, "/api/experiments", small_submission(host, 1, "one"), member)

    assert admin.status_code == 201
    assert refused.status_code == 429
    message = refused.json()["errors"]["quota"][0]
    assert message.startswith(
        f"50.0 GPU-hours a day allowed on host {host.name} (the default, SPECDASH_QUOTA_GPU_HOURS_PER_HOST_PER_DAY); "
        "this asks 12.1 more for 1 launch of 1 config (60.7 used or reserved there in the last 24 h)."
    )
    assert message.endswith(f"An admin can raise the host's limit on /hosts/{host.pk}/edit/.")
    assert not Experiment.objects.filter(name="one").exists()


@pytest.mark.django_db
def test_the_config_gpus_count_a_tp1_launch_reserves_an_eighth(client, member, settings):
    settings.SPECDASH_QUOTA_GPU_HOURS_PER_USER_PER_DAY = 10
    host = make_host()
    payload = small_submission(host, 5)
    payload["baseline"]["tp_size"] = 1

    assert _post(client, "/api/experiments", payload, member).status_code == 201  # 5 x 1.52 = 7.6


@pytest.mark.django_db
def test_a_members_remedy_rerun_is_held_to_the_quota(client, member, settings):
    settings.SPECDASH_QUOTA_LAUNCHES_PER_USER = 2
    candidate = make_eagle_config(name="eagle3")
    experiment = make_experiment(candidates=[candidate], created_by=member)  # its baseline's launch still queued
    failed = experiment.run_set.get(config=candidate)
    Run.objects.filter(pk=failed.pk).update(
        state=Run.State.FAILED, failure_kind=Run.FailureKind.CONTEXT_LENGTH, failure_message=CONTEXT_ERROR
    )
    configs = ServerConfig.objects.count()

    response = _post(client, f"/api/runs/{failed.pk}/remedy", {"remedy": "context-length"}, member)

    assert response.status_code == 429
    assert response.json()["errors"]["quota"][0].startswith(
        "2 pending runs allowed for you (the default, SPECDASH_QUOTA_LAUNCHES_PER_USER); this asks 1 launch of 2 "
        "configs, 2 runs (1 pending)."
    )
    assert Run.objects.count() == 2 and ServerConfig.objects.count() == configs  # no new version either


@pytest.mark.django_db
def test_a_request_of_32_levels_50_passes_100000_prompts_and_day_long_timeouts_is_refused(client, member):
    host = make_host()
    attack = small_submission(host, 50, concurrency=list(range(1, 33)), num_prompts=100_000, passes=50,
                      request_timeout_s=86_400, readiness_timeout_s=86_400, stall_timeout_s=86_400)  # fmt: skip

    response = _post(client, "/api/experiments", attack, member)

    assert response.status_code == 409  # levels x passes x prompts: a rule between fields
    message = " ".join(response.json()["errors"]["profile.num_prompts"])
    assert "160,000,000 requests per launch; at most 200,000" in message
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_profile_within_the_request_bound_but_with_day_long_timeouts_is_refused_by_the_gpu_hours(client, member):
    host = make_host()
    long_waits = small_submission(host, 1, concurrency=[1, 2, 4, 8], num_prompts=64, passes=3,
                          request_timeout_s=86_400, readiness_timeout_s=86_400)  # fmt: skip

    response = _post(client, "/api/experiments", long_waits, member)

    assert response.status_code == 429
    assert "SPECDASH_QUOTA_GPU_HOURS_PER_USER_PER_DAY" in response.json()["errors"]["quota"][0]
    assert not Run.objects.exists()
