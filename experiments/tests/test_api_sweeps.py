"""Sweeps through the JSON API (preview, and `sweep` in POST /api/experiments) and the new-experiment page's own
preview endpoint; the "Profile EAGLE-3" checkbox of a config, in the API and on the page."""

from __future__ import annotations

import copy
import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from experiments.analysis.explanations import MODEL_METRICS
from experiments.models import ApiToken, Experiment, Run, ServerConfig
from experiments.rules.sweeps import DEFAULT_LOAD_SECONDS

from .factories import (
    MODELS,
    experiment_payload,
    make_config,
    make_eagle_config,
    make_experiment,
    make_host,
    make_measured_run,
    make_profile,
    make_run,
    row_counts,
)

pytestmark = pytest.mark.django_db

BASE = {
    "model_path": f"{MODELS}/kimi-k2.5-sim",
    "speculative_algorithm": "EAGLE3",
    "speculative_draft_model_path": f"{MODELS}/kimi-k2.5-sim-eagle3",
    "tp_size": 8,
    "extra_args": ["--mem-fraction-static", "0.85"],
}
PROFILE = {"concurrency": [1, 4], "num_prompts": 8, "input_len": 128, "output_len": 128, "passes": 3, "launches": 1}


@pytest.fixture
def api(client, owner):
    _, token = ApiToken.issue(owner)

    def post(url: str, payload: dict[str, Any]):
        return client.post(url, payload, content_type="application/json", headers={"Authorization": f"Bearer {token}"})

    return post


def _preview_body(host, **sweep: Any) -> dict[str, Any]:
    return {"host": host.name, "sweep": {"base": BASE, **sweep}, "profile": PROFILE}


# --- the preview ----------------------------------------------------------------------------------------------


def test_it_previews_the_grid_with_the_rules_explained_and_an_estimate(api):
    host = make_host()

    response = api(
        "/api/sweeps/preview",
        _preview_body(
            host,
            speculative_num_steps=[1, 2],
            speculative_eagle_topk=[1, 2],
            speculative_num_draft_tokens=[3, 8],
            env={"NCCL_PROTO": ["LL", "Simple"]},
        ),
    )

    assert response.status_code == 200, response.content
    body = response.json()
    names = [c["name"] for c in body["candidates"]]
    assert names == [
        "s1-k1-d2 NCCL_PROTO=LL",
        "s1-k1-d2 NCCL_PROTO=Simple",
        "s1-k2-d3 NCCL_PROTO=LL",
        "s1-k2-d3 NCCL_PROTO=Simple",
        "s2-k1-d3 NCCL_PROTO=LL",
        "s2-k1-d3 NCCL_PROTO=Simple",
        "s2-k2-d3 NCCL_PROTO=LL",
        "s2-k2-d3 NCCL_PROTO=Simple",
    ]
    first = body["candidates"][0]
    assert first["model_path"] == BASE["model_path"] and first["extra_args"] == BASE["extra_args"]
    skipped = {s["label"]: s for s in body["skipped"]}
    assert skipped["s1-k1-d3 NCCL_PROTO=LL"]["replaced_by"] == "s1-k1-d2 NCCL_PROTO=LL"
    assert "at most 3" in skipped["s1-k2-d8 NCCL_PROTO=LL"]["reason"]
    assert skipped["s1-k2-d8 NCCL_PROTO=LL"]["values"]["speculative_num_draft_tokens"] == 8
    # 8 candidates and the baseline, one launch each; no history on the host, so the profile-derived default.
    assert (body["configs"], body["launches_per_config"], body["launches"]) == (9, 1, 9)
    assert body["seconds_per_launch"] > DEFAULT_LOAD_SECONDS
    assert body["estimated_seconds"] == pytest.approx(9 * body["seconds_per_launch"], abs=9)
    assert "no measured run" in body["estimate_basis"]
    assert body["profile"] == "concurrency [1, 4] · 8 prompts · 128 in / 128 out · seed 1 · 3 passes × 1 launch"
    assert row_counts()["ServerConfig"] == 0  # a preview saves nothing


