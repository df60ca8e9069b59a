"""The API's schema and docs page answer as the API does: 401 to anyone without a session or a token, 403 to a
user in no role, the schema to a viewer and up (by session or by bearer token)."""

from __future__ import annotations

import pytest
from django.test import Client

from experiments.models import ApiToken

pytestmark = pytest.mark.django_db

DOCS = ["/api/openapi.json", "/api/docs"]


@pytest.mark.parametrize("path", DOCS)
@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="anonymous"),
        pytest.param({"Authorization": "Bearer sd_not-a-token"}, id="wrong-token"),
        pytest.param({"Authorization": "Basic YWRtaW46YWRtaW4="}, id="wrong-scheme"),
    ],
)
def test_it_refuses_the_schema_and_docs_without_a_login(path, headers):
    response = Client().get(path, headers=headers)

    assert response.status_code == 401
    assert response.json() == {"detail": "Unauthorized"}
    assert b"/api/hosts" not in response.content


@pytest.mark.parametrize("path", DOCS)
def test_it_refuses_them_to_a_user_in_no_role(client, outsider, path):
    client.force_login(outsider)

    response = client.get(path)

    assert response.status_code == 403
    assert "experiments.view_experiment" in response.json()["detail"]


def test_it_refuses_them_to_an_outsiders_token(client, outsider):
    _, token = ApiToken.issue(outsider)

    assert client.get(DOCS[0], headers={"Authorization": f"Bearer {token}"}).status_code == 403


@pytest.mark.parametrize("path", DOCS)
def test_a_viewer_reads_them_by_session(client, viewer, path):
    client.force_login(viewer)

    assert client.get(path).status_code == 200


def test_a_viewer_reads_the_schema_by_token(client, viewer):
    _, token = ApiToken.issue(viewer)

    response = client.get(DOCS[0], headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 200 and "/api/hosts" in response.json()["paths"]
