"""The domain's management commands, called as an operator would."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from experiments.models import ApiToken

pytestmark = pytest.mark.django_db


def test_it_prints_a_new_token_alone_and_it_authenticates(client, owner):
    out = io.StringIO()

    call_command("create_api_token", "owner", stdout=out)

    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    token = text.strip()
    assert token and " " not in token
    assert ApiToken.objects.get().user == owner
    assert client.get("/api/hosts", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_it_prints_a_different_token_each_time(owner):
    tokens = set()
    for _ in range(2):
        out = io.StringIO()
        call_command("create_api_token", "owner", "--name", "ci", stdout=out)
        tokens.add(out.getvalue().strip())

    assert len(tokens) == 2
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["ci", "ci"]


def test_it_refuses_an_unknown_user(owner):
    with pytest.raises(CommandError, match="nobody"):
        call_command("create_api_token", "nobody", stdout=io.StringIO())

    assert ApiToken.objects.count() == 0
