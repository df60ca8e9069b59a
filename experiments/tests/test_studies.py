"""Auto-tuning studies through the JSON API and the action a run's end calls: start, rounds planned once each,
failed launches, the stop with its recommendation, cancel, and who may do what."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db.models import F
from django.urls import reverse
from django.utils import timezone

from dashboard.asgi import application
from experiments.actions.runs import do_advance_run
from experiments.actions.study_rounds import do_advance_study
from experiments.models import (
    AuditEvent,
    Delivery,
    Experiment,
    Measurement,
    PinnedBaseline,
    Run,
    Study,
    StudyRound,
    Subscription,
)

from .factories import MODELS, make_host, make_measurement

# The tests play the worker's part; a queue no worker listens to keeps the session's worker (which sees what
# transactional tests commit) from taking their rounds' runs, or touching their rows while the test database is
# flushed.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("private_queue")]

BASE = {
    "model_path": f"{MODELS}/kimi-k2.5-sim",
    "speculative_algorithm": "EAGLE3",
    "speculative_draft_model_path": f"{MODELS}/kimi-k2.5-sim-eagle3",
    "tp_size": 8,
}
BODY: dict[str, Any] = {
    "name": "tune eagle3",
    "baseline": {"name": "baseline", "model_path": f"{MODELS}/kimi-k2.5-sim", "tp_size": 8},
    "sweep": {"base": BASE, "speculative_num_steps": [1, 2, 3], "speculative_eagle_topk": [1]},
    "profile": {"concurrency": [1, 8], "num_prompts": 8, "input_len": 128, "output_len": 128, "passes": 1},
    "budget": {"launches": 12},
    "precision": {"within": 0.02},
    "round_size": 2,
    "seed": 4,
}
# Steps 3 pays at c=1, nothing pays at c=8.
TRUTH = {"baseline": {1: 80.0, 8: 460.0}, "s1-k1-d2": {1: 84.0, 8: 440.0}, "s2-k1-d3": {1: 90.0, 8: 430.0}}


def _start(api, user, **changes: Any) -> Study:
    host = make_host()
    response = api(user, "post", "/api/studies", {**BODY, "host": host.name, **changes})
    assert response.status_code == 201, response.content
    return Study.objects.get(pk=response.json()["id"])


def _finish_round(study: Study, truth: dict[str, dict[int, float]], jitter: float = 0.0) -> None:
    """The worker's part: every queued run of the current round launched, measured (or failed) and ended."""
    current = study.current_round()
    assert current is not None
    for i, run in enumerate(current.experiment.run_set.order_by("sequence")):
        run.refresh_from_db()
        if run.is_finished:
            continue
        Run.objects.filter(pk=run.pk).update(state=Run.State.BENCHMARKING, started_at=run.created_at)
        run.refresh_from_db()
        values = truth.get(run.config.name)
        if values is None:
            do_advance_run(run, Run.State.FAILED)  # out of memory at graph capture
            continue
        for level, tok_s in values.items():
            make_measurement(run, concurrency=level, output_throughput=tok_s * (1 + jitter * (-1) ** i))
        do_advance_run(run, Run.State.SUCCEEDED)


def test_it_starts_a_study_with_its_first_round_queued(api, owner):
    study = _start(api, owner)

    assert study.studyconfig_set.count() == 3 and study.profile.launches == 1
    rounds = list(StudyRound.objects.filter(study=study))
    assert len(rounds) == 1 and len(rounds[0].candidates) == 2
    runs = list(rounds[0].experiment.run_set.order_by("sequence").select_related("config"))
    assert runs[0].config.name == "baseline" and len(runs) == 3
    body = api(owner, "get", f"/api/studies/{study.pk}").json()
    assert body["state"] == "running" and body["budget"] == {"launches": 12, "hours": None, "launches_spent": 0}
    assert {t["state"] for t in body["trials"]} == {"queued"}
    assert AuditEvent.objects.filter(action=AuditEvent.Action.STUDY_START).count() == 1


