"""The JSON API of remedies: a failed run lists them (GET /api/runs/{id} failure.remedies) and one is applied with
POST /api/runs/{id}/remedy, as a script would call them."""

from __future__ import annotations

import pytest

from experiments.models import ApiToken, Run, ServerConfig

from .factories import make_eagle_config, make_experiment

pytestmark = pytest.mark.django_db

CONTEXT_ERROR = (
    "ValueError: Warning: Target model's context_length (262144) is greater than the derived context_length "
    "(131072). This may lead to incorrect model outputs or CUDA errors."
)


def _bearer(user) -> dict[str, str]:
    _, token = ApiToken.issue(user)
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def failed():
    candidate = make_eagle_config(name="eagle3", env={"NCCL_PROTO": "LL"})
    experiment = make_experiment(candidates=[candidate])
    run = experiment.run_set.get(config=candidate)
    Run.objects.filter(pk=run.pk).update(
        state=Run.State.FAILED, failure_kind=Run.FailureKind.CONTEXT_LENGTH, failure_message=CONTEXT_ERROR
    )
    return Run.objects.get(pk=run.pk)


def test_it_lists_the_remedies_of_a_failed_run(client, owner, failed):
    failure = client.get(f"/api/runs/{failed.pk}", headers=_bearer(owner)).json()["failure"]

    assert failure["kind"] == "context_length"  # the contract's fields stay
    remedies = {r["id"]: r for r in failure["remedies"]}
    assert list(remedies) == ["context-length", "context-override", "matching-draft"]
    assert remedies["context-override"]["change"] == {
        "set_env": {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"},
        "set_args": {},
        "drop_args": [],
        "text": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
        "env": {"NCCL_PROTO": "LL", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"},
        "extra_args": [],
    }
    assert remedies["matching-draft"]["change"] is None
    assert remedies["matching-draft"]["link"] == f"/experiments/new/?from={failed.experiment_id}"


def test_it_reruns_a_failed_run_with_a_remedy(client, owner, failed):
    response = client.post(
        f"/api/runs/{failed.pk}/remedy", {"remedy": "context-length"}, content_type="application/json",
        headers=_bearer(owner),
    )  # fmt: skip

    assert response.status_code == 201, response.content
    body = response.json()
    config = ServerConfig.objects.get(pk=body["config"]["id"])
    assert body["config"]["name"] == "eagle3 · ctx 131072"
    assert body["config"]["extra_args"] == ["--context-length", "131072"]
    assert (body["config"]["derived_from"], body["config"]["remedy_for_run"]) == (failed.config_id, failed.pk)
    assert [(r["config"], r["state"]) for r in body["runs"]] == [
        (failed.experiment.baseline.name, "queued"), (config.name, "queued")
    ]  # fmt: skip
    # The experiment page says which runs a remedy made, linking the failure they answer.
    client.force_login(owner)
    page = client.get(failed.experiment.get_absolute_url()).content.decode()
    assert f'remedy for <a href="/runs/{failed.pk}/">run {failed.pk}</a>' in page


def test_it_answers_409_for_a_remedy_that_cannot_be_applied(client, owner, failed):
    response = client.post(
        f"/api/runs/{failed.pk}/remedy", {"remedy": "matching-draft"}, content_type="application/json",
        headers=_bearer(owner),
    )  # fmt: skip

    assert response.status_code == 409  # the remedy is advice: nothing about the request is malformed
    assert "is advice" in response.json()["detail"] and "is advice" in response.json()["errors"]["remedy"][0]


def test_it_lets_only_whoever_manages_the_experiment_apply_a_remedy(client, member, viewer, failed):
    for user in (member, viewer):
        response = client.post(
            f"/api/runs/{failed.pk}/remedy", {"remedy": "context-length"}, content_type="application/json",
            headers=_bearer(user),
        )  # fmt: skip
        assert response.status_code == 403
    assert not ServerConfig.objects.filter(remedy_for_run=failed).exists()