def test_it_estimates_from_the_runs_measured_on_the_host_of_the_same_model(api):
    host = make_host()
    profile = make_profile(**{k: v for k, v in PROFILE.items() if k != "launches"}, seed=1)
    same_model = make_experiment(host=host, baseline=make_config(model_path=BASE["model_path"]), candidates=[],
                                 profile=profile, with_runs=False)  # fmt: skip
    other_model = make_experiment(host=host, baseline=make_config(model_path=f"{MODELS}/other"), candidates=[],
                                  profile=profile, with_runs=False)  # fmt: skip
    for load in (50, 60, 70):
        make_measured_run(same_model, load_s=load, cell_s=30)
    make_measured_run(other_model, load_s=900)
    # Written, not measured (as the demo seeds its history, or an import files its runs): never read.
    now = timezone.now()
    make_run(experiment=same_model, state=Run.State.SUCCEEDED, started_at=now - timedelta(hours=5), finished_at=now)

    request = _preview_body(host, speculative_num_steps=[2], speculative_eagle_topk=[1])
    request["profile"] = {**PROFILE, "launches": 2}

    body = api("/api/sweeps/preview", request).json()

    # Loading 60 s (the median), warm-up 10 s, six cells of 30 s, then 2 s and a 5 s teardown.
    assert body["seconds_per_launch"] == 60 + 10 + 6 * 30 + 2 + 5
    # One candidate and the baseline, two launches each.
    assert (body["launches_per_config"], body["launches"]) == (2, 4)
    assert body["estimated_seconds"] == 4 * body["seconds_per_launch"]
    assert body["estimate_basis"].startswith(f"from 3 runs of other configs of this model on {host.name}: ")


@pytest.mark.parametrize(
    "sweep, key, fragment, status",
    [
        ({"speculative_num_steps": "1, x"}, "sweep.speculative_num_steps", "'x' is not a whole number", 422),
        ({"speculative_num_steps": [0]}, "sweep.speculative_num_steps", "outside 1..16", 422),
        ({"speculative_eagle_topk": []}, "sweep.speculative_eagle_topk", "required", 422),
        # The launch policy's refusals: 403, as no schema states them.
        ({"env": {"LD_PRELOAD": ["x"]}}, "sweep.env", "LD_PRELOAD", 403),
        ({"extra_args": {"--tp-size": [2]}}, "sweep.extra_args", "set by the config's own fields", 403),
        ({"extra_args": {"--config": ["a.yaml"]}}, "sweep.extra_args", "never settable", 403),
        ({"base": {**BASE, "model_path": ""}}, "sweep.base.model_path", "required", 422),
        # A rule between the base's algorithm and the sweep's lists.
        ({"base": {**BASE, "speculative_algorithm": "NGRAM"}}, "sweep", "EAGLE family", 409),
        ({"base": "eagle3"}, "sweep.base", "valid integer", 422),
    ],
)
def test_it_names_the_field_of_a_bad_sweep(api, sweep, key, fragment, status):
    body = _preview_body(make_host(), speculative_num_steps=[2], speculative_eagle_topk=[1])
    body["sweep"].update(sweep)

    response = api("/api/sweeps/preview", body)

    assert response.status_code == status, response.content
    errors = response.json()["errors"]
    assert any(fragment in message for message in errors[key]), errors


def test_it_lists_every_skipped_combination_when_none_is_valid(api):
    body = _preview_body(make_host(), speculative_num_steps=[1], speculative_eagle_topk=[2, 4])

    response = api("/api/sweeps/preview", body)

    assert response.status_code == 409
    answer = response.json()
    assert "No valid candidate" in answer["errors"]["sweep"][0]
    assert [(s["label"], "needs draft tokens" in s["reason"]) for s in answer["skipped"]] == [
        ("s1-k2", True),
        ("s1-k4", True),
    ]


