"""Adaptive schedules as artefacts: built from a finished study (or an experiment) through the API and the page,
versioned with a diff, their verification experiment queued and judged per concurrency, who may do what, a bad
source refused with a clear error, and a config's hash unchanged unless it has a schedule."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from experiments.actions.schedules import VERIFY_LAUNCHES, VERIFY_PASSES
from experiments.charts.schedules import switching_figure
from experiments.models import AdaptiveSchedule, AuditEvent, Experiment, Run, ServerConfig, ServerMetricSample, Study
from experiments.reads.schedules import ramp_note

from .factories import MODELS, make_config, make_eagle_config, make_experiment, make_host, make_measurement
from .test_studies import BODY, TRUTH, _finish_round, _start

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("private_queue")]

SCHEDULE = {"1": {"candidate_steps": [2]}, "8": {"candidate_steps": [0]}}


def _finished_study(api, user, **changes: Any) -> Study:
    study = _start(api, user, **changes)
    while Study.objects.get(pk=study.pk).is_running:
        _finish_round(study, TRUTH, jitter=0.002)
    study.refresh_from_db()
    return study


def _build(api, user, study: Study):
    return api(user, "post", f"/api/studies/{study.pk}/schedule")


def _verify(schedule: AdaptiveSchedule, truth: dict[str, dict[int, float]], jitter: float = 0.005) -> None:
    """The worker's part: each verification run measured twice per concurrency and ended."""
    assert schedule.verification is not None
    for i, run in enumerate(schedule.verification.run_set.select_related("config").order_by("sequence")):
        name = "adaptive" if run.config.adaptive_schedule_id else run.config.name
        for level, tok_s in truth[name].items():
            for pass_index in range(2):
                sign = (-1) ** (i + pass_index)
                make_measurement(run, concurrency=level, output_throughput=tok_s * (1 + jitter * sign),
                                 pass_index=pass_index)  # fmt: skip
        Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED, started_at=timezone.now())


def test_it_builds_the_schedule_of_a_finished_study_and_queues_its_verification(api, client, owner):
    study = _finished_study(api, owner)

    response = _build(api, owner, study)

    assert response.status_code == 201, response.content
    body = response.json()
    schedule = AdaptiveSchedule.objects.get(pk=body["id"])
    assert (schedule.study_id, schedule.version, body["notes"]) == (study.pk, 1, [])
    assert json.loads(schedule.config_json) == SCHEDULE
    assert schedule.digest == hashlib.sha256(schedule.config_json.encode()).hexdigest() == body["digest"]
    experiment = schedule.verification
    assert experiment is not None and body["verification"]["id"] == experiment.pk
    adaptive, static = experiment.ordered_candidates()
    assert adaptive.adaptive_schedule_id == schedule.pk and static.name == "s2-k1-d3"
    assert (adaptive.speculative_num_steps, adaptive.speculative_eagle_topk, adaptive.speculative_num_draft_tokens) == (
        2, 1, 3,
    )  # fmt: skip
    assert experiment.baseline_id == study.baseline_id
    assert experiment.profile.concurrency == [1, 8] and experiment.profile.launches == VERIFY_LAUNCHES
    assert experiment.profile.passes == VERIFY_PASSES and study.profile.passes == 1  # the study's own is left as is
    order = list(experiment.run_set.order_by("sequence").values_list("config_id", flat=True))
    assert order == [study.baseline_id, adaptive.pk, static.pk] * VERIFY_LAUNCHES  # interleaved
    # The verification's own page leads back to the schedule it verifies.
    client.force_login(owner)
    assert f'href="{schedule.get_absolute_url()}"' in client.get(experiment.get_absolute_url()).content.decode()
    event = AuditEvent.objects.get(action=AuditEvent.Action.SCHEDULE_BUILD)
    assert event.target_id == schedule.pk and event.detail["verification"] == experiment.pk


