"""The rounds nobody clicks for are counted too: a study's whole budget at its start, each of its rounds as a run's
end plans it, and the history check's confirming launches. The probe's member (4 launches, 20 GPU-hours) cannot
start a study of 500 day-long launches, and never holds more pending launches than the limit. (The beat's own
rounds, studies' and schedules', are in workers/tests/test_quota_rounds.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from experiments.actions.study_rounds import do_advance_study
from experiments.models import MemberQuota, Run, Study, Suspicion

from .factories import MODELS, make_history, make_host
from .test_confirmations import _stable
from .test_studies import BODY, TRUTH, _finish_round

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("private_queue")]

# The study of the report at tp 1: one launch of BODY's profile reserves (1800 + 9 x 600 + 60 + 2 x 600 + 60 + 600)
# s on 1 GPU = 2.53 GPU-hours.
SMALL: dict[str, Any] = {
    **BODY,
    "baseline": {**BODY["baseline"], "tp_size": 1},
    "sweep": {**BODY["sweep"], "base": {**BODY["sweep"]["base"], "tp_size": 1}},
    "budget": {"launches": 6},
}
ONE_LAUNCH = (1800 + 9 * 600 + 60 + 2 * 600 + 60 + 600) / 3600


def _limit(member, launches: int | None = None, gpu_hours: float | None = None) -> None:
    """What an admin sets on the Team page."""
    MemberQuota.objects.update_or_create(user=member, defaults={"launches_queued": launches,
                                                                 "gpu_hours_per_day": gpu_hours})  # fmt: skip


def _pending(member) -> int:
    return Run.objects.exclude(state__in=Run.TERMINAL_STATES).filter(experiment__created_by=member).count()


def test_the_probes_study_of_500_day_long_launches_is_refused_at_its_start(api, member):
    _limit(member, launches=4, gpu_hours=20)
    probe = {**BODY, "host": make_host().name, "budget": {"launches": 500},
             "profile": {**BODY["profile"], "request_timeout_s": 86_400, "readiness_timeout_s": 86_400}}  # fmt: skip

    response = api(member, "post", "/api/studies", probe)

    assert response.status_code == 429
    [message] = response.json()["errors"]["quota"]
    assert message.startswith("20.0 GPU-hours a day allowed for you (set by an admin); this study's budget asks up to ")
    assert "(500 launches x " in message and message.endswith("An admin can raise your limit on /team/.")
    assert not Study.objects.exists() and not Run.objects.exists()


def test_a_study_whose_budget_fits_starts_and_one_launch_more_does_not(api, member):
    host = make_host(models_root=MODELS)
    _limit(member, gpu_hours=6 * ONE_LAUNCH + 0.01)

    over = api(member, "post", "/api/studies", {**SMALL, "host": host.name, "budget": {"launches": 7}})
    fits = api(member, "post", "/api/studies", {**SMALL, "host": host.name})

    assert over.status_code == 429 and "this study's budget asks up to 17.7 (7 launches x 2.5 each)" in str(over.json())
    assert fits.status_code == 201, fits.content


def test_an_hours_budget_bounds_the_studys_reservation_by_those_hours_on_its_gpus(api, member):
    _limit(member, gpu_hours=10)
    body = {**SMALL, "host": make_host().name, "budget": {"hours": 2}}  # 500 launches, but 2 h on 1 GPU

    response = api(member, "post", "/api/studies", body)

    # 2 h x 1 GPU and a last round of 3 launches: 2 + 7.6 = 9.6 GPU-hours, within 10.
    assert response.status_code == 201, response.content


def test_a_round_past_the_quota_waits_says_why_and_is_queued_once_there_is_room(api, client, member):
    _limit(member, launches=3)
    study = Study.objects.get(pk=api(member, "post", "/api/studies", {**SMALL, "host": make_host().name}).json()["id"])
    _limit(member, launches=2)  # an admin lowers the limit while the first round runs

    _finish_round(study, TRUTH)  # its last run's end plans round 2: 3 launches, past 2

    study.refresh_from_db()
    assert study.is_running and study.studyround_set.count() == 1 and _pending(member) == 0
    expected = (
        "Round 2 waits: 2 pending runs allowed for member (set by an admin); this asks 1 launch of 3 configs, 3 runs "
        "(0 pending). "
        "An admin can raise member's limit on /team/."
    )
    assert study.round_refusal == expected
    assert api(member, "get", f"/api/studies/{study.pk}").json()["round_refusal"] == expected
    client.force_login(member)
    assert expected.replace("'", "&#x27;") in client.get(f"{study.get_absolute_url()}?part=live").content.decode()

    _limit(member, launches=3)
    assert do_advance_study(study.pk) is not None  # what the beat's advance_studies does each turn

    study.refresh_from_db()
    assert study.studyround_set.count() == 2 and study.round_refusal == "" and _pending(member) == 3


def test_a_confirming_launch_past_the_hosts_quota_is_not_queued_and_the_check_still_lands(settings):
    settings.SPECDASH_QUOTA_LAUNCHES_PER_HOST = 0

    runs = make_history([*_stable(88.8, 10, seed=7), 82.2])

    suspicion = Suspicion.objects.get()
    assert suspicion.run == runs[-1] and suspicion.confirmations == 0
    assert not Run.objects.filter(state=Run.State.QUEUED).exists()
    # The next ordinary result of the config weighs it instead.
    settings.SPECDASH_QUOTA_LAUNCHES_PER_HOST = 10
    make_history([82.3], host=runs[0].host, config=runs[0].config)
    suspicion.refresh_from_db()
    assert len(suspicion.series.get().after) == 1