def test_it_refuses_unknown_sweep_keys_and_hosts(api):
    host = make_host()
    typo = _preview_body(host, speculative_num_steps=[2], speculative_eagle_topk=[1], draft_tokens=[3])
    unknown_host = {**_preview_body(host, speculative_num_steps=[2], speculative_eagle_topk=[1]), "host": "nowhere"}

    refused = api("/api/sweeps/preview", typo)
    assert (refused.status_code, refused.json()["errors"]) == (
        422,
        {"sweep.draft_tokens": ["Extra inputs are not permitted"]},
    )
    missing = api("/api/sweeps/preview", unknown_host)
    assert (missing.status_code, missing.json()) == (404, {"detail": "host: no host named 'nowhere'"})


def test_it_allows_an_env_var_the_host_allows(api):
    body = _preview_body(
        make_host(extra_env_prefixes=["SIMHOST_"]),
        speculative_num_steps=[2],
        speculative_eagle_topk=[1],
        env={"SIMHOST_FAULTS": ["zombie"]},
    )

    assert api("/api/sweeps/preview", body).status_code == 200


def test_it_asks_for_a_token_and_the_right_to_submit(client, viewer):
    body = _preview_body(make_host(), speculative_num_steps=[2], speculative_eagle_topk=[1])
    _, token = ApiToken.issue(viewer)

    anonymous = client.post("/api/sweeps/preview", body, content_type="application/json")
    read_only = client.post(
        "/api/sweeps/preview", body, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )

    assert (anonymous.status_code, read_only.status_code) == (401, 403)


# --- a sweep in POST /api/experiments ---------------------------------------------------------------------------


def _experiment_with_sweep(host, **sweep: Any) -> dict[str, Any]:
    payload = copy.deepcopy(experiment_payload(host))
    payload["profile"].update(passes=3)
    payload["sweep"] = {"base": BASE, **sweep}
    return payload


def test_it_adds_the_sweeps_candidates_to_the_given_ones(api):
    payload = _experiment_with_sweep(
        make_host(),
        speculative_num_steps=[3, 4],
        speculative_eagle_topk=[1],
        extra_args={"--mem-fraction-static": [0.8]},
        name_prefix="eagle3",
    )

    response = api("/api/experiments", payload)

    assert response.status_code == 201, response.content
    experiment = Experiment.objects.get(pk=response.json()["id"])
    names = [c.name for c in experiment.ordered_candidates()]
    assert names == [
        "eagle3-2step",
        "eagle3-s3-k1-d4 mem-fraction-static=0.8",
        "eagle3-s4-k1-d5 mem-fraction-static=0.8",
    ]
    swept = experiment.ordered_candidates()[2]
    assert (swept.speculative_num_steps, swept.speculative_num_draft_tokens) == (4, 5)
    assert swept.extra_args == ["--mem-fraction-static", "0.8"]
    assert [r["config"] for r in response.json()["runs"]] == ["baseline", *names]


def test_it_takes_the_sweeps_base_by_config_id_and_no_other_candidate(api):
    base = make_eagle_config(name="stored", env={"NCCL_PROTO": "LL"})
    payload = _experiment_with_sweep(make_host(), speculative_num_steps=[2], speculative_eagle_topk=[1])
    payload["sweep"]["base"] = base.pk
    payload["candidates"] = []

    response = api("/api/experiments", payload)

    assert response.status_code == 201, response.content
    (config,) = Experiment.objects.get(pk=response.json()["id"]).ordered_candidates()
    assert (config.name, config.env, config.model_path) == ("s2-k1-d3", {"NCCL_PROTO": "LL"}, base.model_path)


@pytest.mark.parametrize(
    "sweep, key, fragment, status",
    [
        ({"speculative_num_steps": "2, two"}, "sweep.speculative_num_steps", "'two' is not a whole number", 422),
        ({"speculative_eagle_topk": [2], "speculative_num_draft_tokens": [9]}, "sweep", "No valid candidate", 409),
        ({"base": {**BASE, "tp_size": 16}}, "sweep.candidates.0.tp_size", "fewer than tp 16", 409),
        ({"name_prefix": "x" * 41}, "sweep.name_prefix", "at most 40", 422),
    ],
)
def test_it_refuses_a_bad_sweep_with_field_errors_and_saves_nothing(api, sweep, key, fragment, status):
    payload = _experiment_with_sweep(make_host(), speculative_num_steps=[2], speculative_eagle_topk=[1])
    payload["sweep"].update(sweep)
    before = row_counts()

    response = api("/api/experiments", payload)

    assert response.status_code == status, response.content
    errors = response.json()["errors"]
    assert any(fragment in message for message in errors[key]), errors
    assert row_counts() == before