def test_a_configs_hash_takes_a_schedule_only_when_it_has_one(api, owner):
    plain = make_eagle_config(2)
    # An SGLang config without engine options hashes as every config did before engines existed.
    spec = {k: v for k, v in plain.launch_spec().items() if k not in ("engine", "engine_options")}
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    assert plain.content_hash == hashlib.sha256(canonical.encode()).hexdigest()  # as every stored hash was made

    study = _finished_study(api, owner)
    first = AdaptiveSchedule.objects.get(pk=_build(api, owner, study).json()["id"])
    second = AdaptiveSchedule.objects.get(pk=_build(api, owner, study).json()["id"])
    other = AdaptiveSchedule.objects.create(study=study, version=9, config_json='{"1": {"candidate_steps": [1]}}\n')
    fields = {f: getattr(plain, f) for f in ServerConfig.LAUNCH_FIELDS}
    hashes = [ServerConfig(name="a", adaptive_schedule=s, **fields).compute_hash() for s in (first, second, other)]

    assert hashes[0] == hashes[1] != plain.content_hash  # the same JSON, the same launch
    assert hashes[2] not in (hashes[0], plain.content_hash)


def test_it_versions_a_rebuilt_schedule_and_diffs_it_against_the_previous_one(api, client, owner):
    study = _finished_study(api, owner)
    first = AdaptiveSchedule.objects.get(pk=_build(api, owner, study).json()["id"])
    second = AdaptiveSchedule.objects.get(pk=_build(api, owner, study).json()["id"])
    third = AdaptiveSchedule.objects.create(
        study=study, version=3, config_json='{\n  "1": {"candidate_steps": [3]}\n}\n', bands=second.bands
    )

    body = api(owner, "get", f"/api/schedules/{second.pk}").json()
    changed = api(owner, "get", f"/api/schedules/{third.pk}").json()

    assert (second.version, body["previous"], body["diff"]) == (2, first.pk, [])
    assert '-  "1": {' in changed["diff"] and '+  "1": {"candidate_steps": [3]}' in changed["diff"]
    client.force_login(owner)
    page = client.get(third.get_absolute_url()).content.decode()
    assert f'href="{second.get_absolute_url()}"' in page
    assert "+  &quot;1&quot;: {&quot;candidate_steps&quot;: [3]}" in page
    download = client.get(reverse("schedule_download", args=[first.pk]))
    assert download["Content-Type"] == "application/json" and download.content.decode() == first.config_json
    assert "attachment" in download["Content-Disposition"]
    # The same bands as vLLM 0.33+ takes a K per batch size: ranges from 1 up, end to end, K the band's steps.
    vllm = client.get(reverse("schedule_vllm_download", args=[first.pk])).json()
    ranges = vllm["num_speculative_tokens_per_batch_size"]
    assert ranges[0][0] == 1 and all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges))
    assert [r[2] for r in ranges] == [max(1, int(band["steps"] or 0)) for band in first.bands]


def test_its_page_leads_with_whether_the_schedule_matches_each_band_winner(
    api, client, owner, django_assert_max_num_queries
):
    study = _finished_study(api, owner)
    schedule = AdaptiveSchedule.objects.get(pk=_build(api, owner, study).json()["id"])
    client.force_login(owner)
    waiting = client.get(schedule.get_absolute_url()).content.decode()
    assert "Not verified yet" in waiting
    assert api(owner, "get", f"/api/schedules/{schedule.pk}").json()["verdict"] == "pending"

    truth = {"baseline": {1: 80.0, 8: 460.0}, "s2-k1-d3": {1: 90.0, 8: 430.0}, "adaptive": {1: 90.2, 8: 458.0}}
    _verify(schedule, truth)
    adaptive_run = Run.objects.filter(experiment=schedule.verification, config__adaptive_schedule=schedule)[0]
    start = timezone.now()
    for i, (steps, running) in enumerate([(2, 1), (2, 1), (0, 8), (0, 8), (2, 2)]):
        ServerMetricSample.objects.create(
            run=adaptive_run, at=start + timedelta(seconds=i), spec_num_steps=steps, num_running_reqs=running
        )
    with django_assert_max_num_queries(12):
        page = client.get(schedule.get_absolute_url())

    text = page.content.decode()
    headline = text.split('id="headline"', 1)[1].split("</p>", 1)[0]
    assert "matches each band&#x27;s static winner within 2% at every concurrency" in headline
    assert "c = 1: 1.00x [" in headline and "of s2-k1-d3" in headline and "c = 8: 1.00x [" in headline
    assert "of no speculation" in headline
    assert text.count('data-verdict="matches"') == 2
    assert 'data-figure="switching-figure"' in text and 'id="switching-figure"' in text
    assert "batches below 8 run the 2 step(s) of c = 1" in text  # the ramp-up and drain note
    body = api(owner, "get", f"/api/schedules/{schedule.pk}").json()
    assert body["verdict"] == "matches" and [c["verdict"] for c in body["checks"]] == ["matches", "matches"]


