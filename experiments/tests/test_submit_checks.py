"""What a submission says before anything runs: profiles that can give no verdict, and what the host's stored model
listing proves about each config's paths and model pair. Through the API, the browser form and the worker task."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from django.utils import timezone

from experiments.models import ApiToken, Experiment, Host
from experiments.rules import model_checks

from .factories import MODELS, experiment_payload, make_host, set_candidate, set_profile, submission_of

pytestmark = pytest.mark.django_db

TARGET = {
    "path": f"{MODELS}/kimi-k2.5-sim",
    "name": "kimi-k2.5-sim",
    "max_position_embeddings": 262144,
    "vocab_size": 163840,
    "text_config": {"max_position_embeddings": 262144, "vocab_size": 163840},
}
DRAFT = {**TARGET, "path": f"{MODELS}/kimi-k2.5-sim-eagle3", "name": "kimi-k2.5-sim-eagle3"}
DRAFT_131K: dict[str, Any] = {
    **TARGET,
    "path": f"{MODELS}/kimi-k2.5-sim-eagle3-ctx131k",
    "name": "kimi-k2.5-sim-eagle3-ctx131k",
    "text_config": {"max_position_embeddings": 131072, "vocab_size": 163840},
}
DRAFT_32K_VOCAB = {
    **TARGET,
    "path": f"{MODELS}/small-vocab-eagle3",
    "name": "small-vocab-eagle3",
    "text_config": {"max_position_embeddings": 262144, "vocab_size": 32000},
}


def _listed_host(models: list[dict[str, Any]] | None = None, **fields: Any) -> Host:
    listing = [TARGET, DRAFT, DRAFT_131K, DRAFT_32K_VOCAB] if models is None else models
    return make_host(
        name="gpu8",
        model_inventory={"models_root": MODELS, "models": listing},
        model_inventory_at=timezone.now(),
        **fields,
    )


def _payload(host: Host, *mutations) -> dict[str, Any]:
    payload = copy.deepcopy(experiment_payload(host))
    payload["profile"].update(passes=3)
    for mutate in mutations:
        mutate(payload)
    return payload


@pytest.fixture
def api(client, owner):
    _, token = ApiToken.issue(owner)

    def post(payload: dict[str, Any]):
        return client.post(
            "/api/experiments", payload, content_type="application/json", headers={"Authorization": f"Bearer {token}"}
        )

    return post


# --- sound defaults ------------------------------------------------------------------------------------------


def test_it_gives_an_api_profile_without_repetitions_a_verdict_by_default(api):
    payload = _payload(make_host())
    del payload["profile"]["passes"], payload["profile"]["launches"], payload["profile"]["concurrency"]

    response = api(payload)

    assert response.status_code == 201, response.content
    assert response.json()["warnings"] == []
    profile = Experiment.objects.get().profile
    assert (profile.passes, profile.launches, profile.concurrency) == (3, 1, [1, 4])


def test_it_starts_the_browser_form_on_the_same_defaults(owner_client):
    make_host()

    content = owner_client.get("/experiments/new/").content.decode()

    assert 'name="profile-passes" value="3"' in content
    assert 'name="profile-launches" value="1"' in content
    assert 'name="profile-concurrency_text" value="1, 4"' in content


def test_it_warns_in_the_api_answer_that_one_sample_gives_no_verdict(api):
    response = api(_payload(make_host(), set_profile(passes=1, launches=1)))

    assert response.status_code == 201, response.content  # existing callers keep working
    (warning,) = response.json()["warnings"]
    assert "no interval and no verdict" in warning


@pytest.mark.parametrize("passes, launches", [(2, 1), (1, 2)])
def test_it_does_not_warn_when_there_is_a_second_sample(passes, launches):
    submission = submission_of(_payload(make_host(), set_profile(passes=passes, launches=launches)))

    assert submission.is_valid(), submission.errors
    assert submission.warnings == []


def test_it_shows_the_profile_line_unambiguously(owner_client, api):
    experiment_id = api(_payload(make_host(), set_profile(concurrency=[1, 4], num_prompts=8))).json()["id"]

    content = owner_client.get(f"/experiments/{experiment_id}/").content.decode()

    assert "profile: concurrency [1, 4]\n  · 8 prompts · 128 in / 128 out" in content


# --- checks against the host's model listing ----------------------------------------------------------------


def test_it_accepts_a_submission_the_listing_agrees_with():
    submission = submission_of(_payload(_listed_host()))

    assert submission.is_valid(), submission.errors


@pytest.mark.parametrize(
    "mutate, key, fragment",
    [
        pytest.param(
            lambda p: p["baseline"].update(model_path=f"{MODELS}/kimi-k2.6"),
            "baseline.model_path",
            f"gpu8 has no model with a config.json at {MODELS}/kimi-k2.6",
            id="target-missing",
        ),
        pytest.param(
            set_candidate(speculative_draft_model_path=f"{MODELS}/typo-eagle3/"),
            "candidates.0.speculative_draft_model_path",
            "no model with a config.json",
            id="draft-missing",
        ),
        pytest.param(
            set_candidate(speculative_draft_model_path=DRAFT_131K["path"]),
            "candidates.0.speculative_draft_model_path",
            "max_position_embeddings (131072) is below the target context length (262144)",
            id="draft-context-short",
        ),
        pytest.param(
            set_candidate(speculative_draft_model_path=DRAFT_131K["path"], extra_args=["--context-length", "200000"]),
            "candidates.0.speculative_draft_model_path",
            "(200000)",
            id="explicit-context-still-too-long",
        ),
        pytest.param(
            set_candidate(speculative_draft_model_path=DRAFT_32K_VOCAB["path"]),
            "candidates.0.speculative_draft_model_path",
            "vocab_size (32000) differs from the target's (163840)",
            id="vocab",
        ),
        pytest.param(
            set_candidate(tp_size=16),
            "candidates.0.tp_size",
            "has 8 GPUs, fewer than tp 16",
            id="tp-over-gpus",
        ),
    ],
)
def test_it_refuses_what_the_listing_proves_wrong_with_a_field_error(request, api, mutate, key, fragment):
    host = _listed_host()

    response = api(_payload(host, mutate))

    # A model the listing does not hold names nothing (404); a pair or a host that does not fit is a conflict (409).
    missing = request.node.callspec.id in {"target-missing", "draft-missing"}
    assert response.status_code == (404 if missing else 409), response.content
    errors = response.json()["errors"]
    assert list(errors) == [key]
    assert fragment in errors[key][0]
    assert Experiment.objects.count() == 0


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(set_candidate(extra_args=["--context-length", "131072"]), id="context-capped"),
        pytest.param(set_candidate(extra_args=["--context-length=100000"]), id="context-capped="),
        pytest.param(set_candidate(env={model_checks.OVERRIDE_ENV: "1", "NCCL_PROTO": "LL"}), id="override-env"),
    ],
)
def test_it_accepts_a_short_draft_that_the_config_allows_for(mutate):
    payload = _payload(_listed_host(), set_candidate(speculative_draft_model_path=DRAFT_131K["path"]), mutate)

    submission = submission_of(payload)

    assert submission.is_valid(), submission.errors


@pytest.mark.parametrize(
    "host_fields",
    [
        pytest.param({"model_inventory": {}, "model_inventory_at": None}, id="never-listed"),
        pytest.param({"models_root": f"{MODELS}/"}, id="root-changed-since"),
    ],
)
def test_it_says_nothing_while_the_listing_does_not_know(host_fields):
    host = _listed_host()
    Host.objects.filter(pk=host.pk).update(**host_fields)
    payload = _payload(host, set_candidate(speculative_draft_model_path=DRAFT_131K["path"]))
    payload["baseline"]["model_path"] = f"{MODELS}/not-listed"

    submission = submission_of(payload)

    assert submission.is_valid(), submission.errors


@pytest.mark.parametrize("algorithm, warned", [("EAGLE", True), ("NEXTN", True), ("EAGLE3", False)])
def test_it_warns_at_submit_that_an_eagle3_draft_served_as_eagle_accepts_nothing(api, algorithm, warned):
    eagle3 = {**DRAFT, "architectures": ["LlamaForCausalLMEagle3"]}
    host = _listed_host([TARGET, eagle3])
    payload = _payload(host, set_candidate(speculative_algorithm=algorithm))
    payload["candidates"][0]["expect"] = {}  # spec v2 lines differ by algorithm; not what this test is about

    response = api(payload)

    assert response.status_code == 201, response.content  # a warning: submitting anyway is the user's choice
    warnings = response.json()["warnings"]
    if warned:
        (warning,) = warnings
        assert warning.startswith("eagle3-2step: The draft model's config.json says LlamaForCausalLMEagle3")
        assert f"--speculative-algorithm {algorithm}" in warning and "accepts no draft token" in warning
    else:
        assert warnings == []


def test_it_says_nothing_about_paths_the_listing_cannot_see():
    # A listing reads only the directories right under the root.
    payload = _payload(_listed_host())
    payload["baseline"]["model_path"] = f"{MODELS}/org/nested-model"

    submission = submission_of(payload)

    assert submission.is_valid(), submission.errors


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/etc", "is not under the host's models root /models"),
        (f"{MODELS}/../etc", "without '.', '..' or '//'"),
        (f"{MODELS}//kimi-k2.5-sim", "without '.', '..' or '//'"),
        ("kimi-k2.5-sim", "must be an absolute path under the host's models root"),
        (f"{MODELS}-evil/kimi-k2.5-sim", "is not under the host's models root"),
    ],
)
def test_it_refuses_a_model_outside_the_hosts_models_root_at_submit(path, says):
    payload = _payload(_listed_host())
    payload["candidates"][0]["speculative_draft_model_path"] = path

    submission = submission_of(payload)

    assert not submission.is_valid()
    (message,) = submission.errors["candidates.0.speculative_draft_model_path"]
    assert message.startswith("Draft model path") and says in message


def test_it_says_nothing_about_a_path_a_full_listing_may_have_left_out():
    full = [{**TARGET, "path": f"{MODELS}/m{i:03}"} for i in range(model_checks.MAX_LISTED_MODELS - 2)]
    payload = _payload(_listed_host([*full, TARGET, DRAFT]))
    payload["baseline"]["model_path"] = f"{MODELS}/zz-beyond-the-listing"

    submission = submission_of(payload)

    assert submission.is_valid(), submission.errors


def test_it_shows_a_listing_error_next_to_the_field_in_the_browser(owner_client):
    _listed_host()
    page = owner_client.get("/experiments/new/").content.decode()
    post = _form_post(page)
    post["cand-0-speculative_draft_model_path"] = DRAFT_131K["path"]

    response = owner_client.post("/experiments/new/", post)

    assert response.status_code == 400
    assert "is below the target context length" in response.content.decode()


# --- the pure rules -----------------------------------------------------------------------------------------


def test_it_reads_the_context_length_flag():
    assert model_checks.context_length_arg(["--context-length", "65536"]) == 65536
    assert model_checks.context_length_arg(["--trust-remote-code", "--context-length=32768"]) == 32768
    assert model_checks.context_length_arg(["--context-length"]) is None
    assert model_checks.context_length_arg(["--context-length", "lots"]) is None
    assert model_checks.context_length_arg(["--context-length-extra", "5"]) is None


def test_it_keeps_the_text_models_numbers_of_a_listed_config():
    config = {"architectures": ["KimiVL"], "text_config": {"max_position_embeddings": 131072, "vocab_size": 7}}

    assert model_checks.listed_text_config(config) == {
        "max_position_embeddings": 131072,
        "vocab_size": 7,
        "num_nextn_predict_layers": None,  # no model_type: not a config.json whose silence says "none"
    }
    assert model_checks.listed_text_config({"seq_length": 4096, "model_type": "x"}) == {
        "max_position_embeddings": 4096,
        "vocab_size": None,
        "num_nextn_predict_layers": 0,
    }


def _form_post(page: str) -> dict[str, str]:
    """What the browser posts for the blank new-experiment form, filled in as the page offers it."""
    post: dict[str, str] = {}
    outside_template = re.sub(r'<template id="candidate-template">.*?</template>', "", page, flags=re.S)
    for tag in re.findall(r"<(?:input|select|textarea)[^>]*>", outside_template):
        name = re.search(r'name="([^"]+)"', tag)
        if not name or name.group(1) == "csrfmiddlewaretoken":
            continue
        value = re.search(r'value="([^"]*)"', tag)
        post[name.group(1)] = value.group(1) if value else ""
    post["experiment-name"] = "from the form"
    post["experiment-host"] = "gpu8"
    post["cand-0-name"] = "eagle3-2step"
    post["cand-0-speculative_algorithm"] = "EAGLE3"
    for key in ("baseline-expect", "baseline-log_metrics", "cand-0-expect", "cand-0-log_metrics"):
        post[key] = ""
    return post
