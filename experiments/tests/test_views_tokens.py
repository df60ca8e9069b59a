"""The API tokens page."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db


def test_it_creates_a_token_that_works_against_the_api(owner_client):
    response = owner_client.post("/tokens/new/", {"name": "ci"})

    assert response.status_code == 200
    match = re.search(r'<code id="new-token">([^<]+)</code>', response.content.decode())
    assert match is not None
    token = match.group(1)
    owner_client.logout()
    assert owner_client.get("/api/hosts").status_code == 401
    assert owner_client.get("/api/hosts", headers={"Authorization": f"Bearer {token}"}).status_code == 200