def test_it_plans_each_round_once_and_stops_with_a_recommendation_per_band(api, owner):
    study = _start(api, owner)

    for _ in range(20):
        study.refresh_from_db()
        if not study.is_running:
            break
        _finish_round(study, TRUTH, jitter=0.002)
        assert do_advance_study(study.pk) is None  # the round a run's end queued is not queued again

    study.refresh_from_db()
    assert study.state == Study.State.FINISHED and study.stop_reason in ("precision", "budget")
    indexes = list(study.studyround_set.values_list("index", flat=True))
    assert indexes == list(range(len(indexes)))
    body = api(owner, "get", f"/api/studies/{study.pk}").json()
    assert [(b["concurrency"], b["config"]) for b in body["best"]] == [(1, "s2-k1-d3"), (8, "baseline")]
    assert body["recommendation"][0]["text"].startswith("c = 1: s2-k1-d3, 1.12x")
    assert body["recommendation"][1]["text"] == "c = 8: no speculation; settled"
    assert body["best"][0]["settled"] and body["best"][1]["versus"] in ("s1-k1-d2", "s2-k1-d3")
    assert body["budget"]["launches_spent"] <= 12
    assert {t["config"]: t["state"] for t in body["trials"]}["s3-k1-d4"] == "failed"


def test_it_tells_the_recommendation_in_the_message_of_the_round_that_ended_the_study(api, owner):
    Subscription.objects.create(
        user=owner, channel=Subscription.Channel.BROWSER, events=["experiment_finished", "experiment_failed"]
    )
    study = _finished_study(api, owner)

    rounds = list(study.studyround_set.order_by("index"))
    bodies = {d.url.rstrip("/").rsplit("/", 1)[-1]: d.body for d in Delivery.objects.filter(user=owner)}
    last = bodies[str(rounds[-1].experiment_id)]
    bands = [f"Study {study.name}: {band['text']}" for band in study.recommendation]
    assert last.startswith("\n".join(bands)) and "; settled" in last
    assert not any("Study " in bodies[str(r.experiment_id)] for r in rounds[:-1])


HUGE: dict[str, Any] = {
    "speculative_num_steps": list(range(1, 9)),
    "speculative_eagle_topk": list(range(1, 9)),
    "speculative_num_draft_tokens": list(range(2, 18)),
}


def test_it_refuses_a_study_without_budget_or_with_an_unsafe_or_oversized_space(api, owner):
    host = make_host()
    cases: list[tuple[dict[str, Any], str, int]] = [
        ({"budget": {}}, "__all__", 422),
        ({"budget": {"launches": 100_000}}, "max_launches", 422),
        ({"sweep": {**BODY["sweep"], "env": {"LD_PRELOAD": ["/tmp/x.so"]}}}, "sweep.env", 403),  # the launch policy
        ({"sweep": {**BODY["sweep"], **HUGE}}, "sweep", 409),  # lists whose grid is too large: no schema says so
        ({"sweep": {**BODY["sweep"], "env": {"SGLANG_SIMULATE_ACC_LEN": ["2", "3"]}}}, "sweep", 409),
    ]
    for changes, field, status in cases:
        response = api(owner, "post", "/api/studies", {**BODY, "host": host.name, **changes})
        assert response.status_code == status, (changes, response.content)
        assert field in response.json()["errors"], response.json()
        if "SGLANG_SIMULATE_ACC_LEN" in str(changes):
            assert "start an acceptance headroom study" in response.json()["errors"]["sweep"][0]
    assert not Study.objects.exists()


def test_it_lets_only_the_owner_or_a_maintainer_cancel_and_cancels_the_queued_runs(api, owner, member, viewer):
    study = _start(api, member)

    assert api(viewer, "post", f"/api/studies/{study.pk}/cancel").status_code == 403
    assert api(viewer, "post", "/api/studies", {**BODY, "host": study.host.name}).status_code == 403
    response = api(member, "post", f"/api/studies/{study.pk}/cancel")

    assert response.json() == {"cancelled": True, "state": "cancelled", "stop_reason": "cancelled"}
    assert set(study.current_round().experiment.run_set.values_list("state", flat=True)) == {"cancelled"}  # type: ignore[union-attr]
    assert StudyRound.objects.filter(study=study).count() == 1


def test_it_shows_the_study_page_to_viewers_only(client, owner, outsider, api):
    study = _start(api, owner)
    client.force_login(outsider)
    assert client.get(study.get_absolute_url()).status_code == 403
    client.force_login(owner)
    page = client.get(study.get_absolute_url())
    assert page.status_code == 200 and b"0</strong> of 12 launches spent" in page.content