def test_it_says_where_the_adaptive_server_is_slower_than_the_band_winner(api, owner):
    study = _finished_study(api, owner)
    schedule = AdaptiveSchedule.objects.get(pk=_build(api, owner, study).json()["id"])
    _verify(schedule, {"baseline": {1: 80.0, 8: 460.0}, "s2-k1-d3": {1: 90.0, 8: 430.0},
                       "adaptive": {1: 90.0, 8: 400.0}})  # fmt: skip

    body = api(owner, "get", f"/api/schedules/{schedule.pk}").json()

    assert body["verdict"] == "slower" and [c["verdict"] for c in body["checks"]] == ["matches", "slower"]
    assert body["sentence"].startswith("The schedule is more than 2% slower than the band's static winner at c = 8:")


def test_it_refuses_a_source_it_cannot_schedule_with_a_clear_error(api, client, owner):
    running = _start(api, owner)
    experiment = make_experiment()  # one candidate

    refused = _build(api, owner, running)
    single = api(owner, "post", f"/api/experiments/{experiment.pk}/adaptive-schedule")
    client.force_login(owner)
    page = client.post(reverse("build_study_schedule", args=[running.pk]), follow=True)

    # The study's state, or what the experiment measured, does not allow a schedule: 409.
    assert refused.status_code == 409 and refused.json()["errors"]["source"] == [
        "The study has not finished: a schedule is built from its recommendation."
    ]
    assert single.status_code == 409 and "at least two candidates and two concurrencies" in str(single.json())
    assert b"No schedule built: The study has not finished" in page.content
    assert not AdaptiveSchedule.objects.exists() and api(owner, "get", "/api/schedules/999").status_code == 404


def test_a_study_where_nothing_speculates_gets_no_schedule(api, owner):
    truth = {name: {1: 100.0, 8: 500.0} if name == "baseline" else {1: 80.0, 8: 400.0} for name in TRUTH}
    study = _start(api, owner)
    while Study.objects.get(pk=study.pk).is_running:
        _finish_round(study, truth, jitter=0.002)

    response = _build(api, owner, study)

    assert response.status_code == 409
    assert response.json()["errors"]["source"] == ["No band speculates: serve the baseline; there is nothing to adapt."]