def test_it_refuses_a_sweep_whose_names_clash_or_that_takes_too_many(api):
    clash = _experiment_with_sweep(make_host(), speculative_num_steps=[2], speculative_eagle_topk=[1])
    clash["candidates"][0]["name"] = "s2-k1-d3"
    full = _experiment_with_sweep(make_host(), speculative_num_steps=[2, 3], speculative_eagle_topk=[1])
    full["candidates"] = [{**full["candidates"][0], "name": f"c{i}"} for i in range(49)]

    clash_errors = api("/api/experiments", clash).json()["errors"]
    full_errors = api("/api/experiments", full).json()["errors"]

    assert "already named 's2-k1-d3'" in clash_errors["sweep.candidates.0.name"][0]
    assert "more than the 1 the experiment can take" in full_errors["sweep"][0]


# --- the page's preview -----------------------------------------------------------------------------------------


def _page_post(host, **sweep: str) -> dict[str, str]:
    """What the new-experiment page posts to its preview: its whole form, the sweep's inputs, the base block."""
    data = {
        "experiment-name": "sweep",
        "experiment-host": host.name,
        "baseline-name": "baseline",
        "baseline-model_path": BASE["model_path"],
        "baseline-tp_size": "8",
        "cand-3-name": "eagle3-2step",
        "cand-3-model_path": BASE["model_path"],
        "cand-3-speculative_algorithm": "EAGLE3",
        "cand-3-speculative_draft_model_path": BASE["speculative_draft_model_path"],
        "cand-3-speculative_num_steps": "2",
        "cand-3-speculative_eagle_topk": "1",
        "cand-3-speculative_num_draft_tokens": "7",  # inconsistent: the sweep sets its own
        "cand-3-tp_size": "8",
        "cand-3-env_text": "NCCL_PROTO=LL",
        "cand-3-extra_args_text": "--mem-fraction-static 0.85",
        "cand-3-profile_eagle3": "on",
        "profile-concurrency_text": "1, 4",
        "sweep-base": "cand-3",
        **{f"profile-{k}": str(v) for k, v in PROFILE.items() if k != "concurrency"},
        **{f"profile-{k}": v for k, v in {"seed": "1", "warmup_requests": "1"}.items()},
        **{f"profile-{k}": "600" for k in ("request_timeout_s", "readiness_timeout_s", "stall_timeout_s")},
    }
    return {**data, **{f"sweep-{k}": v for k, v in sweep.items()}}


def test_it_previews_the_pages_sweep_with_each_candidates_boxes(owner_client):
    data = _page_post(
        make_host(), speculative_num_steps="2, 3", speculative_eagle_topk="1", env="NCCL_PROTO=LL, Simple"
    )

    response = owner_client.post("/experiments/new/sweep-preview/", data)

    assert response.status_code == 200, response.content
    body = response.json()
    assert [c["name"] for c in body["candidates"]][:2] == ["s2-k1-d3 NCCL_PROTO=LL", "s2-k1-d3 NCCL_PROTO=Simple"]
    form = body["candidates"][1]["form"]
    assert form == {
        "name": "s2-k1-d3 NCCL_PROTO=Simple",
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 3,
        "extra_args_text": "--mem-fraction-static 0.85",
        "env_text": "NCCL_PROTO=Simple",  # EAGLE3_PROFILE stays with its checkbox
        "profile_eagle3": True,
    }
    assert body["candidates"][1]["env"] == {"NCCL_PROTO": "Simple", "EAGLE3_PROFILE": "1"}