def test_it_shows_the_baseline_as_the_reference_never_as_eliminated(api, client, owner):
    study = _start(api, owner)
    # Every candidate clearly faster at c=1: the racing rule puts the baseline below the leader ("eliminated").
    _finish_round(study, {**TRUTH, "baseline": {1: 60.0, 8: 460.0}})
    body = api(owner, "get", f"/api/studies/{study.pk}").json()
    baseline, *candidates = body["trials"]

    assert baseline["is_baseline"] and not any(t["is_baseline"] for t in candidates)
    assert baseline["cells"][0]["standing"] == "eliminated"  # the API's value, as it always was
    client.force_login(owner)
    page = client.get(study.get_absolute_url()).content.decode()
    row = page.split('<tr data-config="baseline">')[1].split("</tr>")[0]
    assert row.count("reference (baseline)") == 2 and "eliminated" not in row and "standing-reference" in row


def _finished_study(api, user) -> Study:
    study = _start(api, user)
    while Study.objects.get(pk=study.pk).is_running:
        _finish_round(study, TRUTH, jitter=0.002)
    study.refresh_from_db()
    return study


def test_it_turns_a_recommendation_into_a_confirming_experiment_or_a_pinned_baseline(api, client, owner, viewer):
    study = _finished_study(api, owner)

    response = api(owner, "post", f"/api/studies/{study.pk}/confirm?band=0")
    assert response.status_code == 201, response.content
    experiment = Experiment.objects.get(pk=response.json()["id"])
    assert [c.name for c in experiment.ordered_candidates()] == ["s2-k1-d3"]
    assert experiment.baseline_id == study.baseline_id and experiment.run_set.count() == 2 * 3
    assert api(owner, "post", f"/api/studies/{study.pk}/confirm?band=5").status_code == 404
    assert api(viewer, "post", f"/api/studies/{study.pk}/confirm?band=0").status_code == 403

    client.force_login(owner)
    page = client.get(study.get_absolute_url())
    assert b"c = 1: s2-k1-d3" in page.content and b'data-figure="space-figure-1"' in page.content
    assert client.get(study.get_absolute_url() + "?part=live").content.count(b"<section") == 4
    redirect = client.post(reverse("confirm_recommendation", args=[study.pk, 1]))  # c = 8: the baseline alone
    assert Experiment.objects.get(pk=redirect.url.strip("/").split("/")[-1]).ordered_candidates() == []
    assert client.post(reverse("confirm_recommendation", args=[study.pk, 9])).status_code == 404
    client.post(reverse("pin_recommendation", args=[study.pk, 0]))
    assert PinnedBaseline.objects.get(host=study.host).config.name == "s2-k1-d3"
    client.force_login(viewer)
    assert client.post(reverse("pin_recommendation", args=[study.pk, 0])).status_code == 403


@pytest.mark.django_db(transaction=True)
def test_it_tells_the_study_page_when_the_study_changes(api, client, owner, outsider):
    study = _start(api, owner)

    async def connect(user) -> WebsocketCommunicator | None:
        await sync_to_async(client.force_login)(user)
        cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
        socket = WebsocketCommunicator(
            application, f"/ws/studies/{study.pk}/", headers=[(b"cookie", cookie), (b"origin", b"http://127.0.0.1")]
        )
        connected, _ = await socket.connect(timeout=5)
        return socket if connected else None

    async def scenario() -> dict[str, Any]:
        assert await connect(outsider) is None
        socket = await connect(owner)
        assert socket is not None
        await sync_to_async(_finish_round)(study, TRUTH)
        message = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return message

    assert asyncio.run(scenario()) == {"type": "changed", "study": study.pk}


def _page_data(response) -> dict[str, Any]:
    """What a browser posts back from the blank study form as rendered (every field's initial value)."""
    data: dict[str, Any] = {}
    for key in ("experiment_form", "study_form", "baseline_form", "base_form", "sweep_form", "profile_form"):
        form = response.context[key]
        for name in form.fields:
            value = form[name].value()
            if value is None or value is False:
                continue
            data[form.add_prefix(name)] = value if not isinstance(value, (list, tuple)) else ", ".join(map(str, value))
    return data