def test_it_builds_from_an_experiment_with_several_candidates_and_concurrencies(api, client, owner):
    host = make_host()
    fast, slow = make_eagle_config(2, name="s2"), make_eagle_config(1, name="s1")
    experiment = make_experiment(host=host, candidates=[fast, slow], with_runs=False)
    experiment.profile.concurrency = [1, 8]
    experiment.profile.save()
    truth = {experiment.baseline.name: {1: 80.0, 8: 460.0}, "s2": {1: 92.0, 8: 400.0}, "s1": {1: 85.0, 8: 470.0}}
    for launch in range(2):
        for config in (experiment.baseline, fast, slow):
            run = Run.objects.create(experiment=experiment, config=config, host=host, launch_index=launch,
                                     sequence=Run.objects.filter(experiment=experiment).count(),
                                     state=Run.State.SUCCEEDED)  # fmt: skip
            for level, tok_s in truth[config.name].items():
                make_measurement(run, concurrency=level, output_throughput=tok_s * (1 + 0.003 * (-1) ** launch))
    client.force_login(owner)
    _list_flags(host, "0.5.9", ["--model-path"])
    disabled, reason = _schedule_button(client, experiment.get_absolute_url())
    assert disabled and reason.startswith(f"Off: SGLang 0.5.9 on {host.name} does not know the flags")
    _list_flags(host, "0.5.23", ["--model-path", "--speculative-adaptive", "--speculative-adaptive-config"])
    assert _schedule_button(client, experiment.get_absolute_url()) == (False, "")

    response = client.post(reverse("build_experiment_schedule", args=[experiment.pk]))

    schedule = AdaptiveSchedule.objects.get(experiment=experiment)
    assert response.url == schedule.get_absolute_url()
    assert f'href="{schedule.get_absolute_url()}">v1</a>' in client.get(experiment.get_absolute_url()).content.decode()
    assert json.loads(schedule.config_json) == {"1": {"candidate_steps": [2]}, "8": {"candidate_steps": [1]}}
    assert [b["config"] for b in schedule.bands] == ["s2", "s1"]
    verification = schedule.verification
    assert verification is not None and len(verification.ordered_candidates()) == 3


def test_only_members_build_and_only_team_roles_read(api, client, owner, member, viewer, outsider):
    study = _finished_study(api, owner)
    schedule = AdaptiveSchedule.objects.get(pk=_build(api, owner, study).json()["id"])

    assert _build(api, viewer, study).status_code == 403
    assert _build(api, member, study).status_code == 201  # a member may build from anyone's study
    assert api(viewer, "get", f"/api/schedules/{schedule.pk}").status_code == 200
    client.force_login(viewer)
    assert client.post(reverse("build_study_schedule", args=[study.pk])).status_code == 403
    assert b"Build a schedule" not in client.get(study.get_absolute_url()).content
    assert client.get(schedule.get_absolute_url()).status_code == 200
    assert client.get(reverse("build_study_schedule", args=[study.pk])).status_code == 405  # POST only
    client.force_login(outsider)
    assert client.get(schedule.get_absolute_url()).status_code == 403
    assert client.get(reverse("schedule_download", args=[schedule.pk])).status_code == 403
    client.force_login(owner)
    assert b"Build a schedule" in client.get(study.get_absolute_url()).content
    assert AdaptiveSchedule.objects.filter(study=study).count() == 2


def test_a_member_cannot_name_an_adaptive_config_file_of_their_own(api, member):
    host = make_host()
    candidate = {
        "name": "evil", "model_path": f"{MODELS}/kimi-k2.5-sim", "tp_size": 8, "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": f"{MODELS}/kimi-k2.5-sim-eagle3", "speculative_num_steps": 2,
        "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3,
    }  # fmt: skip
    payload = {**BODY, "host": host.name, "candidates": [], "sweep": None}
    del payload["budget"], payload["precision"], payload["round_size"], payload["seed"]
    refusals = []
    attempts = (
        ["--speculative-adaptive", "--speculative-adaptive-config", "/etc/passwd"],
        ["--speculative-adaptive-config=$(touch /tmp/x)"],
        ["--speculative-adaptive-c", "/tmp/x.json"],  # an abbreviation argparse would read as the managed flag
    )
    for args in attempts:
        body = {**payload, "candidates": [{**candidate, "extra_args": args}]}
        response = api(member, "post", "/api/experiments", body)
        assert response.status_code == 403, response.content  # the launch policy's
        refusals.append(response.json()["errors"]["candidates.0.extra_args"])
    assert all("set by the config's own fields (--speculative-adaptive-config)" in r[0] for r in refusals)
    switch = api(member, "post", "/api/experiments",
                 {**payload, "candidates": [{**candidate, "extra_args": ["--speculative-adaptive"]}]})  # fmt: skip
    assert switch.status_code == 201, switch.content
    assert not ServerConfig.objects.exclude(adaptive_schedule=None).exists()
    assert make_config().adaptive_schedule is None
    assert Experiment.objects.count() == 1


