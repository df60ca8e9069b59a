"""The typed request bodies: what the schema states is refused with a 422 that names the field, and what it cannot
state is answered with the status that says which rule it was (404 no such row, 409 fields that disagree), naming
the field, with nothing saved."""

from __future__ import annotations

from typing import Any

import pytest

from experiments.models import ApiToken, Experiment, ServerConfig

from .factories import MODELS, experiment_payload, make_experiment, make_host, make_profile

pytestmark = pytest.mark.django_db


@pytest.fixture
def auth(member) -> dict[str, str]:
    return {"Authorization": f"Bearer {ApiToken.issue(member)[1]}"}


def _post(client, path: str, body: dict[str, Any], auth: dict[str, str]):
    return client.post(path, body, content_type="application/json", headers=auth)


def _locations(response) -> list[list[Any]]:
    return [item["loc"] for item in response.json()["detail"]]


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"profile": 987654}, "profile: no profile with id 987654"),
        ({"baseline": 987654}, "baseline: no config with id 987654"),
        ({"candidates": [987654]}, "candidates.0: no config with id 987654"),
        ({"host": "no-such-host"}, "host: no host named 'no-such-host'"),
        ({"host": 987654}, "host: no host with id 987654"),
    ],
)
def test_it_answers_404_naming_the_field_for_an_id_that_names_no_row(client, auth, change, detail):
    body = {**experiment_payload(make_host()), **change}

    response = _post(client, "/api/experiments", body, auth)

    assert response.status_code == 404
    assert response.json() == {"detail": detail}
    assert not Experiment.objects.exists() and not ServerConfig.objects.exists()


def test_it_answers_404_for_a_profiles_prompt_set_that_names_no_row(client, auth):
    body = experiment_payload(make_host())
    body["profile"] = {**body["profile"], "prompt_set": 987654}

    response = _post(client, "/api/experiments", body, auth)

    assert (response.status_code, response.json()) == (
        404,
        {"detail": "profile.prompt_set: no prompt set with id 987654"},
    )


def test_it_answers_404_for_a_comparison_pick_that_names_no_run(client, auth):
    response = client.get("/api/compare", {"pick": ["r987654"]}, headers=auth)

    assert response.status_code == 404
    assert response.json()["errors"] == {"pick": ["There is no run 987654."]}


def test_it_answers_404_for_an_import_into_an_experiment_that_is_not_there(client, auth):
    files = [{"name": "a.jsonl", "content": "{}"}]

    response = _post(client, "/api/imports", {"experiment": 987654, "files": files}, auth)

    assert (response.status_code, response.json()) == (404, {"detail": "experiment: no experiment with id 987654"})


@pytest.mark.parametrize(
    ("path", "body", "location"),
    [
        # Wrong type.
        ("/api/configs", {"name": "c", "model_path": "m", "tp_size": "eight"}, ["body", "payload", "tp_size"]),
        # Unknown key where the API refuses them.
        ("/api/configs", {"name": "c", "model_path": "m", "expect": {"log_has": ["x"]}}, ["body", "payload", "expect"]),
        ("/api/experiments/1/rerun", {"launches": [2]}, ["body", "payload", "launches"]),
        # Required field left out.
        ("/api/prompt-sets", {"content": "{}"}, ["body", "body", "name"]),
    ],
)
def test_it_refuses_a_body_against_its_type_naming_the_field(client, auth, path, body, location):
    make_experiment()

    response = _post(client, path, body, auth)

    assert response.status_code == 422
    assert any(loc[: len(location)] == location for loc in _locations(response)), response.json()


def test_it_refuses_a_sweeps_unknown_key_naming_it(client, auth):
    base = {"model_path": f"{MODELS}/kimi-k2.5-sim", "speculative_algorithm": "EAGLE3"}
    sweep = {"base": base, "speculative_num_steps": [1], "speculative_eagle_topk": [1], "steps": [2]}

    response = _post(client, "/api/sweeps/preview", {"host": make_host().name, "sweep": sweep, "profile": 1}, auth)

    assert response.status_code == 422
    assert ["body", "payload", "sweep", "steps"] in _locations(response)


def test_it_refuses_a_value_out_of_its_stated_bound_with_a_422_naming_it(client, auth):
    response = _post(client, "/api/configs", {"name": "c", "model_path": "m", "tp_size": 65}, auth)

    assert response.status_code == 422
    assert list(response.json()["errors"]) == ["tp_size"]
    assert not ServerConfig.objects.exists()


def test_it_answers_409_for_fields_that_disagree(client, auth):
    body = experiment_payload(make_host())
    body["candidates"][0]["speculative_num_draft_tokens"] = 5  # topk 1 runs steps + 1 = 3

    response = _post(client, "/api/experiments", body, auth)

    assert response.status_code == 409
    assert list(response.json()["errors"]) == ["candidates.0.speculative_num_draft_tokens"]
    assert not Experiment.objects.exists()


def test_it_answers_409_for_fewer_prompts_than_requests_in_flight(client, auth):
    response = _post(client, "/api/profiles", {"name": "p", "concurrency": [1, 64], "num_prompts": 8}, auth)

    assert response.status_code == 409
    assert list(response.json()["errors"]) == ["num_prompts"]


def test_it_answers_403_for_a_flag_the_launch_policy_refuses(client, auth):
    body = {"name": "c", "model_path": "m", "extra_args": ["--trust-remote-code"]}

    response = _post(client, "/api/configs", body, auth)

    assert response.status_code == 403
    assert list(response.json()["errors"]) == ["extra_args"]


def test_it_answers_404_for_a_model_outside_the_hosts_models_root(client, auth):
    body = experiment_payload(make_host())
    body["baseline"]["model_path"] = "/etc/passwd"

    response = _post(client, "/api/experiments", body, auth)

    assert response.status_code == 404
    assert list(response.json()["errors"]) == ["baseline.model_path"]


def test_it_still_takes_a_profile_by_id_and_a_config_by_id(client, auth):
    profile = make_profile(concurrency=[1], num_prompts=4)
    created = _post(client, "/api/experiments", {**experiment_payload(make_host()), "profile": profile.pk}, auth)
    assert created.status_code == 201, created.json()
    config_id = created.json()["runs"][0]["config"]

    again = experiment_payload(Experiment.objects.get().host)
    baseline = ServerConfig.objects.get(name=config_id)
    response = _post(client, "/api/experiments", {**again, "name": "again", "baseline": baseline.pk}, auth)

    assert response.status_code == 201, response.json()


def test_it_documents_the_refusals_of_a_typed_body(client, auth):
    operation = client.get("/api/openapi.json", headers=auth).json()["paths"]["/api/experiments"]["post"]

    assert {"403", "404", "409", "422", "429"} <= set(operation["responses"])
    assert operation["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ExperimentIn"
    }