def test_it_starts_a_study_from_the_browser_form_with_the_same_checks(client, member, viewer):
    host = make_host(models_root=MODELS, gpu_inventory=[{"index": i} for i in range(8)])
    client.force_login(viewer)
    assert client.get(reverse("study_new")).status_code == 403
    client.force_login(member)
    blank = client.get(reverse("study_new"))
    assert blank.status_code == 200 and b'id="start-study"' in blank.content
    data = {**_page_data(blank), "experiment-name": "from the page", "profile-concurrency": "1, 8"}

    # Every field of every form is on the page (the advanced ones folded), so none falls back to a default unseen.
    page = blank.content.decode()
    forms = [blank.context[key] for key in ("experiment_form", "study_form", "baseline_form", "base_form",
                                              "sweep_form", "profile_form")]  # fmt: skip
    missing = [
        form.add_prefix(name) for form in forms for name in form.fields if f'name="{form.add_prefix(name)}"' not in page
    ]
    # Not a study's: it always measures its baseline, which never speculates; nor a saved config's link (no picker).
    not_asked = {"experiment-run_candidates_without_baseline", "experiment-profile_traces", "baseline-profile_eagle3",
                 "baseline-source_config", "base-source_config"}  # fmt: skip
    # Nor, on the baseline, a speculative setting of either engine (vLLM's draft options among them).
    speculative = ("baseline-speculative_", "baseline-option_")
    missing = [name for name in missing if name not in not_asked and not name.startswith(speculative)]
    assert missing == [], missing

    unsafe = client.post(reverse("study_new"), {**data, "sweep-env": "LD_PRELOAD=/tmp/x.so"})
    assert unsafe.status_code == 400 and "sweep.env" in unsafe.context["errors"] and not Study.objects.exists()
    # Said once, at the field, under a one-line summary.
    text = unsafe.content.decode()
    message = unsafe.context["errors"]["sweep.env"][0]
    assert text.count(message) == 1 and 'id="study-errors"' in text
    field = text.split('for="id_sweep-env"')[1].split("</label>")[0]
    assert message in field
    response = client.post(reverse("study_new"), data)

    assert response.status_code == 302, response.context and response.context["errors"]
    study = Study.objects.get()
    assert response.url == study.get_absolute_url() and study.host == host
    assert study.space["steps"] == [1, 2, 3] and study.max_launches == 40
    assert study.studyround_set.count() == 1 and study.created_by == member


def test_it_stops_when_its_hours_are_spent_at_the_end_of_a_round(api, owner):
    study = _start(api, owner, budget={"hours": 1})
    assert study.max_launches == 500 and study.max_hours == 1
    Study.objects.filter(pk=study.pk).update(created_at=timezone.now() - timedelta(hours=1, minutes=1))

    _finish_round(study, TRUTH)

    study.refresh_from_db()
    assert (study.state, study.stop_reason) == (Study.State.FINISHED, "budget")
    assert study.studyround_set.count() == 1 and study.recommendation


def test_it_lists_the_studies_in_a_fixed_number_of_queries(api, client, owner, outsider, django_assert_max_num_queries):
    for _ in range(3):
        _start(api, owner)
    client.force_login(outsider)
    assert client.get(reverse("study_list")).status_code == 403
    client.force_login(owner)

    with django_assert_max_num_queries(8):
        page = client.get(reverse("study_list"))

    assert page.content.count(b'class="state state-running"') == 3 and b"still running" in page.content


def test_the_study_page_draws_every_measured_config_per_gpu_against_per_user(
    api, client, owner, django_assert_max_num_queries
):
    study = _finished_study(api, owner)
    # Each cell's pace per user as its throughput implies it (TPOT = 1000 x concurrency / tok/s).
    Measurement.objects.filter(run__experiment__studyround__study=study).update(
        mean_tpot_ms=1000.0 * F("concurrency") / F("output_throughput")
    )
    client.force_login(owner)

    with django_assert_max_num_queries(40):
        page = client.get(study.get_absolute_url())

    figure = page.context["frontier"]
    curves = {trace["name"]: trace for trace in figure["data"]}
    assert set(curves) == {"baseline", "s1-k1-d2", "s2-k1-d3", "best (frontier)"}
    # The frontier: 3 steps at c=1 (the fastest per user there), the baseline at c=8 (the most per GPU).
    assert sorted(curves["best (frontier)"]["text"]) == ["baseline", "s2-k1-d3"]
    assert curves["baseline"]["y"][0] == pytest.approx(460.0 / 8, rel=0.01)  # tok/s per GPU at c=8 on tp 8
    assert b'id="frontier-figure"' in page.content