def test_it_refuses_a_host_whose_sglang_has_no_adaptive_speculation(api, owner):
    study = _finished_study(api, owner)
    host = study.host
    host.server_flags = {"launcher": host.launcher, "sglang_version": "0.5.9", "flags": ["--model-path", "--port"]}
    host.server_flags_at = timezone.now()
    host.save(update_fields=["server_flags", "server_flags_at"])

    response = _build(api, owner, study)

    assert response.status_code == 409
    (message,) = response.json()["errors"]["source"]
    assert message.startswith(
        f"SGLang 0.5.9 on {host.name} does not know the flags --speculative-adaptive, --speculative-adaptive-config"
    )
    assert not AdaptiveSchedule.objects.exists() and not Experiment.objects.filter(name__contains="verify").exists()


def _list_flags(host, version: str, flags: list[str]) -> None:
    host.server_flags = {"launcher": host.launcher, "sglang_version": version, "flags": flags}
    host.server_flags_at = timezone.now()
    host.save(update_fields=["server_flags", "server_flags_at"])


def _schedule_button(client, page_url: str) -> tuple[bool, str]:
    """Whether the page's "Build a schedule" is disabled, and the reason it shows ("" when none)."""
    page = client.get(page_url).content.decode()
    button = re.search(r"<button[^>]*>Build a schedule</button>", page)
    assert button is not None, "no Build a schedule button"
    reason = re.search(r'<span class="warning" id="schedule-off">([^<]*)</span>', page)
    return " disabled" in button.group(0), reason.group(1) if reason else ""


def test_a_page_offers_the_schedule_only_where_the_hosts_sglang_can_serve_it(api, client, owner):
    study = _finished_study(api, owner)
    host = study.host
    client.force_login(owner)
    assert _schedule_button(client, study.get_absolute_url()) == (False, "")  # flags never read: nothing known

    _list_flags(host, "0.5.9", ["--model-path", "--port"])
    disabled, reason = _schedule_button(client, study.get_absolute_url())
    assert disabled and reason.startswith(f"Off: SGLang 0.5.9 on {host.name} does not know the flags --speculative-ad")

    _list_flags(host, "0.5.23", ["--model-path", "--port", "--speculative-adaptive", "--speculative-adaptive-config"])
    assert _schedule_button(client, study.get_absolute_url()) == (False, "")


def test_the_switching_chart_and_the_ramp_note_say_only_what_the_data_holds():
    assert switching_figure({"launch 1": [(0.0, None, 1.0)]}) is None  # a baseline's gauges: nothing switched
    figure = switching_figure({"<b>launch 1</b>": [(0.0, 2.0, 1.0), (0.5, 0.0, 8.0)]})
    assert figure is not None and figure["data"][0]["y"] == [2.0, 0.0] and figure["data"][1]["yaxis"] == "y2"
    assert "<b>" not in figure["data"][0]["name"]  # a label is text, never markup in the page's SVG
    same = [{"low": 1, "high": 2, "steps": 2}, {"low": 4, "high": 8, "steps": 2}]
    assert ramp_note(same) == ""  # neighbouring bands with the same steps: a ramp runs the same speculation
    note = ramp_note([{"low": 16, "high": 16, "steps": 0}, {"low": 2, "high": 4, "steps": 2}])
    assert "while a c = 16 load ramps up and drains, its batches below 16 run the 2 step(s) of 2 <= c <= 4" in note


def test_an_answer_whose_winners_run_on_vllm_builds_no_sglang_adaptive_server(api, owner):
    study = _finished_study(api, owner)
    # The same answer, its candidates served by vLLM: an adaptive server is SGLang's alone.
    ServerConfig.objects.filter(run__experiment__studyround__study=study, speculative_algorithm="EAGLE3").update(
        engine="vllm"
    )

    response = _build(api, owner, study)

    assert response.status_code == 409, response.content
    assert "An adaptive server is SGLang's" in str(response.json()) and "vLLM" in str(response.json())
    assert not AdaptiveSchedule.objects.filter(study=study).exists()