def test_it_names_the_pages_sweep_errors(owner_client):
    data = _page_post(make_host(), speculative_num_steps="2, x", speculative_eagle_topk="")
    data["cand-3-model_path"] = ""

    response = owner_client.post("/experiments/new/sweep-preview/", data)

    assert response.status_code == 422
    errors = response.json()["errors"]
    assert "'x' is not a whole number." in errors["sweep.speculative_num_steps"]
    assert errors["sweep.speculative_eagle_topk"] == ["This field is required."]
    assert "sweep.base.model_path" in errors


def test_it_protects_the_pages_preview(client, owner, viewer):
    data = _page_post(make_host(), speculative_num_steps="2", speculative_eagle_topk="1")
    checked = Client(enforce_csrf_checks=True)
    checked.force_login(owner)
    client.force_login(viewer)

    assert checked.post("/experiments/new/sweep-preview/", data).status_code == 403  # no CSRF token
    assert client.post("/experiments/new/sweep-preview/", data).status_code == 403  # read-only role
    assert client.get("/experiments/new/sweep-preview/").status_code in (403, 405)


def test_it_shows_the_sweep_panel_outside_the_experiments_form(owner_client):
    make_host()

    content = owner_client.get("/experiments/new/").content.decode()

    # The sweep's inputs belong to a form of their own, so the experiment's Submit never carries them.
    assert 'id="sweep-form" action="/experiments/new/sweep-preview/"' in content
    assert '<input type="text" name="sweep-speculative_num_steps" form="sweep-form"' in content
    assert content.index('id="sweep-form"') > content.index("</form>")


# --- "Profile EAGLE-3" --------------------------------------------------------------------------------------------


def test_it_profiles_eagle3_from_one_api_flag(api):
    payload = copy.deepcopy(experiment_payload(make_host()))
    candidate = payload["candidates"][0]
    candidate["profile_eagle3"] = True
    del candidate["log_metrics"]

    response = api("/api/experiments", payload)

    assert response.status_code == 201, response.content
    config = ServerConfig.objects.get(name="eagle3-2step")
    assert config.env == {"NCCL_PROTO": "LL", "EAGLE3_PROFILE": "1"}
    assert config.log_metrics == MODEL_METRICS


@pytest.mark.parametrize(
    "change, key",
    [
        ({"env": {"EAGLE3_PROFILE": "0"}}, "candidates.0.env"),
        ({"log_metrics": {"verify_ms": r"verify=(?P<verify_ms>\d+)"}}, "candidates.0.log_metrics"),
        ({"speculative_algorithm": "", "speculative_draft_model_path": ""}, "candidates.0.profile_eagle3"),
    ],
)
def test_it_refuses_a_profile_flag_that_contradicts_the_config(api, change, key):
    payload = copy.deepcopy(experiment_payload(make_host()))
    candidate = payload["candidates"][0]
    candidate.update(profile_eagle3=True, **change)
    if not candidate["speculative_algorithm"]:
        for field in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"):
            candidate[field] = None

    response = api("/api/experiments", payload)

    assert response.status_code == 409  # the box and the fields it fills disagree
    assert key in response.json()["errors"], response.json()


def test_it_shows_a_profiled_config_as_the_ticked_box_when_duplicating(owner_client):
    config = make_eagle_config(
        env={"NCCL_PROTO": "LL", "EAGLE3_PROFILE": "1"},
        log_metrics={**MODEL_METRICS, "x_ms": r"x: (?P<x_ms>[\d.]+)"},
    )
    source = make_experiment(candidates=[config])

    content = owner_client.get(f"/experiments/new/?from={source.pk}").content.decode()

    assert re.search(r'<input type="checkbox" name="cand-0-profile_eagle3"[^>]* checked>', content)
    env_box = _textarea(content, "cand-0-env_text")
    assert "NCCL_PROTO=LL" in env_box and "EAGLE3_PROFILE" not in env_box
    metrics_box = _textarea(content, "cand-0-log_metrics")
    assert "x_ms" in metrics_box and "verify_ms" not in metrics_box


def _textarea(page: str, name: str) -> str:
    """The text a textarea holds (not its placeholder)."""
    return page.split(f'name="{name}"')[1].split(">", 1)[1].split("</textarea>")[0]
